"""explain: which heads and which members decided the group's conclusion, with the numbers.

For a text of T members the group's conclusion is the predicted word t = argmax of the last
logits. Three measures say who decided it:

- a head's direct contribution: its write's share of the logit of t (`studygroup.attribution`);
- a head's silence effect: the change in log p(t) when its write is zeroed (`studygroup.effects`);
- a member's effect: the change in log p(t) when it is silenced in every head.

Direct contributions are cheap for all heads; exact silencing costs a pass per layer, so it is
done for candidates: the heads ranked highest, alternately, by |direct contribution| and by the
first-order estimate of the silence effect (one backward pass). The result says what was done.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from studygroup import attribution, effects, study_long
from studygroup.estimate import explain as explain_needs
from studygroup.errors import InputError
from studygroup.jsonable import JSONable
from studygroup.progress import Progress, say
from studygroup.record import KEY_STEPS, Record

#: What explain records: the last member's row everywhere, and every member's answer (v).
#: (Every member's keys, k, are recorded too: silencing a member reuses the rows before it.)
STEPS = ("embed", "write", "mlp_out", "resid_final", "weights", "v", "q")
#: Past this many members explain first says what it will need, and shows progress bars.
FULL_RECORD_MAX_T = 64
#: Up to this many members a head's listening lists them all; past it, the largest contributions.
LISTEN_ALL_MAX_T = 64
LISTEN_TOP = 32


@dataclass
class Word(JSONable):
    """A candidate next word: readable token, id, probability (softmax in float64) and logit."""

    token: str
    id: int
    prob: float
    logit: float


@dataclass
class Listened(JSONable):
    """What member `index`'s answer brought to the last member's question in one head."""

    index: int
    token: str
    weight: float  # w_{T-1, j}: the share of attention the question gives this member
    answer_size: float  # ‖v_j · W_O[h]‖: the size of its answer as the head writes it
    contribution: float  # weight × answer_size
    logit_share: float  # w_{T-1, j} (v_j · W_O[h]) · direction: its part of the head's direct contribution


@dataclass
class HeadEffect(JSONable):
    """One head's part in the conclusion, and whom its last question listened to."""

    layer: int
    head: int
    kv_head: int
    logit_contribution: float  # direct share of the predicted word's logit
    silence_effect: float | None  # exact change in log p(t) with the head silenced; None if not computed
    silence_estimate: float | None  # first-order estimate of silence_effect (one gradient); None for long texts
    prob_silenced: float | None  # p(t) with the head silenced
    rank_by_contribution: int  # 1 = largest |logit_contribution| of all heads
    question_norm: float  # ‖q_{T-1}‖ of this head
    listened: list[Listened] = field(default_factory=list)  # largest contribution first


@dataclass
class MemberEffect(JSONable):
    """What silencing one member in every head does to the conclusion."""

    index: int
    token: str
    effect: float | None  # change in log p(t); None if this member was not silenced
    prob_silenced: float | None
    direct_share: float  # its answers' direct share of the logit, summed over every head's last question
    rank: int | None  # 1 = largest |effect|


@dataclass
class LogitSum(JSONable):
    """The predicted word's logit and the direct shares it adds up from."""

    logit: float
    embed: float
    heads: float  # Σ over every head
    mlps: float  # Σ over every MLP
    total: float  # embed + heads + mlps: equals logit up to float error


@dataclass
class ModelInfo(JSONable):
    name: str
    path: str | None
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int


@dataclass
class Explanation(JSONable):
    """The group's conclusion on one text, and who decided it. See docs/json.md."""

    text: str | None
    tokens: list[str]
    token_ids: list[int]
    predicted: Word
    top: list[Word]
    heads: list[HeadEffect]  # the heads silenced exactly, most decisive (largest |silence_effect|) first
    heads_silenced: str  # which heads were silenced, in words
    members: list[MemberEffect]  # every member, in reading order
    members_silenced: str
    logit_parts: LogitSum
    contributions: list[list[float]]  # (n_layers, n_heads) direct contribution of every head
    silence_estimates: list[list[float]]  # (n_layers, n_heads) first-order silence effect of every head
    model: ModelInfo
    story: list[str] = field(default_factory=list)
    scope: str = "in every head"  # where a silenced member is removed (long texts: the last questions only)

    def _repr_html_(self):  # Jupyter shows the study group's views (offline, ids unique per view)
        from studygroup.report import notebook_html; return notebook_html(self)  # noqa: E702


@dataclass
class Analysis:
    """An Explanation with the run behind it (for compare and model_view)."""

    explanation: Explanation
    run: object  # studygroup.run.Run, recorded as `recording(T)` says


def checked_ids(model, text_or_ids) -> list[int]:
    """Token ids of a text the study group can discuss: refuses empty and whitespace-only text."""
    if isinstance(text_or_ids, str) and text_or_ids != "" and not text_or_ids.strip():
        raise InputError("the text is only whitespace: give at least one word")
    return model.ids(text_or_ids)


