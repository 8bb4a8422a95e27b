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


def checked_pair(model, T: int, query: int, key: int) -> tuple[int, int]:
    """(i, j): member `query` asking and member `key` answering among T members, or InputError unless
    both exist and j <= i (a question hears only the members up to itself: the causal mask).

    >>> checked_pair(model, 4, 3, 1)
    (3, 1)
    >>> checked_pair(model, 4, 0, 2)
    Traceback (most recent call last):
    studygroup.errors.InputError: member 2 comes after member 0: a question hears only the members up to itself (0-0); give a key of 0 or less, or a later query
    """
    i, j = model.check_member(query, T), model.check_member(key, T)
    if j > i:
        raise InputError(f"member {j} comes after member {i}: a question hears only the members up to itself "
                         f"(0-{i}); give a key of {i} or less, or a later query")
    return i, j


def check_generated_from(generated_from, T: int) -> None:
    """InputError unless generated_from is None (a text) or the index of the first generated member
    among T members: the number of prompt ids, 1 to T (T: the members hold no generated word yet).

    >>> check_generated_from(3, 5); check_generated_from(None, 5)
    >>> check_generated_from(0, 5)
    Traceback (most recent call last):
    studygroup.errors.InputError: generated_from=0: give the number of prompt ids (1 to 5, the members), or None for a text with no generated words
    """
    if generated_from is None:
        return
    if isinstance(generated_from, bool) or not isinstance(generated_from, int) or not 1 <= generated_from <= T:
        raise InputError(f"generated_from={generated_from!r}: give the number of prompt ids (1 to {T}, the members), "
                         f"or None for a text with no generated words")
