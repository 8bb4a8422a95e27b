"""Greedy generation on the default model against transformers' greedy continuations (float32, the
same weights), stored by tests/data/make_generate_reference.py: 32 words on each reference prompt.

Where two float32 implementations part, it is at a word whose two best logits (transformers') are
closer than 1e-3: the rounding of either may pick either. After such a word the sequences differ
and are not compared further."""
import json

import pytest

from conftest import REFERENCE_DIR

REFERENCES = json.loads((REFERENCE_DIR / "generate.json").read_text())


def test_references_cover_eight_prompts_of_32_words():
    assert len(REFERENCES) >= 8 and all(len(r["generated"]) == 32 for r in REFERENCES)


@pytest.mark.parametrize("ref", REFERENCES, ids=lambda r: f"prompt{r['index']}")
def test_greedy_ids_equal_transformers(model, ref):
    ours = model.generate(ref["token_ids"], 32, ignore_eos=True).ids
    theirs = ref["generated"]
    k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    assert k is None or ref["top2_gap"][k] < 1e-3, (k, ours, theirs)
