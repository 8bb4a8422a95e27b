"""The compiled kernels of one new member's pass during generation (kernels/one_row.c): one row
times a matrix kept as its file's quantized blocks, and one question row's attention over the
key/value cache.

A step of generation multiplies one row by every weight matrix, so its time is the time to read
them: 0.54 GB as float32 for the default model, 0.1 GB as the file's Q4_1 and Q8_0 blocks. The
kernel reads the block types of `studygroup.gguf.blocks.BLOCK_TYPES` (Q4_0 … Q8_0, the K-quants,
IQ4_NL, IQ4_XS; kernels/one_row.c names each layout) and rebuilds each weight in float32 exactly as the dequantizer does and multiplies in float32,
so the weights are the float32 model's; only the order of the sums differs. It is compiled once per machine with the system's C compiler and kept in the cache folder,
loaded only as this user built it and after a check of its numbers (`kernel_build`,
`kernel_self_check`); without a compiler, or for a type it does not read, the
float32 multiply is used instead (`project`), with the same weights. The attention of one row is
a handful of small operations in torch (two batched multiplies, a softmax, copies), whose fixed
costs outweigh their arithmetic; in one call it is the same formula in float32.

Threads: a matrix of a step (the fused ones, W_Q W_K W_V and gate/up, as one) is one call of the
kernel, whose rows it splits among as many OpenMP threads as torch uses, in one parallel region;
a pass's dequantizing splits a layer's rows among Python threads (`split_rows`) whose kernel calls
start no threads of their own. No threads start threads.

Shapes: a matrix W (in, out) of the paper, kept as out rows of in / n blocks (n = 32, or 256 for the
K-quants and IQ4_XS).
"""
from __future__ import annotations

import ctypes
import functools
import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from studygroup.gguf import layout as gguf_layout
from studygroup.model import kernel_build, kernel_self_check
from studygroup.progress import say

if TYPE_CHECKING:
    from studygroup.gguf.blocks import Blocks

SOURCE = Path(__file__).parent / "kernels" / "one_row.c"
#: Compiler flags: this machine's instructions (the library is built per machine and kept per CPU).
FLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-std=c11", "-fopenmp-simd")
#: Set to "off" to multiply float32 weights instead (the same weights; slower).
SWITCH = "STUDYGROUP_BLOCK_KERNEL"


class BlockMatrix:
    """x·W for one row x (1, in), W (in, out) held as blocks: (1, in) -> (1, out) float32.

    >>> from studygroup.gguf.blocks import read_blocks
    >>> from studygroup.gguf.model_path import default_model_path
    >>> W = BlockMatrix(read_blocks(default_model_path(), model.config, {"W_O": ["layers.0.W_O"]})["W_O"])
    >>> x = torch.randn(1, 576)
    >>> bool(torch.allclose(W(x), x @ model.w["layers.0.W_O"], atol=1e-4))
    True
    """

    def __init__(self, blocks: "Blocks"):
        self.blocks, self.n_in, self.n_out = blocks, blocks.n_in, blocks.n_out
        self._call = _PartsCall([(blocks.qtype, blocks.rows.data_ptr(), blocks.n_out, None)], blocks.n_in)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._call(x)

    def weights(self) -> torch.Tensor:
        """(in, out) float32: the weights the kernel multiplies by, rebuilt as the dequantizer does."""
        out = torch.empty(self.n_out, self.n_in)  # (out, in)
        _library().sg_dequantize(self.blocks.qtype, self.blocks.rows.data_ptr(), out.data_ptr(), self.n_out, self.n_in)
        return out.T


class MappedMatrix:
    """x·W for one row x (1, in), W (in, out) kept as the file's mapped blocks (`studygroup.model.packed`):
    each part's rows multiplied where they lie, in one call of the kernel (its threads share every
    part's rows), each output written at its place in our order (W_Q's and W_K's rows un-permuted,
    layout fact 2). (1, in) -> (1, out) float32; each output the same sum as `BlockMatrix`'s."""

    def __init__(self, parts: list):
        self.parts, self.n_in, self.n_out = parts, parts[0].n_in, sum(m.n_out for m in parts)
        for m in parts:
            assert m.data.strides[1] == 1 and m.data.strides[0] == m.data.shape[1], f"{m.name}: rows not contiguous"
        # the file's row r of a permuted part is our row order⁻¹[r]
        self._to = [None if m.order is None else np.argsort(m.order).astype(np.int64) for m in parts]
        self._call = _PartsCall([(m.qtype, m.data.ctypes.data, m.n_out, to) for m, to in zip(parts, self._to)], self.n_in)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._call(x)


