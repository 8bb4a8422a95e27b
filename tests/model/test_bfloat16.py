"""The fast mode (bfloat16) keeps the exact reference's top-1 on every reference prompt.

Runs everywhere (require_native=False): on a CPU without native bfloat16 it is only slower.
"""
import json

import numpy as np
import pytest
import torch

import studygroup
from studygroup.errors import InputError
from conftest import REFERENCE_DIR


@pytest.fixture(scope="module")
def fast():
    return studygroup.load(dtype="bfloat16", require_native=False)


def test_bfloat16_keeps_the_reference_top1_with_a_small_kl(fast):
    kls = []
    for prompt in json.loads((REFERENCE_DIR / "public.json").read_text()):
        exact = torch.from_numpy(np.load(REFERENCE_DIR / f"public_{prompt['index']:02d}_hf.npy")).double()
        logits = fast.run(prompt["token_ids"], record="none").logits[-1].double()
        assert int(logits.argmax()) == int(exact.argmax()) == prompt["hf_top1"], prompt["text"]
        p = torch.log_softmax(exact, -1)
        kls.append(float((p.exp() * (p - torch.log_softmax(logits, -1))).sum()))
    print("KL(exact || bfloat16) per prompt:", ", ".join(f"{k:.2e}" for k in kls))
    assert max(kls) < 0.05


def test_bfloat16_refused_where_not_native(monkeypatch):
    monkeypatch.setattr("studygroup.model.model.native_bfloat16", lambda: False)
    with pytest.raises(InputError, match="not native"):
        studygroup.load(dtype="bfloat16")
    with pytest.raises(InputError, match="not supported"):
        studygroup.load(dtype="float16")


def test_bfloat16_explain_measures_each_heads_members_as_float32_does(fast, model):
    """explain's in-head measures run copies over the recorded keys and values (float32 records):
    in bfloat16 they are taken in the model's dtype, and every member's effect in a head is
    float32's within bfloat16's rounding."""
    text = "Cash or credit card? I have a lot"
    a, b = studygroup.explain(fast, text), studygroup.explain(model, text)
    assert a.predicted.id == b.predicted.id
    exact = {(h.layer, h.head, x.index): x.effect_in_head for h in b.heads for x in h.listened if x.effect_in_head is not None}
    fast_ = {(h.layer, h.head, x.index): x.effect_in_head for h in a.heads for x in h.listened if x.effect_in_head is not None}
    both = exact.keys() & fast_.keys()
    assert len(both) >= 8
    assert max(abs(fast_[k] - exact[k]) for k in both) < 0.1


def test_bfloat16_logit_lens_reads_float32_probabilities(fast, model):
    """The lens unembeds recorded (float32) streams: in bfloat16 they go through the model's dtype."""
    from studygroup.study.lens import lens

    a, b = lens(fast, "I have a lot", all_positions=True), lens(model, "I have a lot", all_positions=True)
    assert [w.id for w in a.final] == [w.id for w in b.final]
    gaps = [abs(x.final_prob - y.final_prob) for ra, rb in zip(a.layers, b.layers) for x, y in zip(ra, rb)]
    assert len(gaps) == 30 * 4 and max(gaps) < 0.15 and sum(gaps) / len(gaps) < 0.02, (max(gaps), sum(gaps) / len(gaps))
