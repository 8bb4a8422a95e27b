"""Terminal rendering of the study layer's results (plain text; no model logic).

Every function takes a result dataclass (Explanation, Comparison, HeadView, LessonSections) and returns
a string. Numbers are formatted, never computed.
"""
from __future__ import annotations

import math
import textwrap

from studygroup.gguf.config import size_text
from studygroup.study import byte_pieces
from studygroup.study.mask_reasons import OUTSIDE_WINDOW
from studygroup.study.sinks import REST_WEIGHT, quiet_sinks
from studygroup.formats import percent, signed
from studygroup.study.story import MEMBER_TAKEN_OUT, TAKEN_OUT
from studygroup.views.colours import generated_line, generated_mark

__all__ = ["bounded", "comparison", "explanation", "head_view", "models", "percent", "roles", "table", "why"]

WIDTH = 100
#: Every command's text output, unless --full: at most MAX_LINES lines of MAX_CHARS characters.
MAX_LINES, MAX_CHARS = 100, 400
# head: what a bounded text output shows (the 100-line rule; --full shows all)
GRID_SIDE = 12  # questions and answers of a grid
LISTED = 20  # answers of a one-question window
HEAD_MEMBERS = 6  # members in detail (5 lines each)
HEAD_ENDS = 10  # first and last members named on the members line
TOKEN_CHARS = 12  # a token in a grid's margins
VECTOR_ENTRIES = 8  # largest entries of a vector
SILENCED_LISTED = 8  # silenced members and heads named
LISTENED_SHOWN = 3
HEADS_LISTENING = 3
# explain: the rows its tables show (--full shows all): the decisive heads, the members
DECISIVE_ROWS = 6
MEMBERS_SHOWN = 10
COMPARE_MEMBERS = 8  # compare: the members its table shows


def bar(p: float, width: int = 40) -> str:
    return "█" * max(1, round(width * p))


def cell(x) -> str:
    """A table cell: floats to 4 significant digits, None (masked) as '·'."""
    if x is None:
        return "·"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def table(header: list[str], rows: list[list], indent: str = "  ") -> str:
    """Columns aligned: text to the left, numbers to the right."""
    cells = [[cell(x) for x in r] for r in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) if cells else len(str(h)) for i, h in enumerate(header)]
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) for i in range(len(header))]
    fit = lambda s, i: s.rjust(widths[i]) if numeric[i] else s.ljust(widths[i])  # noqa: E731
    lines = ["  ".join(fit(str(h), i) for i, h in enumerate(header))]
    lines += ["  ".join(fit(s, i) for i, s in enumerate(r)) for r in cells]
    return "\n".join(indent + line.rstrip() for line in lines)


def wrap(s: str, indent: str = "  ") -> str:
    return textwrap.fill(s, WIDTH, initial_indent=indent, subsequent_indent=indent)


def _members(tokens: list[str]) -> str:
    return f"members ({len(tokens)}): " + " | ".join(tokens)


def _conclusion(words) -> list[str]:
    """The words as bars, each byte piece with what it stands for, and a note saying what a byte piece
    or a lone space is where one is shown."""
    lines = [f"  {w.token:>16}  {percent(w.prob):>6}  {bar(w.prob)}" + (f"  ({w.reads_as})" if w.reads_as else "")
             for w in words]
    notes = [note for note, shown in ((byte_pieces.BYTE_PIECE, any("<0x" in w.token for w in words)),
                                      (byte_pieces.LONE_SPACE, any(set(w.token) == {"␣"} for w in words))) if shown]
    return lines + [wrap(f"({note})") for note in notes]


