"""One check of the compiled kernels when they are loaded, on small generated inputs: every block
type's weights (all rows, and chosen rows in another order) equal gguf's dequantizer bit for bit, a row times its blocks equals a float64
product, and one question row's attention equals the float64 formula. A library built wrongly
(or from altered code) computes other numbers; it is then refused before it writes a word.

The blocks are random bytes with their float16 fields set to finite numbers (`random_blocks`): every
code and integer scale a block can hold is then valid, and gguf's `quants.quantize` writes only some
of the types. One row's blocks are all zeros and one row's all ones (0xFF: the largest codes and scales).

Shapes: a matrix of ROWS outputs × COLS inputs kept as blocks (COLS a whole number of 256-weight
super-blocks); attention with H query heads over H_KV key/value heads of width D, S cache rows used
from START.
"""
from __future__ import annotations

import ctypes

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

from studygroup.gguf.blocks import BLOCK_TYPES, HALF_OFFSETS

ROWS, COLS = 8, 512
H, H_KV, D, CAPACITY, START, S = 4, 2, 8, 10, 2, 6
RTOL = 1e-5  # float32 sums against float64, relative to the largest term


def first_wrong(lib: ctypes.CDLL) -> str:
    """What the first wrong kernel got wrong, or '' where every one gives the expected numbers."""
    rng = np.random.default_rng(0)
    for qtype in sorted(BLOCK_TYPES):
        why = _matrix_wrong(lib, Q(qtype), rng)
        if why:
            return why
    return _attention_wrong(lib, rng)


def random_blocks(qtype: Q, rows: int, cols: int, rng: np.random.Generator, fill: int | None = None,
                  halves=None) -> np.ndarray:
    """(rows, bytes a row) uint8: blocks of `qtype` of random bytes (or every byte `fill`), their float16
    fields then set to `halves` (broadcast to (rows, blocks a row, fields)), by default drawn uniformly
    from (−1, 1): negative scales and mins included.

    >>> b = random_blocks(Q.Q4_K, 2, 512, np.random.default_rng(0))
    >>> b.shape, bool(np.isfinite(quants.dequantize(b, Q.Q4_K)).all())  # 2 super-blocks of 144 bytes a row
    ((2, 288), True)
    """
    n, size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = (rng.integers(0, 256, (rows, cols // n, size), dtype=np.uint8) if fill is None
              else np.full((rows, cols // n, size), fill, np.uint8))
    offsets = HALF_OFFSETS[qtype]
    if halves is None:
        halves = rng.uniform(-1, 1, (rows, cols // n, len(offsets)))
    halves = np.broadcast_to(np.asarray(halves, np.float16), (rows, cols // n, len(offsets))).view(np.uint8)
    for f, offset in enumerate(offsets):
        blocks[..., offset:offset + 2] = halves[..., 2 * f:2 * f + 2]
    return blocks.reshape(rows, -1)


def _matrix_wrong(lib: ctypes.CDLL, qtype: Q, rng: np.random.Generator) -> str:
    blocks = random_blocks(qtype, ROWS, COLS, rng)
    blocks[:2] = [random_blocks(qtype, 1, COLS, rng, fill)[0] for fill in (0, 255)]  # the least and largest codes
    want = quants.dequantize(blocks, qtype).astype(np.float32)  # (ROWS, COLS)
    # bit for bit: the same float32 numbers, −0 and +0 told apart
    got = np.full((ROWS, COLS), np.nan, np.float32)
    if lib.sg_dequantize(int(qtype), blocks.ctypes.data, got.ctypes.data, ROWS, COLS) != 0 or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        return f"its {qtype.name} weights differ from gguf's dequantizer"
    order = np.arange(ROWS - 1, -1, -1, dtype=np.int64)  # the rows backwards
    picked = np.full((ROWS, COLS), np.nan, np.float32)
    if (lib.sg_dequantize_rows(int(qtype), blocks.ctypes.data, blocks.shape[1], order.ctypes.data, ROWS,
                               picked.ctypes.data, COLS) != 0
            or not np.array_equal(picked.view(np.uint32), want[order].view(np.uint32))):
        return f"its {qtype.name} weights of chosen rows differ from gguf's dequantizer"
    x = rng.standard_normal(COLS).astype(np.float32)  # (COLS,)
    y = np.full(ROWS, np.nan, np.float32)  # (ROWS,)
    lib.sg_matvec(int(qtype), blocks.ctypes.data, x.ctypes.data, y.ctypes.data, ROWS, COLS)
    terms = want.astype(np.float64) * x  # (ROWS, COLS)
    if not np.all(np.abs(y - terms.sum(1)) <= RTOL * np.abs(terms).sum(1)):
        return f"its {qtype.name} row times blocks differs from a float64 product"
    if not np.array_equal(_parts_product(lib, qtype, blocks, x).view(np.uint32), y.view(np.uint32)):
        return f"its {qtype.name} row times blocks in parts differs from the row times the whole"
    return ""


def _parts_product(lib: ctypes.CDLL, qtype: Q, blocks: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sg_matvec_parts over the rows as two parts, 0 … 2 and 3 … ROWS − 1, the second's outputs
    written backwards and put back in order: (ROWS,) float32, the same sums as sg_matvec's."""
    to = np.arange(ROWS - 4, -1, -1, dtype=np.int64)  # the second part's row r goes to ROWS − 4 − r
    n = 2
    qtypes, rows = (ctypes.c_int * n)(int(qtype), int(qtype)), (ctypes.c_int64 * n)(3, ROWS - 3)
    W = (ctypes.c_void_p * n)(blocks.ctypes.data, blocks[3:].ctypes.data)
    where = (ctypes.c_void_p * n)(None, to.ctypes.data)
    y = np.full(ROWS, np.nan, np.float32)
    lib.sg_matvec_parts(n, qtypes, W, rows, where, x.ctypes.data, y.ctypes.data, COLS, 2)
    return np.concatenate([y[:3], y[3:][::-1]])


def _attention_wrong(lib: ctypes.CDLL, rng: np.random.Generator) -> str:
    q = rng.standard_normal((H, D)).astype(np.float32)  # (H, D)
    K, V = (rng.standard_normal((H_KV, CAPACITY, D)).astype(np.float32) for _ in range(2))  # (H_KV, CAPACITY, D)
    weights, z = np.full((H, S), np.nan, np.float32), np.full((H, D), np.nan, np.float32)
    scale = 1 / np.sqrt(D)
    lib.sg_attend_row(q.ctypes.data, K.ctypes.data, V.ctypes.data, CAPACITY, START, S, H, H_KV, D,
                      ctypes.c_float(scale), weights.ctypes.data, S, z.ctypes.data)
    kv = np.arange(H) // (H // H_KV)  # each query head's key/value head
    Ks, Vs = K[kv, START:START + S].astype(np.float64), V[kv, START:START + S].astype(np.float64)  # (H, S, D)
    scores = np.einsum("hd,hsd->hs", q.astype(np.float64), Ks) * scale  # (H, S)
    a = np.exp(scores - scores.max(1, keepdims=True))
    a /= a.sum(1, keepdims=True)
    if not (np.abs(weights - a).max() <= 1e-6 and np.abs(z - np.einsum("hs,hsd->hd", a, Vs)).max() <= 1e-5):
        return "its attention of one row differs from the float64 formula"
    return ""
