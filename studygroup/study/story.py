"""The few plain sentences that tell a result's story in the article's terms, with its real numbers.

Templates filled from an Explanation or a Comparison: every name and number comes from the
result; nothing is claimed that the result does not hold.
"""
from __future__ import annotations

from studygroup.formats import clipped, percent, quote, signed
from studygroup.study.sinks import MEANING, QUIET_SHARE, quiet_sinks


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


# ---- explain's story: sentences made of pieces ---------------------------------------------
# A piece is {"text": …}, {"member": i, "text": …} or {"value": x, "field": "heads[0].silence_effect",
# "text": …}: the page links members to chips and a test resolves every value's field in the JSON.

def _t(text: str) -> dict:
    return {"text": text}


def _m(e, i: int) -> list[dict]:
    """Member i as a sentence names it: its token, and its position where that token occurs more
    than once in the text (“␣he” (member 15)), so that no sentence leaves the reader to guess which."""
    out = [{"member": i, "text": quote(e.tokens[i])}]
    return out + [_t(f" (member {i})")] if e.tokens.count(e.tokens[i]) > 1 else out


def _v(value: float, field: str, text: str) -> dict:
    return {"value": value, "field": field, "text": text}


def joined(parts: list[list[dict]]) -> list[str]:
    """The sentences as plain strings.

    >>> joined([[{"text": "p is "}, {"value": 0.5, "field": "predicted.prob", "text": "50%"}, {"text": "."}]])
    ['p is 50%.']
    """
    return ["".join(p["text"] for p in sentence) for sentence in parts]


def _members_parts(e) -> list[dict]:
    T = len(e.tokens)
    if T == 1:
        return [_t("The only member is "), *_m(e, 0), _t(".")]
    shown = list(range(T)) if T <= 20 else [*range(5), None, *range(T - 5, T)]
    out = [_t(f"The {T} members are " if T <= 20 else f"The {T} members run from ")]
    for n, i in enumerate(shown):
        out += [_t(" … to " if i is None else ", " if n and shown[n - 1] is not None else "")]
        out += [] if i is None else _m(e, i)
    return out + [_t(".")]


def _asks(e) -> list[dict]:
    return [_t(f"Every member asks a question (Q) in each of the {e.model.n_layers * e.model.n_heads} heads, and the "
               f"members up to it answer: each answer (V) is weighed by how well its key (K) fits the question "
               f"(Q·K/√d_k, then softmax over the row). The next word is the last member's conclusion: "),
            *_m(e, len(e.tokens) - 1), _t(" asks what comes next.")]


def _conclusion(e) -> list[dict]:
    return conclusion_parts([e.predicted, *e.top[1:3]], ["predicted.prob", "top[1].prob", "top[2].prob"])


def conclusion_parts(words, fields: list[str], silenced: bool = False, ablation: str = "zero") -> list[dict]:
    """The sentence that tells the conclusion: words[0] (.token, .prob) ahead of words[1:3];
    fields[n]: the JSON path of word n's probability. Its first piece carries "about": "conclusion",
    so that the page can put the silenced run's sentence (silenced=True) in its place; ablation:
    how that run took the silenced out (SILENCED_BY names a mean or resample ablation).

    >>> from types import SimpleNamespace as W
    >>> joined([conclusion_parts([W(token="␣of", prob=0.96), W(token="␣to", prob=0.012)], ["top[0].prob", "top[1].prob"])])
    ['The group concludes that the next word is “␣of” (96%), ahead of “␣to” (1.2%).']
    """
    w = words[0]
    opening = f"With the silencing{SILENCED_BY[ablation]}, the group" if silenced else "The group"
    out = [{**_t(f"{opening} concludes that the next word is {quote(w.token)} ("), "about": "conclusion"},
           _v(w.prob, fields[0], percent(w.prob)), _t(")")]
    for n, x in enumerate(words[1:3], start=1):
        out += [_t(f"{', ahead of' if n == 1 else ' and'} {quote(x.token)} ("), _v(x.prob, fields[n], percent(x.prob)),
                _t(")")]
    return out + [_t(".")]