def explanation(e, full: bool = False) -> str:
    """The members, the conclusion, the decisive heads and whom they listened to, the members, the story.

    Unless `full`, the tables show the DECISIVE_ROWS most decisive heads and, on a text of more than
    MEMBERS_SHOWN members, the MEMBERS_SHOWN measured members that matter most, and count the rest."""
    w = e.predicted.token
    model = e.model.label or e.model.name
    g = e.generated_from
    name = lambda i: e.tokens[i] + generated_mark(i, g)  # noqa: E731
    lines = [_head_members(e.tokens, full, g), *generated_line(g, len(e.tokens)), *_silenced(e, full), "",
             f"the group's conclusion (next word; model {model}):",
             *_conclusion(e.top), ""]
    lines += ["which heads decided it:", wrap(f"(measured one at a time: {e.heads_silenced})"),
              f"  silence_effect: the head taken out ({TAKEN_OUT[e.ablation]}) at every position; "
              "silence_effect_last_position: at the last position only (· = not measured)",
              table(["rank", "layer", "head", "direct contribution to logit", "silence_effect",
                     "silence_effect_last_position", f"p({w}) silenced", "rank by contribution"],
                    [[r + 1, h.layer, h.head, h.logit_contribution, h.silence_effect, h.silence_effect_last_position,
                      None if h.prob_silenced is None else percent(h.prob_silenced), h.rank_by_contribution]
                     for r, h in enumerate(e.heads if full else e.heads[:DECISIVE_ROWS])]),
              *_more(len(e.heads) - (len(e.heads) if full else DECISIVE_ROWS), "heads measured"), ""]
    for h in e.heads[:HEADS_LISTENING]:
        lines += [f"layer {h.layer} head {h.head}: the last member {name(len(e.tokens) - 1)} asks (‖q‖ = {h.question_norm:.3g}) "
                  f"and listens to (effect_in_head: the member silenced in this head only):",
                  *_sink_line(e, h),
                  table(["member", "index", "weight", "‖v·W_O‖", "weight × ‖v·W_O‖", "effect_in_head", "attention sink"],
                        [[name(m.index), m.index, m.weight, m.answer_size, m.contribution, m.effect_in_head,
                          "yes" if m.is_sink else ""] for m in h.listened[:LISTENED_SHOWN]], indent="    "), ""]
    lines += ["which members decided it:", wrap(f"(silenced one at a time: {e.members_silenced})"),
              "  effect: the member silenced in every head, for every question; effect_last_question: for the last "
              "member's question only (· = not measured)",
              table(["index", "member", "effect", "effect_last_question", f"p({w}) silenced", "rank"],
                    [[m.index, name(m.index), m.effect, m.effect_last_question,
                      None if m.prob_silenced is None else percent(m.prob_silenced), m.rank]
                     for m in _members_shown(e.members, full)]),
              *_more(len(e.members) - len(_members_shown(e.members, full)), "members"),
              "", "the story:", *[wrap(s) for s in e.story]]
    return "\n".join(lines)


SINK_SAID = "weight the head does not need: that answer is written on every text alike"
SINKS_NAMED = 3


def _sink_line(e, h) -> list[str]:
    """Where the head rests on an attention sink: the weight on it, in words (ranked by effect_in_head below)."""
    if h.sink_weight is None or h.sink_weight < REST_WEIGHT:
        return []
    named = ", ".join(e.tokens[j] for j in h.sinks[:3])
    if not set(h.sinks[:3]) <= set(quiet_sinks(h)):  # not measured small beside the head's own effect
        return [f"    {percent(h.sink_weight)} of this question's weight rests on {named} (effect_in_head below)"]
    return [f"    {percent(h.sink_weight)} of this question's weight rests on {named}, an attention sink ({SINK_SAID})"]


def _head_sinks(v) -> list[str]:
    """The head's attention sinks, in words, and the last question's weight on them (nothing if it has none)."""
    if not v.sinks:
        return []
    named = ", ".join(f"{_short(v.tokens[j], 24)} (member {j})" for j in v.sinks[:SINKS_NAMED])
    named += f" and {len(v.sinks) - SINKS_NAMED} more" if len(v.sinks) > SINKS_NAMED else ""
    rests = ": it rests on them" if v.sink_weight >= REST_WEIGHT else ""
    return [wrap(f"attention sinks of this head: {named} ({SINK_SAID}); the last question gives them "
                 f"{percent(v.sink_weight)} of its weight{rests}", indent="")] \
        + ([wrap(v.sink_write.said, indent="")] if v.sink_write else [])