def explain(model, text, *, top: int = 10, silence_heads: int | str = 16, silence_members: int | str = 24) -> Explanation:
    """Explain the next-word prediction for `text` (or token ids).

    top: how many next words to list. silence_heads: how many candidate heads to silence exactly
    (or "all"). silence_members: silence every member when T is at most this (or "all"),
    otherwise the members with the largest direct shares.

    >>> e = explain(studygroup.load(), "Cash or credit card? I have a lot")  # doctest: +SKIP
    >>> e.predicted.token, e.heads[0].layer, e.members[-1].token            # doctest: +SKIP
    ('␣of', 24, '␣lot')
    """
    return analyse(model, text, top=top, silence_heads=silence_heads, silence_members=silence_members).explanation


def analyse(model, text, *, top: int = 10, silence_heads: int | str = 16, silence_members: int | str = 24) -> Analysis:
    """explain(), keeping the run: one pass with a gradient, then the batched silencing passes."""
    from studygroup import story

    _check_count("top", top, allow_all=False)
    _check_count("silence_heads", silence_heads)
    _check_count("silence_members", silence_members)
    ids = checked_ids(model, text)
    if len(ids) > study_long.LONG_T:
        return study_long.analyse_long(model, ids, text, top=top, silence_heads=silence_heads,
                                       silence_members=silence_members)
    long = len(ids) > FULL_RECORD_MAX_T  # long enough to say what it will need, and show progress
    if long:
        announce(model, len(ids), silence_heads, silence_members)
    with Progress(2 * model.config.n_layers, "a pass with a gradient, forward then backward", show=long) as bar:
        run, estimate = effects.gradient_run(model, ids, recording(len(ids)), on_layer=bar.advance)
    lp = effects.log_probs(run.last_logits)  # (vocab,)
    token = int(lp.argmax())
    parts = attribution.direct_contributions(run, token)
    words = top_words(run, lp, top)
    heads, heads_said = _heads(run, token, lp[token], parts.heads, estimate, silence_heads, long)
    members, members_said = _members(run, token, lp[token], silence_members, long)
    e = Explanation(text=text if isinstance(text, str) else None, tokens=run.tokens, token_ids=list(ids),
                    predicted=words[0], top=words, heads=heads, heads_silenced=heads_said, members=members,
                    members_silenced=members_said, logit_parts=_logit_sum(parts),
                    contributions=parts.heads.tolist(), silence_estimates=estimate.tolist(),
                    model=model_info(model))
    e.story = story.explain_story(e)
    return Analysis(e, run)


def announce(model, T: int, silence_heads, silence_members, stream=None) -> None:
    """Print, before the work starts, what explaining T members will need."""
    c = model.config
    heads, members = _count(silence_heads, c.n_layers * c.n_heads), _count(silence_members, T)
    need = explain_needs(c, T, heads, members, effects.ROWS_PER_PASS)
    say(f"explaining {T} members: {need} (a pass with a gradient, then {heads} heads and {members} members "
        f"silenced exactly, in batched passes)", stream)


def _count(n: int | str, total: int) -> int:
    """How many of `total` a silence_heads / silence_members setting silences."""
    return total if n == "all" else min(n, total)


def recording(T: int) -> Record:
    """What explain records for T members: the last member's row (all that its analysis reads),
    and every member's keys, values and residual stream entering each layer (head silencing
    resumes from it instead of running the text again; member silencing reuses the rows before
    each member). Every row of every step (270 T×T maps) made the pass with a gradient 15-25%
    slower at T=10, for nothing read."""
    return Record(steps=(*STEPS, "k", "resid_pre"), rows="last", full_rows=KEY_STEPS | {"resid_pre"})


def _check_count(name: str, value, allow_all: bool = True) -> None:
    if allow_all and value == "all":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "top" else 0):
        least = 1 if name == "top" else 0
        raise InputError(f"{name} must be a whole number of at least {least}" + (' or "all"' if allow_all else "")
                         + f"; got {value!r}")


def model_info(model) -> ModelInfo:
    c = model.config
    return ModelInfo(c.name or "model", None if model.path is None else str(model.path),
                     c.n_layers, c.n_heads, c.n_kv_heads, c.d_head)


def top_words(run, lp: torch.Tensor, k: int) -> list[Word]:
    """The k most likely next words: lp (vocab,) log-probabilities -> [Word], most likely first."""
    values, ids = lp.topk(min(k, lp.shape[-1]))
    tok = run.model.tokenizer
    return [Word(tok.readable(i), i, float(v.exp()), float(run.last_logits[i])) for v, i in zip(values, ids.tolist())]


def _logit_sum(p: attribution.LogitParts) -> LogitSum:
    return LogitSum(p.logit, p.embed, float(p.heads.double().sum()), float(p.mlps.double().sum()), p.total)


