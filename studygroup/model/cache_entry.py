"""What a cache entry holds, byte for byte, and the digest that proves it is what was written.

A weights entry is a safetensors file (readable by any safetensors reader) whose string metadata
includes "digest": the xxh3-128 of its header (with the digest's own 32 hex digits set to "0")
followed by the xxh3-128 digests of its data cut in PARTS equal parts, hashed side by side on
the machine's cores (one core hashes ~13 GB/s here; the check is then 0.025 s for the default
model instead of 0.04 s). `pack` lays the tensors out in one buffer exactly as the file holds them, so that a
first load computes from views into the same bytes (the same layout, the same alignment) that
every later load maps from the file: the first run and every later run give the same numbers.
`unpack` checks the digest before it hands out a single tensor.

A JSON entry is one line with the digest of the rest, then the JSON text.
"""
from __future__ import annotations

import json
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import xxhash

#: The metadata key of the digest, and what stands for it while the digest is computed.
DIGEST = "digest"
PLACEHOLDER = "0" * 32
#: Tensor data starts at a multiple of this many bytes into the file (and the buffer).
ALIGN = 64
DTYPES = {torch.float32: "F32"}
#: The data is hashed in this many parts (a fixed number: the digest does not depend on the cores).
PARTS = 8


def digest(*parts) -> str:
    """xxh3-128 of byte-like parts, one after another, as 32 hex digits.

    >>> digest(b"ab", b"c") == digest(b"abc")
    True
    """
    h = xxhash.xxh3_128()
    for p in parts:
        h.update(p)
    return h.hexdigest()


def entry_digest(header: bytes, data: np.ndarray) -> str:
    """The digest of an entry: xxh3-128 of its header, then of each of its data's PARTS parts'
    xxh3-128 digests (the parts hashed in threads: xxhash lets go of the GIL).

    >>> entry_digest(b"h", np.arange(100, dtype=np.uint8)) == entry_digest(b"h", np.arange(100, dtype=np.uint8))
    True
    """
    bounds = np.linspace(0, len(data), PARTS + 1).astype(np.int64)
    parts = [data[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    with ThreadPoolExecutor(min(PARTS, os.cpu_count() or 1)) as pool:
        digests = list(pool.map(lambda part: xxhash.xxh3_128(part).digest(), parts))
    return digest(header, *digests)


def pack(tensors: Mapping[str, torch.Tensor | Sequence[torch.Tensor]], metadata: Mapping[str, str]
         ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The bytes of a weights entry, and its tensors as views into them.

    tensors: {name: tensor, or a list of tensors stacked along their first axis}, float32, any
    strides (each is copied once, into its place). Returns (buffer (N,) uint8, {name: view}).

    >>> buffer, views = pack({"a": torch.ones(2, 3), "b": [torch.zeros(1, 2), torch.ones(1, 2)]}, {"k": "v"})
    >>> views["b"].tolist(), unpack(buffer)[1]["k"]
    ([[0.0, 0.0], [1.0, 1.0]], 'v')
    """
    parts = {n: [t] if isinstance(t, torch.Tensor) else list(t) for n, t in tensors.items()}
    shapes = {n: (sum(p.shape[0] for p in ps), *ps[0].shape[1:]) for n, ps in parts.items()}
    header, offsets = _header(shapes, {**metadata, DIGEST: PLACEHOLDER})
    buffer = torch.empty(offsets[-1][1] if offsets else len(header), dtype=torch.uint8)  # (N,)
    buffer[:len(header)] = torch.frombuffer(bytearray(header), dtype=torch.uint8)
    views = {}
    for (name, ps), (start, end) in zip(parts.items(), offsets):
        view = buffer[start:end].view(torch.float32).view(shapes[name])
        row = 0
        for p in ps:
            view[row:row + p.shape[0]].copy_(p)
            row += p.shape[0]
        views[name] = view
    _seal(buffer, len(header))
    return buffer, views


def unpack(buffer: torch.Tensor, check: bool = True) -> tuple[dict[str, torch.Tensor], dict[str, str]] | None:
    """Tensors (views into `buffer`) and metadata of a weights entry; None unless its digest holds.

    buffer: (N,) uint8, the whole file (mapped) or what `pack` made. check=False skips the digest
    (bench/cache_check.py measures what it costs; nothing else skips it).
    """
    raw = buffer.numpy()
    try:
        (n,) = struct.unpack("<Q", raw[:8].tobytes())
        header = json.loads(raw[8:8 + n].tobytes())
        metadata = header.pop("__metadata__")
        stored = metadata[DIGEST]
        sealed = raw[:8 + n].tobytes().replace(f'"{stored}"'.encode(), f'"{PLACEHOLDER}"'.encode(), 1)
        if check and stored != entry_digest(sealed, raw[8 + n:]):
            return None
        data = 8 + n
        views = {}
        for name, spec in header.items():
            start, end = (data + o for o in spec["data_offsets"])
            if spec["dtype"] != "F32" or not 0 <= start <= end <= len(raw):
                return None
            views[name] = buffer[start:end].view(torch.float32).view(spec["shape"])
    except (ValueError, KeyError, TypeError, RuntimeError, struct.error, AttributeError):
        return None
    return views, metadata


def _header(shapes: Mapping[str, tuple[int, ...]], metadata: Mapping[str, str]) -> tuple[bytes, list[tuple[int, int]]]:
    """The safetensors header (8-byte length, JSON padded with spaces) and each tensor's byte range
    in the buffer, every range starting at a multiple of ALIGN."""
    sizes = [4 * int(np.prod(s)) for s in shapes.values()]
    offsets, o = [], 0
    for size in sizes:
        offsets.append((o, o + size))
        o += -(-size // ALIGN) * ALIGN
    entries = {n: {"dtype": "F32", "shape": list(s), "data_offsets": list(r)} for n, s, r in zip(shapes, shapes.values(), offsets)}
    text = json.dumps({"__metadata__": dict(metadata), **entries}, separators=(",", ":")).encode()
    data = -(-(8 + len(text)) // ALIGN) * ALIGN  # where the data starts
    text += b" " * (data - 8 - len(text))
    return struct.pack("<Q", len(text)) + text, [(data + a, data + b) for a, b in offsets]


def _seal(buffer: torch.Tensor, header_end: int) -> None:
    """Write the digest of the whole buffer (placeholder in place) over the placeholder."""
    raw = buffer.numpy()
    value = entry_digest(raw[:header_end].tobytes(), raw[header_end:]).encode()
    at = raw[:header_end].tobytes().index(f'"{PLACEHOLDER}"'.encode()) + 1
    raw[at:at + len(value)] = np.frombuffer(value, dtype=np.uint8)


def dump_json(value) -> str:
    """A JSON entry's text: the digest of the JSON text, a newline, the JSON text.

    >>> load_json(dump_json({"a": [1, 2]}))
    {'a': [1, 2]}
    """
    text = json.dumps(value, ensure_ascii=False)
    return f"{digest(text.encode())}\n{text}"


def load_json(text: str):
    """The value of a JSON entry's text; None unless its digest holds (or it cannot be read).

    >>> load_json('0123\\n{"a": 1}') is None
    True
    """
    stored, _, body = text.partition("\n")
    if stored != digest(body.encode()):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None