class _PartsCall:
    """One call of `sg_matvec_parts` over fixed parts [(qtype, address of its rows, rows, where each row
    goes (rows,) int64 or None)] of `n_in` columns: x (1, n_in) -> (1, Σ rows) float32."""

    def __init__(self, parts: list, n_in: int):
        n = len(parts)
        self.n_in, self.n_out = n_in, sum(p[2] for p in parts)
        self.args = ((ctypes.c_int * n)(*(p[0] for p in parts)), (ctypes.c_void_p * n)(*(p[1] for p in parts)),
                     (ctypes.c_int64 * n)(*(p[2] for p in parts)),
                     (ctypes.c_void_p * n)(*(None if p[3] is None else p[3].ctypes.data for p in parts)))
        self.keep = [p[3] for p in parts]  # the index arrays the call reads
        self.n = n

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1).to(torch.float32).contiguous()  # (in,)
        assert x.numel() == self.n_in, f"a row of {x.numel()} numbers for a matrix of {self.n_in} rows"
        y = torch.empty(1, self.n_out)  # (1, out)
        if _library().sg_matvec_parts(self.n, *self.args, x.data_ptr(), y.data_ptr(), self.n_in, torch.get_num_threads()):
            raise ValueError("the kernel does not read these blocks")
        return y


_kept: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def lean_matrices_of(model) -> dict[str, "BlockMatrix"]:
    """`lean_matrices(model)`, read once per model (0.1 GB for the default one) and kept while it lives."""
    if model not in _kept:
        _kept[model] = lean_matrices(model)
    return _kept[model]


def attend_row(q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, start: int, scale: float,
               weights: torch.Tensor) -> torch.Tensor:
    """One question row's attention in every head over the cache rows start .. start + S − 1.

    q (H, d); K, V (H_kv, capacity, d) contiguous; weights (H, S), rows of contiguous numbers (a slice
    of a larger tensor is fine), receives softmax(q·Kᵀ·scale)
    per head (query head h reads key/value head h // (H / H_kv)). Returns z (H, d), the weighted sums.

    >>> q, K, V = torch.randn(4, 8), torch.randn(2, 10, 8), torch.randn(2, 10, 8)
    >>> a = torch.empty(4, 6)
    >>> z = attend_row(q, K, V, 2, 0.5, a)
    >>> ref = torch.softmax(q.view(2, 2, 8) @ K[:, 2:8].transpose(1, 2) * 0.5, -1)  # (H_kv, g, S)
    >>> bool(torch.allclose(a, ref.view(4, 6), atol=1e-6)), bool(torch.allclose(z, (ref @ V[:, 2:8]).view(4, 8), atol=1e-5))
    (True, True)
    """
    (H, d), (H_kv, capacity, _), S = q.shape, K.shape, weights.shape[-1]
    assert K.is_contiguous() and V.is_contiguous() and weights.stride(-1) == 1 and q.dtype == torch.float32
    z = torch.empty(H, d)
    _library().sg_attend_row(q.contiguous().data_ptr(), K.data_ptr(), V.data_ptr(), capacity, start, S, H, H_kv, d,
                             scale, weights.data_ptr(), weights.stride(0), z.data_ptr())
    return z


def lean_matrices(model) -> dict[str, BlockMatrix]:
    """The matrices the lean step multiplies, per layer `layers.{l}.` W_QKV, W_O, W_gate_up, W_down, and
    "unembed", for those the file holds as blocks the kernel reads; {} where the kernel cannot be used
    (no compiler, switched off, not the CPU, not float32)."""
    if not usable(model):
        return {}
    kept = getattr(model.w, "kept", {})
    if kept:  # the file's mapped blocks, as the model keeps them
        from studygroup.gguf.blocks import BLOCK_TYPES

        wanted = {n: parts for n, parts in kept.items() if n != "embed" or "unembed" not in kept}
        return {("unembed" if n == "embed" else n): MappedMatrix(parts) for n, parts in wanted.items()
                if all(m.qtype in BLOCK_TYPES for m in parts)}
    c = model.config
    groups = {"unembed": ["unembed"]}
    for l in range(c.n_layers):
        p = f"layers.{l}."
        groups.update({p + n: [p + n] for n in ("W_O", "W_down")})
        groups.update({p + fused: [p + part for part in parts] for fused, parts in gguf_layout.FUSED.items()
                       if p + fused in model.w})  # the fused matrices the model multiplies
    from studygroup.gguf.blocks import read_blocks  # here: a command that does not generate never imports gguf
    from studygroup.gguf.model_path import resolve_model_path

    blocks = read_blocks(resolve_model_path(model.path), c, groups)
    return {name: BlockMatrix(b) for name, b in blocks.items()}