def bounded(text: str, full: bool = False, rest: str = "--full shows them all, --json gives every number") -> str:
    """A command's text output within MAX_LINES lines of at most MAX_CHARS characters (unless
    `full`): a longer line is cut ("…"), and past the limit the last line counts what was left out.

    >>> bounded("\\n".join(["x" * 500] * 3)).splitlines()[0][-3:], len(bounded("a\\n" * 200).splitlines())
    ('xx…', 100)
    """
    if full:
        return text
    lines = [line if len(line) <= MAX_CHARS else line[:MAX_CHARS - 1] + "…" for line in text.split("\n")]
    if len(lines) > MAX_LINES:
        left = len(lines) - (MAX_LINES - 1)
        lines = lines[:MAX_LINES - 1] + [f"… and {left} more lines: {rest}"]
    return "\n".join(lines)


def _members_shown(members: list, full: bool) -> list:
    """Every member in reading order, or past MEMBERS_SHOWN the measured ones by rank."""
    if full or len(members) <= MEMBERS_SHOWN:
        return members
    return sorted((m for m in members if m.rank is not None), key=lambda m: m.rank)[:MEMBERS_SHOWN]


def _more(n: int, what: str) -> list[str]:
    """The line that counts what a table left out, or nothing.

    >>> _more(3, "heads measured")
    ['  … and 3 more heads measured: --full lists them all, --json gives every number']
    """
    return [f"  … and {n} more {what}: --full lists them all, --json gives every number"] if n > 0 else []


def comparison(c) -> str:
    """Both conclusions, the shift of the top words, the heads and members behind it, the story."""
    silenced = c.prefix is not None
    header = ["word", "prob a", "prob b", "change"] + (["b, prefix silenced" if c.longer == "b" else
                                                        "a, prefix silenced"] if silenced else [])
    rows = [[s.token, percent(s.prob_a), percent(s.prob_b), f"{signed(100 * s.change, 1)} pts"]
            + ([percent(s.prob_prefix_silenced)] if silenced else []) for s in c.shift]
    lines = [f"a: {_members(c.a.tokens)}", *_silenced(c.a), f"b: {_members(c.b.tokens)}", *_silenced(c.b), "",
             f"the shift (a → b) in the next word:", table(header, rows), "",
             f"heads whose direct contribution to the logit of {c.word} changed most (b - a):",
             table(["layer", "head", "in a", "in b", "change"],
                   [[h.layer, h.head, h.contribution_a, h.contribution_b, h.change] for h in c.heads]), "",
             *_gap_table(c),
             f"members of text {c.longer} by the effect of silencing them on log p({c.word}):",
             table(["index", "member", "effect", "effect_last_question", "p silenced"],
                   [[m.index, m.token, m.effect, m.effect_last_question,
                     None if m.prob_silenced is None else percent(m.prob_silenced)] for m in c.members[:COMPARE_MEMBERS]]),
             *_members_left_out(c), "", "the story:", *[wrap(s) for s in c.story]]
    return "\n".join(lines)


def _members_left_out(c) -> list[str]:
    """Lines counting the longer text's members the table does not show: measured but smaller, or not measured."""
    T = len((c.a if c.longer == "a" else c.b).tokens)
    smaller, unmeasured = len(c.members) - COMPARE_MEMBERS, T - len(c.members)
    lines = []
    if smaller > 0:
        lines.append(f"  … and {smaller} more members measured, each with a smaller effect: --json gives every number")
    if unmeasured > 0:
        lines.append(f"  ({unmeasured} of the {T} members not measured: --measure-members all measures every one)")
    return lines


