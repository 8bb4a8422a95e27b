"""The compiled kernels of a generation step (studygroup.model.row_kernels): the block matrices hold
exactly the float32 model's weights, multiply as a float64 oracle does, the attention of one row
equals the formula's, and a machine without a C compiler generates the same words without them."""
from __future__ import annotations

import math

import pytest
import torch
from conftest import write_tiny_gemma3_gguf, write_tiny_gguf
from gguf import GGMLQuantizationType as Q

import studygroup
from studygroup.model import row_kernels

#: The block types the loader reads too (IQ4_NL and IQ4_XS are read by the kernel only: test_block_types.py).
TYPES = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
K_TYPES = [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
#: Widths whose rows are whole super-blocks of 256 (4 heads of 64, an MLP of 256).
K_WIDTHS = dict(d_head=64, d_mlp=256)


def write_tiny(path, qtype: Q, **kwargs):
    """write_tiny_gguf with rows of whole blocks of `qtype` (256 weights for the K-quants)."""
    return write_tiny_gguf(path, tensor_type=qtype, **(K_WIDTHS if qtype in K_TYPES else {}), **kwargs)


@pytest.fixture(scope="module", params=TYPES, ids=lambda t: t.name)
def quantized(request, tmp_path_factory):
    """A tiny Llama whose matrices are all of one block type (the embedding untied: W_U of its own)."""
    tiny = write_tiny(tmp_path_factory.mktemp("blocks") / f"{request.param.name}.gguf", request.param, untied=True)
    return studygroup.load(tiny.path, cache=False)


def lean_names(c) -> set[str]:
    return {"unembed"} | {f"layers.{l}.{n}" for l in range(c.n_layers) for n in ("W_QKV", "W_O", "W_gate_up", "W_down")}


def test_block_matrices_hold_exactly_the_float32_weights(quantized):
    blocks = row_kernels.lean_matrices(quantized)
    assert set(blocks) == lean_names(quantized.config)
    for name, B in blocks.items():
        assert torch.equal(B.weights(), quantized.w[name]), name  # bit for bit, W_Q's rows un-permuted


def test_a_row_times_blocks_equals_a_float64_oracle(quantized):
    g = torch.Generator().manual_seed(0)
    for name, B in row_kernels.lean_matrices(quantized).items():
        W = quantized.w[name].double()  # (in, out)
        x = torch.randn(1, B.n_in, generator=g)
        want = x.double() @ W  # (1, out)
        assert (B(x).double() - want).abs().max() < 1e-5 * max(1.0, float(want.abs().max())), name


def test_a_matrix_of_another_type_is_multiplied_in_float32(tmp_path):
    """W_K as F16 leaves W_QKV to the float32 multiply; the layer's other matrices keep their blocks."""
    tiny = write_tiny_gguf(tmp_path / "mixed.gguf", tensor_type=Q.Q4_1, type_overrides={"blk.0.attn_k.weight": Q.F16})
    model = studygroup.load(tiny.path, cache=False)
    assert set(row_kernels.lean_matrices(model)) == lean_names(model.config) - {"layers.0.W_QKV"}


def attention_oracle(q, K, V, start, S, scale):
    """float64: softmax(q·Kᵀ·scale) per query head over rows start .. start+S-1, and the weighted sums."""
    H, H_kv = q.shape[0], K.shape[0]
    Kx, Vx = K[:, start:start + S].double(), V[:, start:start + S].double()  # (H_kv, S, d)
    kv = torch.arange(H) // (H // H_kv)  # each query head's key/value head
    a = torch.softmax(torch.einsum("hd,hsd->hs", q.double(), Kx[kv]) * scale, -1)  # (H, S)
    return a, torch.einsum("hs,hsd->hd", a, Vx[kv])


@pytest.mark.parametrize("H,H_kv,d,capacity,start,S", [
    (4, 2, 8, 10, 0, 1), (4, 2, 8, 10, 3, 7), (9, 3, 64, 200, 0, 150), (6, 1, 32, 5000, 100, 4900)])
def test_one_rows_attention_equals_the_formula(H, H_kv, d, capacity, start, S):
    g = torch.Generator().manual_seed(S)
    q = torch.randn(H, d, generator=g)
    K, V = torch.randn(H_kv, capacity, d, generator=g), torch.randn(H_kv, capacity, d, generator=g)
    weights = torch.full((H, start + S + 2), -1.0)  # a wider tensor: the rows' stride is not S
    z = row_kernels.attend_row(q, K, V, start, 1 / math.sqrt(d), weights[:, start:start + S])
    a, want = attention_oracle(q, K, V, start, S, 1 / math.sqrt(d))
    assert (weights[:, start:start + S].double() - a).abs().max() < 1e-6
    assert (weights[:, :start] == -1).all() and (weights[:, start + S:] == -1).all()  # nothing else written
    assert (z.double() - want).abs().max() < 1e-5


@pytest.mark.parametrize("write", [
    lambda p: write_tiny_gguf(p / "q4_1.gguf", tensor_type=Q.Q4_1),
    lambda p: write_tiny_gemma3_gguf(p / "q8_0.gguf", tensor_type=Q.Q8_0),
    *(lambda p, t=t: write_tiny(p / f"{t.name}.gguf", t) for t in K_TYPES)],
    ids=["llama Q4_1", "gemma3 Q8_0", *(f"llama {t.name}" for t in K_TYPES)])
def test_without_the_kernels_the_same_words_and_rows(write, tmp_path, monkeypatch):
    model = studygroup.load(write(tmp_path).path, cache=False)
    ids = torch.randint(0, model.config.vocab_size, (5,), generator=torch.Generator().manual_seed(3)).tolist()
    kernels = model.generate(ids, 10, ignore_eos=True)
    monkeypatch.setenv(row_kernels.SWITCH, "off")
    plain = model.generate(ids, 10, ignore_eos=True)
    assert kernels.ids == plain.ids
    for a, b in zip(kernels.words, plain.words):
        assert (a.weights - b.weights).abs().max() < 1e-5 and (a.sink - b.sink).abs().max() < 1e-5
        assert abs(a.logit - b.logit) < 1e-4 * max(1.0, abs(b.logit))  # K-quants' random scales: logits of hundreds


def test_no_compiler_means_no_kernels_and_the_same_words(tmp_path, monkeypatch, tiny_model):
    model = studygroup.load(tiny_model.path)
    ids = [5, 6, 7]
    want = model.generate(ids, 6, ignore_eos=True).ids
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("STUDYGROUP_CACHE_DIR", str(tmp_path / "empty-cache"))
    row_kernels._library.cache_clear(), row_kernels._loaded.cache_clear()
    try:
        assert not row_kernels.available() and not row_kernels.usable(model)
        assert studygroup.load(tiny_model.path, cache=False).generate(ids, 6, ignore_eos=True).ids == want
    finally:
        row_kernels._library.cache_clear(), row_kernels._loaded.cache_clear()
