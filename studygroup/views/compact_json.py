"""The web answers' bytes: compact JSON, grids of rounded weights copied from a table of their
texts, and arrays packed as base64 (the page reads them without a number parsed per value).

Every function gives the same numbers as the plain JSON of the same values: a packed array holds
exactly the doubles the lists would.
"""
from __future__ import annotations

import base64
import functools
import json
from typing import Any

import numpy as np
import torch


def compact(data: Any) -> bytes:
    """JSON-able `data` as compact UTF-8 JSON (no spaces, no ASCII escapes, no NaN), as the web app sends it.

    >>> compact({"a": [1.5, None], "b": "␣of"}).decode()
    '{"a":[1.5,null],"b":"␣of"}'
    """
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def rounded_grids(x: torch.Tensor, decimals: int) -> list[bytes]:
    """compact(grid.tolist()) of every grid of x (N, R, C), each value in [0, 1] rounded to
    `decimals` by `x.double().round(decimals=decimals)`: the same bytes, copied from a table of
    the 10^decimals + 1 values' texts instead of written from a Python float per value (grids
    holding any other value go through `compact`).

    >>> w = torch.tensor([[[1.0, 0.0], [0.25, 0.75]]]).double().round(decimals=3)
    >>> rounded_grids(w, 3)
    [b'[[1.0,0.0],[0.25,0.75]]']
    """
    N, R, C = x.shape
    k = whole_units(x, decimals)  # (N, R, C)
    if k is None or k.size == 0:
        return [compact(g.tolist()) for g in x]
    texts, sizes = _value_texts(decimals)  # (n + 1, width + 1), (n + 1,)
    rows = np.empty((N, R, C * texts.shape[1] + 2), np.uint8)  # per row: "[", the values each with a comma, ","
    rows[:, :, 1:-1] = np.take(texts, k, axis=0).reshape(N, R, -1)
    rows[:, :, 0], rows[:, :, -2], rows[:, :, -1] = ord("["), ord("]"), ord(",")  # the last value's comma closes the row
    flat = rows.reshape(-1)
    text = flat[flat != 0].tobytes()  # the padding left out
    ends = np.cumsum(np.take(sizes, k).sum(axis=(1, 2)) + 2 * R)  # (N,) where each grid's rows end
    return [b"[" + text[a:b - 1] + b"]" for a, b in zip([0, *ends[:-1].tolist()], ends.tolist())]


def whole_units(x: torch.Tensor, decimals: int) -> np.ndarray | None:
    """x (…) as whole numbers k of 10^-decimals (intp), where every value is k / 10^decimals with
    0 <= k <= 10^decimals (values in [0, 1] rounded to `decimals`, as x.double().round gives
    them); else None.

    >>> whole_units(torch.tensor([0.25, 1.0], dtype=torch.float64), 3).tolist(), whole_units(torch.tensor([1 / 3]), 3)
    ([250, 1000], None)
    """
    n = 10 ** decimals
    values = x.detach().cpu().double().numpy()
    k = np.rint(values * n)  # value k / 10^decimals
    if values.size and (not np.array_equal(k / n, values) or k.min() < 0 or k.max() > n):  # NaN: not equal
        return None
    return k.astype(np.intp)


@functools.lru_cache(maxsize=4)
def _value_texts(decimals: int) -> tuple[np.ndarray, np.ndarray]:
    """Row k: repr(k / 10^decimals) as JSON writes it, zeros to a common width, a comma:
    (10^decimals + 1, width + 1) uint8; and each row's length without the zeros (10^decimals + 1,)."""
    n = 10 ** decimals
    texts = [repr(k / n).encode("ascii") for k in range(n + 1)]
    width = max(map(len, texts))
    table = np.zeros((n + 1, width + 1), np.uint8)
    for i, t in enumerate(texts):
        table[i, :len(t)] = np.frombuffer(t, np.uint8)
    table[:, -1] = ord(",")
    return table, np.array([len(t) + 1 for t in texts], np.intp)


def packed_thumbnails(w: torch.Tensor, decimals: int) -> dict:
    """The thumbnails w (n_layers, n_heads, R, T), each weight rounded to `decimals`, as whole
    units of 10^-decimals: little-endian uint16, layer by layer, head by head, row by row, in base64.
    A weight is its number / scale: the double nearest its decimals, as the lists' JSON gives.
    Where every head's map is square (R = T) and 0 above its diagonal (the future, which no
    question hears), each row i holds its first i + 1 weights only (`triangle`: true): the
    T (T + 1) / 2 weights of the lower triangle a head, half the bytes; the rest are 0.

    >>> p = packed_thumbnails(torch.tensor([[[[1.0, 0.0], [0.25, 0.75]]]], dtype=torch.float64), 3)
    >>> import struct
    >>> p["shape"], p["scale"], p["triangle"], struct.unpack("<3H", base64.b64decode(p["base64"]))
    ([1, 1, 2, 2], 1000, True, (1000, 250, 750))
    """
    k = whole_units(w, decimals)  # (L, H, R, T) whole units of 10^-decimals
    if k is None:
        raise ValueError("packed thumbnails hold weights in [0, 1] rounded to their decimals")
    R, T = k.shape[-2:]
    lower = np.tril(np.ones((R, T), bool)) if R == T else None  # (T, T) row i: columns 0 … i
    triangle = lower is not None and not k[..., ~lower].any()
    data = (k[..., lower] if triangle else k).astype("<u2").tobytes()  # (L, H, T (T + 1) / 2) or (L, H, R, T)
    return {"dtype": "uint16", "scale": 10 ** decimals, "shape": list(w.shape), "triangle": bool(triangle),
            "base64": base64.b64encode(data).decode("ascii")}


#: The head view's vectors that `packed_vectors` packs: every member's, at full precision.
PACKED_VECTORS = ("q_pre_rope", "k_pre_rope", "q", "k", "v", "output")


def packed_vectors(d: dict) -> dict:
    """The head view d with its vectors (PACKED_VECTORS, float32 numbers) null and in
    `packed_vectors` instead: {name: {"dtype": "float32", "shape": [n, m], "base64": …}}, the
    float32 numbers little-endian, row by row: the same numbers in a third of the bytes, and
    none written or read as text. A vector whose numbers are not all float32 ones stays a list.

    >>> p = packed_vectors({"q": [[0.5, -2.0]], "k": [[0.1]]})
    >>> p["q"], p["packed_vectors"]["q"]["shape"], p["k"], "k" in p["packed_vectors"]
    (None, [1, 2], [[0.1]], False)
    """
    packed = {}
    for name in PACKED_VECTORS:
        if d.get(name) is None:
            continue
        wide = np.asarray(d[name], dtype=np.float64)  # (n, m)
        narrow = wide.astype("<f4")
        if wide.ndim == 2 and np.array_equal(narrow.astype(np.float64), wide):
            packed[name] = {"dtype": "float32", "shape": list(wide.shape),
                            "base64": base64.b64encode(narrow.tobytes()).decode("ascii")}
            d[name] = None
    return d | {"packed_vectors": packed}
