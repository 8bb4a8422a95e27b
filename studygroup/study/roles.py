"""What each head does: role scores, each a mean over the questions of a row of attention weights.

For question i (i >= 1) and its row of weights w_i (summing to 1 over the members 0..i):

- previous: w[i, i−1], the weight on the member just before;
- duplicate: the weight on earlier members j < i with i's token;
- induction: the weight on j+1 for every earlier copy j of i's token with j+1 < i (the member that
  followed the token last time: what an induction head copies forward);
- sink: the weight on the head's sinks: every member (the first one too) that takes >= 0.3 of the
  weight of >= 80 % of the questions scored;
- local: the weight on members i−8 … i;
- broad: the row's entropy over log(i+1), 0 for a row on one member, 1 for a uniform row.

Each is in [0, 1]. Scored over the last min(T, 512) questions (question 0 has only itself);
`duplicate` and `induction` over those of them that have such an earlier copy (a question with
none has nothing to find: counted, it would halve an induction head's score on the probe), null
where none has.
A head's role is its highest score, named only where the text can tell: where at least TELLING of
the questions scored hear a member outside their local window (i > LOCAL_WINDOW). Below that,
`local` covers nearly every member every question hears, so it is the largest score of almost every
head by construction (a head that gives 92% to member 0 included): the role is null, and `untold`
says why.
Without a text, the standard probe: 50 ordinary tokens repeated twice (after the BOS where the
model adds one), where a head that copies what followed earlier shows itself.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from studygroup.errors import InputError
from studygroup.gguf.tokenizer import TOKEN_NORMAL
from studygroup.study.jsonable import JSONable
from studygroup.study.sinks import MAX_QUESTIONS, SINK_SHARE, SINK_WEIGHT, head_sinks_of, last_rows, sink_mask, sink_weight
from studygroup.formats import brief
from studygroup.study.text_ids import checked_ids

ROLES = ("previous", "duplicate", "induction", "sink", "local", "broad")
#: `local`: members i−LOCAL_WINDOW … i.
LOCAL_WINDOW = 8
#: A role is named where at least this many questions scored hear a member outside `local`'s window.
TELLING = 8
#: The probe: PROBE_LENGTH ordinary tokens drawn with numpy's default_rng(PROBE_SEED), repeated twice.
PROBE_LENGTH, PROBE_SEED = 50, 0

DEFINITIONS = {
    "previous": "weight on the member just before",
    "duplicate": "weight on earlier members with the same token",
    "induction": "weight on the member after an earlier copy of the same token",
    "sink": f"weight on attention sinks (members with >= {SINK_WEIGHT} of >= {SINK_SHARE:.0%} of rows)",
    "local": f"weight on the last {LOCAL_WINDOW + 1} members (i-{LOCAL_WINDOW} … i)",
    "broad": "entropy of the row over log(i+1): 1 when spread evenly",
}


@dataclass
class RoleScores(JSONable):
    """One head's role scores, each a mean over the questions scored, in [0, 1]."""

    previous: float
    duplicate: float
    induction: float
    sink: float
    local: float
    broad: float


@dataclass
class HeadRoles(JSONable):
    layer: int
    head: int
    roles: RoleScores
    role: str | None = None  # its highest score's role; null where the text is too short to tell (Roles.untold)


@dataclass
class Roles(JSONable):
    """Every head's role scores on one text (or the probe). See docs/json.md."""

    text: str | None  # null for the probe
    probe: str | None  # how the probe was drawn (null for a text)
    tokens: list[str]
    token_ids: list[int]
    questions: list[int]  # [first, last]: the questions scored
    heads: list[HeadRoles]  # every head, layer by layer
    untold: str | None = None  # why no head's role is named (a text too short to tell); null where they are

    def __repr__(self) -> str:
        top = max(self.heads, key=lambda h: h.roles.induction)
        return brief(self, f"of {len(self.heads)} heads on {len(self.tokens)} members (questions "
                           f"{self.questions[0]}-{self.questions[1]}); most induction: head {top.layer}.{top.head} "
                           f"({top.roles.induction:.2f})", ".heads, .to_dict()")

    def top(self, role: str, k: int = 5) -> list[HeadRoles]:
        """The k heads with the highest score in `role`, highest first (none where it is null)."""
        scored = [h for h in self.heads if not math.isnan(getattr(h.roles, role))]
        return sorted(scored, key=lambda h: -getattr(h.roles, role))[:k]


