"""Greedy generation on the default model against transformers' greedy continuations (float32, the
same weights), stored by tests/data/make_generate_reference.py: 32 words on each reference prompt.

Where two float32 implementations part, it is at a word whose two best logits (transformers') are
closer than 1e-3: the rounding of either may pick either. After such a word the sequences differ
and are not compared further.

llama.cpp's greedy continuations are stored beside them. llama.cpp rounds its activations to 8 bits,
so it is not held to 1e-3: the test reports how many words it shares with ours and the gap between
our two best logits where they part (tests/data/reference/README.md lists the figures)."""
import functools
import json

import pytest
import torch

from conftest import REFERENCE_DIR

REFERENCES = json.loads((REFERENCE_DIR / "generate.json").read_text())


def test_references_cover_eight_prompts_of_32_words():
    assert len(REFERENCES) >= 8 and all(len(r["generated"]) == 32 for r in REFERENCES)


WIDE_GAP = 0.5  # a top-2 logit gap that llama.cpp's 8-bit rounding does not close


@functools.cache
def continuation(model, index: int):
    """Our 32 greedy words after reference prompt `index`."""
    ref = next(r for r in REFERENCES if r["index"] == index)
    return model.generate(ref["token_ids"], 32, ignore_eos=True).words


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many ids a and b share before they first differ.

    >>> shared_prefix([1, 2, 3], [1, 2, 4]), shared_prefix([1], [1])
    (2, 1)
    """
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize("ref", REFERENCES, ids=lambda r: f"prompt{r['index']}")
def test_greedy_ids_equal_transformers(model, ref):
    ours = [w.id for w in continuation(model, ref["index"])]
    theirs = ref["generated"]
    k = shared_prefix(ours, theirs)
    assert k == len(theirs) or ref["top2_gap"][k] < 1e-3, (k, ours, theirs)


@pytest.mark.parametrize("ref", REFERENCES, ids=lambda r: f"prompt{r['index']}")
def test_llama_cpp_continuation_beside_ours(model, ref):
    words = continuation(model, ref["index"])
    ours, theirs = [w.id for w in words], ref["llamacpp_generated"]
    k = shared_prefix(ours, theirs)
    if k == len(ours):
        print(f"prompt {ref['index']}: llama.cpp's 32 greedy words equal ours")
        return
    top = words[k].top  # (id, prob, logit), most likely first
    gap = top[0][2] - top[1][2]
    print(f"prompt {ref['index']}: llama.cpp shares {k} of 32 words with ours; at word {k + 1} our two best logits "
          f"differ by {gap:.3f}, llama.cpp's by {ref['llamacpp_top2_gap'][k]:.3f}")
    assert gap < WIDE_GAP, "llama.cpp parts from us where our choice is clear"
    assert theirs[k] in [i for i, _, _ in top], "llama.cpp's word is not among our most likely"


def test_the_steps_block_matrices_are_the_default_models_weights(model):
    """Every matrix of a generation step is multiplied from the file's Q4_1 and Q8_0 blocks (the
    kernel built on this machine), and their weights are the float32 model's, bit for bit."""
    from studygroup.model import row_kernels

    blocks = row_kernels.lean_matrices_of(model)
    assert len(blocks) == 4 * model.config.n_layers + 1  # W_QKV, W_O, W_gate_up, W_down per layer, and W_U
    for name, B in blocks.items():
        assert torch.equal(B.weights(), model.w[name]), name
