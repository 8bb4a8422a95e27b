"""What an explain will do and how long it will take: its passes counted in layer-rows (one row
through one layer: projections, attention and MLP), by kind, times this machine's measured
seconds per row of each kind (`studygroup.model.estimate.speed`).

Kinds: `text`, rows of a pass over the text's rows (copies joining at a layer count from it);
`gradient`, the pass with a gradient's rows (forward and backward); `copy`, one-row copies over
the kept keys and values (the last-position and last-question measures). In the last layer a
pass computes only the row that predicts (the others give their keys and values and nothing
else): L layers over R rows count (L - 1)·R + 1.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from studygroup.gguf.config import Config
from studygroup.model.estimate import Speed
from studygroup.study import effects


@dataclass(frozen=True)
class Work:
    """Layer-rows by kind of pass.

    >>> (Work(text=10) + Work(copy=5)).rows
    15.0
    """

    text: float = 0.0
    gradient: float = 0.0
    copy: float = 0.0

    def __add__(self, other: "Work") -> "Work":
        return Work(self.text + other.text, self.gradient + other.gradient, self.copy + other.copy)

    @property
    def rows(self) -> float:
        """Every layer-row, of every kind."""
        return self.text + self.gradient + self.copy

    def seconds(self, speed: Speed, c: Config, T: int) -> float:
        """Wall seconds at `speed` for a text of T members: text and gradient rows scaled to T."""
        scale = speed.text_at(c, T) / speed.text
        return (self.text * speed.text + self.gradient * speed.gradient) * scale + self.copy * speed.copy


def _from(L: int, layer: int, rows: int) -> int:
    """Layer-rows of `rows` rows from `layer` to the last, whose layer computes one row per copy."""
    return (L - 1 - layer) * rows + 1


def every_question(c: Config, T: int, heads: Sequence[float], in_head: Sequence[tuple[float, int]],
                   members: Sequence[int], sentence: int = 0, clean: bool = True) -> Work:
    """explain's work up to LONG_T members: a pass for the sinks, the pass with a gradient, (on a
    clean run) every head at the last position and every member for the last question, then each
    of `heads` (their layers) silenced at every position, the `in_head` copies ((layer, member): a
    member silenced in one head of that layer, its copy over the rows from that member on), each
    of `members` silenced in every head, and the last
    sentence's pass (`sentence` rows; 0: none). clean: measured on the run as it is (on top of a
    silenced run, each copy passes the whole text).

    >>> from studygroup.gguf.config import Config
    >>> c = Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152)
    >>> w = every_question(c, 384, [14.5] * 32, [(14.5, 0)] * 18, list(range(360, 384)))
    >>> round(w.text / (384 * 30))   # passes of the whole text, in all
    26
    """
    L, H = c.n_layers, c.n_heads
    work = Work(text=T * L, gradient=_from(L, 0, T))
    if clean:
        work += Work(copy=H * L * (L + 1) / 2 + T * L)
    start = lambda l: l if clean else 0  # noqa: E731  (a copy on top of a silenced run starts at layer 0)
    work += Work(text=sum(_from(L, start(l), T) for l in heads) + sum(_from(L, l, T - j) for l, j in in_head)
                 + (_from(L, 0, sentence) if sentence else 0))
    return work + Work(text=members_work(L, T, members, clean))


def members_work(L: int, T: int, members: Sequence[int], clean: bool = True) -> int:
    """Layer-rows of `members` each silenced in every head: on a clean run in the passes
    `effects.passes` groups them into (the rows before a pass's first member reused; packed, each
    copy from its own member), else each copy over the whole text.

    >>> members_work(2, 4, [2, 3])   # one packed pass: rows 2, 3 and 3 in layer 0, a row each in layer 1
    5
    """
    if not clean:
        return len(members) * _from(L, 0, T)
    starts = sorted(members)
    total = 0
    for group, packed in effects.passes(starts, T):
        own = [starts[i] for i in group]
        rows = sum(T - j for j in own) if packed else len(own) * (T - own[0])
        total += (L - 1) * rows + len(own)
    return total


def last_question(c: Config, T: int, heads: Sequence[float], members: int, sentence: int = 0) -> Work:
    """explain's work past LONG_T members: a pass for the sinks, one keeping every member's keys and
    values, then one row for each of `heads` (their layers) from its layer, and for each of
    `members` silenced members from layer 0; and the last sentence's pass (`sentence` rows; 0: none).

    >>> from studygroup.gguf.config import Config
    >>> c = Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152)
    >>> last_question(c, 600, [0, 29], 600).copy   # 30 + 1 rows for the heads, 30 for each member
    18031
    """
    L = c.n_layers
    return Work(text=T * L + _from(L, 0, T) + (_from(L, 0, sentence) if sentence else 0),
                copy=sum(L - l for l in heads) + members * L)