def _gap_table(c) -> list[str]:
    if not c.heads_by_gap:
        return []
    return [f"heads whose direct contribution to the gap logit({c.word}) - logit({c.rival}) changed most (b - a):",
            table(["layer", "head", "in a", "in b", "change"],
                  [[h.layer, h.head, h.contribution_a, h.contribution_b, h.change] for h in c.heads_by_gap]), ""]


def _short(token: str, n: int) -> str:
    """A token cut to n characters ("…" marks the cut)."""
    return token if len(token) <= n else token[:n - 1] + "…"


def _member_name(v, i: int, full: bool) -> str:
    """Member i of a head view by its token (cut to 40 characters unless `full`), marked if generated."""
    return (v.tokens[i] if full else _short(v.tokens[i], 40)) + generated_mark(i, v.generated_from)


def _head_members(tokens: list[str], full: bool, generated_from: int | None = None) -> str:
    """The members line: every member with --full, else the first and last HEAD_ENDS; generated
    members marked."""
    if full or len(tokens) <= 2 * HEAD_ENDS:
        return _members([t + generated_mark(i, generated_from) for i, t in enumerate(tokens)])
    cut = [_short(t, TOKEN_CHARS) + generated_mark(i, generated_from) for i, t in enumerate(tokens)]
    return (f"members ({len(tokens)}): " + " | ".join(cut[:HEAD_ENDS]) + f" | … {len(tokens) - 2 * HEAD_ENDS} more … | "
            + " | ".join(cut[-HEAD_ENDS:]))


def _grid(v, values, caption: str, full: bool) -> list[str]:
    """A grid of the window: with --full all of it, else its last GRID_SIDE questions and answers
    (the corner of the last question), with counts of what is left out."""
    (a, b), (c, d) = v.rows_shown, v.keys_shown
    paper = v.notation == "paper"
    grid = values if paper else [list(r) for r in zip(*values)]  # (questions, answers)
    R, K = (b - a, d - c) if full else (min(GRID_SIDE, b - a), min(GRID_SIDE, d - c))
    rows, keys = range(b - R, b), range(d - K, d)
    short = (lambda t: t) if full else (lambda t: _short(t, TOKEN_CHARS))  # noqa: E731
    cut = lambda i: short(v.tokens[i]) + generated_mark(i, v.generated_from)  # noqa: E731
    cells = [[grid[i - a][j - c] for j in keys] for i in rows]  # (R, K) questions × answers
    head, side = ([cut(j) for j in keys], rows) if paper else ([cut(i) for i in rows], keys)
    body = cells if paper else [list(r) for r in zip(*cells)]
    first = "question \\ answer" if paper else "answer \\ question"
    left = (b - a - R, d - c - K)
    note = [] if left == (0, 0) else [f"  (the last {R} questions × last {K} answers of the window: {left[0]} earlier "
                                      f"questions and {left[1]} earlier answers left out; --full prints them all)"]
    return [f"{caption}:", table([first, *head], [[cut(x), *row] for x, row in zip(side, body)]), *note]


def _one_question(v, full: bool) -> list[str]:
    """A window of one question: its answers listed (with --full all, else the LISTED with the
    largest weights, in order), score and weight side by side."""
    (a, _), (c, d) = v.rows_shown, v.keys_shown
    paper = v.notation == "paper"
    weights = v.weights[0] if paper else [r[0] for r in v.weights]
    scores = v.scores[0] if paper else [r[0] for r in v.scores]
    order = range(d - c) if full else sorted(sorted(range(d - c), key=lambda x: -weights[x])[:LISTED])
    name = lambda i: _member_name(v, i, full)  # noqa: E731
    rows = [[c + x, name(c + x), scores[x], weights[x]] for x in order]
    lines = [f"the question of {a} ({name(a)}) over the answers {c}:{d}"
             + ("" if full else f", the {len(order)} with the largest weights") + ":",
             table(["index", "answer from", "score", "weight"], rows)]
    if len(order) < d - c:
        rest = sum(weights) - sum(weights[x] for x in order)
        lines.append(f"  ({d - c - len(order)} more answers hold {rest:.4g} of the weight; --full lists them all)")
    return lines


