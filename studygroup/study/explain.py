"""explain: which heads and which members decided the group's conclusion, with the numbers.

For a text of T members the group's conclusion is the predicted word t = argmax of the last
logits. Three measures say who decided it:

- a head's direct contribution: its write's share of the logit of t (`studygroup.study.attribution`);
- a head's silence effect: the change in log p(t) when its write is zeroed (`studygroup.study.effects`);
- a member's effect: the change in log p(t) when it is silenced.

One pipeline, two strategies for the silencing, chosen by length:

- `EveryQuestion` (up to LONG_T members): a member is silenced in every head for every question,
  a head at every position; the whole text is rerun (in batched passes). Past the budget, heads
  are chosen alternately by |silence_effect_last_position| and by a first-order estimate of the
  silence effect (one backward pass), members by |effect_last_question|.
- `LastQuestion` (past LONG_T): one bounded pass keeps the last member's row in every head and
  every member's keys and values; a silenced member (or head) is removed for the last member's
  questions only (at the last position only), and only that row is recomputed
  (`studygroup.study.last_question`).

Either way every head is silenced at the last position only and every member for the last
member's questions only (on a clean run): one row per copy over the kept keys and values, about
a generation step each, so no decisive head or member is left out at any length.

The result says what was done, in `heads_silenced`, `members_silenced` and `scope`.
"""
from __future__ import annotations

import math
from dataclasses import replace as with_fields

import torch

from studygroup.errors import InputError
from studygroup.model import estimate
from studygroup.model.interventions import Interventions
from studygroup.model.record import KEY_STEPS, Record
from studygroup.progress import Progress, say, shown
from studygroup.study import attribution, effects, explain_cost, last_question, story
from studygroup.model.ablation import ZERO
from studygroup.study import ablation as ablation_
from studygroup.study.last_sentence import last_sentence, last_sentence_start
from studygroup.study.roles import head_sinks
from studygroup.study.sinks import first_not_resting
from studygroup.study.text_ids import check_generated_from, checked_ids
from studygroup.study.ranking import as_heads, heads_largest_first, largest_first
from studygroup.study.results import (Analysis, Explanation, HeadEffect, Listened, LogitSum, MemberEffect,
                                      ModelInfo, Word, model_info, next_word, top_words)

#: What explain records: the last member's row everywhere, and every member's answer (v).
#: (Every member's keys, k, are recorded too: silencing a member reuses the rows before it.)
STEPS = (*attribution.NEEDED_STEPS, "weights", "v", "q")
#: Past this many members explain first says what it will need, and shows progress bars.
ANNOUNCE_PAST_T = 64
#: Up to this many members a head's listening lists them all; past it, the largest contributions.
LISTEN_ALL_MAX_T = 64
LISTEN_TOP = 32
#: Past this many members, explain takes the last-question strategy.
LONG_T = 512
#: Up to this many members explain measures every head exactly by default: the article's sentence,
#: where its own work is about 5 s warm on 2 cores (docs/performance.md, bench/explain_complete.py;
#: every head costs ~9 CPU-seconds at 10 members, ~11 at 12); past it, candidates in order until
#: STOP_AFTER heads in a row each move log p(t) by less than half the fifth-largest effect.
HEADS_ALL_MAX_T = 10
STOP_AFTER = 16
#: The stopping rule's bar: half the BAR_RANK-th largest |effect| measured.
BAR_RANK = 5
#: Up to this many members explain measures every member by default (every member costs ~1.8
#: CPU-seconds at 24 members, ~3.2 at 32); past it, the MEMBERS_TOP largest by |direct share|.
MEMBERS_ALL_MAX_T = 24
MEMBERS_TOP = 24
#: effect_in_head is measured for the first LISTENED_MEASURED members (by contribution) that each
#: of the HEADS_WITH_MEMBERS most decisive heads listened to.
HEADS_WITH_MEMBERS = 3
LISTENED_MEASURED = 5
#: Where a silenced member is removed, by strategy.
EVERY_QUESTION = "in every head"
LAST_QUESTIONS = "for the last member's questions only"
#: What the announcement calls the last-position measures of every head and member.
LAST_ROWS = "every head and member silenced at the last position only (one row each)"

__all__ = ["Analysis", "Explanation", "HeadEffect", "Listened", "LogitSum", "MemberEffect", "ModelInfo", "Word",
           "analyse", "explain"]