def role_scores(weights: torch.Tensor, token_ids: list[int]) -> RoleScores:
    """A head's role scores from its rows of weights: the last R questions of T members.

    weights: (R, T), row r the weights of question i = T − R + r (zero after i); token_ids: (T,).
    Question 0, if among them, is not scored (it hears only itself).

    >>> previous_only = torch.eye(4).roll(-1, dims=1).tril()  # row i: all on i−1
    >>> role_scores(previous_only, [5, 6, 5, 6]).previous
    1.0
    """
    return heads_role_scores(weights[None], token_ids)[0]


def heads_role_scores(weights: torch.Tensor, token_ids: list[int]) -> list[RoleScores]:
    """Role scores of N heads at once (role_scores of each): weights (N, R, T) -> N RoleScores.

    >>> w = torch.stack([torch.eye(4).roll(-1, dims=1).tril(), torch.eye(4)])  # previous member; itself
    >>> [s.previous for s in heads_role_scores(w, [5, 6, 5, 6])]
    [1.0, 0.0]
    """
    scores = batch_role_scores(weights[None], torch.tensor([token_ids]))[0]  # (N, 6)
    return [RoleScores(*s) for s in scores.tolist()]


def batch_role_scores(weights: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Role scores of N heads on each of B sequences of T members: weights (B, N, R, T), token_ids
    (B, T) -> (B, N, 6) float64, the roles in the order of ROLES (NaN where no question scores one).

    >>> w = torch.eye(4).roll(-1, dims=1).tril()[None, None]  # (1, 1, 4, 4): row i all on i−1
    >>> batch_role_scores(w, torch.tensor([[5, 6, 5, 6]]))[0, 0, ROLES.index("previous")].item()
    1.0
    """
    B, N, R, T = weights.shape
    d = weights.device
    i = torch.arange(T - R, T, device=d)  # (R,) the questions
    asked = i >= 1
    if not bool(asked.any()):
        raise InputError("roles need at least 2 members: the first member's question hears only itself")
    w, i = weights[:, :, asked].double(), i[asked]  # (B, N, Q, T), (Q,)
    tok, j = token_ids.to(d), torch.arange(T, device=d)  # (B, T), (T,)
    same = tok[:, None, :] == tok[:, i][:, :, None]  # (B, Q, T): member j has question i's token
    before = j[None, :] < i[:, None]  # (Q, T)
    after_copy = torch.zeros_like(same)
    after_copy[..., 1:] = same[..., :-1] & (j[None, :-1] < (i - 1)[:, None])  # j+1 after a copy j < i−1
    near = (j[None, :] >= (i - LOCAL_WINDOW)[:, None]) & (j[None, :] <= i[:, None])  # (Q, T)
    entropy = -torch.special.xlogy(w, w).sum(-1)  # (B, N, Q)
    duplicates, copies = same & before, after_copy.any(-1)  # (B, Q, T), (B, Q)
    heavy = sink_mask(w)  # (B, N, T): each head's sinks
    marks = torch.stack([duplicates, after_copy, near.expand_as(same)]).double()  # (3, B, Q, T)
    on = torch.einsum("bnqt,mbqt->mbnq", w, marks)  # (3, B, N, Q): weight on each
    scores = torch.stack([
        w.gather(-1, (i - 1)[None, None, :, None].expand(B, N, -1, 1))[..., 0],  # previous
        _masked(on[0], duplicates.any(-1)),  # duplicate: questions with an earlier copy
        _masked(on[1], copies),  # induction: questions with an earlier copy j < i−1
        torch.einsum("bnqt,bnt->bnq", w, heavy.double()),  # sink
        on[2],  # local
        entropy / torch.log(i.double() + 1),  # broad
    ]).nanmean(-1)  # (6, B, N): each a mean over the questions scored (NaN over none)
    return scores.permute(1, 2, 0)  # (B, N, 6)


def first_weight(weights: torch.Tensor) -> torch.Tensor:
    """Each head's mean weight on member 0 over the questions scored (i >= 1): Gu et al.'s
    importance score of the first token. weights (…, R, T) -> (…,) float64.

    >>> first_weight(torch.tensor([[[1.0, 0.0], [0.25, 0.75]]]))
    tensor([0.2500], dtype=torch.float64)
    """
    R, T = weights.shape[-2:]
    asked = torch.arange(T - R, T, device=weights.device) >= 1  # (R,)
    return weights[..., asked, 0].double().mean(-1)  # (…,)


def layer_roles(model, ids: list[int]):
    """Every head's role scores and weight on member 0 on token ids, layer by layer: yields
    (layer, [RoleScores] * n_heads, first_weight (n_heads,)). What `roles` and the survey both compute.

    >>> layer, scores, first = next(layer_roles(model, model.ids("I have a lot")))
    >>> layer, len(scores), tuple(first.shape)
    (0, 9, (9,))
    """
    for layer, rows in last_rows(model, ids):  # (n_heads, R, T)
        yield layer, heads_role_scores(rows, ids), first_weight(rows)


#: A pass over a batch of sequences keeps every layer's weights until it ends: at most this many bytes.
BATCH_MAPS_BYTES = 256 * 2**20


def batch_size(config, T: int) -> int:
    """How many sequences of T tokens one batched pass may hold (every layer's weights of the last
    min(T, MAX_QUESTIONS) questions, float32, within BATCH_MAPS_BYTES); 0 where one alone does not fit.

    >>> batch_size(model.config, 64), batch_size(model.config, 8192)
    (60, 0)
    """
    one = config.n_layers * config.n_heads * min(T, MAX_QUESTIONS) * T * 4
    return BATCH_MAPS_BYTES // one


@torch.inference_mode()
def batch_layer_roles(model, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`layer_roles` of B sequences of T tokens in one pass: what the survey computes. The pass
    stops after the last layer (no final norm, no unembedding) and keeps each layer's weights of
    the last min(T, MAX_QUESTIONS) questions (B at most `batch_size`).
    ids (B, T) long -> scores (B, n_layers, n_heads, 6) float64 (ROLES' order), first_weight
    (B, n_layers, n_heads) float64.

    >>> scores, first = batch_layer_roles(model, torch.tensor([model.ids("I have a lot of cash")] * 2))
    >>> tuple(scores.shape), tuple(first.shape)
    ((2, 30, 9, 6), (2, 30, 9))
    """
    from studygroup.model.interventions import PassPlan
    from studygroup.model.record import Record, step_name

    B, T = ids.shape
    L, R = model.config.n_layers, min(T, MAX_QUESTIONS)
    plan = PassPlan(record=Record(steps=("weights",), last_rows=None if R == T else R), stop_after=L - 1,
                    start=(0, model.embed(ids)), on_layer=lambda: None)
    _, steps = model.forward(ids[0].to(model.device), plan)
    maps = [steps.pop(step_name("weights", l)).float().cpu() for l in range(L)]  # L × (B, n_heads, R, T)
    return (torch.stack([batch_role_scores(w, ids) for w in maps], 1),  # (B, L, n_heads, 6)
            torch.stack([first_weight(w) for w in maps], 1))  # (B, L, n_heads)


def strongest(scores: RoleScores) -> str:
    """The role whose score is highest (the first of ROLES on a tie; null scores left out).

    >>> strongest(RoleScores(0.9, math.nan, math.nan, 0.1, 0.95, 0.2))
    'local'
    """
    return max((r for r in ROLES if not math.isnan(getattr(scores, r))), key=lambda r: getattr(scores, r))


def untold(T: int, first: int) -> str | None:
    """Why no head's role can be named on T members whose questions first … T−1 are scored, or None
    where one can: fewer than TELLING of them hear a member outside `local`'s window.

    >>> untold(100, 1) is None
    True
    >>> untold(10, 1)
    '10 members are too few to name a role: 1 question hears a member before its last 9 (8 are needed, from 17 members on), so `local` covers nearly every weight of every row and is the largest score of almost every head whatever it does'
    """
    telling = sum(1 for i in range(max(first, 1), T) if i > LOCAL_WINDOW)
    if telling >= TELLING:
        return None
    hears = f"{telling} question{'' if telling == 1 else 's'} hear{'s' if telling == 1 else ''}"
    return (f"{T} members are too few to name a role: {hears} a member before its last {LOCAL_WINDOW + 1} "
            f"({TELLING} are needed, from {LOCAL_WINDOW + 1 + TELLING} members on), so `local` covers nearly every "
            "weight of every row and is the largest score of almost every head whatever it does")


def _masked(x: torch.Tensor, questions: torch.Tensor) -> torch.Tensor:
    """x (B, N, Q) with the questions not scored (questions (B, Q) False) as NaN, which nanmean leaves out."""
    return x.masked_fill(~questions[:, None, :], math.nan)


def probe_ids(tokenizer, vocab_size: int, n: int = PROBE_LENGTH, seed: int = PROBE_SEED) -> list[int]:
    """The standard probe: n ordinary tokens (token type normal: no control, user-defined, unused
    or byte token) drawn uniformly without replacement by numpy.random.default_rng(seed), the
    same n again, after the BOS where the model adds one. (2n or 2n + 1,)

    >>> ids = probe_ids(model.tokenizer, model.config.vocab_size)
    >>> len(ids), ids[:50] == ids[50:]
    (100, True)
    """
    ordinary = [t for t, kind in enumerate(tokenizer.token_types[:vocab_size]) if kind == TOKEN_NORMAL]
    if len(ordinary) < n:
        raise InputError(f"the probe draws {n} ordinary tokens and the vocabulary has {len(ordinary)}: give a text")
    drawn = np.random.default_rng(seed).choice(ordinary, size=n, replace=False).tolist()
    ids = drawn + drawn
    return [tokenizer.bos_id, *ids] if tokenizer.add_bos else ids


def probe_description(tokenizer) -> str:
    bos = "after the BOS, " if tokenizer.add_bos else ""
    return (f"{PROBE_LENGTH} ordinary tokens (token type normal) drawn uniformly without replacement by "
            f"numpy.random.default_rng({PROBE_SEED}).choice, {bos}repeated twice")


def roles(model, text=None) -> Roles:
    """Every head's role scores on `text` (None: the standard probe), over the last min(T, 512) questions.

    >>> r = roles(model)
    >>> best = r.top("induction", 1)[0]
    >>> best.roles.induction > 0.5
    True
    """
    if text is None:
        ids, probe = probe_ids(model.tokenizer, model.config.vocab_size), probe_description(model.tokenizer)
    else:
        ids, probe = checked_ids(model, text), None
    T = len(ids)
    if T < 2:
        raise InputError("roles need at least 2 members: the first member's question hears only itself")
    R = min(T, MAX_QUESTIONS)
    first, reason = max(1, T - R), untold(T, T - R)
    heads = [HeadRoles(l, h, s, None if reason else strongest(s)) for l, scores, _ in layer_roles(model, ids)
             for h, s in enumerate(scores)]
    tokens = [model.tokenizer.readable(i) for i in ids]
    return Roles(text if isinstance(text, str) else None, probe, tokens, list(ids), [first, T - 1], heads, reason)


@dataclass
class HeadSinks:
    """One head's attention sinks on a text, the last question's weight on them, and its role scores."""

    sinks: list[int]  # the members that are sinks for this head (study.sinks; may be none)
    sink_weight: float  # the weight the last question gives them
    roles: RoleScores | None  # None past MAX_QUESTIONS members


def head_sinks(model, ids: list[int], on_layer=None) -> dict[tuple[int, int], HeadSinks]:
    """Every head's sinks and (up to MAX_QUESTIONS members) role scores on token ids, by (layer, head).
    on_layer: a progress bar's advance, called 2 · n_layers times (sinks.last_rows).

    >>> s = head_sinks(model, model.ids("Cash or credit card? I have a lot"))
    >>> s[24, 6].sinks, s[24, 6].sink_weight > 0.9
    ([0], True)
    """
    T, out = len(ids), {}
    for l, rows in last_rows(model, ids, on_layer):
        for h, w in enumerate(rows):  # w: (R, T)
            s = head_sinks_of(w)
            out[l, h] = HeadSinks(s, sink_weight(w[-1], s), role_scores(w, ids) if T <= MAX_QUESTIONS and T > 1 else None)
    return out
