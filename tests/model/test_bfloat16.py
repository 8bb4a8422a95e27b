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
