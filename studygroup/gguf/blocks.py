"""A matrix as the file's quantized blocks (32 weights, or 256 for the K-quants and IQ4_XS), its rows in our order, for a kernel that
multiplies one row by it without dequantizing it (`studygroup.model.row_kernels`).

Each row of a file's matrix is one output of the layer (the (out, in) of `torch.nn.Linear`), a run
of blocks; a block's bytes are those the file stores. Only the rows' order changes: W_Q and W_K
are un-permuted as `layout.unpermute_rope_rows` does for the float32 weights, so row r here is
column r of our W (in, out).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from studygroup.errors import ModelFileError
from studygroup.gguf import layout as gguf_layout
from studygroup.gguf.config import UNTIED_UNEMBED, Config
from studygroup.gguf.container import read_gguf

#: Where each block type the kernel reads (kernels/one_row.c names each layout) keeps its float16
#: numbers (d, and m or dmin), as byte offsets in a block: the only bytes that can make a block's
#: weights infinite or NaN (the others are codes and integer scales).
HALF_OFFSETS = {Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2), Q.Q8_0: (0,), Q.Q2_K: (80, 82),
                Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,), Q.IQ4_NL: (0,), Q.IQ4_XS: (0,)}
#: The block types read: blocks of 32 weights, or super-blocks of 256 (the K-quants, IQ4_XS).
BLOCK_TYPES = frozenset(HALF_OFFSETS)


@dataclass(frozen=True)
class Blocks:
    """qtype: ggml's type number; rows (out, in / weights per block · bytes per block) uint8; n_in:
    weights a row, a whole number of blocks."""

    qtype: int
    rows: torch.Tensor
    n_in: int

    def __post_init__(self):
        n, size = gguf.GGML_QUANT_SIZES[Q(self.qtype)]
        assert self.n_in % n == 0 and self.rows.dtype == torch.uint8 and self.rows.dim() == 2 \
            and self.rows.shape[1] == self.n_in // n * size, \
            f"{Q(self.qtype).name} rows of {tuple(self.rows.shape)} bytes cannot hold {self.n_in} weights each"

    @property
    def n_out(self) -> int:
        return self.rows.shape[0]


def read_blocks(path: str | Path, config: Config, groups: dict[str, list[str]]) -> dict[str, Blocks]:
    """Each group's matrices, our names (e.g. "layers.0.W_Q", "unembed"), as one Blocks: the parts'
    rows one after another (as `fusing` joins their columns), read from the file into memory in one
    copy. A group is left out unless every part's file type is one of BLOCK_TYPES, all alike and of
    one width. A tied "unembed" is the embedding's rows.

    >>> from studygroup.gguf.model_path import default_model_path
    >>> from studygroup.model.weights_cache import load_weights
    >>> config, _ = load_weights()
    >>> b = read_blocks(default_model_path(), config, {"QKV": ["layers.0.W_Q", "layers.0.W_K", "layers.0.W_V"],
    ...                                                "unembed": ["unembed"]})
    >>> b["QKV"].rows.shape, Q(b["unembed"].qtype).name  # 576 + 2 · 192 rows of 18 Q4_1 blocks
    (torch.Size([960, 360]), 'Q8_0')
    """
    file = read_gguf(path)
    tied = UNTIED_UNEMBED not in file.tensors
    to_file = {ours: name for name, ours in gguf_layout.name_map(config.n_layers, tied=tied, arch=config.arch).items()}
    if tied:
        to_file["unembed"] = to_file["embed"]
    found = {}
    for group, parts in groups.items():
        infos = [file.tensors.get(to_file.get(name, "")) for name in parts]
        if (any(i is None or len(i.shape) != 2 for i in infos) or len({(i.qtype, i.shape[1]) for i in infos}) != 1
                or infos[0].qtype not in BLOCK_TYPES):
            continue
        for i in infos:
            row_bytes(i.name, i.qtype, i.shape[1])
        rows = np.concatenate([np.take(file.raw(i), _row_order(name, i.shape[0], config), axis=0)
                               for name, i in zip(parts, infos)])  # (Σ out, bytes per row), one copy
        found[group] = Blocks(int(infos[0].qtype), torch.from_numpy(rows), infos[0].shape[1])
    return found


@dataclass(frozen=True, eq=False)
class FileMatrix:
    """One matrix as the file keeps it, memory-mapped and never copied: `data` (out, bytes a row)
    uint8 for block types (out, in) of its numbers for F32/F16/BF16, read-only; `n_in` weights a row;
    `order` (out,) the file's row for each of our rows (W_Q and W_K un-permuted, layout fact 2), None
    where they are the same. `name` is the file's tensor name, `qtype` ggml's type number."""

    name: str
    qtype: int
    data: np.ndarray
    n_in: int
    order: np.ndarray | None = None

    @property
    def n_out(self) -> int:
        return self.data.shape[0]

    @property
    def nbytes(self) -> int:
        return self.data.nbytes


def file_matrix(data: np.ndarray, name: str, qtype: int, ours: str, config: Config) -> FileMatrix:
    """The mapped bytes `data` of the file's matrix `name` (`GGUFFile.raw`), kept as they are for our
    matrix `ours`, after checking that its rows are whole blocks and its numbers finite.

    >>> from studygroup.gguf.config import Config
    >>> c = Config(1, 1, 1, 32, 32, 64, 64, 1e4, 1e-5, 10)
    >>> m = file_matrix(np.zeros((64, 34), np.uint8), "blk.0.ffn_up.weight", Q.Q8_0, "layers.0.W_up", c)
    >>> m.n_out, m.n_in, m.order is None
    (64, 32, True)
    """
    n_in = data.shape[1] if qtype in PLAIN_TYPES else _weights_a_row(name, qtype, data)
    check_finite(name, data, qtype)
    kind = ours.rsplit(".", 1)[-1]
    permuted = kind in gguf_layout.ROPE_PERMUTED and config.arch.permuted_qk
    return FileMatrix(name, int(qtype), data, n_in, _row_order(ours, data.shape[0], config) if permuted else None)


#: Types stored as plain numbers, one a weight.
PLAIN_TYPES = frozenset({Q.F32, Q.F16, Q.BF16})


def _weights_a_row(name: str, qtype: int, data: np.ndarray) -> int:
    """Weights in a row of `data`, (out, bytes a row) uint8 blocks of `qtype`."""
    n, size = gguf.GGML_QUANT_SIZES[Q(qtype)]
    if data.shape[1] % size:
        raise ModelFileError(f"tensor {name} ({Q(qtype).name}) has rows of {data.shape[1]} bytes, not a whole "
                             f"number of its {size}-byte blocks: the file is damaged")
    return data.shape[1] // size * n


def check_finite(name: str, data: np.ndarray, qtype: int) -> None:
    """ModelFileError where a weight of the tensor `name` would not be finite: for block types, where a
    float16 field of a block (HALF_OFFSETS: the only bytes that can make a weight infinite or NaN) is
    not; for plain numbers, where one is not. Reads the tensor once, allocates a few bytes a block.

    >>> b = np.zeros((1, 34), np.uint8); b[0, :2] = np.array([np.inf], np.float16).view(np.uint8)
    >>> check_finite("t", b, Q.Q8_0)
    Traceback (most recent call last):
    studygroup.errors.ModelFileError: tensor t holds 32 values not finite (NaN or infinite): the file is damaged or was converted wrongly
    """
    if qtype in PLAIN_TYPES:
        bad = 0 if qtype == Q.BF16 else int(data.size - np.count_nonzero(np.isfinite(data)))
        if qtype == Q.BF16:  # bfloat16 as uint16: exponent all ones
            bad = int(np.count_nonzero((data.view(np.uint16) & 0x7F80) == 0x7F80))
    else:
        n, size = gguf.GGML_QUANT_SIZES[Q(qtype)]
        blocks = data.reshape(-1, size)  # (blocks, bytes a block)
        finite = np.ones(len(blocks), bool)
        for offset in HALF_OFFSETS[Q(qtype)]:
            finite &= np.isfinite(np.ascontiguousarray(blocks[:, offset:offset + 2]).view(np.float16)[:, 0])
        bad = int(len(blocks) - np.count_nonzero(finite)) * n
    if bad:
        raise ModelFileError(f"tensor {name} holds {bad} value{'' if bad == 1 else 's'} not finite (NaN or infinite): "
                             "the file is damaged or was converted wrongly")


def row_bytes(name: str, qtype: int, n_in: int) -> int:
    """The bytes of one row of `n_in` weights of the tensor `name` stored as `qtype`; ModelFileError
    where the row is not a whole number of that type's blocks.

    >>> row_bytes("blk.0.ffn_down.weight", Q.Q4_K, 8960)  # 35 super-blocks of 256 weights, 144 bytes each
    5040
    """
    n, size = gguf.GGML_QUANT_SIZES[Q(qtype)]
    if n_in % n:
        raise ModelFileError(f"tensor {name} ({Q(qtype).name}) has rows of {n_in} weights, not a whole number "
                             f"of its {n}-weight blocks: the file is damaged")
    return n_in // n * size


def _row_order(name: str, n_rows: int, config: Config) -> np.ndarray:
    """The file's row for each of our rows: W_Q and W_K un-permuted (layout fact 2), others as they are."""
    kind = name.rsplit(".", 1)[-1]
    order = torch.arange(n_rows).view(n_rows, 1)  # (out, 1)
    if kind in gguf_layout.ROPE_PERMUTED and config.arch.permuted_qk:
        order = gguf_layout.unpermute_rope_rows(order, getattr(config, gguf_layout.ROPE_PERMUTED[kind]))
    return order.view(-1).numpy()
