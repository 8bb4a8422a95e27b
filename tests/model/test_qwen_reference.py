"""The two packaged Qwen2.5-Coder files (0.5B and 1.5B Instruct, Q4_K_M, qwen2), by name: joined from
their packages and checked, holding the tensor types they were published with; ids against
transformers' tokenizer, last logits against transformers'.

tests/data/reference_qwen/ (made by tests/data/make_qwen_reference.py) holds, for each model, the
ids of the tokenizer transformers builds from the GGUF on plain texts, and transformers' float32
eager last-position logits on a few of them, the GGUF dequantized: five for the 0.5B (one of 355
tokens), one short one for the 1.5B (its load, not its pass, is what costs).
The models load with cache=False: the 1.5B's float32 cache entry (7.1 GB) is larger than the cache's
size bound and would push the run's other entries out.
"""
import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import studygroup
from studygroup.gguf.container import read_gguf
from studygroup.model import disk_cache
from studygroup.model.packaged import PACKAGED

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference_qwen"
MODELS = {m["name"]: m["texts"] for m in json.loads((REFERENCE / "qwen.json").read_text(encoding="utf-8"))}
# name -> (n_layers, n_heads, n_kv_heads, d_model, d_head), the tensor types gguf counts, the label
SHAPES = {"qwen2.5-coder-0.5b": (24, 14, 2, 896, 64), "qwen2.5-coder-1.5b": (28, 12, 2, 1536, 128)}
TYPES = {"qwen2.5-coder-0.5b": {"Q5_0": 133, "Q8_0": 13, "Q6_K": 12, "Q4_K": 12, "F32": 121},
         "qwen2.5-coder-1.5b": {"Q4_K": 169, "Q6_K": 29, "F32": 141}}
LABELS = {"qwen2.5-coder-0.5b": "Qwen2.5-Coder 0.5B · Q4_K_M · 491 MB",
          "qwen2.5-coder-1.5b": "Qwen2.5-Coder 1.5B · Q4_K_M · 1.12 GB"}


@pytest.fixture(scope="module", params=list(MODELS))
def qwen(request):
    """(name, Model): one model at a time (pytest finishes one name's tests before loading the next)."""
    return request.param, studygroup.load(request.param, cache=False)


def test_the_file_is_joined_into_the_cache_and_is_the_model(qwen):
    name, model = qwen
    assert model.path == disk_cache.cache_dir() / "models" / PACKAGED[name].file
    assert model.path.stat().st_size == PACKAGED[name].size
    digest = hashlib.sha256()
    with open(model.path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    assert digest.hexdigest() == PACKAGED[name].sha256


def test_the_file_is_q4_k_m_with_the_tensor_types_it_was_published_with(qwen):
    import gguf

    name, model = qwen
    file = read_gguf(model.path)
    assert gguf.LlamaFileType(file.fields["general.file_type"]).name == "MOSTLY_Q4_K_M"
    assert Counter(t.qtype.name for t in file.tensors.values()) == TYPES[name]
    assert model.config.label == LABELS[name]


def test_config_is_qwen2_of_its_size(qwen):
    name, model = qwen
    c = model.config
    assert c.architecture == "qwen2"
    assert (c.n_layers, c.n_heads, c.n_kv_heads, c.d_model, c.d_head) == SHAPES[name]


def test_ids_equal_transformers_on_plain_text(qwen):
    name, model = qwen
    for t in MODELS[name]:
        assert model.tokenize(t["text"]) == t["hf_token_ids"], f"text {t['index']}: {t['text'][:40]!r}"


def test_a_prompt_has_several_hundred_tokens():
    assert max(len(t["hf_token_ids"]) for t in MODELS["qwen2.5-coder-0.5b"] if "hf_top1" in t) >= 300


def test_last_logits_match_transformers(qwen):
    name, model = qwen
    for t in (t for t in MODELS[name] if "hf_top1" in t):
        logits = model.run(t["hf_token_ids"], record="none").logits[-1].numpy()  # (vocab,)
        hf = np.load(REFERENCE / f"{name}_{t['index']:02d}_hf.npy")
        assert np.abs(logits - hf).max() <= 2e-3, f"text {t['index']}"
        assert int(logits.argmax()) == int(hf.argmax()) == t["hf_top1"], f"text {t['index']}"


def test_what_models_shows_before_the_file_is_joined_is_the_files_own(qwen):
    from studygroup.gguf.summary import summarize

    name, model = qwen
    spec, read = PACKAGED[name], summarize((model.path,))
    assert (spec.title, spec.architecture, spec.parameters, spec.quantization, spec.context_length, spec.size) == (
        read.title, read.architecture, read.parameters, read.quantization, read.context_length, read.size)
    assert dict(spec.tensor_types) == read.tensor_types
