"""The article's softmax example, with the real float64 weights.

In "I have a lot" the query of "lot" gives the score 100 to "lot" and 1 to "I", "have" and "a":
softmax turns these absolute scores into relative weights, and "lot" takes essentially all of it.
Put "Cash or credit card?" before it with the score 1,000 for each of its words, and they take the
weight from "lot". The numbers are the ones float64 gives; where float64 rounds a weight to 1 or
underflows it to 0, the exact value is printed beside it (from log_softmax, which does not underflow).

>>> print(softmax_example())
I have a lot: the query of "lot" shares its attention
  member   score  weight
  I            1  1.01122e-43
  have         1  1.01122e-43
  a            1  1.01122e-43
  lot        100  1  (exactly 1 - 3.03366e-43: float64 rounds it to 1)
<BLANKLINE>
Cash or credit card? I have a lot: the query of "lot" shares its attention
  member   score  weight
  Cash      1000  0.25
  or        1000  0.25
  credit    1000  0.25
  card?     1000  0.25
  I            1  0  (exactly 3.44947e-435: float64 underflows it to 0)
  have         1  0  (exactly 3.44947e-435: float64 underflows it to 0)
  a            1  0  (exactly 3.44947e-435: float64 underflows it to 0)
  lot        100  0  (exactly 3.41119e-392: float64 underflows it to 0)
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["GroupWeights", "SoftmaxStory", "softmax_example", "weigh"]


@dataclass(frozen=True)
class GroupWeights:
    """How one query shares its attention among the study group's members (one word per token)."""

    context: str  # the text, e.g. "I have a lot"
    query: str  # the member asking, e.g. "lot"
    members: tuple[str, ...]  # (T,) the words
    scores: tuple[float, ...]  # (T,) attention scores Q_query · K_member
    weights: tuple[float, ...]  # (T,) softmax(scores) in float64; they sum to 1
    log_weights: tuple[float, ...]  # (T,) log_softmax(scores): exact where a weight underflows to 0

    def weight_of(self, member: str) -> float:
        """The float64 weight of the first member with this name."""
        return self.weights[self.members.index(member)]

    def format(self) -> str:
        """One line per member: score, float64 weight (.6g), and the exact value where float64 rounds it."""
        lines = [f'{self.context}: the query of "{self.query}" shares its attention', "  member   score  weight"]
        for i, (member, score, weight) in enumerate(zip(self.members, self.scores, self.weights)):
            lines.append(f"  {member:<8}{score:>6g}  {weight:.6g}{self._note(i)}")
        return "\n".join(lines)

    __str__ = format

    def said(self, i: int) -> str:
        """Member i's weight in words: the float64 value, and the exact one where float64 rounds it.

        >>> weigh(["I", "lot"], [1.0, 100.0], "lot").said(-1)
        '1 (exactly 1 - 1.01122e-43: float64 rounds it to 1)'
        """
        return f"{self.weights[i]:.6g}{self._note(i % len(self.weights))}".replace("  (", " (")

    def _note(self, i: int) -> str:
        """Where float64 shows 1 or 0 but the exact weight is not, say what it is."""
        if self.weights[i] == 0.0:
            return f"  (exactly {_scientific(self.log_weights[i])}: float64 underflows it to 0)"
        others = [w for j, w in enumerate(self.log_weights) if j != i]
        if self.weights[i] == 1.0 and others:
            shortfall = torch.logsumexp(torch.tensor(others, dtype=torch.float64), dim=0).item()  # log Σ others
            return f"  (exactly 1 - {_scientific(shortfall)}: float64 rounds it to 1)"
        return ""


@dataclass(frozen=True)
class SoftmaxStory:
    """The article's two scenes: "lot" alone, then after the question "Cash or credit card?"."""

    alone: GroupWeights  # "I have a lot"
    after_question: GroupWeights  # "Cash or credit card? I have a lot"

    def format(self) -> str:
        """Both scenes, one after the other."""
        return f"{self.alone}\n\n{self.after_question}"

    __str__ = format


def _scientific(log_x: float) -> str:
    """exp(log_x) as '1.23456e-435', for values far below float64's smallest (about 4.9e-324)."""
    log10_x = log_x / math.log(10)
    exponent = math.floor(log10_x)
    return f"{10 ** (log10_x - exponent):.6g}e{exponent}"


def weigh(members: Sequence[str], scores: Sequence[float], query: str) -> GroupWeights:
    """softmax over one query's scores, in float64: members (T,), scores (T,) -> weights (T,).

    >>> weigh(["I", "lot"], [0.0, math.log(3)], query="lot").weights
    (0.25, 0.75)
    """
    s = torch.tensor(scores, dtype=torch.float64)  # (T,)
    return GroupWeights(
        context=" ".join(members),
        query=query,
        members=tuple(members),
        scores=tuple(float(x) for x in scores),
        weights=tuple(torch.softmax(s, dim=0).tolist()),  # (T,)
        log_weights=tuple(torch.log_softmax(s, dim=0).tolist()),  # (T,)
    )


def softmax_example() -> SoftmaxStory:
    """The article's scores and the float64 weights softmax makes of them.

    Returns a SoftmaxStory: .alone for "I have a lot" (T=4), .after_question for
    "Cash or credit card? I have a lot" (T=8), each a GroupWeights with (T,) scores and weights.

    >>> story = softmax_example()
    >>> story.alone.weight_of("lot"), story.after_question.weight_of("Cash")
    (1.0, 0.25)
    """
    sentence, sentence_scores = ["I", "have", "a", "lot"], [1.0, 1.0, 1.0, 100.0]
    question, question_scores = ["Cash", "or", "credit", "card?"], [1000.0] * 4
    return SoftmaxStory(
        alone=weigh(sentence, sentence_scores, query="lot"),
        after_question=weigh(question + sentence, question_scores + sentence_scores, query="lot"),
    )
