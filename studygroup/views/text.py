"""Terminal rendering of the study layer's results (plain text; no model logic).

Every function takes a result dataclass (Explanation, Comparison, HeadView, Lesson) and returns
a string. Numbers are formatted, never computed.
"""
from __future__ import annotations

import textwrap

from studygroup.study.story import percent, signed

__all__ = ["comparison", "explanation", "head_view", "lesson", "lesson_section", "percent", "table"]

WIDTH = 100
GRID_MAX_T = 16  # larger grids show the last question only
LISTENED_SHOWN = 5
HEADS_LISTENING = 3


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
    return [f"  {w.token:>16}  {percent(w.prob):>6}  {bar(w.prob)}" for w in words]


def explanation(e) -> str:
    """The members, the conclusion, the decisive heads and whom they listened to, the members, the story."""
    w = e.predicted.token
    lines = [_members(e.tokens), "", "the group's conclusion (next word):", *_conclusion(e.top), ""]
    lines += ["which heads decided it:", wrap(f"(measured one at a time: {e.heads_silenced})"),
              "  silence_effect: the head's write zeroed at every position; silence_effect_last_position: at the "
              "last position only (· = not measured)",
              table(["rank", "layer", "head", "direct contribution to logit", "silence_effect",
                     "silence_effect_last_position", f"p({w}) silenced", "rank by contribution"],
                    [[r + 1, h.layer, h.head, h.logit_contribution, h.silence_effect, h.silence_effect_last_position,
                      None if h.prob_silenced is None else percent(h.prob_silenced), h.rank_by_contribution]
                     for r, h in enumerate(e.heads)]), ""]
    for h in e.heads[:HEADS_LISTENING]:
        lines += [f"layer {h.layer} head {h.head}: the last member {e.tokens[-1]} asks (‖q‖ = {h.question_norm:.3g}) "
                  f"and listens to (effect_in_head: the member silenced in this head only):",
                  table(["member", "index", "weight", "‖v·W_O‖", "weight × ‖v·W_O‖", "effect_in_head"],
                        [[m.token, m.index, m.weight, m.answer_size, m.contribution, m.effect_in_head]
                         for m in h.listened[:LISTENED_SHOWN]], indent="    "), ""]
    lines += ["which members decided it:", wrap(f"(silenced one at a time: {e.members_silenced})"),
              "  effect: the member silenced in every head, for every question; effect_last_question: for the last "
              "member's question only (· = not measured)",
              table(["index", "member", "effect", "effect_last_question", f"p({w}) silenced", "rank"],
                    [[m.index, m.token, m.effect, m.effect_last_question,
                      None if m.prob_silenced is None else percent(m.prob_silenced), m.rank]
                     for m in e.members]), "", "the story:", *[wrap(s) for s in e.story]]
    return "\n".join(lines)


def comparison(c) -> str:
    """Both conclusions, the shift of the top words, the heads and members behind it, the story."""
    silenced = c.prefix is not None
    header = ["word", "prob a", "prob b", "change"] + (["b, prefix silenced" if c.longer == "b" else
                                                        "a, prefix silenced"] if silenced else [])
    rows = [[s.token, percent(s.prob_a), percent(s.prob_b), f"{signed(100 * s.change, 1)} pts"]
            + ([percent(s.prob_prefix_silenced)] if silenced else []) for s in c.shift]
    lines = [f"a: {_members(c.a.tokens)}", f"b: {_members(c.b.tokens)}", "",
             f"the shift (a → b) in the next word:", table(header, rows), "",
             f"heads whose direct contribution to the logit of {c.word} changed most (b - a):",
             table(["layer", "head", "in a", "in b", "change"],
                   [[h.layer, h.head, h.contribution_a, h.contribution_b, h.change] for h in c.heads]), "",
             *_gap_table(c),
             f"members of text {c.longer} by the effect of silencing them on log p({c.word}):",
             table(["index", "member", "effect", "effect_last_question", "p silenced"],
                   [[m.index, m.token, m.effect, m.effect_last_question,
                     None if m.prob_silenced is None else percent(m.prob_silenced)] for m in c.members[:8]]), "",
             "the story:", *[wrap(s) for s in c.story]]
    return "\n".join(lines)


