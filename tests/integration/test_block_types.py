"""Every block type the generation kernels read (studygroup.gguf.blocks.BLOCK_TYPES), on generated
blocks: the kernel's float32 weights are gguf's dequantization bit for bit, and a row times the
blocks is a float64 product within float32 summation rounding; for the library as this machine
builds it (AVX-512 or AVX2 where the CPU has them), as a machine with AVX2 and no AVX-512 builds it,
and for the plain build any x86-64 gets (no AVX2, no F16C: every type's scalar path and the float16
conversion in software). Tiny models of each
type the loader reads: tests/integration/test_row_kernels.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q
from gguf import quants

from studygroup.errors import ModelFileError
from studygroup.gguf.blocks import BLOCK_TYPES, HALF_OFFSETS, row_bytes
from studygroup.model import kernel_build, row_kernels
from studygroup.model.kernel_self_check import random_blocks

TYPES = sorted(BLOCK_TYPES, key=lambda t: t.name)
#: The plain build: the same source and flags, less -march=native (x86-64's baseline instructions).
PLAIN_FLAGS = tuple(f for f in row_kernels.FLAGS if not f.startswith("-march"))
#: Float16 fields at their edges: zero, −0, the largest, the smallest subnormal, both signs.
EDGE_HALVES = [0.0, -0.0, 65504.0, -65504.0, 2.0 ** -24, -(2.0 ** -24), 1.0, -1.0]


#: This machine's instructions less AVX-512: the AVX2 path where the CPU has AVX-512 too.
AVX2_FLAGS = (*row_kernels.FLAGS, "-mno-avx512f")
#: What the CPU has, as torch tells it: "AVX512" (F, BW, VL, DQ), "AVX2" or less.
CPU = torch.backends.cpu.get_cpu_capability()


@pytest.fixture(scope="module", params=["native", "AVX2", "plain"])
def lib(request, tmp_path_factory):
    """The kernels as this machine builds them, as an AVX2 machine does (here where the CPU has
    AVX2), and plain; sg_vectorized says which path each took (2: AVX-512, 1: AVX2, 0: plain)."""
    if request.param == "native":
        lib = row_kernels._library()
        assert lib.sg_vectorized() == {"AVX512": 2, "AVX2": 1}.get(CPU, 0)
        return lib
    if request.param == "AVX2" and CPU not in ("AVX2", "AVX512"):
        pytest.skip("this CPU has no AVX2: its build is the plain one")
    with pytest.MonkeyPatch.context() as m:  # a cache folder of its own: the kept native library stays
        m.setenv("STUDYGROUP_CACHE_DIR", str(tmp_path_factory.mktemp(f"{request.param}-cache")))
        built = kernel_build.load(row_kernels.SOURCE, PLAIN_FLAGS if request.param == "plain" else AVX2_FLAGS,
                                  row_kernels._bind_and_check)
    assert built.sg_vectorized() == (0 if request.param == "plain" else 1)
    return built


def kernel_weights(lib, qtype: Q, blocks: np.ndarray) -> np.ndarray:
    """(rows, cols) float32: the kernel's weights of blocks (rows, bytes a row)."""
    n, size = GGML_QUANT_SIZES[qtype]
    rows, cols = blocks.shape[0], blocks.shape[1] // size * n
    out = np.full((rows, cols), np.nan, np.float32)
    assert lib.sg_dequantize(int(qtype), np.ascontiguousarray(blocks).ctypes.data, out.ctypes.data, rows, cols) == 0
    return out


def assert_bit_for_bit(got: np.ndarray, want: np.ndarray):
    assert got.shape == want.shape and want.dtype == np.float32
    differ = got.view(np.uint32) != want.view(np.uint32)  # −0 and +0 told apart
    assert not differ.any(), f"{differ.sum()} weights differ, first at {np.argwhere(differ)[0]}"


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_blocks_dequantize_as_gguf(lib, qtype, seed):
    blocks = random_blocks(qtype, 16, 1024, np.random.default_rng(seed))
    assert_bit_for_bit(kernel_weights(lib, qtype, blocks), quants.dequantize(blocks, qtype))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("fill", [0, 255, None], ids=["least codes", "largest codes", "random codes"])
