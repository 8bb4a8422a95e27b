"""The few plain sentences that tell a result's story in the article's terms, with its real numbers.

Templates filled from an Explanation or a Comparison: every name and number comes from the
result; nothing is claimed that the result does not hold.
"""
from __future__ import annotations

import math


def percent(p: float) -> str:
    """Probabilities as percentages: one decimal under 10%, none above (see UI.md).

    >>> percent(0.9526), percent(0.0171), percent(0.0004)
    ('95%', '1.7%', '0.0%')
    """
    return f"{100 * p:.1f}%" if p < 0.1 else f"{100 * p:.0f}%"


def signed(x: float, digits: int) -> str:
    """x with its sign, never "-0.00": a value that rounds to zero reads "+0.00".

    >>> signed(-0.0004, 2), signed(-0.25, 2), signed(1.5, 1)
    ('+0.00', '-0.25', '+1.5')
    """
    text = f"{x:+.{digits}f}"
    return "+" + text[1:] if text.startswith("-") and float(text) == 0 else text


def quote(token: str) -> str:
    """A member or word in quotes, readable form (␣ for a leading space)."""
    return f"“{token}”"


def clipped(text: str, n: int = 40) -> str:
    """text in quotes, cut to n characters with an ellipsis.

    >>> clipped("Cash or credit card? I have a lot", 12)
    '“Cash or cre…”'
    """
    return quote(text if len(text) <= n else text[:n - 1] + "…")


def brief(result, what: str, more: str) -> str:
    """A result's repr: its kind, what it found in a few words, and where the rest is.

    >>> brief(3.5, "of nothing", ".real")
    '<float of nothing; .real>'
    """
    return f"<{type(result).__name__} {what}; {more}>"


def members_line(tokens: list[str]) -> str:
    """The members in one sentence: every one up to 20, else the first and the last five.

    >>> members_line(["C", "ash", "␣or"])
    'The 3 members are “C”, “ash”, “␣or”.'
    """
    if len(tokens) == 1:
        return f"The only member is {quote(tokens[0])}."
    if len(tokens) <= 20:
        return f"The {len(tokens)} members are " + ", ".join(quote(t) for t in tokens) + "."
    head, tail = ", ".join(quote(t) for t in tokens[:5]), ", ".join(quote(t) for t in tokens[-5:])
    return f"The {len(tokens)} members run from {head} … to {tail}."


def _moves(what: str, p0: float, p1: float) -> str:
    """How a probability p0 -> p1 reads; "leaves … at" when both print the same (not "lowers it
    from 92% to 92%").

    >>> _moves("the probability of “␣of”", 0.96, 0.73), _moves("its probability", 0.9204, 0.9198)
    ('lowers the probability of “␣of” from 96% to 73%', 'leaves its probability at 92%')
    """
    if percent(p0) == percent(p1):
        return f"leaves {what} at {percent(p0)}"
    return f"{'lowers' if p1 < p0 else 'raises'} {what} from {percent(p0)} to {percent(p1)}"


def _conclusion(e) -> str:
    others = [f"{quote(w.token)} ({percent(w.prob)})" for w in e.top[1:3]]
    ahead = f", ahead of {' and '.join(others)}" if others else ""
    return f"The group concludes that the next word is {quote(e.predicted.token)} ({percent(e.predicted.prob)}){ahead}."


def _head_measure(e) -> tuple[str, str]:
    """(the field the heads are ranked by, how it silences), for the story's sentences."""
    if e.heads and e.heads[0].silence_effect is None:
        return "silence_effect_last_position", " at the last position only"
    return "silence_effect", " at every position"


def _decisive_head(e) -> list[str]:
    if not e.heads:
        return []
    h, w = e.heads[0], e.predicted
    name, where = _head_measure(e)
    total = e.model.n_layers * e.model.n_heads
    which = "of all heads" if e.heads_measured == total else "of the heads measured"
    lines = [_coverage(e),
             f"The most decisive head {which} is head {h.head} of layer {h.layer}: silencing it{where} "
             f"{_moves(f'the probability of {quote(w.token)}', w.prob, _silenced_prob(w.prob, h.shown_effect))} "
             f"({name} {signed(h.shown_effect, 3)}), and its write "
             f"adds {signed(h.logit_contribution, 2)} directly to that word's logit ({e.logit_parts.logit:.2f} in all)."]
    first = next((x for x in e.heads if x.rank_by_contribution == 1), None)
    if first is not None and first is not h:
        lines.append(f"By direct contribution alone, head {first.head} of layer {first.layer} comes first "
                     f"({signed(first.logit_contribution, 2)} to the logit), yet silencing it changes the log-probability "
                     f"by {signed(first.shown_effect, 3)}: a head's write also changes what later layers compute, "
                     f"so the two measures can disagree.")
    return lines + _listening(h, e.tokens[-1])