def explain(model, text, *, top: int = 10, measure_heads: int | str | None = None,
            measure_members: int | str | None = None, interventions: Interventions = Interventions(),
            word: int | None = None, generated_from: int | None = None, reuse: Explanation | None = None) -> Explanation:
    """Explain the next-word prediction for `text` (or token ids).

    top: how many next words to list. Every head is silenced at the last position only and every
    member for the last member's questions only (on a clean run; past LONG_T members, unless a
    number says how many). measure_heads: how many heads to measure exactly at every position (or
    "all"); None: every head where that fits the time budget (T <= HEADS_ALL_MAX_T), else candidates
    in order until STOP_AFTER in a row fall below half the fifth-largest effect. measure_members:
    measure every member in every head when T is at most this (or "all"), otherwise the members
    with the largest |effect_last_question|; None: every member up to MEMBERS_ALL_MAX_T, else
    MEMBERS_TOP. interventions: explain the run with its silenced members and heads (members in
    every head, heads at every position; up to LONG_T members); every measure is then taken on top
    of them. Its ablation says how each head and member measured is taken out
    (`studygroup.model.ablation`: zero, the default, zeroes a head's write and removes a member's
    keys; mean or resample replace a head's output and a member's key and value projections; either
    of those with nothing silenced); members in one head only (effect_in_head) are silenced.
    word: the id of the next word to explain (a generated word, sampled or not); None: the most
    likely one. generated_from: with text the ids of a prompt and of words generated after it, the
    index of the first generated member (len(prompt ids)), kept in the result; None: a plain text.
    reuse: an explanation of the same members, word and silencing, by zero ablation: the heads it
    measured at every position are taken from it, not measured again (measure_heads="all" after
    the default: the page's complete ranking); ValueError where it is another's.

    >>> e = explain(model, "Cash or credit card? I have a lot")
    >>> e.predicted.token, e.members[-1].token
    ('␣of', '␣lot')
    """
    return analyse(model, text, top=top, measure_heads=measure_heads, measure_members=measure_members,
                   interventions=interventions, word=word, generated_from=generated_from, reuse=reuse).explanation


def analyse(model, text, *, top: int = 10, measure_heads: int | str | None = None,
            measure_members: int | str | None = None, interventions: Interventions = Interventions(),
            word: int | None = None, generated_from: int | None = None, reuse: Explanation | None = None) -> Analysis:
    """explain(), keeping the run: one recorded pass, then the strategy's silencing passes."""
    _check_count("top", top, allow_all=False)
    _check_count("measure_heads", measure_heads)
    _check_count("measure_members", measure_members)
    ids = checked_ids(model, text)
    check_generated_from(generated_from, len(ids))
    ablation = interventions.ablation
    chosen = with_fields(interventions.checked(model, len(ids)), ablation=ZERO)  # what the explained run silences
    if chosen != Interventions() and len(ids) > LONG_T:
        raise InputError(f"explain silences members or heads in texts of up to {LONG_T} members; this one has "
                         f"{len(ids)}: shorten it, or explain it without --silence-member/--silence-head")
    if chosen != Interventions() and ablation.kind != "zero":
        raise InputError(f"{ablation.kind} ablation measures the heads of the run as it is: give no "
                         "--silence-member/--silence-head with it (in a request: an empty silence)")
    strategy = (LastQuestion if len(ids) > LONG_T else EveryQuestion)(model, ids, chosen)
    strategy.values, strategy.ablation = ablation.values(model, list(ids)), ablation
    strategy.taken_out = "silenced" if ablation.kind == "zero" else f"taken out ({story.TAKEN_OUT[ablation.kind]})"
    strategy.member_taken_out = "silenced" if ablation.kind == "zero" else f"taken out ({story.MEMBER_TAKEN_OUT[ablation.kind]})"
    strategy.known = {} if reuse is None else measured_before(reuse, list(ids), chosen, ablation.kind)
    strategy.announce(measure_heads, measure_members)
    found = strategy.sinks()  # before the base run: its pass never runs beside the base run's keys and values
    run, estimate = strategy.base_run()
    lp = effects.log_probs(run.last_logits)  # (vocab,)
    token = int(lp.argmax()) if word is None else model.ids([word])[0]
    parts = attribution.direct_contributions(run, token)
    words = top_words(run, lp, top)
    predicted = next((w for w in words if w.id == token), None) or next_word(run, lp, token)
    if reuse is not None and reuse.predicted.id != token:
        raise ValueError("reuse: an explanation of another word")
    heads, heads_said = strategy.heads(run, token, lp[token], parts.heads, estimate, measure_heads)
    members, members_said = strategy.members(run, token, lp[token], measure_members)
    _mark_sinks(heads, found)
    missed = _estimate_missed_by(heads)
    e = Explanation(text=text if isinstance(text, str) else None, tokens=run.tokens, token_ids=list(ids),
                    predicted=predicted, top=words, heads=heads, heads_silenced=heads_said, members=members,
                    members_silenced=members_said, heads_measured=_measured([h.silence_effect for h in heads],
                                                                            [h.silence_effect_last_position for h in heads]),
                    members_measured=_measured([m.effect for m in members], [m.effect_last_question for m in members]),
                    estimate_missed_by=missed,
                    logit_parts=_logit_sum(parts), contributions=parts.heads.tolist(),
                    mlp_contributions=parts.mlps.tolist(),
                    silence_estimates=[] if estimate is None else estimate.tolist(),
                    model=model_info(model), scope=strategy.scope, generated_from=generated_from,
                    ablation=ablation.kind, first_head=first_not_resting(heads), **chosen.silenced())
    e.runner_up, e.logit_gap = _against_runner_up(run, lp, token, parts)
    if chosen == Interventions():  # the last sentence alone is a clean run: compared with the clean run only
        e.last_sentence = last_sentence(model, list(ids), run.tokens, token)
    e.story_parts = story.explain_parts(e, norm_after_attention="post_attn_norm" in model.config.arch.layer_names)
    e.story = story.joined(e.story_parts)
    return Analysis(e, run)


