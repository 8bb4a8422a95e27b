"""One head as a whole study group: every member's question, the nature of its answer, its answer,
the score grid, the weights and the weighted sums, in the paper's or the video's notation.

Paper notation: rows are members; row i of the grids is member i's question, and each row of
the weights sums to 1. Column notation (3Blue1Brown): every matrix transposed; column i is
member i's question, and each column of the weights sums to 1. The column view is computed by
`attention.columns` on the recorded Q, K and V and checked, at run time, against the paper result.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field

import torch

from studygroup.formulas import attention
from studygroup.model.interventions import Interventions
from studygroup.errors import InputError, NotationError
from studygroup.study.attribution import answer_sizes
from studygroup.study.jsonable import JSONable
from studygroup.study.mask_reasons import mask_reasons
from studygroup.study.text_ids import check_generated_from, checked_ids
from studygroup.study.sink_write import SinkWrite, sink_write
from studygroup.study.sinks import MAX_QUESTIONS, head_sinks_of, rests_on_sink, sink_weight
from studygroup.formats import brief
from studygroup.study.window import Window, window

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
    rows_shown: list[int]  # [A, B]: the questions (members A to B-1) the grids and q, output, members hold
    keys_shown: list[int]  # [C, D]: the answers (members C to D-1) the grids and k, v hold
    scores: list[list[float | None]]  # Q·Kᵀ/√d_k (paper, R × K) or Kᵀ·Q/√d_k (columns, K × R); masked cells null
    weights: list[list[float]]  # softmax per row (paper) or per column (columns), over every key; masked cells 0
    mask: list[list[bool]]  # True where the question may hear the answer
    mask_reasons: list[list[int]]  # why each cell is or is not heard: codes of mask_reasons.REASONS
    q: list[list[float]]  # (R, d_head) paper, (d_head, R) columns: the questions shown
    k: list[list[float]]  # (K, d_head) paper, (d_head, K) columns: the answers shown
    v: list[list[float]]
    q_pre_rope: list[list[float]]
    k_pre_rope: list[list[float]]
    output: list[list[float]]  # the weighted sums of the questions shown
    members: list[MemberRow]  # the members whose questions are shown
    sinks: list[int]  # the head's attention sinks (study.sinks), over its last min(T, 512) questions, whatever the window
    sink_weight: float  # the weight the last member's question gives them
    check: NotationCheck
    silenced_members: list[int] = field(default_factory=list)  # whose answers nobody heard in this run
    silenced_heads: list[list[int]] = field(default_factory=list)  # [layer, head] pairs that wrote nothing
    generated_from: int | None = None  # the first member the model generated (prompt ids + generated ids); None: none
    sink_write: SinkWrite | None = None  # where the last question rests on a sink: its write compared across texts
    taken_out: str | None = None  # where this head is itself silenced: what its output shown is, and what the run puts in

    @property
    def is_whole(self) -> bool:
        """Whether the view holds the whole grid (every question, every answer)."""
        T = len(self.tokens)
        return self.rows_shown == [0, T] and self.keys_shown == [0, T]

    def __repr__(self) -> str:
        """<HeadView of head 3 of layer 5 (kv head 1) on 4 members, paper notation: …>"""
        T, (a, b), (c, d) = len(self.tokens), self.rows_shown, self.keys_shown
        silenced = f", silenced members {self.silenced_members}" if self.silenced_members else ""
        silenced += f", silenced heads {[tuple(p) for p in self.silenced_heads]}" if self.silenced_heads else ""
        silenced += f", members {self.generated_from}: generated" if self.generated_from not in (None, T) else ""
        dh = len(self.q[0]) if self.notation == "paper" else len(self.q)
        shown = (f"scores and weights {T}×{T}, q k v {T}×{dh}" if self.is_whole else
                 f"questions {a}:{b} × answers {c}:{d} of {T}×{T}, q {b - a}×{dh}, k v {d - c}×{dh}")
        return brief(self, f"of head {self.head} of layer {self.layer} (kv head {self.kv_head}) on {T} members, "
                           f"{self.notation} notation: {shown}{silenced}",
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
    return vectors(x[None], k)[0]


def vectors(x: torch.Tensor, k: int = LARGEST) -> list[Vector]:
    """`vector` of every row of x (n, d), in one computation.

    >>> [v.largest[0].index for v in vectors(torch.tensor([[3.0, 0.0, -4.0], [1.0, 2.0, 0.0]]), k=1)]
    [2, 1]
    """
    order = x.abs().argsort(dim=-1, descending=True, stable=True)[:, :k]  # (n, k): largest_first of each row
    norms, indices, values = x.norm(dim=-1).tolist(), order.tolist(), x.gather(1, order).tolist()
    return [Vector(n, [Entry(i, v) for i, v in zip(row, vals)]) for n, row, vals in zip(norms, indices, values)]


def masked_grid(values: torch.Tensor, mask: torch.Tensor) -> list[list[float | None]]:
    """values (T, T) as nested lists, None where mask (T, T) is False.

    >>> masked_grid(torch.ones(2, 2), torch.tensor([[True, False], [True, True]]))
    [[1.0, None], [1.0, 1.0]]
    """
    return [[x if m else None for x, m in zip(row, mrow)] for row, mrow in zip(values.tolist(), mask.tolist())]


def head_view(model, text, layer: int, head: int, notation: str = "paper", largest: int = LARGEST,
              interventions: Interventions = Interventions(), rows=None, keys=None, run=None,
              generated_from: int | None = None) -> HeadView:
    """One head as a study group, in paper or column notation, over a window of its grid.

    rows, keys: the questions and the answers shown, as Python slices over the members (half-open,
    negatives from the end; None: every member); a view holds at most window.MAX_CELLS cells, so a
    text past 256 members needs one (rows=slice(-1, None): the last question). Only the window's
    rows are computed, each over every key (softmax needs the whole row), then cut to the keys.
    largest: how many of each vector's largest entries the member summaries keep.
    interventions: the head as it is in a run with its members and heads silenced (members in every
    head; a silenced member's answer is masked, as the future is, under zero ablation; under mean or
    resample ablation it is heard, with its replaced key and value). run: a run of this text with
    those interventions, whose recorded vectors are read where it holds them (else a pass is made).
    generated_from: with text the ids of a prompt and of words generated after it (Model.generate's
    .prompt_ids + .ids), the index of the first generated member, len(prompt ids); None: a plain text.

    >>> v = head_view(model, "I have a lot", layer=0, head=8, notation="columns")
    >>> v.check.agree, len(v.weights), v.orientation.split(",")[0]
    (True, 4, 'columns are members asking (questions)')
    """
    check_notation(notation)
    layer, head = model.check_head(layer, head)
    if isinstance(largest, bool) or not isinstance(largest, int) or largest < 1:
        raise InputError(f"largest={largest!r}: give how many of each vector's largest entries to show (1 or more)")
    ids = checked_ids(model, text)
    check_generated_from(generated_from, len(ids))
    w = window(len(ids), rows, keys)  # before the pass: a window too large is refused at once
    if run is None:
        run = model.before_pass(ids, interventions)
    vec = run.head_vectors(layer, head)  # (T, d_head) each: a pass up to this layer
    g = _grids(vec, run.head_mask(layer, head, w.rows), w)  # silenced members and a local layer's window left out
    quiet = run.interventions.silenced_members if run.interventions.hides_members(layer, head) else ()
    t = (lambda m: m.mT) if notation == "columns" else (lambda m: m)  # noqa: E731
    R, K = slice(w.rows.start, w.rows.stop), slice(w.keys.start, w.keys.stop)
    c = model.config
    kv = c.kv_head_of(head)
    sinks = _sinks(vec, run.head_mask(layer, head))
    resting = sink_write(model, run, layer, head) if rests_on_sink(sinks["sink_weight"]) else None
    return HeadView(
        text=text if isinstance(text, str) else None, tokens=run.tokens, token_ids=list(ids), layer=layer, head=head,
        kv_head=kv, shares_keys_with=c.query_heads_of(kv), notation=notation, orientation=ORIENTATION[notation],
        rows_shown=[w.rows.start, w.rows.stop], keys_shown=[w.keys.start, w.keys.stop],
        scores=masked_grid(t(g.scores), t(g.mask)),
        weights=(g.cols_weights if notation == "columns" else g.weights).tolist(), mask=t(g.mask).tolist(),
        mask_reasons=t(mask_reasons(g.mask, quiet, model.config.window_of(layer), rows=w.rows, keys=w.keys)).tolist(),
        q=t(vec["q"][R]).tolist(), k=t(vec["k"][K]).tolist(), v=t(vec["v"][K]).tolist(),
        q_pre_rope=t(vec["q_pre_rope"][R]).tolist(), k_pre_rope=t(vec["k_pre_rope"][K]).tolist(),
        output=(g.cols_output if notation == "columns" else g.output).tolist(),
        members=_members(vec, g, w.rows, run.tokens, largest), **sinks,
        check=g.check(), generated_from=generated_from, sink_write=resting, **run.interventions.silenced(),
        taken_out=taken_out_said(run.interventions, layer, head))


def taken_out_said(interventions: Interventions, layer: int, head: int) -> str | None:
    """Where head (layer, head) is itself silenced in the run: its output and write shown (and in
    its sink write) are what it computes from its own q, k and v, not what the run passes on; in
    words, with what the run puts in instead. None where the head is not silenced.

    >>> taken_out_said(Interventions(silenced_heads=frozenset({(2, 0)})), 2, 0).split(":")[0]
    'Head 2.0 is silenced in this run'
    """
    if (layer, head) not in interventions.silenced_heads:
        return None
    a = interventions.ablation
    how = "silenced" if a.kind == "zero" else f"taken out by {a.kind} ablation"
    over = "the text's members" if not a.reference else "every member of the reference texts"
    instead = {"zero": "its write is zeroed, so none of what is shown here reaches the residual stream",
               "mean": f"its output at every member is replaced by its mean over {over}, so the residual stream gets "
                       "that one mean (through W_O) at every member, not the outputs shown here",
               "resample": "its output at each member is taken from the other text's run at that member, so the "
                           "residual stream gets the other text's outputs (through W_O), not those shown here"}[a.kind]
    return (f"Head {layer}.{head} is {how} in this run: the output shown and the write it makes through W_O (here "
            f"and where its write is compared across texts) are what it computes from its own q, k and v; in the run "
            f"{instead}.")


def _sinks(vec: dict[str, torch.Tensor], mask: torch.Tensor) -> dict:
    """The head's sinks over its last min(T, MAX_QUESTIONS) questions and the last one's weight on
    them. vec: (T, d_head) each; mask (T, T) bool."""
    T = mask.shape[0]
    rows = slice(T - min(T, MAX_QUESTIONS), T)
    _, weights = attention.paper(vec["q"][rows][None], vec["k"][None], vec["v"][None], mask=mask[rows])  # (1, R, T)
    s = head_sinks_of(weights[0])
    return {"sinks": s, "sink_weight": sink_weight(weights[0, -1], s)}


@dataclass
class _Grids:
    """A window's cells in paper orientation (rows are questions): scores, weights, mask (R, K);
    the questions' weighted sums output (R, d_head) and their loudest answer over every key,
    listens (R,); the same weights (K, R) and outputs (d_head, R) by attention.columns; the two
    notations' largest differences."""

    scores: torch.Tensor
    weights: torch.Tensor
    mask: torch.Tensor
    output: torch.Tensor
    listens: torch.Tensor
    cols_weights: torch.Tensor
    cols_output: torch.Tensor
    weights_difference: float
    output_difference: float

    def check(self) -> NotationCheck:
        dw, do = self.weights_difference, self.output_difference
        size = max(1.0, float(self.output.abs().max())) if self.output.numel() else 1.0  # float32 rounding grows with it
        tol = rounding_bound(self.weights.shape[-1])
        agree = dw <= tol and do <= tol * size
        statement = (f"V softmax(Kᵀ Q / √d_k) with softmax per column gives the transposed weights and outputs of "
                     f"softmax(Q Kᵀ / √d_k) V with softmax per row: the largest differences on these numbers are "
                     f"{dw:.1e} (weights) and {do:.1e} (outputs), " + ("float rounding: the same result." if agree else
                                                                       "larger than float rounding: they DISAGREE."))
        return NotationCheck(dw, do, agree, statement)