def candidates(direct: torch.Tensor, estimate: torch.Tensor, n: int) -> list[tuple[int, int]]:
    """n heads taken alternately from the |direct| and |estimate| rankings, without repeats.

    direct, estimate: (n_layers, n_heads) -> [(layer, head)].

    >>> candidates(torch.tensor([[3.0, 0.0], [1.0, 0.0]]), torch.tensor([[0.0, 0.0], [0.0, 9.0]]), 2)
    [(0, 0), (1, 1)]
    """
    H = direct.shape[1]
    orders = [direct.flatten().abs().argsort(descending=True, stable=True).tolist(),
              estimate.flatten().abs().argsort(descending=True, stable=True).tolist()]
    chosen: list[int] = []
    for pair in zip(*orders):
        for i in pair:
            if len(chosen) < n and i not in chosen:
                chosen.append(i)
    return [(i // H, i % H) for i in chosen]


def _heads(run, token: int, lp_t, direct, estimate, silence_heads, show: bool = False) -> tuple[list[HeadEffect], str]:
    c = run.model.config
    total = c.n_layers * c.n_heads
    n = _count(silence_heads, total)
    chosen = candidates(direct, estimate, n)
    resid_pre = {l: run[f"layers.{l}.resid_pre"] for l in range(c.n_layers)} if "layers.0.resid_pre" in run else None
    with Progress(1, f"silencing {n} heads, layer by layer", show=show and n > 0) as bar:
        silenced = effects.head_log_probs(run.model, run.token_ids, token, chosen, resid_pre, bar)  # (n,)
    rank = {int(i): r + 1 for r, i in enumerate(direct.flatten().abs().argsort(descending=True, stable=True))}
    u = attribution.direction_for(run, token)
    out = [_head_effect(run, l, h, u, float(direct[l, h]), float(s - lp_t), float(s.exp()),
                        float(estimate[l, h]), rank[l * c.n_heads + h]) for (l, h), s in zip(chosen, silenced)]
    out.sort(key=lambda e: -abs(e.silence_effect))
    said = (f"all {total}" if n == total else "none" if n == 0 else
            f"top {n} of {total}, alternately by |direct contribution| and by |first-order estimate of the silence effect|")
    return out, said


def _head_effect(run, l: int, h: int, u, direct: float, effect: float, prob: float, est: float, rank: int) -> HeadEffect:
    c = run.model.config
    kv = h // c.group_size
    weights = run[f"layers.{l}.weights"][h, -1].float()  # (T,)
    W_O_h = run.model.w[f"layers.{l}.W_O"][h * c.d_head:(h + 1) * c.d_head].float()  # (d_head, d_model)
    sizes, reads = attribution.answers_through_head(run[f"layers.{l}.v"][kv], W_O_h, u)  # (T,), (T,)
    contribution = weights * sizes  # (T,)
    order = contribution.argsort(descending=True, stable=True).tolist()
    if run.T > LISTEN_ALL_MAX_T:
        order = order[:LISTEN_TOP]
    tokens = run.tokens
    listened = [Listened(j, tokens[j], float(weights[j]), float(sizes[j]), float(contribution[j]),
                         float(weights[j] * reads[j])) for j in order]
    q_norm = float(run[f"layers.{l}.q"][h, -1].norm())
    return HeadEffect(layer=l, head=h, kv_head=kv, logit_contribution=direct, silence_effect=effect,
                      silence_estimate=est, prob_silenced=prob, rank_by_contribution=rank, question_norm=q_norm,
                      listened=listened)


def _members(run, token: int, lp_t, silence_members, show: bool = False) -> tuple[list[MemberEffect], str]:
    T = run.T
    shares = attribution.member_shares(run, token)  # (T,)
    if silence_members == "all" or T <= silence_members:
        chosen, said = list(range(T)), f"all {T}"
    elif silence_members == 0:
        chosen, said = [], "none"
    else:
        chosen = sorted(shares.abs().argsort(descending=True, stable=True)[:silence_members].tolist())
        said = f"top {silence_members} of {T} by |direct share| (the others were not silenced)"
    with Progress(1, f"silencing {len(chosen)} members, layer by layer", show=show and bool(chosen)) as bar:
        lps = effects.member_log_probs(run.model, run.token_ids, token, chosen, effects.keys_and_values(run), bar)
    effect = {j: float(s - lp_t) for j, s in zip(chosen, lps)}
    prob = {j: float(s.exp()) for j, s in zip(chosen, lps)}
    ranks = {j: r + 1 for r, j in enumerate(sorted(effect, key=lambda j: -abs(effect[j])))}
    tokens = run.tokens
    return [MemberEffect(j, tokens[j], effect.get(j), prob.get(j), float(shares[j]), ranks.get(j))
            for j in range(T)], said
