"""What callers pass by number: whole numbers, (layer, head) pairs and token ids, checked before use.

A float, a bool or a string where an index belongs would otherwise index a tensor by accident
(True is 1) or fail deep inside with a message about something else.
"""
from __future__ import annotations

import operator

from studygroup.errors import InputError


def whole_number(x, what: str) -> int:
    """x as an int if it is a whole number (an int, a numpy or 0-d torch integer; not a bool,
    float or string), else InputError naming `what` it was meant to be.

    >>> whole_number(3, "a layer")
    3
    >>> whole_number(True, "a layer")
    Traceback (most recent call last):
    studygroup.errors.InputError: True is not a layer: give a whole number
    """
    if not isinstance(x, bool):
        try:
            return operator.index(x)
        except TypeError:
            pass
    raise InputError(f"{x!r} is not {what}: give a whole number")


def layer_head(p) -> tuple[int, int]:
    """A (layer, head) pair of whole numbers, or InputError for anything else ("0.1", [1], [1, 2, 3], …)."""
    if isinstance(p, str | bytes) or not hasattr(p, "__len__") or len(p) != 2:
        raise InputError(f"{p!r} is not a (layer, head) pair")
    return whole_number(p[0], "a layer"), whole_number(p[1], "a head")


def head_set(heads) -> frozenset | None:
    """(layer, head) pairs as a set of int pairs (None stays None: every head)."""
    return None if heads is None else frozenset(map(layer_head, heads))


def token_ids(ids) -> list[int]:
    """One row of token ids as ints, or InputError saying what `model.run` takes instead
    (several texts, a table of ids, a number).

    >>> token_ids([1, 2])
    [1, 2]
    >>> token_ids(["I have", "a lot"])
    Traceback (most recent call last):
    studygroup.errors.InputError: model.run takes one text (a str) or a list of token ids, not a list of strings: run each text on its own
    """
    if getattr(ids, "ndim", 1) != 1:  # a tensor or array of another shape
        raise InputError(f"token ids must be one row, not an array of shape {tuple(ids.shape)}: run each text on its own")
    try:
        ids = list(ids)
    except TypeError:
        raise InputError(f"model.run takes one text (a str) or a list of token ids, not {type(ids).__name__}") from None
    texts = next((i for i in ids if isinstance(i, str | bytes | list | tuple)), None)
    if texts is not None:
        kind = "strings" if isinstance(texts, str | bytes) else "lists"
        raise InputError(f"model.run takes one text (a str) or a list of token ids, not a list of {kind}: "
                         "run each text on its own")
    return [whole_number(i, "a token id") for i in ids]