class EveryQuestion:
    """Silencing for every question: a pass with a gradient, then the whole text rerun in batches.
    The last-question measures come too (one row per copy: cheap)."""

    scope = EVERY_QUESTION

    def __init__(self, model, ids: list[int], chosen: Interventions = Interventions()):
        self.model, self.ids, self.chosen = model, ids, chosen  # chosen: what the explained run silences
        self.values = None  # what a head's output becomes when it is taken out (None: its write zeroed)
        self.taken_out = "silenced"  # how a head is taken out, in words
        self.ablation, self.member_taken_out = ZERO, "silenced"  # how a member is taken out, and in words
        self.show = len(ids) > ANNOUNCE_PAST_T  # long enough to say what it will need, and show progress
        self.known: dict[tuple[int, int], float] = {}  # {(layer, head): silence_effect} measured already (explain's reuse)

    def announce(self, measure_heads, measure_members, stream=None) -> None:
        """Print, before the work starts, what explaining these members will need: its memory, and
        its time at this machine's speed now (`estimate.speed`)."""
        if not self.show or not shown():  # the speed probe only feeds the message
            return
        c, T = self.model.config, len(self.ids)
        heads, members, work, further = self.expected(measure_heads, measure_members)
        speed = estimate.speed(self.model, T)
        need = f"about {self.memory(heads, members) / 2**30:.1f} GiB and {estimate.duration(work.seconds(speed, c, T))}"
        if further is not None:  # the stopping rule
            say(f"explaining {T} members: {need} with the first {heads} heads, "
                f"{estimate.duration(further.seconds(speed, c, T))} more for each further {STOP_AFTER} "
                f"(a pass for the heads' sinks, a pass with a gradient, {LAST_ROWS}, then heads "
                f"silenced exactly in candidate order until {STOP_AFTER} in a row are small, and {members} "
                f"members, in batched passes)", stream)
            return
        known = f" ({len(self.known)} measured already)" if self.known else ""
        say(f"explaining {T} members: {need} (a pass for the heads' sinks, a pass with a gradient, {LAST_ROWS}, then {heads} heads"
            f"{known} and {members} members silenced exactly, in batched passes)", stream)

    def memory(self, heads: int, members: int) -> int:
        """Before the run: its peak memory in bytes (`estimate.explain_bytes`) with `heads` heads and
        `members` members measured exactly: its largest batched pass (those, or the in-head copies),
        what its run records, and on a clean run every head's one-row copy at the last position."""
        c, T = self.model.config, len(self.ids)
        clean = self.chosen == Interventions()
        cells = HEADS_WITH_MEMBERS * (LISTENED_MEASURED + 1) if clean else 0
        last = c.n_layers * c.n_heads if clean else 0
        return estimate.explain_bytes(c, T, max(heads + members, cells), effects.ROWS_PER_PASS,
                                      estimate.loaded_bytes(self.model), checkpointed=bool(self.model.w.kept),
                                      recorded=estimate.recording_bytes(c, T, recording(T)), last_copies=last,
                                      log_prob_rows=min(effects.LOG_PROB_ROWS, last))

    def expected(self, measure_heads, measure_members) -> tuple[int, int, explain_cost.Work, explain_cost.Work | None]:
        """Before the run: how many heads and members it measures exactly (under the stopping rule,
        the least: BAR_RANK heads above the bar, then STOP_AFTER below it), its work, and under the
        stopping rule the work of each further STOP_AFTER heads (else None)."""
        c, T = self.model.config, len(self.ids)
        heads, members = _count(measure_heads, c.n_layers * c.n_heads, T), _members_count(measure_members, T)
        rule = measure_heads is None and T > HEADS_ALL_MAX_T
        heads = min(BAR_RANK + STOP_AFTER, c.n_layers * c.n_heads) if rule else heads
        heads -= len(self.known) if measure_heads == "all" else 0  # measured already (explain's reuse)
        cells = HEADS_WITH_MEMBERS * (LISTENED_MEASURED + 1) if self.chosen == Interventions() else 0
        work = self.work(heads, members, cells, sentence_rows(self.model, self.ids, self.chosen))
        further = self.work(STOP_AFTER, 0, 0, 0).text - self.work(0, 0, 0, 0).text
        return heads, members, work, explain_cost.Work(text=further) if rule else None

    def work(self, heads: int, members: int, cells: int, sentence: int) -> explain_cost.Work:
        """The work of this explain with `heads` heads and `members` members measured exactly and
        `cells` in-head copies, as expected before the run: the heads at the middle layer, the
        members spread evenly over the text (the last of them included), the in-head copies over
        every row (their members are known only after the run: at most that), `sentence` rows of
        the last sentence alone."""
        c, T = self.model.config, len(self.ids)
        middle = (c.n_layers - 1) / 2
        spread = [T - 1 - round(i * (T - 1) / max(members, 1)) for i in range(members)]
        return explain_cost.every_question(c, T, [middle] * heads, [(middle, 0)] * cells, spread, sentence,
                                           clean=self.chosen == Interventions())

    def sinks(self):
        """Every head's sinks (roles.head_sinks), a pass and each layer's rows advancing a bar."""
        return _sinks(self.model, self.ids, self.show)

    def base_run(self):
        """The recorded run and the first-order silence estimate of every head, (n_layers, n_heads)."""
        with Progress(2 * self.model.config.n_layers, "a pass with a gradient, forward then backward",
                      show=self.show) as bar:
            return effects.gradient_run(self.model, self.ids, recording(len(self.ids)), on_layer=bar.advance,
                                        interventions=self.chosen)

    def heads(self, run, token: int, lp_t, direct, estimate, measure_heads) -> tuple[list[HeadEffect], str]:
        c = run.model.config
        resid_pre = {l: run["resid_pre", l] for l in range(c.n_layers)} if ("resid_pre", 0) in run else None
        clean = self.chosen == Interventions()  # the last-position and in-head measures reuse the clean run
        with Progress(1, f"silencing every head at the last position, layer by layer", show=self.show and clean) as bar:
            last = every_head_last_position(run, token, bar, self.values) if clean else {}  # {(layer, head): log p(t)}
        order = candidates(direct if not last else _grid(last, c) - float(lp_t), estimate, c.n_layers * c.n_heads)

        @_known_taken(self.known, lp_t)
        def measure(chosen, bar=None):
            if not clean:  # on top of the explained run's silencing
                added = [Interventions(silenced_heads=frozenset({p})) for p in chosen]
                return effects.added_log_probs(run.model, run.token_ids, token, self.chosen, added, bar)  # (n,)
            return effects.head_log_probs(run.model, run.token_ids, token, chosen, resid_pre, bar, values=self.values)  # (n,)
        n = _count(measure_heads, c.n_layers * c.n_heads, run.T)
        label = (f"silencing {n} heads" if measure_heads is not None or run.T <= HEADS_ALL_MAX_T else
                 f"silencing candidate heads until {STOP_AFTER} in a row are small")
        label += f" ({len(self.known)} measured already)" if self.known else ""
        with Progress(1, label + ", layer by layer", show=self.show and n > 0) as bar:
            chosen, lps = measured_heads(order, measure_heads, run.T, lp_t, lambda h: measure(h, bar))
        out = _head_effects(run, token, lp_t, direct, dict(zip(chosen, lps)), last, estimate)
        if clean:
            with Progress(1, "silencing members in the most decisive heads only, layer by layer", show=self.show and bool(out)) as bar:
                _measure_in_head(run, token, lp_t, out[:HEADS_WITH_MEMBERS], resid_pre, bar)
        first = "|silence_effect_last_position|" if last else "|direct contribution|"
        how = f"alternately by {first} and by |first-order estimate of the silence effect|"
        return out, _heads_said(len(chosen), c.n_layers * c.n_heads, measure_heads, how, "at every position",
                                _estimate_missed_by(out), bool(last), self.taken_out)

    def members(self, run, token: int, lp_t, measure_members) -> tuple[list[MemberEffect], str]:
        T = run.T
        shares = attribution.member_shares(run, token)  # (T,)
        clean = self.chosen == Interventions()
        n = _members_count(measure_members, T)
        if self.ablation.kind != "zero":  # every member taken out both ways by the ablation (on a clean run)
            _, last = ablation_.member_log_probs(run.model, run, token, self.ablation, last=range(T))  # (T,)
            chosen = list(range(T)) if n == T else sorted(largest_first(last - float(lp_t))[:n])
            lps, _ = ablation_.member_log_probs(run.model, run, token, self.ablation, every=chosen)
            said = _members_said(n, T, "|effect_last_question|", "taken out", how=story.MEMBER_TAKEN_OUT[self.ablation.kind])
            return _member_effects(run, lp_t, shares, dict(zip(chosen, lps.tolist())), dict(enumerate(last.tolist()))), said
        with Progress(T, f"silencing each of the {T} members for the last question", show=self.show and clean) as bar:
            last = every_member_last_question(run, token, bar) if clean else {}  # {member: log p(t)}
        ranking = shares if not last else torch.tensor([last[j] for j in range(T)]) - float(lp_t)  # (T,)
        chosen = list(range(T)) if n == T else sorted(largest_first(ranking)[:n])
        said = _members_said(n, T, "|effect_last_question|" if last else "|direct share|", "silenced", bool(last))
        with Progress(1, f"silencing {len(chosen)} members, layer by layer", show=self.show and bool(chosen)) as bar:
            if clean:
                lps = effects.member_log_probs(run.model, run.token_ids, token, chosen, effects.keys_and_values(run), bar)
            else:  # on top of the explained run's silencing
                added = [Interventions(silenced_members=(j,)) for j in chosen]
                lps = effects.added_log_probs(run.model, run.token_ids, token, self.chosen, added, bar)
        return _member_effects(run, lp_t, shares, dict(zip(chosen, lps)), last), said


