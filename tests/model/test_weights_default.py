"""The default model (SmolLM2-135M-Instruct Q4_1): config, tensors, cache speed, transformers parity."""
from __future__ import annotations

import os
import time

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from studygroup.gguf import layout as gguf_layout
from studygroup.gguf.config import Config
from studygroup.gguf.container import read_gguf
from studygroup.model.weights_cache import load_tokenizer
from studygroup.gguf.model_path import default_model_path
from studygroup.model.weights_cache import load_weights

EXPECTED = dict(n_layers=30, n_heads=9, n_kv_heads=3, d_model=576, d_head=64, d_mlp=1536,
                context_length=8192, rope_base=100000.0, vocab_size=49152)


@pytest.fixture(scope="module")
def loaded():
    load_weights()  # fills the cache when empty
    return load_weights()  # what every later load gets: mapped from the cache


@pytest.fixture(scope="module")
def hf_model(theirs):
    """transformers' weights of the same file (tests/model/conftest.py)."""
    return theirs.state_dict()


def test_config_has_the_known_values(loaded):
    config, _ = loaded
    assert {k: getattr(config, k) for k in EXPECTED} == EXPECTED
    assert config.group_size == 3 and config.rms_eps == pytest.approx(1e-5)


def test_every_tensor_has_its_shape(loaded):
    config, w = loaded
    assert "unembed" not in w  # tied embeddings
    assert set(w) == set(gguf_layout.name_map(30, tied=True).values()) and len(w) == 2 + 30 * 9
    for name, t in w.items():
        assert tuple(t.shape) == gguf_layout.paper_shape(name, config), name
        # dense float32; matrices from the cache are (in, out) views of (out, in) rows
        assert t.dtype == torch.float32 and (t.is_contiguous() or (t.dim() == 2 and t.T.is_contiguous())), name
    assert w["layers.0.W_Q"].shape == (576, 576) and w["layers.0.W_K"].shape == (576, 192)
    assert w["embed"].shape == (49152, 576) and w["layers.29.W_down"].shape == (1536, 576)


def test_file_holds_q8_0_and_q4_1_tensors_and_all_dequantize_finite(loaded):
    types = {name: info.qtype for name, info in read_gguf(default_model_path()).tensors.items()}
    assert types["token_embd.weight"] == Q.Q8_0 and types["blk.0.attn_q.weight"] == Q.Q4_1
    assert set(types.values()) == {Q.F32, Q.Q4_1, Q.Q8_0}
    _, w = loaded
    assert all(torch.isfinite(t).all() for t in w.values())


def test_our_parser_agrees_with_gguf_reader():
    path = default_model_path()
    ours, theirs = read_gguf(path), gguf.GGUFReader(path)
    assert ours.fields == {k: f.contents() for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
    for t in theirs.tensors:
        info = ours.tensors[t.name]
        assert (info.qtype, list(info.dims), info.offset, info.n_bytes) == \
               (t.tensor_type, t.shape.tolist(), t.data_offset, t.n_bytes)
        assert np.array_equal(ours.raw(info), t.data)


@pytest.mark.parametrize("layer", [0, 17, 29])
def test_unpermuted_queries_and_keys_equal_transformers_gguf_loader(loaded, hf_model, layer):
    _, w = loaded
    for ours, hf in (("W_Q", "q_proj"), ("W_K", "k_proj"), ("W_V", "v_proj"), ("W_O", "o_proj")):
        expected = hf_model[f"model.layers.{layer}.self_attn.{hf}.weight"].T  # HF (out, in) -> ours (in, out)
        assert torch.allclose(w[f"layers.{layer}.{ours}"], expected, atol=1e-6, rtol=0), ours


def test_embedding_and_norms_equal_transformers_gguf_loader(loaded, hf_model):
    _, w = loaded
    assert torch.equal(w["embed"], hf_model["model.embed_tokens.weight"])
    assert torch.equal(w["final_norm"], hf_model["model.norm.weight"])
    assert torch.equal(w["layers.3.mlp_norm"], hf_model["model.layers.3.post_attention_layernorm.weight"])
    assert torch.allclose(w["layers.3.W_down"], hf_model["model.layers.3.mlp.down_proj.weight"].T, atol=1e-6)


def test_warm_load_is_well_under_a_second(loaded):
    load_weights(), load_tokenizer()  # the module fixture made the weights entry; this makes sure of both
    start = time.perf_counter()
    config, w = load_weights()
    tok = load_tokenizer()
    elapsed = time.perf_counter() - start
    assert isinstance(config, Config) and tok.vocab_size == config.vocab_size
    assert elapsed < 1.0, f"warm load took {elapsed:.2f} s"


def test_the_default_model_is_named_with_its_quantization_and_file_size(loaded):
    config, _ = loaded
    reader = gguf.GGUFReader(default_model_path())  # gguf's own reader of the same file
    file_type = gguf.LlamaFileType(int(reader.fields["general.file_type"].contents()))
    size = os.path.getsize(default_model_path())
    assert (file_type.name, size) == ("MOSTLY_Q4_1", 98_362_432)
    assert config.label == "smollm2 135M · Q4_1 · 98.4 MB"