def _head_measure(e) -> tuple[str, str]:
    """(the field the heads are ranked by, how it silences), for the story's sentences."""
    if e.heads and e.heads[0].silence_effect is None:
        return "silence_effect_last_position", " at the last position only"
    return "silence_effect", " at every position"


def _measures(e) -> list[dict]:
    return [_t(f"Two measures say who decided it. A head's direct contribution is what its write adds to the logit "
               f"of {quote(e.predicted.token)} as that write stands; the effect of silencing a head (or a member) is "
               f"how much log p({quote(e.predicted.token)}) changes when it is removed and everything after it is "
               f"computed again. They can disagree: a head's write also changes what every later layer computes, "
               f"which only silencing sees.")]


def _head_name(h) -> str:
    return f"head {h.head} of layer {h.layer}"


def _moved(e, h, i: int, name: str) -> list[dict]:
    """silencing head i lowers p from … to … (name ±x), with every number's field."""
    w, f = e.predicted, f"heads[{i}]"
    out = []
    if h.prob_silenced is not None:
        verb = "leaves" if percent(w.prob) == percent(h.prob_silenced) else "lowers" if h.prob_silenced < w.prob else "raises"
        out += [_t(f"{verb} the probability of {quote(w.token)} "),
                *([_t("at ")] if verb == "leaves" else [_t("from "), _v(w.prob, "predicted.prob", percent(w.prob)), _t(" to ")]),
                _v(h.prob_silenced, f"{f}.prob_silenced", percent(h.prob_silenced)), _t(" (")]
    else:  # the change in log p, then the measure's name
        return [_t(f"changes log p({quote(w.token)}) by "), _v(h.shown_effect, f"{f}.{name}", signed(h.shown_effect, 3)),
                _t(f" ({name})")]
    return out + [_t(f"{name} "), _v(h.shown_effect, f"{f}.{name}", signed(h.shown_effect, 3)), _t(")")]


def _sink_clause(e, h, i: int, explained: list) -> list[dict]:
    """Head i's sinks: the last question's weight on them, what removing them from the head does,
    and the name "attention sink" only where that is small beside the head's own effect."""
    f, named = f"heads[{i}]", h.sinks[:3]
    out = [_v(h.sink_weight, f"{f}.sink_weight", percent(h.sink_weight)),
           _t(" of the last question's attention in this head rests on ")]
    for n, j in enumerate(named):
        out += [_t(", " if n else ""), *_m(e, j)]
    quiet = _sinks_quiet(h)
    if quiet:
        out.append(_t(", an attention sink" + ("" if explained else f" ({MEANING})")))
        explained.append(True)
    for n, x in [(n, x) for n, x in enumerate(h.listened) if x.index in named and x.effect_in_head is not None][:1]:
        out += [_t("; removing "), *_m(e, x.index), _t(" from this head alone changes log p by "),
                _v(x.effect_in_head, f"{f}.listened[{n}].effect_in_head", _small(x.effect_in_head))]
        if not quiet:
            out.append(_t(f", not small beside the head's own effect (at least {QUIET_SHARE:.0%} of it), so that "
                          f"weight matters here"))
    return out


def _sinks_quiet(h) -> bool:
    """Whether every sink a sentence names for head h is measured small beside the head's own effect."""
    return bool(h.sinks) and set(h.sinks[:3]) <= set(quiet_sinks(h))


def _small(x: float) -> str:
    """A small signed change, two significant digits.

    >>> _small(0.0022719), _small(-2.56e-05)
    ('+0.0023', '-2.6e-05')
    """
    return f"{x:+.2g}"


