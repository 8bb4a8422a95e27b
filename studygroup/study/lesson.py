"""The article's walkthrough, in its order, with the real model's numbers at every step.

Texts: "I have a lot" and "Cash or credit card? I have a lot". One head is followed throughout:
the most decisive head for the first text (the largest exact silence effect among those tested).
Each section is plain data (paragraphs, tables, preformatted text) for the terminal and HTML.
"""
from __future__ import annotations

from dataclasses import dataclass

from studygroup.errors import InputError
from studygroup.formulas.softmax_example import softmax_example
from studygroup.study import lesson_steps as steps
from studygroup.study.compare import compare
from studygroup.study.jsonable import JSONable
from studygroup.study.lesson_blocks import Block
from studygroup.study.story import brief, clipped, percent

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

    def __repr__(self) -> str:
        """<Lesson of 8 sections on head 6 of layer 24, comparing “…” with “…”; …>"""
        return brief(self, f"of {len(self.sections)} sections on head {self.head} of layer {self.layer}, comparing "
                           + " with ".join(clipped(t, 30) for t in self.texts), ".section(n), .sections, .to_dict()")

    def section(self, n: int) -> Section:
        """Section n (1-based); InputError for a number outside 1..len(sections)."""
        check_section(n)
        return self.sections[n - 1]


def check_section(n: int) -> None:
    """InputError unless 1 <= n <= the number of sections."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(TITLES):
        raise InputError(f"section {n} does not exist: the lesson has {len(TITLES)} sections (1-{len(TITLES)})")


def lesson(model, top: int = 8, comparison=None) -> Lesson:
    """Build the lesson on the two texts with `model`'s numbers (top: words in the conclusion's table).

    comparison: compare(model, TEXT_A, TEXT_B) if already computed (it is the costly part).

    >>> l = lesson(model)
    >>> [s.title for s in l.sections][:2]
    ['Two notations', 'The study group and its members: E, and where position enters']
    """
    cmp = comparison or compare(model, TEXT_A, TEXT_B, top=top)
    if (cmp.a.text, cmp.b.text) != (TEXT_A, TEXT_B):
        raise InputError(f"the lesson compares “{TEXT_A}” with “{TEXT_B}”, not “{cmp.a.text}” with “{cmp.b.text}”")
    l, h = cmp.a.heads[0].layer, cmp.a.heads[0].head
    run_a, run_b = model.run(TEXT_A, record="all"), model.run(TEXT_B, record="all")
    ctx = steps.Context(model, run_a, run_b, run_a.head(l, h), run_b.head(l, h), cmp, top)
    bodies = [steps.notations(ctx), steps.members(ctx), steps.questions(ctx), steps.keys_and_scores(ctx),
              steps.softmax(ctx, softmax_example()), steps.answers(ctx), steps.swapped(ctx), steps.conclusion(ctx)]
    return Lesson([TEXT_A, TEXT_B], l, h, [Section(i + 1, t, b) for i, (t, b) in enumerate(zip(TITLES, bodies))])


__all__ = ["Block", "Lesson", "Section", "TEXT_A", "TEXT_B", "TITLES", "check_section", "lesson", "percent"]
