"""The model view: every head's weights on one text, layer × head, for the web page's grid.

Short texts (T ≤ FULL_MAPS_MAX_T) get each head's full T×T map of weights (paper orientation:
row i is member i's question, each row sums to 1; masked cells are 0). Longer texts get each
head's last row only: the last member's question, the one that predicts the next word.
Query heads that share a key/value head form a group. The decisive heads carry their rank.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from studygroup.study import attribution
from studygroup.study.jsonable import JSONable
from studygroup.study.mask_reasons import reasons_of_head
from studygroup.study.ranking import heads_largest_first
from studygroup.study.roles import RoleScores, heads_role_scores, strongest, untold
from studygroup.formats import brief, quote
from studygroup.model.record import Record

#: Up to this many members every head's whole T×T map is kept and shown: the model view's maps, the
#: page's run (study.page_run) and a head's grid by default; past it, the last question's row.
FULL_MAPS_MAX_T = 64
#: How many heads get a rank when ranked by direct contribution.
RANKED = 10


@dataclass
class HeadMap(JSONable):
    layer: int
    head: int
    kv_head: int
    weights: list[list[float]]  # (T, T) or (1, T): see ModelView.rows
    logit_contribution: float  # direct share of the predicted word's logit
    rank: int | None  # 1 = most decisive; None outside the ranked heads
    mask_reasons: list[list[int]] | None = None  # this head's own, where it differs from ModelView.mask_reasons
    roles: RoleScores | None = None  # role scores on this text (studygroup.study.roles); None with rows "last"
    role: str | None = None  # its highest score's role; None without roles or where ModelView.roles_untold says why


@dataclass
class KVGroup(JSONable):
    kv_head: int
    heads: list[int]  # the query heads that share this key/value head (in every layer)


@dataclass
class ModelView(JSONable):
    """Every head of the model on one text. See docs/json.md."""

    tokens: list[str]
    token_ids: list[int]
    predicted: str  # the predicted next word, readable
    n_layers: int
    n_heads: int
    n_kv_heads: int
    rows: str  # "all": full T×T maps; "last": each head's last row only
    kv_groups: list[KVGroup]
    ranked_by: str
    heads: list[list[HeadMap]] = field(default_factory=list)  # [layer][head]
    mask_reasons: list[list[int]] = field(default_factory=list)  # (R, T) every head's, unless its own is given
    roles_untold: str | None = None  # why no head's role is named on this text (roles.untold); None where they are

    def __repr__(self) -> str:
        """<ModelView of 30 layers × 9 heads (3 kv heads) on 4 members, rows: all: next word “␣of”; …>"""
        return brief(self, f"of {self.n_layers} layers × {self.n_heads} heads ({self.n_kv_heads} kv heads) on "
                           f"{len(self.tokens)} members, rows: {self.rows}: next word {quote(self.predicted)}, "
                           f"ranked by {self.ranked_by}", ".heads[layer][head], .kv_groups, .to_dict()")


def model_view(run, explanation=None, decimals: int | None = None, weights: bool = True) -> ModelView:
    """Every head's weights on the run's text, grouped and ranked.

    explanation: an Explanation of the same text; its heads (most decisive first) give the ranks.
    Without one, the RANKED heads with the largest |direct contribution| are ranked.
    decimals: the weights rounded to this many decimals (None: as computed).
    weights: False leaves every head's `weights` empty, for a caller that writes them from
    `thumbnails` itself (the web page's JSON: `views.payloads.model_view_json`).

    >>> view = model_view(model.run("I have a lot"))
    >>> len(view.heads), len(view.heads[0]), view.rows
    (30, 9, 'all')
    """
    c = run.model.config
    rows = "all" if run.T <= FULL_MAPS_MAX_T else "last"
    run = _with_steps(run, rows)
    token = int(run.last_logits.argmax())
    direct = attribution.direct_contributions(run, token).heads  # (L, H)
    ranks, ranked_by = _ranks(direct, explanation, run)
    shared, own = _mask_reasons(run, rows)
    maps = thumbnails(run, decimals).tolist() if weights else [[[] for _ in range(c.n_heads)] for _ in range(c.n_layers)]
    roles = _roles(run, rows)
    reason = untold(run.T, 0) if roles[0][0] is not None else None
    named = lambda r: None if r is None or reason else strongest(r)  # noqa: E731
    heads = [[HeadMap(l, h, c.kv_head_of(h), maps[l][h], float(direct[l, h]), ranks.get((l, h)), own.get((l, h)),
                      roles[l][h], named(roles[l][h])) for h in range(c.n_heads)] for l in range(c.n_layers)]
    groups = [KVGroup(g, [h for h in range(c.n_heads) if h // c.group_size == g]) for g in range(c.n_kv_heads)]
    return ModelView(run.tokens, list(run.token_ids), run.model.tokenizer.readable(token), c.n_layers, c.n_heads,
                     c.n_kv_heads, rows, groups, ranked_by, heads, shared, reason)


def thumbnails(run, decimals: int | None = None) -> torch.Tensor:
    """Every head's weights as the model view shows them: (n_layers, n_heads, R, T), R = T up to
    FULL_MAPS_MAX_T members, else 1 (the last question). decimals: rounded to this many, in float64,
    so that 0.123 is the double nearest 0.123 (as Python's round gives it); None: float32 as computed.

    >>> thumbnails(model.run("I have a lot"), 3).shape
    torch.Size([30, 9, 4, 4])
    """
    c = run.model.config
    rows = "all" if run.T <= FULL_MAPS_MAX_T else "last"
    run = _with_steps(run, rows)
    cut = slice(None) if rows == "all" else slice(-1, None)
    w = torch.stack([run["weights", l][:, cut] for l in range(c.n_layers)])  # (L, H, R, T)
    return w.float() if decimals is None else w.double().round(decimals=decimals)


def _mask_reasons(run, rows: str) -> tuple[list[list[int]], dict]:
    """The reasons most heads share (R, T), and {(layer, head): (R, T)} for the heads that differ
    (members silenced in some heads only; local layers whose window leaves members out)."""
    c, T, iv = run.model.config, run.T, run.interventions
    cut = (lambda m: m) if rows == "all" else (lambda m: m[-1:])  # noqa: E731
    pairs = [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
    window = {l: w if (w := c.window_of(l)) is not None and w < T else None for l in range(c.n_layers)}
    kind = {(l, h): (iv.hides_members(l, h), window[l]) for l, h in pairs}  # pairs of one kind share reasons
    counts = {k: sum(1 for p in pairs if kind[p] == k) for k in set(kind.values())}
    most = max(counts, key=lambda k: (counts[k], k[0], k[1] is None))
    typical = next(p for p in pairs if kind[p] == most)
    shared = cut(reasons_of_head(iv, *typical, T, window[typical[0]])).tolist()
    own = {p: cut(reasons_of_head(iv, *p, T, window[p[0]])).tolist() for p in pairs if kind[p] != most}
    return shared, own


def _roles(run, rows: str) -> list[list[RoleScores | None]]:
    """Every head's role scores from its full map (rows "all", at least 2 members), else None: [layer][head]."""
    c = run.model.config
    if rows != "all" or run.T < 2:
        return [[None] * c.n_heads for _ in range(c.n_layers)]
    w = torch.stack([run["weights", l].float() for l in range(c.n_layers)])  # (L, H, T, T)
    scores = heads_role_scores(w.flatten(0, 1), list(run.token_ids))  # L·H of them, layer by layer
    return [scores[l * c.n_heads:(l + 1) * c.n_heads] for l in range(c.n_layers)]


def _with_steps(run, rows: str):
    """The run itself if it recorded what the view needs, else the same run recomputed to record it."""
    needed = ("weights", *attribution.NEEDED_STEPS)
    L = run.model.config.n_layers
    has = all((s, l) in run for l in range(L) for s in ("weights", "write", "mlp_out"))
    has = has and "embed" in run and "resid_final" in run and ("pos_embed" in run or "pos_embed" not in run.model.w)
    if has and (rows == "last" or run["layers.0.weights"].shape[-2] == run.T):
        return run
    from studygroup.model.run import Run

    return Run.compute(run.model, run.token_ids, run.interventions, Record(steps=needed, rows=rows))


def _ranks(direct: torch.Tensor, explanation, run) -> tuple[dict, str]:
    if explanation is not None and explanation.token_ids == list(run.token_ids):
        return ({(e.layer, e.head): r + 1 for r, e in enumerate(explanation.heads[:explanation.heads_measured])},
                f"exact silence effect ({explanation.heads_silenced} heads silenced)")
    return {pair: r + 1 for r, pair in enumerate(heads_largest_first(direct)[:RANKED])}, f"|direct contribution| (top {RANKED})"
