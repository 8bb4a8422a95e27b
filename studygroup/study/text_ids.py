"""The token ids of a text the study group can discuss."""
from __future__ import annotations

from studygroup.errors import InputError


def checked_ids(model, text_or_ids) -> list[int]:
    """Token ids of a text the study group can discuss: refuses empty and whitespace-only text.

    >>> checked_ids(model, "I have a lot")[-1] == model.ids("I have a lot")[-1]
    True
    """
    if isinstance(text_or_ids, str) and text_or_ids != "" and not text_or_ids.strip():
        raise InputError("the text is only whitespace: give at least one word")
    return model.ids(text_or_ids)