def rounding_bound(K: int) -> float:
    """The largest difference two float32 computations of a softmax and a weighted sum over K keys
    may show from rounding alone: AGREE_ATOL, or ten times √K·ε where that is larger (the rounding
    errors of a sum of K float32 terms fall either way and grow like √K·ε).

    >>> rounding_bound(64), round(rounding_bound(8191), 6)
    (1e-05, 0.000108)
    """
    return max(AGREE_ATOL, 10 * math.sqrt(K) * torch.finfo(torch.float32).eps)


#: Questions computed at a time, each over every key: BLOCK × T cells live at once.
BLOCK = 256


def _grids(vec: dict[str, torch.Tensor], mask: torch.Tensor, w: Window) -> _Grids:
    """The window's cells, BLOCK questions at a time, in both notations. vec: (T, d_head) each;
    mask (R, T) bool: the window's questions' rows."""
    K, a = slice(w.keys.start, w.keys.stop), w.rows.start
    blocks = [slice(i, min(i + BLOCK, w.rows.stop)) for i in range(w.rows.start, w.rows.stop, BLOCK)]
    parts = [_block(vec, mask[rows.start - a:rows.stop - a], rows, K) for rows in blocks]
    cat = lambda n, dim=0: torch.cat([p[n] for p in parts], dim=dim)  # noqa: E731
    return _Grids(cat("scores"), cat("weights"), cat("mask"), cat("output"), cat("listens"),
                  cat("cols_weights", 1), cat("cols_output", 1),
                  max(p["dw"] for p in parts), max(p["do"] for p in parts))