def _coverage(e) -> str:
    """How many heads and members were measured exactly, how, and what is known of the rest."""
    total = e.model.n_layers * e.model.n_heads
    _, where = _head_measure(e)
    heads = (f"All {total} heads were measured exactly (each silenced{where})" if e.heads_measured == total else
             f"{e.heads_measured} of {total} heads were measured exactly (each silenced{where})")
    if e.heads_measured < total:
        if e.estimate_missed_by is not None:
            heads += (f"; the first-order estimate that chose them missed by up to {e.estimate_missed_by:.3g} on the "
                      f"heads it was checked against, so an untested head may still matter")
        else:
            heads += ", chosen by direct contribution, so an untested head may still matter"
    T = len(e.tokens)
    members = (f"each of the {T} members was" if e.members_measured == T else
               f"{e.members_measured} of {T} members {'was' if e.members_measured == 1 else 'were'}")
    return heads + f"; {members} silenced {e.scope}."


def _silenced_prob(p: float, effect: float) -> float:
    """p(t) after a change of `effect` in log p(t)."""
    return p * math.exp(effect)


def _listening(h, asker: str) -> list[str]:
    if not h.listened:
        return []
    by_weight = sorted(h.listened, key=lambda x: -x.weight)[:2]
    heard = " and ".join(f"{quote(x.token)} ({x.weight:.2g})" for x in by_weight)
    line = (f"In head {h.head} of layer {h.layer}, the last member {quote(asker)} asks its question and gives "
            f"the most weight to {heard}.")
    top = h.listened[0]  # largest weight × answer size
    line += (f" Weighing each answer by its size through the output projection (weight × ‖v·W_O‖), "
             f"{quote(top.token)} contributes most ({top.contribution:.3g})")
    if top.index != by_weight[0].index:
        line += f", with a weight of only {top.weight:.2g}: here the attention weight alone would mislead"
    return [line + "."]


def _verb(effect: float) -> str:
    return "stays at" if abs(effect) < 5e-4 else "falls to" if effect < 0 else "rises to"


def _members(e) -> list[str]:
    ranked = sorted((m for m in e.members if m.rank is not None), key=lambda m: m.rank)
    if not ranked:
        return []
    w = e.predicted
    name = "effect" if ranked[0].effect is not None else "effect_last_question"
    parts = [f"without {quote(m.token)} (member {m.index}) it {_verb(m.shown_effect)} "
             f"{percent(_silenced_prob(w.prob, m.shown_effect))} ({name} {signed(m.shown_effect, 3)})" for m in ranked[:2]]
    lines = [f"Silencing one member at a time, {e.scope}, moves the probability of {quote(w.token)} "
             f"({percent(w.prob)}) most like this: " + "; ".join(parts) + "."]
    raising = [m for m in ranked[2:] if m.shown_effect > 0][:1]  # the member the group does better without
    lines += [f"Of the others, silencing {quote(m.token)} (member {m.index}) raises it most, to "
              f"{percent(_silenced_prob(w.prob, m.shown_effect))} ({signed(m.shown_effect, 3)})." for m in raising]
    return lines


def explain_story(e, norm_after_attention: bool = False) -> list[str]:
    """The Explanation `e` as a few sentences: members, conclusion, decisive head, members, logit.
    `norm_after_attention`: the model norms the sum of the heads' writes (Gemma), which the story says."""
    n_heads, n_layers = e.model.n_layers * e.model.n_heads, e.model.n_layers
    p = e.logit_parts
    return [
        members_line(e.tokens),
        *_silenced_line(e),
        f"In each of the {n_heads} heads every member asks a question (Q); each answer (V) is weighed by how "
        f"well its nature (K) matches the question (Q·K/√d_k, then softmax over the question's row).",
        _conclusion(e),
        *_decisive_head(e),
        *(_norm_after_attention() if norm_after_attention and e.heads else []),
        *_members(e),
        f"The logit of {quote(e.predicted.token)}, {p.logit:.2f}, adds up from the embedding ({signed(p.embed, 2)}), "
        f"the {n_heads} heads' writes ({signed(p.heads, 2)}) and the {n_layers} MLPs ({signed(p.mlps, 2)}).",
    ]


