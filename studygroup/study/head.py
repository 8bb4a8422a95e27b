"""One head as a whole study group: every member's question, the nature of its answer, its answer,
the score grid, the weights and the weighted sums, in the paper's or the video's notation.

Paper notation: rows are members; row i of the grids is member i's question, and each row of
the weights sums to 1. Column notation (3Blue1Brown): every matrix transposed; column i is
member i's question, and each column of the weights sums to 1. The column view is computed by
`attention.columns` on the recorded Q, K and V and checked, at run time, against the paper result.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from studygroup.formulas import attention
from studygroup.errors import InputError, NotationError
from studygroup.study.jsonable import JSONable
from studygroup.study.mask_reasons import mask_reasons
from studygroup.study.explain import checked_ids
from studygroup.study.ranking import largest_first
from studygroup.study.story import brief

NOTATIONS = ("paper", "columns")
#: How many of a vector's largest entries (by size) a summary keeps.
LARGEST = 4
#: Largest difference allowed between the two notations' results (float32 rounding).
AGREE_ATOL = 1e-5

ORIENTATION = {
    "paper": "rows are members asking (questions), columns are members answering; each row of weights sums to 1",
    "columns": "columns are members asking (questions), rows are members answering; each column of weights sums to 1",
}


@dataclass
class Entry(JSONable):
    index: int
    value: float


@dataclass
class Vector(JSONable):
    """A long vector in short: its norm and its largest entries (by size)."""

    norm: float
    largest: list[Entry]


@dataclass
class MemberRow(JSONable):
    """One member of the head: its question, the nature of its answer, its answer, what it heard."""

    index: int
    token: str
    question: Vector  # q_i after RoPE
    question_pre_rope: Vector
    key: Vector  # k_i after RoPE: the nature of its answer
    key_pre_rope: Vector
    answer: Vector  # v_i
    weighted_sum: Vector  # output_i = Σ_j w_ij v_j
    listens_most_to: int  # argmax_j w_ij


@dataclass
class NotationCheck(JSONable):
    """attention.columns on the transposed Q, K, V against the paper-notation result, on these numbers."""

    weights_max_difference: float
    output_max_difference: float
    agree: bool
    statement: str


@dataclass
class HeadView(JSONable):
    """One head on one text. Grids and matrices are in the orientation of `notation`. See docs/json.md."""

    text: str | None
    tokens: list[str]
    token_ids: list[int]
    layer: int
    head: int
    kv_head: int
    shares_keys_with: list[int]  # the query heads of the same key/value group
    notation: str
    orientation: str
    scores: list[list[float | None]]  # Q·Kᵀ/√d_k (paper) or Kᵀ·Q/√d_k (columns); masked cells null
    weights: list[list[float]]  # softmax per row (paper) or per column (columns); masked cells 0
    mask: list[list[bool]]  # True where the question may hear the answer
    mask_reasons: list[list[int]]  # why each cell is or is not heard: codes of mask_reasons.REASONS
    q: list[list[float]]  # (T, d_head) paper, (d_head, T) columns
    k: list[list[float]]
    v: list[list[float]]
    q_pre_rope: list[list[float]]
    k_pre_rope: list[list[float]]
    output: list[list[float]]  # the weighted sums
    members: list[MemberRow]
    check: NotationCheck
    silenced_members: list[int] = field(default_factory=list)  # whose answers nobody heard in this run
    silenced_heads: list[list[int]] = field(default_factory=list)  # [layer, head] pairs that wrote nothing

    def __repr__(self) -> str:
        """<HeadView of head 3 of layer 5 (kv head 1) on 4 members, paper notation: …>"""
        T, d = len(self.tokens), len(self.q[0]) if self.notation == "paper" else len(self.q)
        silenced = f", silenced members {self.silenced_members}" if self.silenced_members else ""
        silenced += f", silenced heads {[tuple(p) for p in self.silenced_heads]}" if self.silenced_heads else ""
        return brief(self, f"of head {self.head} of layer {self.layer} (kv head {self.kv_head}) on {T} members, "
                           f"{self.notation} notation: scores and weights {T}×{T}, q k v {T}×{d}{silenced}",
                     ".weights, .members, .check, .to_dict()")


def check_notation(notation: str) -> None:
    """NotationError unless notation is "paper" or "columns"."""
    if notation not in NOTATIONS:
        raise NotationError(f'unknown notation {notation!r}: use "paper" (rows are tokens, the paper) '
                            f'or "columns" (columns are tokens, 3Blue1Brown)')


def vector(x: torch.Tensor, k: int = LARGEST) -> Vector:
    """Norm and the k largest entries by size of x (d,).

    >>> vector(torch.tensor([3.0, 0.0, -4.0]), k=2).to_dict()
    {'norm': 5.0, 'largest': [{'index': 2, 'value': -4.0}, {'index': 0, 'value': 3.0}]}
    """
    order = largest_first(x)[:k]
    return Vector(float(x.norm()), [Entry(i, float(x[i])) for i in order])


def masked_grid(values: torch.Tensor, mask: torch.Tensor) -> list[list[float | None]]:
    """values (T, T) as nested lists, None where mask (T, T) is False.

    >>> masked_grid(torch.ones(2, 2), torch.tensor([[True, False], [True, True]]))
    [[1.0, None], [1.0, 1.0]]
    """
    return [[x if m else None for x, m in zip(row, mrow)] for row, mrow in zip(values.tolist(), mask.tolist())]


def head_view(model, text, layer: int, head: int, notation: str = "paper", largest: int = LARGEST,
              silence_members: Sequence[int] = (), silence_heads: Sequence[tuple[int, int]] = ()) -> HeadView:
    """One head as a study group, in paper or column notation.

    largest: how many of each vector's largest entries the member summaries keep.
    silence_members, silence_heads: the head as it is in a run with these silenced (in every
    head); a silenced member's answer is masked, as the future is.

    >>> v = head_view(model, "I have a lot", layer=0, head=8, notation="columns")
    >>> v.check.agree, len(v.weights), v.orientation.split(",")[0]
    (True, 4, 'columns are members asking (questions)')
    """
    check_notation(notation)
    layer, head = model.check_head(layer, head)
    if isinstance(largest, bool) or not isinstance(largest, int) or largest < 1:
        raise InputError(f"largest={largest!r}: give how many of each vector's largest entries to show (1 or more)")
    ids = checked_ids(model, text)
    run = model.run(ids, record="none", silence_members=list(silence_members), silence_heads=list(silence_heads))
    h = run.head(layer, head)  # recomputed up to this layer
    cols_out, cols_weights, check = _columns(h)
    t = (lambda m: m.mT) if notation == "columns" else (lambda m: m)  # noqa: E731
    weights = cols_weights if notation == "columns" else h.weights  # (T, T) in the asked orientation
    output = cols_out if notation == "columns" else h.output
    c = model.config
    group = c.query_heads_of(h.kv_head)
    quiet = run.interventions.silenced_members if run.interventions.hides_members(layer, head) else ()
    reasons = mask_reasons(h.mask, quiet, model.config.window_of(layer))  # (T, T) paper orientation
    return HeadView(
        text=text if isinstance(text, str) else None, tokens=run.tokens, token_ids=list(ids), layer=layer, head=head,
        kv_head=h.kv_head, shares_keys_with=group, notation=notation, orientation=ORIENTATION[notation],
        scores=masked_grid(t(h.scores), t(h.mask)), weights=weights.tolist(), mask=t(h.mask).tolist(),
        mask_reasons=t(reasons).tolist(), q=t(h.q).tolist(),
        k=t(h.k).tolist(), v=t(h.v).tolist(), q_pre_rope=t(h.q_pre_rope).tolist(), k_pre_rope=t(h.k_pre_rope).tolist(),
        output=output.tolist(), members=_members(h, run.tokens, largest), check=check, **run.interventions.silenced())


def _columns(h) -> tuple[torch.Tensor, torch.Tensor, NotationCheck]:
    """attention.columns on Qᵀ, Kᵀ, Vᵀ; compared with the paper result (the run's own weights)."""
    Q, K, V = h.q.mT[None], h.k.mT[None], h.v.mT[None]  # (1, d_head, T) each: columns are members
    out, weights = attention.columns(Q, K, V, mask=h.mask.mT)  # (1, d_head, T), (1, T_k, T_q)
    dw = float((weights[0].mT - h.weights).abs().max())
    do = float((out[0].mT - h.output).abs().max())
    agree = dw <= AGREE_ATOL and do <= AGREE_ATOL
    statement = (f"V softmax(Kᵀ Q / √d_k) with softmax per column gives the transposed weights and outputs of "
                 f"softmax(Q Kᵀ / √d_k) V with softmax per row: the largest differences on these numbers are "
                 f"{dw:.1e} (weights) and {do:.1e} (outputs), " + ("float rounding: the same result." if agree else
                                                                   "larger than float rounding: they DISAGREE."))
    return out[0], weights[0], NotationCheck(dw, do, agree, statement)


def _members(h, tokens: list[str], k: int) -> list[MemberRow]:
    return [MemberRow(i, tokens[i], vector(h.q[i], k), vector(h.q_pre_rope[i], k), vector(h.k[i], k),
                      vector(h.k_pre_rope[i], k), vector(h.v[i], k), vector(h.output[i], k), int(h.weights[i].argmax()))
            for i in range(len(tokens))]