def _members_said(n: int, T: int, by: str, verb: str, last_too: bool = True, how: str = "") -> str:
    """How many members were measured at every question, `verb` ("silenced", "taken out") each, and
    `how` a member is taken out, in words (none: silenced)."""
    said = ("none" if n == 0 else f"all {T}" if n == T else f"top {n} of {T} by {by} (the others were not "
            f"{verb} in every head)") + ("" if n == 0 else f", each {verb} {EVERY_QUESTION}")
    said += "" if not last_too or n == T else f"; all {T} {verb} {LAST_QUESTIONS}"
    return said + (f"; taken out: {how}" if how else "")


def every_head_last_position(run, token: int, bar=None, values=None) -> dict[tuple[int, int], float]:
    """log p(t) with each head of the model silenced at the last position only, every head exactly:
    {(layer, head): log p(t)}. One row per copy joins the pass at its head's layer, over the run's
    keys and values (`effects.last_position_head_log_probs`). values: as `effects.head_log_probs`
    takes them (None: the write zeroed)."""
    c = run.model.config
    heads = [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
    return dict(zip(heads, effects.last_position_head_log_probs(run.model, run, token, heads, bar, values).tolist()))


def every_member_last_question(run, token: int, bar=None) -> dict[int, float]:
    """log p(t) with each member silenced for the last member's questions only, every member
    exactly: {member: log p(t)}, one row per copy over the run's keys and values."""
    groups = [[j] for j in range(run.T)]
    advance = None if bar is None else bar.advance
    return dict(enumerate(last_question.silenced_members_logits(run.model, run, groups, token, advance).tolist()))


def _grid(per_head: dict[tuple[int, int], float], config) -> torch.Tensor:
    """{(layer, head): value} for every head -> (n_layers, n_heads) float64."""
    return torch.tensor([[per_head[l, h] for h in range(config.n_heads)] for l in range(config.n_layers)],
                        dtype=torch.float64)


class LastQuestion:
    """Silencing for the last member's questions only: one bounded pass, then one row per copy."""

    scope = LAST_QUESTIONS

    def __init__(self, model, ids: list[int], chosen: Interventions = Interventions()):
        self.model, self.ids = model, ids
        self.values = None  # what a head's output becomes when it is taken out (None: its write zeroed)
        self.taken_out = "silenced"  # how a head is taken out, in words
        self.ablation, self.member_taken_out = ZERO, "silenced"  # how a member is taken out, and in words

    def announce(self, measure_heads, measure_members, stream=None) -> None:
        """Print what the run will need before a large run starts: its memory, and its time at this
        machine's speed now (`estimate.speed`)."""
        if not shown():  # the speed probe only feeds the message
            return
        c, T = self.model.config, len(self.ids)
        heads, members, work, _ = self.expected(measure_heads, measure_members)
        need = (f"about {estimate.forward(c, T, keep_kv=True, weights=estimate.loaded_bytes(self.model)).bytes / 2**30:.1f} GiB and "
                f"{estimate.duration(work.seconds(estimate.speed(self.model, T), c, T))}")
        say(f"explaining {T} members: {need} (a pass for the heads' sinks, one keeping every member's keys and "
            f"values, then one row for each of {heads} silenced heads and {members} silenced members)", stream)

    def expected(self, measure_heads, measure_members) -> tuple[int, int, explain_cost.Work, None]:
        """Before the run: how many heads and members it silences at the last position, and its work
        (the heads at the mean layer of those chosen by |direct contribution|: unknown yet)."""
        c, T = self.model.config, len(self.ids)
        heads, members = _last_count(measure_heads, c.n_layers * c.n_heads), _last_count(measure_members, T)
        middle = (c.n_layers - 1) / 2
        work = explain_cost.last_question(c, T, [middle] * heads, members, sentence_rows(self.model, self.ids))
        return heads, members, work, None

    def sinks(self):
        """Every head's sinks (roles.head_sinks), a pass and each layer's rows advancing a bar."""
        return _sinks(self.model, self.ids, True)

    def base_run(self):
        """One pass keeping the last member's row of STEPS (and of resid_pre, where a head's silenced
        copy joins) and every member's keys and values; no estimate."""
        record = Record(steps=(*STEPS, *last_question.STEPS, "resid_pre"), rows="last")
        with Progress(self.model.config.n_layers, "forward pass, layer by layer") as bar:
            return self.model.run(self.ids, record=record, on_layer=bar.advance), None

    def heads(self, run, token: int, lp_t, direct, estimate, measure_heads) -> tuple[list[HeadEffect], str]:
        """Every head (by default) silenced at the last position only; with a number, the heads
        with the largest |direct contribution|."""
        c = run.model.config
        total = c.n_layers * c.n_heads
        chosen = heads_largest_first(direct)[:_last_count(measure_heads, total)]
        with Progress(1, f"silencing {len(chosen)} heads at the last position, layer by layer") as bar:
            lps = effects.last_position_head_log_probs(run.model, run, token, chosen, bar, self.values) if chosen else []
        out = _head_effects(run, token, lp_t, direct, {}, dict(zip(chosen, [float(x) for x in lps])), None)
        return out, _heads_said(len(chosen), total, measure_heads, "by |direct contribution|",
                                "at the last position only", None, taken_out=self.taken_out)

    def members(self, run, token: int, lp_t, measure_members) -> tuple[list[MemberEffect], str]:
        """Every member (by default) silenced for the last member's questions only; with a number,
        the members with the largest |direct share|."""
        T = run.T
        shares = attribution.member_shares(run, token)  # (T,)
        n = _last_count(measure_members, T)
        chosen = sorted(largest_first(shares)[:n])
        if self.ablation.kind != "zero":
            lps = ablation_.member_log_probs(run.model, run, token, self.ablation, last=chosen)[1].tolist()
        else:
            with Progress(n, f"silencing {n} members for the last questions") as bar:
                groups = [[j] for j in chosen]
                lps = last_question.silenced_members_logits(run.model, run, groups, token, bar.advance) if n else []
        said = ("none" if n == 0 else f"{'all' if n == T else f'top {n} of'} {T}" + ("" if n == T else " by |direct share|")
                + f", each {self.member_taken_out} {LAST_QUESTIONS} (every member's keys and values reused)")
        return _member_effects(run, lp_t, shares, {}, dict(zip(chosen, [float(x) for x in lps]))), said


def sentence_rows(model, ids: list[int], chosen: Interventions = Interventions()) -> int:
    """Rows of the last sentence's own pass (`last_sentence`: a BOS and the last sentence's
    members); 0 where none is made (one sentence, or a run with something silenced)."""
    if chosen != Interventions():
        return 0
    tok = model.tokenizer
    bos = 1 if tok.add_bos and ids and ids[0] == tok.bos_id else 0
    start = last_sentence_start([tok.readable(i) for i in ids], bos)
    return 0 if start is None else bos + len(ids) - start


def _last_count(n: int | str | None, total: int) -> int:
    """How many of `total` heads or members a setting measures at the last position (None: all)."""
    return total if n is None or n == "all" else min(n, total)


def measured_heads(order: list[tuple[int, int]], setting, T: int, lp_t, measure) -> tuple[list, torch.Tensor]:
    """The heads to measure exactly, in candidate `order`, and their log p(t) once silenced.

    setting: a number or "all" (that many of `order`); None: all of them up to HEADS_ALL_MAX_T
    members, else in order until the first head where STOP_AFTER heads in a row have each moved
    log p(t) by less than half the fifth-largest |effect| measured. measure(heads) -> (len(heads),) log p(t).

    The heads are measured in batched passes, each as large as it can be without passing that
    head: after a run of q small effects the rule holds STOP_AFTER - q heads later at the soonest
    (a head above the fifth-largest effect raises the bar but is no small effect itself, so the run
    only grows by a small head or starts again after a large one).
    """
    if setting is not None or T <= HEADS_ALL_MAX_T:
        chosen = order[:_count(setting, len(order), T)]
        return chosen, measure(chosen) if chosen else torch.empty(0, dtype=torch.float64)
    chosen, lps, quiet = [], [], 0
    while len(chosen) < len(order) and quiet < STOP_AFTER:
        batch = order[len(chosen):len(chosen) + STOP_AFTER - quiet]
        chosen += batch
        lps += [float(x) for x in measure(batch)]
        quiet = quiet_run(torch.tensor(lps, dtype=torch.float64) - float(lp_t))
    return chosen, torch.tensor(lps, dtype=torch.float64)


def measured_before(e: Explanation, ids: list[int], chosen: Interventions, ablation: str) -> dict[tuple[int, int], float]:
    """{(layer, head): silence_effect} of the heads `e` measured at every position, where e explains
    these members with `chosen` silenced, by zero ablation, in every head (ValueError otherwise;
    its word is checked once the run has one)."""
    silenced = chosen.silenced()
    same = (e.token_ids == ids and e.ablation == ablation == ZERO.kind and e.silenced_members == silenced["silenced_members"]
            and e.silenced_heads == silenced["silenced_heads"])
    if not same:
        raise ValueError("reuse: an explanation of other members, silencing or ablation")
    return {(h.layer, h.head): h.silence_effect for h in e.heads if h.silence_effect is not None}


def _known_taken(known: dict[tuple[int, int], float], lp_t):
    """A measure(heads, bar) -> (len(heads),) log p(t) that measures only the heads whose effect
    on log p(t) = lp_t is not `known` already."""
    def wrap(measure):
        def taken(chosen, bar=None):
            new = [p for p in chosen if p not in known]
            lps = dict(zip(new, measure(new, bar).tolist())) if new else {}
            return torch.tensor([float(lp_t) + known[p] if p in known else lps[p] for p in chosen], dtype=torch.float64)
        return taken
    return wrap


def quiet_run(effects_in_order: torch.Tensor) -> int:
    """How many of the last effects in a row are each below half the fifth-largest |effect|.

    >>> quiet_run(torch.tensor([-1.0, 0.9, 0.8, 0.7, 0.6, 0.1, -0.2, 0.5]))
    0
    >>> quiet_run(torch.tensor([-1.0, 0.9, 0.8, 0.7, 0.6, 0.1, -0.2, 0.25]))
    3
    """
    size = effects_in_order.abs()
    if len(size) < BAR_RANK:
        return 0
    below = (size < size.sort(descending=True).values[BAR_RANK - 1] / 2).tolist()
    run = 0
    for b in reversed(below):
        if not b:
            break
        run += 1
    return run


def _heads_said(n: int, total: int, setting, how: str, where: str, missed: float | None,
                last_too: bool = False, taken_out: str = "silenced") -> str:
    """Which heads were measured, how, and what is known of the rest, in words. last_too: every head
    was also silenced at the last position only. taken_out: how each head was taken out."""
    also = f"; all {total} {taken_out} at the last position only" if last_too and n < total else ""
    if n == 0:
        return "none" + (f" {where}" if also else "") + also
    if n == total:
        return f"all {total}, each {taken_out} {where}"
    chose = (f"candidates in order ({how}) until {STOP_AFTER} in a row were each below half the fifth-largest effect"
             if setting is None else f"the top {n} candidates ({how})")
    known = ("" if missed is None else f"; the first-order estimate missed by up to {missed:.3g} on the heads it was "
             f"checked against")
    rest = "" if also else ", so an untested head may still matter"
    return f"{n} of {total} heads measured exactly, each {taken_out} {where}: {chose}{known}{rest}{also}"


def _measured(every: list, last: list) -> int:
    """How many were measured by the measure they are ranked by: every position (every question)
    where any was, else the last position (the last question)."""
    n = sum(x is not None for x in every)
    return n if n else sum(x is not None for x in last)


def _estimate_missed_by(heads: list[HeadEffect]) -> float | None:
    """The largest |silence_estimate - silence_effect| over the heads that have both (None: none has)."""
    gaps = [abs(h.silence_estimate - h.silence_effect) for h in heads
            if h.silence_estimate is not None and h.silence_effect is not None]
    return max(gaps) if gaps else None


def _measure_in_head(run, token: int, lp_t, heads: list[HeadEffect], resid_pre, bar=None) -> None:
    """Fill effect_in_head for the first LISTENED_MEASURED members each of `heads` listened to, and
    member 0 (the commonest sink); then list those measured first, largest |effect_in_head| first.
    bar: a Progress advanced after each layer of each pass."""
    cells = [(h, x) for h in heads for x in h.listened if x in h.listened[:LISTENED_MEASURED] or x.index == 0]
    silenced = [(h.layer, h.head, x.index) for h, x in cells]
    lps = effects.member_in_head_log_probs(run.model, run.token_ids, token, silenced, resid_pre, bar,
                                           kv=effects.keys_and_values(run))  # (n,)
    for (_, x), s in zip(cells, lps):
        x.effect_in_head = float(s - lp_t)
    for h in heads:
        h.listened.sort(key=lambda x: (x.effect_in_head is None, -abs(x.effect_in_head or 0.0)))  # stable


def _sinks(model, ids: list[int], show: bool):
    """roles.head_sinks with its pass and its rows advancing one bar (2 · n_layers steps)."""
    with Progress(2 * model.config.n_layers, "finding every head's attention sinks, layer by layer", show=show) as bar:
        return head_sinks(model, ids, bar.advance)


def _mark_sinks(heads: list[HeadEffect], found) -> None:
    """Each head's sinks, the last question's weight on them, its roles, and is_sink on what it listened to."""
    for h in heads:
        s = found[h.layer, h.head]
        h.sinks, h.sink_weight, h.roles = s.sinks, s.sink_weight, s.roles
        for x in h.listened:
            x.is_sink = x.index in s.sinks


def _count(n: int | str | None, total: int, T: int) -> int:
    """How many of `total` heads a measure_heads setting measures (None: all where affordable, else
    at least STOP_AFTER)."""
    if n is None:
        return total if T <= HEADS_ALL_MAX_T else min(STOP_AFTER, total)
    return total if n == "all" else min(n, total)


def _members_count(n: int | str | None, T: int) -> int:
    """How many of T members a measure_members setting measures: all when T is at most n."""
    n = (T if T <= MEMBERS_ALL_MAX_T else MEMBERS_TOP) if n is None else n
    return T if n == "all" or T <= n else n


def recording(T: int) -> Record:
    """What explain records for T members: the last member's row (all that its analysis reads),
    and every member's keys, values and residual stream entering each layer (head silencing
    resumes from it instead of running the text again; member silencing reuses the rows before
    each member). Every row of every step (270 T×T maps) made the pass with a gradient 15-25%
    slower at T=10, for nothing read."""
    return Record(steps=(*STEPS, "k", "resid_pre"), rows="last", full_rows=KEY_STEPS | {"resid_pre"})


def _check_count(name: str, value, allow_all: bool = True) -> None:
    if allow_all and (value == "all" or value is None):
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "top" else 0):
        least = 1 if name == "top" else 0
        raise InputError(f"{name} must be a whole number of at least {least}" + (' or "all"' if allow_all else "")
                         + f"; got {value!r}")