def usable(model) -> bool:
    """Whether the lean step can multiply this model's blocks: float32 on the CPU, the kernel built,
    and not switched off."""
    return (os.environ.get(SWITCH, "").lower() != "off" and model.device.type == "cpu"
            and model.dtype == torch.float32 and available())


def reads(qtype: int) -> bool:
    """Whether the kernel is built (compiled now if needed) and reads blocks of `qtype`, vectorized or not:
    what dequantizing a layer needs (multiplying one row also needs `usable`)."""
    from studygroup.gguf.blocks import BLOCK_TYPES

    return qtype in BLOCK_TYPES and _loaded() is not None


def library() -> ctypes.CDLL:
    """The compiled kernels (see `reads`)."""
    return _library()


def available() -> bool:
    """Whether the kernel is built (compiled now if needed) and vectorized for this CPU."""
    return _loaded() is not None and bool(_library().sg_vectorized())


@functools.cache
def _loaded() -> ctypes.CDLL | None:
    """The library, or None where it cannot be built, loaded or trusted: tried once per process, with
    one line where something other than a missing compiler stands in the way."""
    try:
        return _library()
    except kernel_build.NoCompiler:
        return None
    except OSError as e:
        say(f"studygroup: the generation kernels are not used ({e}); multiplying float32 weights instead")
        return None


@functools.cache
def _library() -> ctypes.CDLL:
    """The compiled kernels, built by this user and checked (`kernel_build`); OSError if they cannot be had."""
    return kernel_build.load(SOURCE, FLAGS, _bind_and_check)


def _bind_and_check(lib: ctypes.CDLL) -> None:
    """Declare the kernels' signatures, then check them once on small generated inputs against the
    dequantizer and float64 (a library that misses a symbol or computes wrong numbers is Refused)."""
    try:
        lib.sg_matvec.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2  # type, W, x, y, rows, cols
        lib.sg_dequantize.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2  # type, W, out, rows, cols
        lib.sg_dequantize_rows.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                                           ctypes.c_void_p, ctypes.c_int64]  # type, W, row stride, rows, n, out, cols
        lib.sg_matvec_parts.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 6 + [ctypes.c_int64, ctypes.c_int]
        # parts, their types, W, rows, where rows go, x, y, cols, threads
        lib.sg_matvec.restype = lib.sg_dequantize.restype = lib.sg_dequantize_rows.restype = ctypes.c_int
        lib.sg_matvec_parts.restype = ctypes.c_int
        lib.sg_attend_row.argtypes = ([ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3 + [ctypes.c_int] * 3
                                      + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p])
        # q, K, V, capacity, start, S, H, H_kv, d, scale, weights, its row stride, z
        lib.sg_vectorized.restype = ctypes.c_int
    except AttributeError as e:
        raise kernel_build.Refused(f"a symbol is missing: {e}") from None
    wrong = kernel_self_check.first_wrong(lib)
    if wrong:
        raise kernel_build.Refused(wrong)


def split_rows(n: int, work) -> None:
    """work(a, b) for rows a … b − 1 of n, the rows split among the threads (`_pool`), all done on return.

    >>> done = []
    >>> split_rows(5, lambda a, b: done.append((a, b)))
    >>> sum(b - a for a, b in done)
    5
    """
    pool = _pool()
    step = -(-n // pool._max_workers)
    jobs = [pool.submit(work, a, min(a + step, n)) for a in range(0, n, step)]
    for j in jobs:
        j.result()


@functools.cache
def _pool() -> ThreadPoolExecutor:
    """Threads that dequantize blocks (the foreign call lets go of Python's lock): as many as torch uses."""
    return ThreadPoolExecutor(max(1, torch.get_num_threads()), thread_name_prefix="studygroup-blocks")