def _silenced_line(e) -> list[str]:
    """What the explained run silences, if anything: every number then is that run's."""
    parts = [f"member {j} ({quote(e.tokens[j])}) is silenced in every head" for j in e.silenced_members]
    parts += [f"head {h} of layer {l} writes nothing" for l, h in e.silenced_heads]
    if not parts:
        return []
    return [f"In this run {', and '.join(parts)}: the conclusion and every effect below are this run's, "
            f"measured on top of that silencing."]


def _norm_after_attention() -> list[str]:
    return ["In this model a norm acts on the sum of a layer's head writes before it reaches the residual stream, "
            "so silencing one head also rescales what the other heads of its layer write; the direct "
            "contributions hold that norm's scale at its value in this run."]


def _text(e) -> str:
    return f"“{e.text}”" if e.text is not None else f"the {len(e.tokens)} tokens"


def _shift_lines(c) -> list[str]:
    a, b, w = c.a, c.b, quote(c.word)
    s = next(x for x in c.shift if x.id == c.word_id)
    lines = [f"After {_text(a)} the group concludes {quote(a.predicted.token)} ({percent(a.predicted.prob)}); "
             f"after {_text(b)}, {quote(b.predicted.token)} ({percent(b.predicted.prob)})."]
    if a.predicted.id == b.predicted.id:
        lines.append(f"The conclusion stays {w}: text b {_moves('its probability', s.prob_a, s.prob_b)} "
                     f"({signed(100 * s.change, 1)} points).")
    else:
        lines.append(f"The conclusion changes: {w} goes from {percent(s.prob_a)} to {percent(s.prob_b)}.")
    others = sorted((x for x in c.shift if x.id != c.word_id), key=lambda x: -abs(x.change))[:2]
    if others:
        lines.append("Among the alternatives, " + " and ".join(
            f"{quote(x.token)} goes from {percent(x.prob_a)} to {percent(x.prob_b)}" for x in others) + ".")
    return lines


def _compare_heads(c) -> list[str]:
    if not c.heads:
        return []
    named = ", ".join(f"head {h.head} of layer {h.layer} ({signed(h.contribution_a, 2)} → {signed(h.contribution_b, 2)})"
                      for h in c.heads[:3])
    return [f"The heads whose direct push on {quote(c.word)} changed most from a to b: {named}. In all, the heads' "
            f"direct share of its logit changes by {signed(c.logit.heads, 2)} and the MLPs' by {signed(c.logit.mlps, 2)} "
            f"(the logit goes from {c.logit.logit_a:.2f} to {c.logit.logit_b:.2f})."]


def _compare_gap(c) -> list[str]:
    if c.gap is None or not c.heads_by_gap:
        return []
    g = c.gap
    named = ", ".join(f"head {h.head} of layer {h.layer} ({signed(h.change, 2)})" for h in c.heads_by_gap[:3])
    return [f"A probability depends on the gaps between logits. Against {quote(c.rival)}, the other top word whose "
            f"probability changed most, the gap of {quote(c.word)} goes from {signed(g.logit_a, 2)} to {signed(g.logit_b, 2)}: "
            f"the heads' direct shares change it by {signed(g.heads, 2)} (most: {named}) and the MLPs' by {signed(g.mlps, 2)}."]


def _compare_members(c) -> list[str]:
    lines = []
    if c.members:
        named = " and ".join(f"{quote(m.token)} (member {m.index}, {signed(m.shown_effect, 3)})" for m in c.members[:2])
        lines.append(f"In text {c.longer}, silencing one member in every head moves the log-probability of "
                     f"{quote(c.word)} most for {named}.")
    p = c.prefix
    if p is not None:
        shorter = c.a if p.longer == "b" else c.b
        s = next(x for x in c.shift if x.id == c.word_id)
        p_short = s.prob_a if p.longer == "b" else s.prob_b
        closer = abs(p.prob_word - p_short) < abs((s.prob_b if p.longer == "b" else s.prob_a) - p_short)
        lines.append(f"Silencing the members of “{p.text}” together in every head (they stay in the text, but "
                     f"nobody hears their answers) gives {quote(c.word)} {percent(p.prob_word)}, "
                     f"{'closer to' if closer else 'further from'} the {percent(p_short)} of {_text(shorter)}; "
                     f"the whole next-word distribution moves {'toward' if p.toward_shorter else 'away from'} that "
                     f"text's (total variation {p.distance_before:.3f} → {p.distance_silenced:.3f}).")
    return lines


def compare_story(c) -> list[str]:
    """The Comparison `c` as a few sentences: both conclusions, the shift, the heads, the members."""
    return [*_shift_lines(c), *_compare_heads(c), *_compare_gap(c), *_compare_members(c)]