def _logit_sum(p: attribution.LogitParts) -> LogitSum:
    return LogitSum(p.logit, p.embed, float(p.heads.double().sum()), float(p.mlps.double().sum()), p.total,
                    p.position, p.biases)


def _against_runner_up(run, lp: torch.Tensor, token: int, parts: attribution.LogitParts):
    """The most likely word other than `token` (lp (vocab,) log-probabilities), and the parts of the
    gap between their logits; (None, None) for a vocabulary of one word."""
    if lp.shape[-1] < 2:
        return None, None
    rival = int(lp.index_fill(0, torch.tensor([token], device=lp.device), float("-inf")).argmax())
    return next_word(run, lp, rival), _logit_sum(attribution.gap(parts, attribution.direct_contributions(run, rival)))


def candidates(direct: torch.Tensor, estimate: torch.Tensor, n: int) -> list[tuple[int, int]]:
    """n heads taken alternately from the |direct| and |estimate| rankings, without repeats.

    direct, estimate: (n_layers, n_heads) -> [(layer, head)].

    >>> candidates(torch.tensor([[3.0, 0.0], [1.0, 0.0]]), torch.tensor([[0.0, 0.0], [0.0, 9.0]]), 2)
    [(0, 0), (1, 1)]
    """
    chosen: list[int] = []
    for pair in zip(largest_first(direct), largest_first(estimate)):
        for i in pair:
            if len(chosen) < n and i not in chosen:
                chosen.append(i)
    return as_heads(chosen, direct.shape[1])