def _decisive_head(e, explained: list) -> list[list[dict]]:
    if not e.heads or e.heads[0].shown_effect is None:
        return []
    h = e.heads[0]
    name, where = _head_measure(e)
    total = e.model.n_layers * e.model.n_heads
    which = "of all heads" if e.heads_measured == total else "of the heads measured"
    lines = [[_t(f"The most decisive head {which} is {_head_name(h)}: {_taking_out(e)}{where} "), *_moved(e, h, 0, name),
              _t(", while its write adds "), _v(h.logit_contribution, "heads[0].logit_contribution", signed(h.logit_contribution, 2)),
              _t(f" directly to the logit of {quote(e.predicted.token)}.")]]
    lines += _listening(e, h, 0, explained)
    k, first = next(((k, x) for k, x in enumerate(e.heads) if x.rank_by_contribution == 1), (None, None))
    if first is not None and first is not h and first.shown_effect is not None:
        line = [_t(f"By direct contribution alone, {_head_name(first)} comes first ("),
                _v(first.logit_contribution, f"heads[{k}].logit_contribution", signed(first.logit_contribution, 2)),
                _t(f" to the logit), yet {_taking_out(e)} changes log p by "),
                _v(first.shown_effect, f"heads[{k}].{name}", signed(first.shown_effect, 3))]
        if first.rests_on_sink:
            line += [_t("; ")] + _sink_clause(e, first, k, explained)
        lines.append(line + [_t(".")])
    return lines


def _listening(e, h, i: int, explained: list) -> list[list[dict]]:
    """Whom head i's last question listened to, ranked by effect_in_head, naming its sinks."""
    asker = len(e.tokens) - 1
    measured = [(n, x) for n, x in enumerate(h.listened) if x.effect_in_head is not None]
    useful = measured[:1]  # listened: the measured first, largest |effect_in_head| first
    lines = []
    if h.rests_on_sink and _sinks_quiet(h):
        lines.append([_t("It matters, but not because "), *_m(e, asker), _t(" asks "), *_m(e, h.sinks[0]), _t(" anything: "),
                      *_sink_clause(e, h, i, explained), _t(".")])
    elif h.rests_on_sink:
        lines.append([*_sink_clause(e, h, i, explained), _t(".")])
    for n, x in useful:
        lines.append([_t(f"Of the {len(measured)} members removed from {_head_name(h)} one at a time (effect_in_head: "
                         f"those it heard most by weight × ‖v·W_O‖, its sinks included), the one that matters most is "),
                      *_m(e, x.index), _t(": log p changes by "),
                      _v(x.effect_in_head, f"heads[{i}].listened[{n}].effect_in_head", _small(x.effect_in_head)),
                      _t(", with a weight of "), _v(x.weight, f"heads[{i}].listened[{n}].weight", f"{x.weight:.2g}"), _t(".")])
    return lines


def _verb(effect: float) -> str:
    return "stays at" if abs(effect) < 5e-4 else "falls to" if effect < 0 else "rises to"


def _member_change(e, m) -> list[dict]:
    name = "effect" if m.effect is not None else "effect_last_question"
    f = f"members[{m.index}]"
    out = [_t("without "), *_m(e, m.index), _t(" it ")]
    if m.prob_silenced is not None:
        out += [_t(_verb(m.shown_effect) + " "), _v(m.prob_silenced, f"{f}.prob_silenced", percent(m.prob_silenced)), _t(" (")]
    else:  # the change in log p, then the measure's name
        return out + [_t("changes log p by "), _v(m.shown_effect, f"{f}.{name}", signed(m.shown_effect, 3)), _t(f" ({name})")]
    return out + [_t(f"{name} "), _v(m.shown_effect, f"{f}.{name}", signed(m.shown_effect, 3)), _t(")")]


def _members(e) -> list[list[dict]]:
    ranked = sorted((m for m in e.members if m.rank is not None), key=lambda m: m.rank)
    if not ranked:
        return []
    w = e.predicted
    how = "silencing one member at a time" if e.ablation == "zero" else \
        f"taking out one member at a time ({MEMBER_TAKEN_OUT[e.ablation]})"
    line = [_t(f"What changes with context: {how}, {e.scope}, moves the probability of "
               f"{quote(w.token)} ("), _v(w.prob, "predicted.prob", percent(w.prob)), _t(") most like this: ")]
    for n, m in enumerate(ranked[:2]):
        line += [_t("; " if n else "")] + _member_change(e, m)
    lines = [line + [_t(".")]]
    raising = [m for m in ranked[2:] if m.shown_effect > 0][:1]  # the member the group does better without
    lines += [[_t("Of the others, silencing "), *_m(e, m.index), _t(" raises it most: "), *_member_change(e, m), _t(".")]
              for m in raising]
    return lines


