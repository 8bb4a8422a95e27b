"""The generation kernels on real files' tensors: every matrix of the default model (Q4_1, Q8_0) and
of Gemma 3 270M (Q4_K_M: Q4_K, Q6_K, Q5_0, Q8_0) held in a block type the kernel reads, its weights
gguf's dequantization bit for bit and a row times it a float64 product within float32 rounding;
Gemma's generation step multiplies its float32 model's weights and generates the words the float32 multiply does."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import quants

import studygroup
from studygroup.gguf.blocks import BLOCK_TYPES, Blocks
from studygroup.gguf.container import read_gguf
from studygroup.gguf.model_path import default_model_path
from studygroup.model import row_kernels
from studygroup.model.packaged import model_file

ROWS = 1024  # of each matrix (Gemma's embedding has 262,144): every tensor, its first rows
FILES = {"default": (default_model_path, {Q.Q4_1, Q.Q8_0}),
         "gemma-3-270m": (lambda: model_file("gemma-3-270m"), {Q.Q4_K, Q.Q6_K, Q.Q5_0, Q.Q8_0})}


@pytest.mark.parametrize("name", FILES)
def test_every_block_matrix_of_a_real_file_is_read_as_gguf_reads_it(name):
    path, types = FILES[name]
    file = read_gguf(path())
    seen = set()
    g = torch.Generator().manual_seed(0)
    for info in file.tensors.values():
        if info.qtype not in BLOCK_TYPES or len(info.shape) != 2:
            continue
        raw = np.array(file.raw(info)[:ROWS])  # (rows, bytes a row), a copy of the mapped file
        B = row_kernels.BlockMatrix(Blocks(int(info.qtype), torch.from_numpy(raw), info.shape[1]))
        want = quants.dequantize(raw, info.qtype)  # (rows, in) float32
        got = B.weights().T.contiguous().numpy()
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), info.name  # −0 and +0 told apart
        x = torch.randn(1, B.n_in, generator=g)
        terms = want.astype(np.float64) * x.double().numpy()  # (rows, in)
        assert np.all(np.abs(B(x)[0].double().numpy() - terms.sum(1)) <= 1e-5 * np.abs(terms).sum(1)), info.name
        seen.add(info.qtype)
    assert seen == types


def test_gemmas_step_multiplies_its_float32_weights():
    gemma = studygroup.load("gemma-3-270m")
    blocks = row_kernels.lean_matrices(gemma)
    # W_QKV is blocks where its three parts are Q5_0 (a layer with W_V in Q8_0 multiplies float32)
    c, file = gemma.config, read_gguf(gemma.path)
    v_types = {l: file.tensors[f"blk.{l}.attn_v.weight"].qtype for l in range(c.n_layers)}
    assert set(blocks) == ({"unembed"} | {f"layers.{l}.{n}" for l in range(c.n_layers) for n in ("W_O", "W_gate_up", "W_down")}
                           | {f"layers.{l}.W_QKV" for l, t in v_types.items() if t == Q.Q5_0})
    assert {Q(B.blocks.qtype).name for B in blocks.values()} == {"Q4_K", "Q6_K", "Q5_0", "Q8_0"}
    for name, B in blocks.items():
        assert torch.equal(B.weights(), gemma.w[name]), name


def test_gemma_generates_the_same_words_without_the_kernels(monkeypatch):
    gemma = studygroup.load("gemma-3-270m")
    ids = gemma.tokenize("The capital of France is")
    kernels = gemma.generate(ids, 12, ignore_eos=True)
    monkeypatch.setenv(row_kernels.SWITCH, "off")
    plain = gemma.generate(ids, 12, ignore_eos=True)
    assert kernels.ids == plain.ids
    for a, b in zip(kernels.words, plain.words):
        assert abs(a.logit - b.logit) < 1e-4 * max(1.0, abs(b.logit))  # float32 sums in another order
