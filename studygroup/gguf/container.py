"""The GGUF container: header, metadata, tensor directory and memory-mapped tensor data.

A GGUF file is, in little-endian order:
  magic "GGUF" | version u32 | n_tensors u64 | n_kv u64
  n_kv metadata entries:  key (string) | value type u32 | value
  n_tensors tensor infos: name (string) | n_dims u32 | dims u64 x n_dims | ggml type u32 | offset u64
  padding to `general.alignment` (32) | tensor data (each at its offset from here)
where a string is u64 length + UTF-8 bytes and an array is element type u32 + count u64 + elements.

We parse this ourselves rather than with `gguf.GGUFReader` because that reader makes a numpy
view for every value: on SmolLM2's 98k vocabulary strings it takes ~6 s, this ~0.1 s. The test
suite checks both readers agree. Dequantization is left to `gguf.quants.dequantize`.
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType

from studygroup.errors import ModelFileError
from studygroup.gguf.layout import numpy_shape
from studygroup.gguf.metadata import lookup
from studygroup.gguf.model_path import open_regular

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 used 32-bit counts and predates every model we read
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
MAX_NESTING = 2  # arrays of arrays at most (GGUF files hold none; deeper is damage, not data)
# The fewest bytes each part of the file can take: a count claiming more than the bytes left is damage.
MIN_KV_BYTES = 8 + 4 + 1  # key length, value type, a one-byte value
MIN_TENSOR_INFO_BYTES = 8 + 4 + 8 + 4 + 8  # name length, n_dims, one dim, type, offset
MIN_ITEM_BYTES = {GGUFValueType.STRING: 8, GGUFValueType.ARRAY: 4 + 8}
# Fixed-size value types -> struct format (little-endian).
SCALAR_FORMATS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
# Tensor types stored as plain numbers; the others are blocks of bytes.
PLAIN_DTYPES = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16}


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor directory. `dims` in GGUF order, `shape` in numpy order."""

    name: str
    dims: tuple[int, ...]  # GGUF order: dims[0] is the length of a row
    qtype: GGMLQuantizationType
    offset: int  # absolute byte offset of the data in the file
    n_bytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """Numpy shape, (rows, row length) for a matrix."""
        return numpy_shape(self.dims)


