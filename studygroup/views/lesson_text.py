"""The lesson (study.lesson_sections.LessonSections) as text for a terminal: each section's title,
its formula in both notations, its sentences and the numbers it shows (the question's and the
answer's vectors, one dot product term by term, the question's row of weights, the conclusion),
the same numbers as the page's Lesson mode and `--json`."""
from __future__ import annotations

from studygroup.study.lesson_sections import SECTIONS, member_row
from studygroup.formats import percent, quote
from studygroup.views.text import WIDTH, table, wrap

#: Numbers of a vector printed (the rest: `--json` or `--html`).
VECTOR_SHOWN = 12
#: Terms of the dot product and members of the question's row printed.
TERMS_SHOWN = 8
ROW_SHOWN = 8


def lesson_section(l, n: int, numbers: bool = True) -> str:
    """Section n (1-based) of a LessonSections: its title, both notations' formulas, its sentences
    and (numbers) the numbers it shows."""
    s, total = l.section(n), len(l.sections)
    lines = [f"── {n}/{total}  {s['title']} " + "─" * max(0, WIDTH - len(s["title"]) - 12),
             wrap(f"rows (the paper): {s['formula_paper']}"), wrap(f"columns (the video): {s['formula_columns']}"),
             *[wrap(x) for x in s["says"]]]
    shown = _numbers(l, s) if numbers else []
    return "\n".join(lines + ([""] + shown if shown else [])) + "\n"


def lesson(l, section: int | None = None) -> str:
    """The whole lesson (a LessonSections): every section's sentences, within a screenful or two;
    or section `section` (1-based) with its numbers and a pointer to the next."""
    total = len(l.sections)
    if section is None:
        return "\n".join(lesson_section(l, n, numbers=False) for n in range(1, total + 1)) + \
            "each section with its numbers: --section N; every number: --json\n"
    out = lesson_section(l, section)
    if section < total:
        out += f"next: --section {section + 1}  ({l.sections[section]['title']})\n"
    return out


def _numbers(l, s: dict) -> list[str]:
    """The lines of numbers section s shows (l: the whole lesson)."""
    i, j, tok = l.query, l.key, lambda m: quote(l.tokens[m])
    name = s["name"]
    if name in ("embedding", "layer_input"):
        E = "E" if name == "embedding" else f"E (layer {l.layer})"
        return [_vector(f"{E} of member {i} {tok(i)}", s["query_row"]), _vector(f"{E} of member {j} {tok(j)}", s["key_row"])]
    if name == "qkv":
        return [_vector(f"q_{i} {tok(i)}", member_row(s, "q", i)), _vector(f"k_{j} {tok(j)}", member_row(s, "k", j)),
                _vector(f"v_{j} {tok(j)}", member_row(s, "v", j))]
    if name == "scores":
        qkv = l.sections[SECTIONS.index("qkv")]
        qi, kj = member_row(qkv, "q", i), member_row(qkv, "k", j)
        rows = [[t, qi[t], kj[t], x] for t, x in enumerate(s["terms"][:TERMS_SHOWN])]
        more = len(s["terms"]) - TERMS_SHOWN
        return [f"  q_{i} · k_{j}, term by term:", table(["t", f"q_{i}[t]", f"k_{j}[t]", "product"], rows)] \
            + ([f"  … {more} more terms (--json: all)"] if more > 0 else []) \
            + [f"  sum of the {len(s['terms'])} products {s['dot']:.6g}; ÷ √d_k = {s['sqrt_d_k']:.4g}: score {s['score']:.6g}"]
    if name == "softmax":
        ranked = sorted((m for m, w in enumerate(s["weights"]) if s["scores"][m] is not None), key=lambda m: -s["weights"][m])
        rows = [[m, tok(m), s["scores"][m], s["exps"][m], s["weights"][m]] for m in ranked[:ROW_SHOWN]]
        return [f"  question {i}'s row, its largest weights (of {len(ranked)} members it hears):",
                table(["member", "token", "score s", f"exp(s − {s['shift']:.4g})", "weight = exp ÷ Σ"], rows),
                f"  Σ of the {len(ranked)} exps {s['exp_sum']:.6g} (the largest score, {s['shift']:.4g}, subtracted first)"]
    if name == "weighted_sum":
        top = sorted(range(len(s["contributions"])), key=lambda m: -s["contributions"][m])[:ROW_SHOWN]
        return [_vector(f"output_{i} = Σ_j w_{i}j v_j", s["output"]), "  the largest parts, w × ‖v_j·W_O‖:",
                table(["member", "token", "size"], [[m, tok(m), s["contributions"][m]] for m in top]), *_coordinate(l, s)]
    if name == "conclusion":
        words = lambda top: ", ".join(f"{quote(w['token'])} {percent(w['prob'])}" for w in top)  # noqa: E731
        lines = [f"  next word: {words(s['top'])}"]
        if s.get("shorter_top"):
            lines.append(f"  without the context ({quote(s['shorter_text'])}): {words(s['shorter_top'])}")
        return lines
    return []


def _coordinate(l, s: dict) -> list[str]:
    """The weighted sum's coordinate t worked out: its largest terms w_j · v_j[t], the sum, the model's."""
    i, t, w = l.query, s["t"], l.sections[SECTIONS.index("softmax")]["weights"]
    heard = [m for m, x in enumerate(s["terms"]) if x is not None]
    top = sorted(heard, key=lambda m: -abs(s["terms"][m]))[:ROW_SHOWN]
    more = len(heard) - len(top)
    return [f"  one coordinate, t = {t} (the output's largest): output_{i}[{t}] = Σ_j w_j · v_j[{t}], its largest terms:",
            table(["member", "token", "w_j", f"v_j[{t}]", "w_j · v_j[t]"],
                  [[m, quote(l.tokens[m]), w[m], s["v_t"][m], s["terms"][m]] for m in top])] \
        + ([f"  … {more} more terms (--json: all)"] if more > 0 else []) \
        + [f"  sum of the {len(heard)} terms {s['terms_sum']:.6g}; the model's output_{i}[{t}] {s['output'][t]:.6g}"]


def _vector(name: str, xs: list[float]) -> str:
    """name = [the first VECTOR_SHOWN numbers, …] (how many in all)."""
    shown = ", ".join(f"{x:.4g}" for x in xs[:VECTOR_SHOWN])
    rest = f", … ({len(xs)} numbers; --json: all)" if len(xs) > VECTOR_SHOWN else ""
    return wrap(f"{name} = [{shown}{rest}]")