def test_edge_blocks_dequantize_as_gguf(lib, qtype, fill):
    """Every pair of edge float16 values as (d, m or dmin): zero scales, negative mins, the largest
    and subnormal scales, with the least, the largest (0xFF: every code and integer scale at its top)
    or random codes."""
    fields = len(HALF_OFFSETS[qtype])
    pairs = np.array([(a, b) for a in EDGE_HALVES for b in EDGE_HALVES])[:, :fields]  # (rows, fields)
    blocks = random_blocks(qtype, len(pairs), 256, np.random.default_rng(7), fill, pairs[:, None, :])
    assert_bit_for_bit(kernel_weights(lib, qtype, blocks), quants.dequantize(blocks, qtype))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_a_row_times_blocks_equals_a_float64_product(lib, qtype):
    """Within float32 summation rounding: 1e-5 of the sum of the terms' sizes (a sum with cancellation
    keeps the rounding of its largest terms)."""
    rng = np.random.default_rng(int(qtype))
    blocks = random_blocks(qtype, 64, 1536, rng)  # (64, bytes a row)
    x = rng.standard_normal(1536).astype(np.float32)  # (1536,)
    y = np.full(64, np.nan, np.float32)  # (64,)
    assert lib.sg_matvec(int(qtype), blocks.ctypes.data, x.ctypes.data, y.ctypes.data, 64, 1536) == 0
    terms = quants.dequantize(blocks, qtype).astype(np.float64) * x  # (64, 1536)
    assert np.all(np.abs(y - terms.sum(1)) <= 1e-5 * np.abs(terms).sum(1))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("fill", [0, 255, None], ids=["least codes", "largest codes", "random codes"])
def test_the_weights_a_row_is_multiplied_by_are_gguf_s(lib, qtype, fill):
    """W · e_k is column k of the weights the multiply uses (w · 1 plus zeros: exact, but −0 + 0 = +0),
    for every k: the same values as gguf's dequantization, on the edge float16 fields."""
    fields = len(HALF_OFFSETS[qtype])
    pairs = np.array([(a, b) for a in EDGE_HALVES for b in EDGE_HALVES])[:, :fields]  # (rows, fields)
    blocks = random_blocks(qtype, len(pairs), 512, np.random.default_rng(5), fill, pairs[:, None, :])
    want = quants.dequantize(blocks, qtype)  # (rows, 512)
    got = np.full((512, len(pairs)), np.nan, np.float32)  # row k = W · e_k
    for k, e in enumerate(np.eye(512, dtype=np.float32)):
        assert lib.sg_matvec(int(qtype), blocks.ctypes.data, e.ctypes.data, got[k].ctypes.data, len(pairs), 512) == 0
    assert np.array_equal(got.T, want)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_a_row_not_a_whole_number_of_blocks_is_refused(lib, qtype):
    n, size = GGML_QUANT_SIZES[qtype]
    blocks = random_blocks(qtype, 2, 256, np.random.default_rng(0))
    out = np.zeros(2 * 256, np.float32)
    assert lib.sg_dequantize(int(qtype), blocks.ctypes.data, out.ctypes.data, 2, 256 - n // 2) == -1
    assert lib.sg_matvec(int(qtype), blocks.ctypes.data, out.ctypes.data, out.ctypes.data, 2, 256 - n // 2) == -1
    assert not out.any()  # nothing written
    with pytest.raises(ModelFileError, match=rf"^tensor blk.3.ffn_down.weight \({qtype.name}\) has rows of 100 weights"):
        row_bytes("blk.3.ffn_down.weight", qtype, 100)
    assert row_bytes("blk.3.ffn_down.weight", qtype, 8 * n) == 8 * size


def test_a_type_not_read_is_refused(lib):
    out = np.zeros(256, np.float32)
    blocks = np.zeros(256, np.uint8)
    assert lib.sg_dequantize(int(Q.IQ2_XXS), blocks.ctypes.data, out.ctypes.data, 1, 256) == -1
