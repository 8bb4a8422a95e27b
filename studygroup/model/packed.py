"""The model's weights by name, its matrices kept as the file's blocks and turned into float32 a
layer at a time.

A matrix kept as blocks (`studygroup.gguf.blocks.FileMatrix`, the file's mapped bytes) is turned
into float32 only while it is used: during a pass, the layer being computed is dequantized into
buffers that every layer reuses (`enter_layer`), the unembedding a slice of its rows at a time
(`unembed`, in a buffer let go after each pass), the embedding only the rows of the text's tokens
(`rows`). Any other look-up (`weights["layers.3.W_O"]`, say, a head's write in a study) dequantizes
that matrix afresh. The
float32 numbers are those of gguf's dequantizer bit for bit (the compiled kernel is checked
against it at load; without a compiler gguf's own numpy code runs), laid out as the float32 model
holds them, (out, in) rows seen as (in, out): the same multiplies give the same results.

A pass with a gradient keeps of each layer only its input (`checkpointed`, torch's checkpoint): the
backward pass computes the layer again from it, with its matrices dequantized afresh once for both
the layer's second computation and its backward, and lets them go before the layer below. At 512
tokens of Qwen2.5-Coder-1.5B that keeps 3 MiB a layer instead of ~100 MB of activations. Elsewhere
(the unembedding's slices) a weight buffer the backward pass keeps is replaced by a note of which
rows it held, and dequantized again when the backward pass asks
(`torch.autograd.graph.saved_tensors_hooks`), so that the next slice may reuse the buffer.

Shapes: a matrix W (in, out) of the paper, stored (out, in) rows.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from studygroup.errors import ModelFileError
from studygroup.gguf import layout as gguf_layout
from studygroup.gguf.config import Config

if TYPE_CHECKING:
    from studygroup.gguf.blocks import FileMatrix

#: The most bytes of float32 unembedding rows turned at once (a buffer reused slice after slice).
UNEMBED_SLICE_BYTES = 128 * 2**20


class Weights(Mapping):
    """{our name: float32 tensor} over `tensors` (float32, as they are) and `kept` (a matrix name ->
    the FileMatrix parts whose rows it joins, e.g. "layers.0.W_QKV" -> [W_Q, W_K, W_V]).

    >>> w = Weights({"final_norm": torch.ones(2)}, {}, None)
    >>> "final_norm" in w, w.rows("final_norm", torch.tensor([1])).tolist()
    (True, [1.0])
    """

    def __init__(self, tensors: dict[str, torch.Tensor], kept: dict[str, list[FileMatrix]], c: Config | None,
                 path: Path | None = None):
        self.tensors, self.kept, self.path = tensors, kept, path
        self._parts = _part_columns(kept, c) if kept else {}
        self._buffers: dict[str, torch.Tensor] = {}  # kind -> (out, in) float32, reused layer after layer
        self._held: dict[int, tuple[str, int, int]] = {}  # a buffer's data pointer -> (matrix, rows a, b) it holds
        self._layer: dict[str, torch.Tensor] = {}  # the matrices of the layer being computed
        self._stamp = _stamp(path) if path is not None and kept else None

    # ---- the mapping -------------------------------------------------------------------------
    def __getitem__(self, name: str) -> torch.Tensor:
        if name in self.tensors:
            return self.tensors[name]
        if name in self._parts:
            whole, a, b = self._parts[name]
            return self[whole][:, a:b]
        if name in self._layer:
            return self._layer[name]
        if name in self.kept:
            rows = self._float32(name, torch.empty(self._shape(name)))  # (out, in)
            return rows if name == "embed" else rows.T
        if name == "unembed" and "embed" in self.kept:  # tied: the embedding's rows
            return self["embed"].T
        raise KeyError(name)

    def __setitem__(self, name: str, value: torch.Tensor) -> None:
        """Replace a weight by a float32 tensor of its shape (a study's changed model, say)."""
        self.kept.pop(name, None)
        self.tensors[name] = value

    def __contains__(self, name) -> bool:
        return (name in self.tensors or name in self._parts or name in self.kept
                or (name == "unembed" and "embed" in self.kept))

    def __iter__(self) -> Iterator[str]:
        yield from self.tensors
        yield from self.kept
        yield from self._parts
        if "embed" in self.kept and "unembed" not in self.kept and "unembed" not in self.tensors:
            yield "unembed"

    def __len__(self) -> int:
        return sum(1 for _ in self)

    @property
    def blocks_bytes(self) -> int:
        """Bytes of the matrices kept as the file's blocks."""
        return sum(m.nbytes for parts in self.kept.values() for m in parts)

    # ---- what a pass uses --------------------------------------------------------------------
    def rows(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` (T,) of a table such as the embedding (vocab, d_model) -> (T, d_model)."""
        if name not in self.kept:
            return self[name][ids]
        self.check_unchanged()
        (m,) = self.kept[name]
        out = torch.empty(len(ids), m.n_in)  # (T, d_model)
        dequantize_rows(m, ids.cpu().numpy().astype(np.int64), out.numpy())
        return out

    def unembed_column(self, token: int) -> torch.Tensor:
        """Column `token` of W_U (d_model, vocab): the direction whose dot product is token's logit. -> (d_model,)"""
        name = "unembed" if "unembed" in self.kept else "embed"
        if name not in self.kept:
            return self["unembed"][:, token]
        return self.rows(name, torch.tensor([token]))[0]

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """x·W_U: (…, d_model) -> (…, vocab); kept as blocks, a slice of the vocabulary's rows at a time."""
        name = "unembed" if "unembed" in self.kept else "embed"
        if name not in self.kept:
            return _project(x, self["unembed"])
        (m,) = self.kept[name]
        step = max(1, UNEMBED_SLICE_BYTES // (4 * m.n_in))
        try:
            if step >= m.n_out:
                return _project(x, self._buffer(name, "unembed", m.n_out).T)
            out = x.new_empty(*x.shape[:-1], m.n_out)  # (…, vocab)
            for a in range(0, m.n_out, step):
                b = min(a + step, m.n_out)
                out[..., a:b] = _project(x, self._buffer(name, "unembed", b - a, a).T)
            return out
        finally:  # not held between passes: the next pass's layers may use its memory
            self._drop("unembed")

    def enter_layer(self, l: int) -> None:
        """Layer l's matrices into float32, in the buffers the previous layer used."""
        p = f"layers.{l}."
        self._layer = {}
        for name in self.kept:
            if name.startswith(p):
                kind = name[len(p):]
                self._layer[name] = self._buffer(name, kind, self._shape(name)[0]).T  # (in, out)

    def leave_layers(self) -> None:
        """After a pass: look-ups dequantize afresh again."""
        self._layer = {}

    def let_layers_go(self) -> None:
        """Let the layers' buffers go, between passes (the next pass makes them afresh): logits of
        many rows then take their place instead of sitting beside them (1,024 rows of a
        128,256-word vocabulary are 525 MB, an 8B layer in float32 is 872 MB)."""
        self.leave_layers()
        for kind in list(self._buffers):
            self._drop(kind)

    @contextlib.contextmanager
    def pass_(self) -> Iterator[None]:
        """Around a pass: the file checked unchanged, and what a gradient keeps of a buffer noted
        (see the module's docstring); the buffers free for others after."""
        self.check_unchanged()
        hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack) \
            if self.kept and torch.is_grad_enabled() else contextlib.nullcontext()
        try:
            with hooks:
                yield
        finally:
            self.leave_layers()

    def checkpointed(self, l: int, layer, x: torch.Tensor, quiet) -> torch.Tensor:
        """layer(x), layer l of a pass (x (B, T, d_model) -> (B, T or R, d_model)). With a gradient over
        kept matrices, the layer's activations are not kept for the backward pass: only x is, and
        the backward pass computes the layer again inside `quiet()` (a context: what records nothing
        twice), its matrices dequantized into the buffers once for both (see the module's docstring)."""
        if not self.kept or not torch.is_grad_enabled():
            return layer(x)
        from torch.utils.checkpoint import checkpoint

        return checkpoint(layer, x, use_reentrant=False, preserve_rng_state=False,
                          context_fn=lambda: (contextlib.nullcontext(), self._again(l, quiet())))

    @contextlib.contextmanager
    def _again(self, l: int, quiet) -> Iterator[None]:
        """Layer l computed again in the backward pass: its matrices in the buffers (the layer above
        is done with them: the backward pass goes down the layers one by one)."""
        self.check_unchanged()
        with quiet:
            self.enter_layer(l)
            try:
                yield
            finally:
                self.leave_layers()

    def check_unchanged(self) -> None:
        """ModelFileError where the file changed since it was mapped (its size, time or identity):
        its mapped bytes would otherwise be other weights, or gone (a crash)."""
        if self._stamp is not None and _stamp(self.path) != self._stamp:
            raise ModelFileError(f"{self.path} changed while studygroup had it open: load the model again")

    # ---- dequantizing ------------------------------------------------------------------------
    def _shape(self, name: str) -> tuple[int, int]:
        """(out, in) of a kept matrix: its parts' rows one after the other."""
        parts = self.kept[name]
        return sum(m.n_out for m in parts), parts[0].n_in

    def _buffer(self, name: str, kind: str, n: int, first: int = 0) -> torch.Tensor:
        """Rows first … first + n − 1 of the matrix `name`, float32 (n, in), in the buffer of `kind`."""
        width = self.kept[name][0].n_in
        buf = self._buffers.get(kind)
        if buf is None or buf.shape[1] != width or buf.shape[0] < n:
            if buf is not None:
                self._held.pop(buf.data_ptr(), None)
            with torch.inference_mode(False):  # a plain tensor: a pass with a gradient may use it
                buf = self._buffers[kind] = torch.empty(n, width)
        rows = buf[:n]
        self._held[buf.data_ptr()] = (name, first, first + n)
        return self._float32(name, rows, first)

    def _drop(self, kind: str) -> None:
        """Let the buffer of `kind` go (a later use makes a fresh one)."""
        buf = self._buffers.pop(kind, None)
        if buf is not None:
            self._held.pop(buf.data_ptr(), None)

    def _float32(self, name: str, out: torch.Tensor, first: int = 0) -> torch.Tensor:
        """The rows first … first + len(out) − 1 of the kept matrix `name`, dequantized into out (n, in)."""
        self.check_unchanged()
        at, end = 0, first + out.shape[0]
        for m in self.kept[name]:  # the parts' rows, one after the other
            a, b = max(first, at), min(end, at + m.n_out)
            if a < b:
                rows = np.arange(a - at, b - at) if m.order is None else m.order[a - at:b - at]
                dequantize_rows(m, rows.astype(np.int64), out[a - first:b - first].numpy())
            at += m.n_out
        return out

    def _pack(self, t: torch.Tensor):
        """A tensor the backward pass keeps: a buffer's rows are noted, not kept (they will change)."""
        held = self._held.get(t.untyped_storage().data_ptr())
        if held is None or t.device.type != "cpu":
            return t
        return held, t.shape, t.stride(), t.storage_offset()

    def _unpack(self, saved):
        if isinstance(saved, torch.Tensor):
            return saved
        (name, a, b), shape, stride, offset = saved
        rows = self._float32(name, torch.empty(b - a, self.kept[name][0].n_in), a)
        return rows.as_strided(shape, stride, offset)


def _project(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    from studygroup.model.linear import project

    return project(x, W)


def _part_columns(kept: dict[str, list[FileMatrix]], c: Config) -> dict[str, tuple[str, int, int]]:
    """Each part of a fused kept matrix (W_Q of W_QKV, ...) -> (the fused name, its columns a, b)."""
    parts = {}
    for name in kept:
        prefix, _, kind = name.rpartition(".")
        if kind in gguf_layout.FUSED:
            at = 0
            for part in gguf_layout.FUSED[kind]:
                width = gguf_layout.paper_shape(f"{prefix}.{part}", c)[1]
                parts[f"{prefix}.{part}"] = (name, at, at + width)
                at += width
    return parts


def _stamp(path: Path) -> tuple[int, int, int, int]:
    """What changes when a file is written or replaced: (device, inode, size, modification time)."""
    try:
        s = os.stat(path)
    except OSError:
        return (0, 0, -1, 0)
    return s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns


def dequantize_rows(m: FileMatrix, rows: np.ndarray, out: np.ndarray) -> None:
    """Rows `rows` (n,) of the file's matrix m into out (n, in) float32, as gguf dequantizes them:
    the compiled kernel where it is built, its rows split among the threads; else gguf's numpy code.

    >>> from gguf import GGMLQuantizationType as Q
    >>> from gguf import quants
    >>> from studygroup.gguf.blocks import FileMatrix
    >>> b = quants.quantize(np.linspace(-1, 1, 128, dtype=np.float32).reshape(4, 32), Q.Q8_0)
    >>> out = np.empty((2, 32), np.float32)
    >>> dequantize_rows(FileMatrix("t", Q.Q8_0, b, 32), np.array([3, 0]), out)
    >>> bool((out == quants.dequantize(b, Q.Q8_0)[[3, 0]]).all())
    True
    """
    from studygroup.model import row_kernels  # here: a float32 model never builds the kernels

    n = len(rows)
    if n == 0:
        return
    if row_kernels.reads(m.qtype):
        lib = row_kernels.library()
        row_kernels.split_rows(n, lambda a, b: _dequantize_part(lib, m, rows[a:b], out[a:b]))
        return
    from gguf import quants

    with np.errstate(all="ignore"):
        out[...] = quants.dequantize(m.data[rows], m.qtype)


def _dequantize_part(lib, m: FileMatrix, rows: np.ndarray, out: np.ndarray) -> None:
    rows = np.ascontiguousarray(rows, np.int64)
    assert out.flags.c_contiguous and out.dtype == np.float32 and out.shape == (len(rows), m.n_in)
    if lib.sg_dequantize_rows(m.qtype, m.data.ctypes.data, m.data.strides[0], rows.ctypes.data, len(rows),
                              out.ctypes.data, m.n_in) != 0:
        raise ModelFileError(f"tensor {m.name}: the kernel does not read its blocks")