def _vec(x, full: bool = True) -> str:
    largest = x.largest if full else x.largest[:VECTOR_ENTRIES]
    entries = ", ".join(f"[{e.index}] {e.value:+.3g}" for e in largest) + ("" if len(largest) == len(x.largest) else ", …")
    return f"‖{x.norm:.3g}‖ {entries}"


def _window(v) -> list[str]:
    """Which part of the grid the view holds, and how to choose another."""
    (a, b), (c, d), T = v.rows_shown, v.keys_shown, len(v.tokens)
    if v.is_whole:
        return []
    return [wrap(f"window: the questions of members {a}:{b} ({b - a} of {T}) and the answers of members {c}:{d} "
                 f"({d - c} of {T}); --rows A:B --keys C:D choose another (half-open, negatives count from the end; "
                 f"at most 256 × 256 cells)", indent="")]


def head_view(v, full: bool = False, ablation: dict | None = None) -> str:
    """One head over its window: each member's question, key and answer in short, the grids, the
    notation check. Within 100 lines of at most 400 characters, unless `full`. ablation: how the
    silenced were taken out where not by zero ablation ({"kind", …})."""
    sums = _weight_sums(v)
    name = lambda i: _member_name(v, i, full)  # noqa: E731
    lines = [_head_members(v.tokens, full, v.generated_from), *generated_line(v.generated_from, len(v.tokens)), "",
             f"layer {v.layer} head {v.head} (key/value head {v.kv_head}, shared by heads {v.shares_keys_with})",
             f"notation: {v.notation}: {v.orientation}", *_silenced(v, full, ablation),
             *([wrap(v.taken_out, indent="")] if v.taken_out else []), *_window(v), *_head_sinks(v), "",
             "each member: its question q, the nature of its answer k (before and after RoPE), its answer v,",
             "and the weighted sum of what it heard (norm, then the largest entries by size):"]
    shown = v.members if full else v.members[-HEAD_MEMBERS:]
    if len(shown) < len(v.members):
        lines.append(f"  (the last {len(shown)} of the {len(v.members)} questions shown; --full prints every one)")
    for m in shown:
        lines += [f"  {m.index:>3} {name(m.index)}  (listens most to {m.listens_most_to}: {name(m.listens_most_to)})",
                  f"      q  {_vec(m.question, full)}",
                  f"      k  {_vec(m.key, full)}    before RoPE {_vec(m.key_pre_rope, full)}",
                  f"      v  {_vec(m.answer, full)}", f"      Σ  {_vec(m.weighted_sum, full)}"]
    score_name = "scores Kᵀ·Q/√d_k" if v.notation == "columns" else "scores Q·Kᵀ/√d_k"
    lines += _outside_window(v)
    if v.rows_shown[1] - v.rows_shown[0] == 1:
        lines += ["", *_one_question(v, full)]
    else:
        lines += ["", *_grid(v, v.scores, f"{score_name} (· = masked: the future or a silenced member)", full), "",
                  *_grid(v, v.weights, f"weights ({sums})", full)]
    lines += ["", wrap(v.check.statement, indent="")]
    return "\n".join(lines)


def _weight_sums(v) -> str:
    """What each question's weights in the window add up to: 1 where the window holds every answer
    its questions hear, else the range of the sums shown, the rest lying outside the window."""
    line = "column" if v.notation == "columns" else "row"
    sums = [sum(x or 0.0 for x in r) for r in (v.weights if line == "row" else zip(*v.weights))]
    if all(abs(x - 1) < 1e-3 for x in sums):
        return f"each {line} of weights sums to 1"
    low, high = min(sums), max(sums)
    shown = f"{low:.2g}" if f"{low:.2g}" == f"{high:.2g}" else f"{low:.2g} to {high:.2g}"
    return (f"each {line} would sum to 1 over every answer its question hears; the {line}s of this window sum to "
            f"{shown}, the rest of the weight lies on answers outside it")