def _without_earlier_sentences(e) -> list[list[dict]]:
    """The conclusion on the last sentence alone, against the full text's (no sentence for one sentence)."""
    s = e.last_sentence
    if s is None:
        return []
    w = e.predicted
    line = [_t(f"Without its earlier sentences, after {clipped(s.text)} alone, the group concludes {quote(s.predicted.token)} ("),
            _v(s.predicted.prob, "last_sentence.predicted.prob", percent(s.predicted.prob))]
    if s.predicted.id != w.id:
        line += [_t(f") and gives {quote(w.token)}, the full text's conclusion, "),
                 _v(s.prob_of_predicted, "last_sentence.prob_of_predicted", percent(s.prob_of_predicted)), _t(" (")]
    else:
        line += [_t("; ")]
    return [line + [_v(w.prob, "predicted.prob", percent(w.prob)), _t(" with the full text).")]]


def _thinking_alone(e) -> list[dict]:
    """Where the gap to the runner-up comes from: softmax ignores what every logit shares, so the
    shares are told of the gap, not of the raw logit."""
    opening = _t("Attention moves information between members; each member's own MLP (“thinking alone”) turns what it "
                 "gathered into the word.")
    p, r = e.logit_gap, e.runner_up
    if p is None:
        return [opening]
    n_heads, n_layers, f = e.model.n_layers * e.model.n_heads, e.model.n_layers, "logit_gap"
    return [_t(opening["text"] + f" A probability follows the gaps between logits: the logit of {quote(e.predicted.token)} "
               f"minus that of {quote(r.token)}, the runner-up ("), _v(r.prob, "runner_up.prob", percent(r.prob)),
            _t("), is "), _v(p.logit, f"{f}.logit", signed(p.logit, 2)), _t(f"; of that gap the {n_heads} heads' writes add "),
            _v(p.heads, f"{f}.heads", signed(p.heads, 2)), _t(f" directly, the {n_layers} MLPs "),
            _v(p.mlps, f"{f}.mlps", signed(p.mlps, 2)), _t(" and the embedding "),
            _v(p.embed, f"{f}.embed", signed(p.embed, 2)), *_position_and_biases(p, f),
            _t(". A direct share counts a write as it stands; silencing a head also counts what later layers make of "
               "its write.")]


def _position_and_biases(p, f: str) -> list[dict]:
    """The learned position embedding's and the biases' shares, in a family that has them (GPT-2);
    f: the field of p in the JSON."""
    if not (p.position or p.biases):
        return []
    return [_t(", the position embedding "), _v(p.position, f"{f}.position", signed(p.position, 2)),
            _t(" and the biases no head writes "), _v(p.biases, f"{f}.biases", signed(p.biases, 2))]


def explain_parts(e, norm_after_attention: bool = False) -> list[list[dict]]:
    """The Explanation `e` as sentences of pieces: the article's walk on the text (who asks, the
    conclusion, whose answers count, what changes with context and, for more than one sentence, the
    conclusion on the last sentence alone), then the measures, each
    defined once, and where the logit comes from. `norm_after_attention`: the model norms the sum
    of the heads' writes (Gemma), which the story says."""
    explained: list = []  # an attention sink is explained the first time it is named
    norm = [_norm_after_attention()] if norm_after_attention and e.heads else []
    return [_members_parts(e), *_silenced_parts(e), _asks(e), _conclusion(e), *_members(e),
            *_without_earlier_sentences(e), _measures(e),
            [_t(_coverage(e))], *_decisive_head(e, explained), *norm, _thinking_alone(e)]