class GGUFFile:
    """A parsed GGUF file: `fields` (key -> Python value), `tensors` (name -> TensorInfo), `raw()`.

    >>> from studygroup.gguf.model_path import default_model_path
    >>> f = read_gguf(default_model_path())
    >>> f.fields["llama.block_count"], f.tensors["token_embd.weight"].shape
    (30, (49152, 576))
    """

    def __init__(self, path: Path, version: int, fields: dict[str, Any], tensors: dict[str, TensorInfo],
                 buffer: mmap.mmap):
        self.path, self.version, self.fields, self.tensors = path, version, fields, tensors
        self._buffer = buffer

    def raw(self, info: TensorInfo) -> np.ndarray:
        """A tensor's bytes, read-only and memory-mapped, in the form `gguf.quants.dequantize` takes:
        F32/F16 as numbers of shape `info.shape`, other types as uint8 (rows, bytes per row).

        >>> from studygroup.gguf.model_path import default_model_path
        >>> f = read_gguf(default_model_path())
        >>> f.raw(f.tensors["blk.0.attn_q.weight"]).shape  # Q4_1: 576 rows of 18 blocks x 20 bytes
        (576, 360)
        """
        if info.qtype in PLAIN_DTYPES:
            dtype = np.dtype(PLAIN_DTYPES[info.qtype])
            data = np.frombuffer(self._buffer, dtype, info.n_bytes // dtype.itemsize, info.offset)
            return data.reshape(info.shape)
        data = np.frombuffer(self._buffer, np.uint8, info.n_bytes, info.offset)
        return data.reshape(gguf.quants.quant_shape_to_byte_shape(info.shape, info.qtype))


def read_gguf(path: str | Path) -> GGUFFile:
    """Parse a GGUF file's header, metadata and tensor directory; the data stays memory-mapped.

    Raises ModelFileError, naming the file and the part that is wrong, for a missing, empty,
    non-GGUF, truncated or malformed file.

    >>> from studygroup.gguf.model_path import default_model_path
    >>> read_gguf(default_model_path()).fields["general.architecture"]
    'llama'
    """
    path = Path(path)
    buffer = _map(path)
    cur = _Cursor(buffer, path)
    version = _read_header(cur, path)
    n_tensors, n_kv = cur.scalar("<Q", "the tensor count"), cur.scalar("<Q", "the metadata count")
    cur.check_count(n_kv, MIN_KV_BYTES, "metadata entries", "the metadata")
    cur.check_count(n_tensors, MIN_TENSOR_INFO_BYTES, "tensors", "the metadata")
    fields = {}
    for _ in range(n_kv):
        key = cur.string("a metadata key")
        fields[key] = cur.value(cur.value_type(key), key)
    infos = [_read_tensor_info(cur) for _ in range(n_tensors)]
    alignment = _alignment(fields, path)
    data_start = -(-cur.pos // alignment) * alignment  # round up to the alignment
    tensors = _place_tensors(infos, data_start, len(buffer), alignment, path)
    return GGUFFile(path, version, fields, tensors, buffer)


def _alignment(fields: dict[str, Any], path: Path) -> int:
    """Where tensor data starts and each tensor is placed: a multiple of `general.alignment` bytes."""
    try:
        alignment = lookup(fields, "general.alignment", int, gguf.GGUF_DEFAULT_ALIGNMENT)
    except ModelFileError as e:
        raise ModelFileError(f"{path}: {e}") from None
    if alignment <= 0:
        raise ModelFileError(f"{path}: general.alignment = {alignment!r} must be a positive integer")
    return alignment


def _map(path: Path) -> mmap.mmap:
    """Memory-map the file read-only, after checking it is a GGUF file at all."""
    try:
        with open_regular(path) as f:
            magic = f.read(len(MAGIC))
            if magic != MAGIC:
                raise ModelFileError(f"{path} is not a GGUF file (it starts with {magic!r}, not {MAGIC!r}): "
                                     "pass a .gguf model file, e.g. from llama.cpp's convert_hf_to_gguf.py")
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise ModelFileError(f"cannot read model file {path}: {e.strerror or e}") from e


def _read_header(cur: _Cursor, path: Path) -> int:
    cur.take(len(MAGIC), "the magic")
    version = cur.scalar("<I", "the version")
    if version not in VERSIONS:
        hint = " (big-endian)" if version in (2 << 24, 3 << 24) else ""
        raise ModelFileError(f"{path} is GGUF version {version}{hint}; studygroup reads little-endian "
                             f"versions {VERSIONS}: re-convert it with a recent llama.cpp")
    return version


def _read_tensor_info(cur: _Cursor) -> tuple[str, tuple[int, ...], GGMLQuantizationType, int]:
    """(name, dims in GGUF order, type, offset from the data start) of one directory entry."""
    name = cur.string("a tensor name")
    n_dims = cur.scalar("<I", f"the dimensions of tensor {name}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise ModelFileError(f"{cur.path}: tensor {name} claims {n_dims} dimensions (1-{MAX_DIMS} allowed); "
                             "the file is damaged")
    dims = tuple(cur.scalar("<Q", f"the shape of tensor {name}") for _ in range(n_dims))
    code = cur.scalar("<I", f"the type of tensor {name}")
    try:
        qtype = GGMLQuantizationType(code)
    except ValueError:
        raise ModelFileError(f"{cur.path}: tensor {name} has type number {code}, unknown to the gguf "
                             "package: upgrade it (pip install -U gguf) or re-convert the file") from None
    return name, dims, qtype, cur.scalar("<Q", f"the offset of tensor {name}")


def _place_tensors(infos, data_start: int, file_size: int, alignment: int, path: Path) -> dict[str, TensorInfo]:
    """Absolute positions and sizes of every tensor; all must lie inside the file, each at a
    multiple of `general.alignment` bytes from the data's start (as GGUF requires)."""
    tensors = {}
    for name, dims, qtype, offset in infos:
        if name in tensors:
            raise ModelFileError(f"{path}: tensor {name} appears twice; the file is damaged")
        if offset % alignment:
            raise ModelFileError(f"{path}: tensor {name} is at offset {offset}, not a multiple of "
                                 f"general.alignment = {alignment}; the file is damaged")
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        n_elements = int(np.prod(dims, dtype=np.int64))
        if dims[0] % block:
            raise ModelFileError(f"{path}: tensor {name} has rows of {dims[0]} values, not a multiple of "
                                 f"the {block}-value blocks of type {qtype.name}")
        info = TensorInfo(name, dims, qtype, data_start + offset, n_elements // block * type_size)
        if info.offset + info.n_bytes > file_size:
            raise ModelFileError(f"{path} is truncated: tensor {name} needs bytes up to "
                                 f"{info.offset + info.n_bytes} but the file has {file_size}; download it again")
        tensors[name] = info
    return tensors


_U64 = struct.Struct("<Q")


class _Cursor:
    """Reads little-endian values from a buffer, failing with a clear message past its end."""

    def __init__(self, buffer: mmap.mmap, path: Path):
        self.buffer, self.path, self.pos = buffer, path, 0

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.buffer):
            raise ModelFileError(f"{self.path} is truncated or damaged: it ends at byte {len(self.buffer)}, "
                                 f"in the middle of {what} (byte {self.pos}); download it again")
        view = memoryview(self.buffer)[self.pos:self.pos + n]
        self.pos += n
        return view

    def check_count(self, count: int, min_bytes: int, what: str, within: str) -> None:
        """A count of parts that cannot fit in the bytes left is damage: refused before anything is made."""
        left = len(self.buffer) - self.pos
        if count * min_bytes > left:
            raise ModelFileError(f"{self.path} is truncated or damaged: it claims {count} {what} (at least "
                                 f"{count * min_bytes} bytes) and ends {left} bytes later, in the middle of {within}")

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        raw = self.take(self.scalar("<Q", what), what)
        return str(raw, "utf-8", errors="replace")

    def value_type(self, key: str) -> GGUFValueType:
        code = self.scalar("<I", f"the type of {key}")
        try:
            return GGUFValueType(code)
        except ValueError:
            raise ModelFileError(f"{self.path}: metadata {key} has unknown value type {code}; "
                                 "the file is damaged") from None

    def value(self, vtype: GGUFValueType, key: str, depth: int = 0) -> Any:
        """One metadata value: a Python scalar, str, or list of them."""
        if vtype == GGUFValueType.STRING:
            return self.string(key)
        if vtype != GGUFValueType.ARRAY:
            return self.scalar(SCALAR_FORMATS[vtype], key)
        if depth >= MAX_NESTING:
            raise ModelFileError(f"{self.path}: metadata {key} nests arrays more than {MAX_NESTING} deep; "
                                 "the file is damaged")
        item_type, count = self.value_type(key), self.scalar("<Q", key)
        item_bytes = struct.calcsize(SCALAR_FORMATS[item_type]) if item_type in SCALAR_FORMATS else MIN_ITEM_BYTES[item_type]
        self.check_count(count, item_bytes, f"items in metadata {key}", key)
        if item_type in SCALAR_FORMATS:  # numbers: one numpy read instead of `count` small ones
            fmt = SCALAR_FORMATS[item_type]
            raw = self.take(count * struct.calcsize(fmt), key)
            return np.frombuffer(raw, np.dtype(fmt)).tolist()
        if item_type == GGUFValueType.STRING:
            return self.strings(count, key)
        return [self.value(item_type, key, depth + 1) for _ in range(count)]

    def strings(self, count: int, what: str) -> list[str]:
        """`count` strings one after another (a vocabulary: ~100k of them, 10× faster than `string`)."""
        buffer, pos, end, out = self.buffer, self.pos, len(self.buffer), []
        length = _U64.unpack_from
        for _ in range(count):
            n = length(buffer, pos)[0] if pos + 8 <= end else end  # past the end either way
            if pos + 8 + n > end:
                self.pos = pos
                self.string(what)  # raises the truncation error, naming the byte
            out.append(str(buffer[pos + 8:pos + 8 + n], "utf-8", errors="replace"))
            pos += 8 + n
        self.pos = pos
        return out