def _head_effects(run, token: int, lp_t, direct, every: dict, last: dict, estimate) -> list[HeadEffect]:
    """The heads measured, from their silenced log-probabilities: every {(layer, head): log p(t)}
    silenced at every position, last {(layer, head): log p(t)} at the last position only. Those
    measured at every position first, most decisive first; then the others by their last-position effect."""
    H = run.model.config.n_heads
    rank = {i: r + 1 for r, i in enumerate(largest_first(direct))}
    u = attribution.direction_for(run, token)
    lp = float(lp_t)
    out = [_head_effect(run, l, h, u, float(direct[l, h]), _minus(every.get((l, h)), lp), _minus(last.get((l, h)), lp),
                        None if (l, h) not in every else math.exp(float(every[l, h])),
                        None if estimate is None else float(estimate[l, h]), rank[l * H + h])
           for l, h in [*every, *(p for p in last if p not in every)]]
    out.sort(key=lambda e: (e.silence_effect is None, -abs(e.shown_effect)))
    return out


def _minus(lp: float | None, lp_t: float) -> float | None:
    """lp - lp_t: an effect on log p(t), or None where not measured."""
    return None if lp is None else float(lp) - lp_t


def _head_effect(run, l: int, h: int, u, direct: float, effect, effect_last, prob, est, rank: int) -> HeadEffect:
    c = run.model.config
    kv = c.kv_head_of(h)
    weights = run["weights", l][h, -1].float()  # (T,)
    sizes, reads = attribution.answers_through_head(run["v", l][kv], run.model.W_O_head(l, h).float(), u)  # (T,), (T,)
    contribution = weights * sizes  # (T,)
    order = contribution.argsort(descending=True, stable=True).tolist()
    if run.T > LISTEN_ALL_MAX_T:
        order = order[:LISTEN_TOP]
    tokens = run.tokens
    listened = [Listened(j, tokens[j], float(weights[j]), float(sizes[j]), float(contribution[j]),
                         float(weights[j] * reads[j])) for j in order]
    q_norm = float(run["q", l][h, -1].norm())
    return HeadEffect(layer=l, head=h, kv_head=kv, logit_contribution=direct, silence_effect=effect,
                      silence_effect_last_position=effect_last, silence_estimate=est, prob_silenced=prob, rank_by_contribution=rank, question_norm=q_norm,
                      listened=listened)


def _member_effects(run, lp_t, shares: torch.Tensor, every: dict, last: dict) -> list[MemberEffect]:
    """Every member in reading order, with the effects of those silenced and their rank. every
    {member: log p(t)} silenced for every question; last {member: log p(t)} for the last member's
    questions only. Ranked by effect where any was measured, else by effect_last_question."""
    lp = float(lp_t)
    effect = {j: float(s) - lp for j, s in every.items()}
    shown = effect if every else {j: float(s) - lp for j, s in last.items()}
    ranks = {j: r + 1 for r, j in enumerate(sorted(shown, key=lambda j: -abs(shown[j])))}
    tokens = run.tokens
    return [MemberEffect(j, tokens[j], effect.get(j), _minus(last.get(j), lp),
                         None if j not in every else math.exp(float(every[j])), float(shares[j]), ranks.get(j))
            for j in range(run.T)]
