"""One GGUF metadata value by its key, checked for its kind: the one way the gguf layer reads metadata.

Metadata maps keys to plain Python values (`GGUFFile.fields`, or a dict in a test) or to gguf's
`ReaderField`s (`GGUFReader(path).fields`); both are read alike. A key that is absent, or holds
None, gives the default; `REQUIRED` as the default makes its absence an error naming the key.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from studygroup.errors import ModelFileError

#: The default that makes a key required: its absence is a ModelFileError naming it.
REQUIRED = object()
#: What each kind is called in an error message.
KINDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false", list: "a list"}
PLURALS = {int: "whole numbers", float: "numbers", str: "strings", bool: "true or false values"}


def lookup(fields: Mapping[str, Any], key: str, kind: type | None = None, default: Any = None,
           items: type | None = None) -> Any:
    """The value of metadata `key` as `kind` (int, float, str, bool or list; None: as stored),
    or `default` when the key is absent. A value of another kind is a ModelFileError naming the key;
    so is a list with an item that is not of kind `items` (when given).

    >>> lookup({"llama.block_count": 30}, "llama.block_count", int)
    30
    >>> lookup({}, "llama.rope.freq_base", float, 10000.0)
    10000.0
    >>> lookup({"llama.block_count": "big"}, "llama.block_count", int)
    Traceback (most recent call last):
    studygroup.errors.ModelFileError: metadata key 'llama.block_count' should hold a whole number, not 'big'
    >>> lookup({"tokenizer.ggml.tokens": ["a", 7]}, "tokenizer.ggml.tokens", list, items=str)
    Traceback (most recent call last):
    studygroup.errors.ModelFileError: metadata key 'tokenizer.ggml.tokens' should hold a list of strings; item 1 is 7
    >>> lookup({}, "llama.block_count", int, REQUIRED)
    Traceback (most recent call last):
    studygroup.errors.ModelFileError: the model file lacks the metadata key 'llama.block_count'; re-convert it with a recent llama.cpp convert_hf_to_gguf.py
    """
    field = fields.get(key)
    value = field.contents() if hasattr(field, "contents") else field
    if value is None:
        if default is REQUIRED:
            raise ModelFileError(f"the model file lacks the metadata key {key!r}; "
                                 "re-convert it with a recent llama.cpp convert_hf_to_gguf.py")
        return default
    if kind is None:
        return value
    if not _is(kind, value):
        raise ModelFileError(f"metadata key {key!r} should hold {KINDS[kind]}, not {_short(value)}")
    if items is not None:
        bad = next((i for i, v in enumerate(value) if not _is(items, v)), None)
        if bad is not None:
            raise ModelFileError(f"metadata key {key!r} should hold a list of {PLURALS[items]}; "
                                 f"item {bad} is {_short(value[bad])}")
        return [items(v) for v in value] if items in (int, float) else list(value)
    return kind(value)


def _short(value: Any) -> str:
    """A value as an error message shows it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is(kind: type, value: Any) -> bool:
    """Whether `value` can stand for `kind` (a whole float for an int, 0 or 1 for a bool)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return number and (isinstance(value, int) or value.is_integer())
    if kind is float:
        return number
    if kind is bool:
        return isinstance(value, bool) or (number and value in (0, 1))
    if kind is list:
        return isinstance(value, (list, tuple))
    return isinstance(value, kind)