def _block(vec: dict[str, torch.Tensor], m: torch.Tensor, rows: slice, keys: slice) -> dict:
    """Questions `rows` over every key, in both notations, cut to `keys`. m: (b, T) their mask."""
    q, k, v = vec["q"][rows], vec["k"], vec["v"]  # (b, d_head), (T, d_head), (T, d_head)
    out, weights = attention.paper(q[None], k[None], v[None], mask=m)  # (1, b, d_head), (1, b, T)
    cols_out, cols_w = attention.columns(q.mT[None], k.mT[None], v.mT[None], mask=m.mT)  # (1, d_head, b), (1, T, b)
    return {"scores": attention.scores(q[None], k[None])[0][:, keys], "weights": weights[0][:, keys],
            "mask": m[:, keys], "output": out[0], "listens": weights[0].argmax(-1),
            "cols_weights": cols_w[0][keys], "cols_output": cols_out[0],
            "dw": float((cols_w[0].mT - weights[0]).abs().max()), "do": float((cols_out[0].mT - out[0]).abs().max())}


def _members(vec: dict[str, torch.Tensor], g: _Grids, rows: range, tokens: list[str], k: int) -> list[MemberRow]:
    """The members whose questions the window holds, each in short."""
    R = slice(rows.start, rows.stop)
    q, q_pre, key, key_pre, v = (vectors(vec[n][R], k) for n in ("q", "q_pre_rope", "k", "k_pre_rope", "v"))
    out, listens = vectors(g.output, k), g.listens.tolist()
    return [MemberRow(i, tokens[i], q[r], q_pre[r], key[r], key_pre[r], v[r], out[r], listens[r])
            for r, i in enumerate(rows)]


def answer_contributions(model, view: HeadView) -> tuple[torch.Tensor, torch.Tensor]:
    """What each answer of a head view brings to each question: the answers' sizes ‖v_j · W_O[h]‖
    (K,), and contributions[i][j] = w_ij · ‖v_j · W_O[h]‖, the size of member j's answer in
    question i's weighted sum as the head writes it: (R, K) in paper notation, (K, R) in columns.

    >>> view = head_view(model, "I have a lot", 0, 0)
    >>> sizes, c = answer_contributions(model, view)
    >>> tuple(c.shape) == (len(view.weights), len(view.weights[0])) == (len(view.weights), len(sizes))
    True
    """
    paper = view.notation == "paper"
    v = torch.tensor(view.v if paper else [list(r) for r in zip(*view.v)])  # (K, d_head)
    sizes = answer_sizes(model, view.layer, view.head, v)  # (K,)
    weights = torch.tensor(view.weights, dtype=torch.float32)  # (R, K) or (K, R) in the view's orientation
    return sizes, weights * (sizes[None, :] if paper else sizes[:, None])
