"""Plain dataclasses that serialise to JSON: the study layer's results, for --json and the web page
(the page's bytes: views/compact_json.py).

Every number written is finite: a value that is not (a masked score, an effect nobody computed)
is written as null. Tuples become lists; nested dataclasses become objects with the same keys.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from typing import Any


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