def _gap_table(c) -> list[str]:
    if not c.heads_by_gap:
        return []
    return [f"heads whose direct contribution to the gap logit({c.word}) - logit({c.rival}) changed most (b - a):",
            table(["layer", "head", "in a", "in b", "change"],
                  [[h.layer, h.head, h.contribution_a, h.contribution_b, h.change] for h in c.heads_by_gap]), ""]


def _grid(v, values, caption: str) -> list[str]:
    T = len(v.tokens)
    if T > GRID_MAX_T:
        last = [row[-1] for row in values] if v.notation == "columns" else values[-1]
        return [f"{caption}, the last question only ({T} members; --json has the whole grid):",
                table(["index", "answer from", "value"], [[j, t, x] for j, (t, x) in enumerate(zip(v.tokens, last))])]
    first = "answer \\ question" if v.notation == "columns" else "question \\ answer"
    return [f"{caption}:", table([first, *v.tokens], [[t, *row] for t, row in zip(v.tokens, values)])]


def _vec(x) -> str:
    entries = ", ".join(f"[{e.index}] {e.value:+.3g}" for e in x.largest)
    return f"‖{x.norm:.3g}‖ {entries}"


def head_view(v) -> str:
    """One head whole: each member's question, key and answer in short, the grids, the notation check."""
    sums = "each column of weights sums to 1" if v.notation == "columns" else "each row of weights sums to 1"
    lines = [_members(v.tokens), "",
             f"layer {v.layer} head {v.head} (key/value head {v.kv_head}, shared by heads {v.shares_keys_with})",
             f"notation: {v.notation}: {v.orientation}", *_silenced(v), "",
             "each member: its question q, the nature of its answer k (before and after RoPE), its answer v,",
             "and the weighted sum of what it heard (norm, then the largest entries of the 64):"]
    shown = v.members if len(v.members) <= 2 * GRID_MAX_T else v.members[-GRID_MAX_T:]
    if len(shown) < len(v.members):
        lines.append(f"  (the last {len(shown)} of {len(v.members)} members; --json has every member)")
    for m in shown:
        lines += [f"  {m.index:>3} {m.token}  (listens most to {v.tokens[m.listens_most_to]})",
                  f"      q  {_vec(m.question)}", f"      k  {_vec(m.key)}    before RoPE {_vec(m.key_pre_rope)}",
                  f"      v  {_vec(m.answer)}", f"      Σ  {_vec(m.weighted_sum)}"]
    score_name = "scores Kᵀ·Q/√d_k" if v.notation == "columns" else "scores Q·Kᵀ/√d_k"
    lines += ["", *_grid(v, v.scores, f"{score_name} (· = masked: the future)"), "",
              *_grid(v, v.weights, f"weights ({sums})"), "", wrap(v.check.statement, indent="")]
    return "\n".join(lines)


def _silenced(v) -> list[str]:
    """A line saying what is silenced in the run shown, if anything."""
    parts = [f"member {j} ({v.tokens[j]}): nobody hears its answer" for j in v.silenced_members]
    parts += [f"layer {l} head {h}: writes nothing" for l, h in v.silenced_heads]
    return [wrap("silenced in this run: " + "; ".join(parts), indent="")] if parts else []


def lesson_section(s, total: int) -> str:
    """One section of the lesson: its title, paragraphs, tables and preformatted blocks."""
    lines = [f"── {s.number}/{total}  {s.title} " + "─" * max(0, WIDTH - len(s.title) - 12), ""]
    for b in s.blocks:
        if b.kind == "text":
            lines.append(wrap(b.text, indent=""))
        elif b.kind == "code":
            lines.append(textwrap.indent(b.text, "    "))
        else:
            lines += [f"{b.caption}:", table(b.header, b.rows)]
        lines.append("")
    return "\n".join(lines)


def lesson(l, section: int | None = None) -> str:
    """The whole lesson, or section `section` (1-based) with a pointer to the next."""
    total = len(l.sections)
    if section is None:
        return "\n".join(lesson_section(s, total) for s in l.sections)
    out = lesson_section(l.section(section), total)
    if section < total:
        out += f"next: studygroup lesson --section {section + 1}  ({l.sections[section].title})\n"
    return out
