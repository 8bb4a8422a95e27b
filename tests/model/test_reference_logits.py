"""The default model against llama.cpp's token ids and the exact float32 reference logits."""
import json

import numpy as np
import pytest
import torch

from studygroup.formulas import attention
from conftest import REFERENCE_DIR


PROMPTS = json.loads((REFERENCE_DIR / "public.json").read_text())


@pytest.mark.parametrize("prompt", PROMPTS, ids=lambda p: f"prompt{p['index']:02d}")
def test_last_logits_match_the_exact_reference(model, prompt):
    ref = REFERENCE_DIR
    ids = model.tokenize(prompt["text"])
    assert ids == prompt["token_ids"]
    logits = model.run(ids, record="none").logits[-1].numpy()
    hf = np.load(ref / f"public_{prompt['index']:02d}_hf.npy")
    llamacpp = np.load(ref / f"public_{prompt['index']:02d}_llamacpp.npy")
    assert np.abs(logits - hf).max() < 1e-3
    assert int(logits.argmax()) == int(hf.argmax()) == prompt["hf_top1"] == int(llamacpp.argmax())


def test_every_head_output_equals_the_formulas_in_both_notations(model):
    run = model.run(PROMPTS[1]["text"], record="all")
    c = model.config
    for l in range(c.n_layers):
        q, k, v = run[f"layers.{l}.q"], run[f"layers.{l}.k"], run[f"layers.{l}.v"]
        out, _ = attention.paper(q, k, v, mask="causal")
        col, _ = attention.columns(q.mT, k.mT, v.mT, mask="causal")
        recorded = run[f"layers.{l}.output"]
        assert torch.allclose(out, recorded, atol=1e-5), l
        assert torch.allclose(col.mT, recorded, atol=1e-5), l


def test_silencing_a_member_a_head_ignores_leaves_that_head_unchanged(model):
    run = model.run(PROMPTS[1]["text"], record="all")
    # the member the last question of head (l, h) listens to least, silenced in that head only
    weights = torch.stack([run[f"layers.{l}.weights"][:, -1] for l in range(model.config.n_layers)])  # (L, H, T)
    l, h, j = np.unravel_index(int(weights.argmin()), tuple(weights.shape))
    assert weights[l, h, j] < 1e-4
    quiet = run.silence_member(int(j), heads=[(int(l), int(h))])
    change = (quiet.head(int(l), int(h)).output[-1] - run.head(int(l), int(h)).output[-1]).abs().max()
    assert change < 1e-3 * run.head(int(l), int(h)).v.abs().max()
