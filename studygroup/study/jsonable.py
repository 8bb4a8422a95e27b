"""Plain dataclasses that serialise to JSON: the study layer's results, for --json and the web page.

Every number written is finite: a value that is not (a masked score, an effect nobody computed)
is written as null. Tuples become lists; nested dataclasses become objects with the same keys.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from typing import Any

import numpy as np
import torch


def plain(value: Any) -> Any:
    """A JSON-able copy of `value`: dataclasses as dicts, tuples as lists, non-finite floats as None.

    >>> plain({"a": (1.5, float("nan")), "b": [float("-inf")]})
    {'a': [1.5, None], 'b': [None]}
    """
    kind = type(value)
    if kind in _AS_THEY_ARE:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: plain(getattr(value, name)) for name in _field_names(kind)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return _numbers(value) or [plain(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    raise TypeError(f"{type(value).__name__} is not JSON-able: convert it (e.g. .tolist()) before storing it")


_AS_THEY_ARE = frozenset({str, int, bool, type(None)})


@functools.lru_cache(maxsize=None)
def _field_names(kind: type) -> tuple[str, ...]:
    """A dataclass's field names, in order (read once per class)."""
    return tuple(f.name for f in dataclasses.fields(kind))


def _numbers(values) -> list | None:
    """values as a list when every one is a finite float, or every one an int (a row of a map, of
    mask reasons: the common cases, checked at C speed), else None.

    >>> _numbers((0.5, 1.0)), _numbers([0.5, float("nan")]), _numbers([1, 2.0]), _numbers([3, 1]), _numbers([])
    ([0.5, 1.0], None, None, [3, 1], None)
    """
    kinds = set(map(type, values))
    if kinds == {int}:
        return list(values)
    if kinds != {float}:
        return None
    try:
        return list(values) if math.isfinite(math.fsum(values)) else None
    except (OverflowError, ValueError):  # a sum past the largest float, or inf - inf: check each
        return None if not all(map(math.isfinite, values)) else list(values)


class JSONable:
    """Mixin for result dataclasses: `to_dict()` and `to_json()`.

    >>> @dataclasses.dataclass
    ... class Point(JSONable):
    ...     x: float
    ...     y: float | None = None
    >>> Point(1.0, float("inf")).to_json()
    '{"x": 1.0, "y": null}'
    """

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain dicts, lists, strings and finite numbers (None for the rest)."""
        return plain(self)

    def to_json(self, indent: int | None = None) -> str:
        """Valid JSON (no NaN or Infinity), keys in field order."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)


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