def explain_story(e, norm_after_attention: bool = False) -> list[str]:
    """The Explanation `e` as a few sentences (explain_parts joined)."""
    return joined(explain_parts(e, norm_after_attention))


#: How a silenced run took its heads and members out, after "With the silencing" (zero: as said).
SILENCED_BY = {"zero": "", "mean": " by mean ablation (each silenced head's output and member's key and value "
               "replaced by their mean)", "resample": " by resample ablation (each silenced head's output and "
               "member's key and value taken from the other text)"}
#: What each ablation (`studygroup.model.ablation`) does to a head, in words.
TAKEN_OUT = {"zero": "its write zeroed", "mean": "its output replaced by its mean output",
             "resample": "its output taken from the other text"}

#: What each ablation does to a member, in words.
MEMBER_TAKEN_OUT = {"zero": "its keys removed", "mean": "its key and value replaced by their mean",
                    "resample": "its key and value taken from the other text"}


def _taking_out(e) -> str:
    """What the story calls taking a head out: "silencing it", or its ablation (TAKEN_OUT)."""
    return "silencing it" if e.ablation == "zero" else f"taking it out ({TAKEN_OUT[e.ablation]})"


def _coverage(e) -> str:
    """How many heads and members were measured exactly, how, and what is known of the rest."""
    total = e.model.n_layers * e.model.n_heads
    _, where = _head_measure(e)
    how = "silenced" if e.ablation == "zero" else f"with {TAKEN_OUT[e.ablation]}"
    heads = (f"All {total} heads were measured exactly (each {how}{where})" if e.heads_measured == total else
             f"{e.heads_measured} of {total} heads were measured exactly (each {how}{where})")
    if e.heads_measured < total:
        if e.estimate_missed_by is not None:
            heads += (f"; the first-order estimate that chose them missed by up to {e.estimate_missed_by:.3g} on the "
                      f"heads it was checked against, so an untested head may still matter")
        else:
            heads += ", chosen by direct contribution, so an untested head may still matter"
    T = len(e.tokens)
    members = (f"each of the {T} members was" if e.members_measured == T else
               f"{e.members_measured} of {T} members {'was' if e.members_measured == 1 else 'were'}")
    taken = "silenced" if e.ablation == "zero" else f"taken out ({MEMBER_TAKEN_OUT[e.ablation]})"
    return heads + f"; {members} {taken} {e.scope}."


def _silenced_parts(e) -> list[list[dict]]:
    """What the explained run silences, if anything: every number then is that run's."""
    parts = [f"member {j} ({quote(e.tokens[j])}) is silenced in every head" for j in e.silenced_members]
    parts += [f"head {h} of layer {l} writes nothing" for l, h in e.silenced_heads]
    if not parts:
        return []
    return [[_t(f"In this run {', and '.join(parts)}: the conclusion and every effect below are this run's, "
                f"measured on top of that silencing.")]]


def _norm_after_attention() -> list[dict]:
    return [_t("In this model a norm acts on the sum of a layer's head writes before it reaches the residual stream, "
               "so silencing one head also rescales what the other heads of its layer write; the direct "
               "contributions hold that norm's scale at its value in this run.")]


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


def _same_text(c) -> list[str]:
    """Two texts of the same tokens: one run twice, so nothing in it can differ."""
    a = c.a
    return [f"Text a and text b are the same {len(a.tokens)} tokens, so the two runs are one: after both the group "
            f"concludes {quote(a.predicted.token)} ({percent(a.predicted.prob)}), and no probability, head or member "
            "differs between them. Give two different texts (the same sentence with and without a context before "
            "it) to see what context changes."]


def compare_story(c) -> list[str]:
    """The Comparison `c` as a few sentences: both conclusions, the shift, the heads, the members."""
    if c.a.token_ids == c.b.token_ids:
        return _same_text(c)
    return [*_shift_lines(c), *_compare_heads(c), *_compare_gap(c), *_compare_members(c)]
