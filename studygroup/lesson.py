"""The article's walkthrough, in its order, with the real model's numbers at every step.

Texts: "I have a lot" and "Cash or credit card? I have a lot". One head is followed throughout:
the most decisive head for the first text (the largest exact silence effect among those tested).
Each section is plain data (paragraphs, tables, preformatted text) for the terminal and HTML.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from studygroup import attention
from studygroup.errors import InputError, NotationError
from studygroup.jsonable import JSONable
from studygroup.softmax_example import softmax_example
from studygroup.story import percent, quote

TEXT_A = "I have a lot"
TEXT_B = "Cash or credit card? I have a lot"
TITLES = (
    "Two notations",
    "The study group and its members: E, and where position enters",
    "Questions (Q)",
    "The nature of the answers (K) and the scores",
    "Softmax: from absolute scores to relative weights",
    "Answers (V) and their weighted sum",
    "Q and K are not interchangeable",
    "The conclusion, and what the earlier question changes",
)
SHOWN_ENTRIES = 6  # entries of a long vector shown in a table


@dataclass
class Block(JSONable):
    """A paragraph ("text"), a table ("table") or preformatted text ("code")."""

    kind: str
    text: str = ""
    caption: str = ""
    header: list[str] = field(default_factory=list)
    rows: list[list] = field(default_factory=list)  # cells: str, float, or None (masked)
    shade: bool = False  # cells are weights in [0, 1]: a renderer may shade them


@dataclass
class Section(JSONable):
    number: int
    title: str
    blocks: list[Block]


@dataclass
class Lesson(JSONable):
    """The walkthrough. See docs/json.md."""

    texts: list[str]
    layer: int
    head: int
    sections: list[Section]

    def section(self, n: int) -> Section:
        """Section n (1-based); InputError for a number outside 1..len(sections)."""
        check_section(n)
        return self.sections[n - 1]


def check_section(n: int) -> None:
    """InputError unless 1 <= n <= the number of sections."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(TITLES):
        raise InputError(f"section {n} does not exist: the lesson has {len(TITLES)} sections (1-{len(TITLES)})")


def text(s: str) -> Block:
    return Block("text", text=s)


def table(caption: str, header: list[str], rows: list[list], shade: bool = False) -> Block:
    return Block("table", caption=caption, header=header, rows=rows, shade=shade)


def code(s: str) -> Block:
    return Block("code", text=s)


def grid(caption: str, tokens: list[str], values: torch.Tensor, mask: torch.Tensor, shade: bool = False) -> Block:
    """A T×T grid in paper orientation: rows are questions, columns answers; masked cells None."""
    rows = [[f"{quote(tokens[i])} asks"] + [float(values[i, j]) if mask[i, j] else None for j in range(len(tokens))]
            for i in range(len(tokens))]
    return table(caption, ["question \\ answer from"] + tokens, rows, shade)


def lesson(model, top: int = 8, comparison=None) -> Lesson:
    """Build the lesson on the two texts with `model`'s numbers (top: words in the conclusion's table).

    comparison: compare(model, TEXT_A, TEXT_B) if already computed (it is the costly part).

    >>> l = lesson(studygroup.load())                          # doctest: +SKIP
    >>> [s.title for s in l.sections][:2]                      # doctest: +SKIP
    ['Two notations', 'The study group and its members: E, and where position enters']
    """
    from studygroup import lesson_steps as steps
    from studygroup.study_compare import compare

    cmp = comparison or compare(model, TEXT_A, TEXT_B, top=top)
    if (cmp.a.text, cmp.b.text) != (TEXT_A, TEXT_B):
        raise InputError(f"the lesson compares “{TEXT_A}” with “{TEXT_B}”, not “{cmp.a.text}” with “{cmp.b.text}”")
    l, h = cmp.a.heads[0].layer, cmp.a.heads[0].head
    run_a, run_b = model.run(TEXT_A, record="all"), model.run(TEXT_B, record="all")
    ctx = steps.Context(model, run_a, run_b, run_a.head(l, h), run_b.head(l, h), cmp, top)
    bodies = [steps.notations(ctx), steps.members(ctx), steps.questions(ctx), steps.keys_and_scores(ctx),
              steps.softmax(ctx, softmax_example()), steps.answers(ctx), steps.swapped(ctx), steps.conclusion(ctx)]
    return Lesson([TEXT_A, TEXT_B], l, h, [Section(i + 1, t, b) for i, (t, b) in enumerate(zip(TITLES, bodies))])


def drawn_form_error(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> str:
    """The message attention.as_drawn raises for these column-notation matrices."""
    try:
        attention.as_drawn(Q, K, V)
    except NotationError as e:
        return str(e)
    raise AssertionError("as_drawn must refuse")  # pragma: no cover


def summary_row(name: str, x: torch.Tensor) -> list:
    """[name, norm, first SHOWN_ENTRIES entries] for a vector x (d,)."""
    return [name, float(x.norm()), *[float(v) for v in x[:SHOWN_ENTRIES]]]


def summary_header(first: str) -> list[str]:
    return [first, "norm", *[f"[{i}]" for i in range(SHOWN_ENTRIES)]]


__all__ = ["Block", "Lesson", "Section", "TEXT_A", "TEXT_B", "TITLES", "check_section", "lesson", "percent"]