def _outside_window(v) -> list[str]:
    """A line naming the answers a local layer's sliding window leaves out, if the view holds any."""
    n = sum(r == OUTSIDE_WINDOW for row in v.mask_reasons for r in row)
    if not n:
        return []
    return [wrap(f"layer {v.layer} is a local layer: each question hears only the latest members (a sliding "
                 f"window), so {n} cells shown are masked as outside the window (weight 0), not as the future", indent="")]


def _silenced(v, full: bool = True, ablation: dict | None = None) -> list[str]:
    """A line saying what is silenced in the run shown, if anything (with --full, every one), and how
    where a mean or resample `ablation` ({"kind", …}) took it out."""
    kind = "zero" if ablation is None else ablation["kind"]
    member, head = ("nobody hears its answer", "writes nothing") if kind == "zero" else (MEMBER_TAKEN_OUT[kind], TAKEN_OUT[kind])
    parts = [f"member {j} ({_short(v.tokens[j], 24)}): {member}" for j in v.silenced_members]
    parts += [f"layer {l} head {h}: {head}" for l, h in v.silenced_heads]
    if not full and len(parts) > SILENCED_LISTED:
        parts = parts[:SILENCED_LISTED] + [f"and {len(parts) - SILENCED_LISTED} more (--full lists them)"]
    said = "silenced in this run" if kind == "zero" else f"taken out by {kind} ablation in this run"
    return [wrap(f"{said}: " + "; ".join(parts), indent="")] if parts else []


WHY_PAIRS_SHOWN = 20
ROLE_HEADS_SHOWN = 5


def why(w, shown: int = WHY_PAIRS_SHOWN) -> str:
    """The score of one cell, split into content + position and into its largest part pairs."""
    q, k = w.tokens[w.query], w.tokens[w.key]
    lines = [f"head {w.layer}.{w.head} (kv head {w.kv_head}): why member {w.query} ({q}) listens to member "
             f"{w.key} ({k})", *_silenced(w, ablation=w.ablation),
             f"  score q·k/√d_k = {w.score:.4f}   weight {percent(w.weight)}", "",
             "content + position:", f"  content   {signed(w.content, 4)}   " + ("(before this layer's rotation: distance 0)"
                                                                         if w.rope else "(the whole score)"),
             f"  position  {signed(w.position, 4)}   " + (f"(what distance {w.query - w.key} adds through RoPE)" if w.rope
                                                      else "(no RoPE in this model: nothing is turned)"),
             wrap(w.notes[1]), "", f"the largest of {len(w.pairs):,} (query part, key part) pairs:"]
    top, rest = w.pairs[:shown], w.pairs[shown:]
    lines.append(table(["query part", "key part", "value"], [[p.query_part, p.key_part, p.value] for p in top]))
    mass = sum(abs(p.value) for p in w.pairs) or 1.0
    rest_sum, rest_mass = sum(p.value for p in rest), sum(abs(p.value) for p in rest)
    lines += [f"  the other {len(rest):,} pairs: {signed(rest_sum, 4)} in all, {percent(rest_mass / mass)} of Σ|value|",
              f"  all pairs: {w.parts_total:.6f} (the score, in float64)", "", wrap(w.notes[2], indent="")]
    lines += [wrap(n, indent="") for n in w.notes[3:]]  # what a mean or resample ablation put in
    return "\n".join(lines)


