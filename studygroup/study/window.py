"""Which part of a head's T × T grid a view holds: a window of questions (rows) and answers (keys).

A grid grows as T²: 8,192 members make 67 million cells, gigabytes as numbers and more as JSON.
A view therefore holds at most MAX_CELLS cells (256 × 256, the whole grid of a 256-member text);
past that the caller chooses a window. Rows and keys are Python slices over the members,
half-open, negatives counting from the end: rows -1: is the last question.

A bad window is refused with a WindowError (studygroup.errors) whose message names the parameters
as the caller spells them: `rows=slice(A, B)` in Python, `--rows A:B` on the command line,
`"rows": [A, B]` in the web API.
"""
from __future__ import annotations

from dataclasses import dataclass

from studygroup.errors import WindowError

#: The most cells (questions × answers) one view holds: the whole grid up to 256 members.
MAX_CELLS = 256 * 256
@dataclass(frozen=True)
class Window:
    """The questions (rows) and answers (keys) a view holds, as member ranges of a T-member text."""

    rows: range
    keys: range

    @property
    def cells(self) -> int:
        return len(self.rows) * len(self.keys)

    def is_whole(self, T: int) -> bool:
        return len(self.rows) == T and len(self.keys) == T


def window(T: int, rows=None, keys=None) -> Window:
    """The window of a T-member grid that `rows` and `keys` name (a slice, a range with step 1,
    or None: every member), checked: not empty, not reversed, within the text, at most MAX_CELLS.

    >>> window(10, slice(-1, None))
    Window(rows=range(9, 10), keys=range(0, 10))
    >>> window(10, range(2, 4), slice(0, 3)).cells
    6
    """
    w = any_size(T, rows, keys)
    if w.cells > MAX_CELLS:
        raise WindowError(_too_large(T, w, rows is None and keys is None))
    return w


def any_size(T: int, rows=None, keys=None) -> Window:
    """The window `rows` and `keys` name, checked as window() checks it but of any size (for a
    view that pools the cells, such as a head's overview).

    >>> len(any_size(1000).rows)
    1000
    """
    return Window(members_in(T, rows, "rows"), members_in(T, keys, "keys"))


def or_last_question(T: int, rows=None, keys=None) -> tuple:
    """rows and keys as given, or, when neither is and the whole grid of T members is more than
    a view holds, the last question over every answer: what a bounded text shows by default.

    >>> or_last_question(300)
    (slice(-1, None, None), None)
    >>> or_last_question(300, keys=slice(0, 4)), or_last_question(16)
    ((None, slice(0, 4, None)), (None, None))
    """
    if rows is None and keys is None and T * T > MAX_CELLS:
        return slice(-1, None), None
    return rows, keys


def members_in(T: int, part, name: str) -> range:
    """The members a slice or range names, half-open, negatives from the end; WindowError if it
    steps, is empty or reversed, or leaves the text."""
    if part is None:
        return range(T)
    if not isinstance(part, (slice, range)):
        shown = repr(part).replace("{", "{{").replace("}", "}}")
        raise WindowError(f"{name}={shown}: give a slice of the members, as {{{name}}}")
    if part.step not in (None, 1):
        raise WindowError(f"{name} steps by {part.step}: a window is a run of members, as {{{name}}}")
    bounds = (part.start if part.start is not None else 0, part.stop if part.stop is not None else T)
    for b in bounds:
        if isinstance(b, bool) or not isinstance(b, int):
            raise WindowError(f"{name} bound {b!r} is not a whole number: give {{{name}}}")
    a, b = (x + T if x < 0 else x for x in bounds)
    said = f"{name} {_said(part)}"
    valid = f"the text's {T} members are 0-{T - 1} (0:{T} is every one; negatives count from the end)"
    if not (0 <= a <= T and 0 <= b <= T):
        raise WindowError(f"{said} leaves the text: {valid}; give {{{name}}}")
    if a > b:
        raise WindowError(f"{said} is reversed (it starts after it ends): give {{{name}}} with its start before its end; {valid}")
    if a == b:
        raise WindowError(f"{said} is empty: give {{{name}}} with its start before its end; {valid}")
    return range(a, b)


def _said(part) -> str:
    """A slice or range as the user wrote it: "3:1", "-1:"."""
    fmt = lambda x: "" if x is None else str(x)  # noqa: E731
    return f"{fmt(part.start)}:{fmt(part.stop)}"


def _too_large(T: int, w: Window, whole: bool) -> str:
    what = (f"the whole grid of {T} members is {T:,} × {T:,} = {w.cells:,} cells" if whole else
            f"the window is {len(w.rows):,} questions × {len(w.keys):,} answers = {w.cells:,} cells")
    return (f"{what}, more than the {MAX_CELLS:,} (256 × 256) a view holds: choose a window with {{rows}} "
            f"{{keys}} (A:B are members 0-{T - 1}, half-open; -1: is the last question)")