def roles(r, shown: int = ROLE_HEADS_SHOWN) -> str:
    """The heads with the highest score in each role."""
    from studygroup.study.roles import DEFINITIONS, ROLES

    what = f"the probe: {r.probe}" if r.text is None else f"{len(r.tokens)} members"
    lines = [wrap(f"what each of the {len(r.heads)} heads does, on {what}; mean over questions "
                  f"{r.questions[0]}-{r.questions[1]} (duplicate, induction: those with an earlier copy of their token)",
                  indent=""), ""]
    if r.untold:
        lines[1:1] = ["", wrap(f"no head's role is named: {r.untold}. The highest scores follow, as scores only.", indent="")]
    for role in ROLES:
        top = r.top(role, shown)
        lines.append(f"{role}: {DEFINITIONS[role]}")
        if not top:
            lines += ["  (no question has an earlier copy of its token)", ""]
            continue
        order = [role, *[x for x in ROLES if x != role]]
        score = lambda h, x: None if math.isnan(getattr(h.roles, x)) else round(getattr(h.roles, x), 3)  # noqa: E731
        lines.append(table(["head", *order], [[f"{h.layer}.{h.head}", *[score(h, x) for x in order]] for h in top]))
        lines.append("")
    return "\n".join(lines).rstrip()


MODELS_SHOWN = 80  # models listed without --full
SKIPPED_SHOWN = 5  # folders skipped, named without --full
REASON_CHARS = 200  # a reason cut to this without --full


def models(listed, skipped: list[str], full: bool = False) -> str:
    """`studygroup models`: one row per model (Listed, studygroup.model.model_names), then why the
    unreadable ones are not read and which folders were skipped."""
    shown = listed if full else listed[:MODELS_SHOWN]
    rows = [[m.name, m.store, m.summary.title or "?", m.summary.architecture or "?", _count(m.summary.parameters),
             m.summary.quantization or "?", m.summary.context_length, size_text(m.summary.size),
             size_text(m.memory) if m.memory else "?", "yes" if m.summary.readable else "no"] for m in shown]
    lines = [f"GGUF models on this disk ({len(listed)}); --model takes the name, ollama:NAME[:TAG] or a path:",
             table(["name", "where", "model", "family", "params", "quant", "context", "size", "memory", "reads"], rows),
             "params: every number in the file's tensors (a file that keeps its unembedding apart from its embedding "
             "counts that matrix twice: Qwen2.5-Coder 0.5B's 494M are 630M there)",
             "memory: what its weights take once loaded (float32, or the file's blocks and one layer in float32)"]
    lines += _more(len(listed) - len(shown), "models")
    if full:
        lines += ["", "files and tensor types:"]
        lines += [f"  {m.name}: {m.path or '(no file yet: joined on first use)'}; " + _tensor_types(m.summary.tensor_types) for m in shown]
    notes = [m for m in shown if m.summary.reason]
    if notes:
        lines += ["", "why not, and notes:"]
        lines += [f"  {m.name}: {m.summary.reason if full else _short(m.summary.reason, REASON_CHARS)}" for m in notes]
    if skipped:
        lines += ["", f"skipped ({len(skipped)}):"]
        lines += [f"  {_short(s, REASON_CHARS) if not full else s}" for s in (skipped if full else skipped[:SKIPPED_SHOWN])]
        lines += _more(len(skipped) - SKIPPED_SHOWN if not full else 0, "folders skipped")
    return "\n".join(lines)


def _tensor_types(types: dict[str, int]) -> str:
    """'tensors: 61 F32, 210 Q4_1, 1 Q8_0' (or that they are unknown)."""
    return "tensors: " + (", ".join(f"{n} {name}" for name, n in types.items()) if types else "unknown")


def _count(n: int | None) -> str:
    """A parameter count as people write it: 268M, 3.9B.

    >>> _count(268_098_176), _count(3_880_000_000), None
    ('268M', '3.9B', None)
    """
    if n is None:
        return "?"
    return f"{n / 1e9:.2g}B" if n >= 1e9 else f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e3:.3g}k"
