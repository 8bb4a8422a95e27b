"""The lesson's sections (a LessonSections) as one self-contained HTML page: no scripts, no
network, every text escaped. Each section goes back, to the contents and on to the next."""
from __future__ import annotations

from html import escape

from studygroup.study.lesson_sections import member_row
from studygroup.formats import quote
from studygroup.views import colours

STYLE = """
body { font: 16px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.5rem; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; display: block; overflow-x: auto; }
caption { text-align: left; font-style: italic; padding-bottom: 0.25rem; }
th, td { border: 1px solid #ddd; padding: 0.15rem 0.5rem; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.masked { background: MASKED_BACKGROUND; }
dl.formulas dt { font-weight: 600; } dl.formulas dd { margin: 0 0 0.5rem 1rem; font-family: monospace; }
pre { background: #f6f6f6; padding: 0.75rem; overflow-x: auto; white-space: pre-wrap; }
nav ol { columns: 2; }
p.steps { display: flex; gap: 1.5rem; font-size: 0.9rem; }
""".replace("MASKED_BACKGROUND", colours.mask_css())


def _cell(x, shade: bool = False) -> str:
    """A table cell: None is masked (the future: the lesson's pass silences nobody unless asked), a
    number is right-aligned (a weight in [0, 1] shaded when `shade`), anything else escaped text."""
    if x is None:
        return f'<td class="masked" title="{escape(colours.MASKED["future"][1])}"></td>'
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        style = ""
        if shade and 0.0 <= x <= 1.0:  # weights: one absolute 0–1 scale, the same in every table and view
            rgb = colours.weight_rgb(x)
            style = f' style="background: rgb{rgb}; color: {colours.ink(rgb)}"'
        return f'<td class="num"{style} title="{float(x):.6g}">{float(x):.4g}</td>'
    return f"<td>{escape(str(x))}</td>"


def _table(caption: str, header: list[str], rows: list[list], weights: int | None = None) -> str:
    """A table; the numbers of column `weights` (if any) are weights in [0, 1], shaded."""
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(x, c == weights) for c, x in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><caption>{escape(caption)}</caption><tr>{head}</tr>{body}</table>"


def _vector(name: str, xs: list[float]) -> str:
    return f"<pre>{escape(name)} = [{', '.join(f'{x:.4g}' for x in xs)}]</pre>"


def _words(caption: str, words: list[dict]) -> str:
    return _table(caption, ["next word", "probability"], [[quote(w["token"]), w["prob"]] for w in words], weights=1)


def _named(d: dict, name: str) -> dict:
    return next(s for s in d["sections"] if s["name"] == name)


def _numbers(d: dict, s: dict) -> str:
    """The numbers section s shows, as tables and vectors (d: the whole LessonSections as a dict)."""
    tokens, i, j = [quote(t) for t in d["tokens"]], d["query"], d["key"]
    name = s["name"]
    if name == "members":
        return _table("the members", ["member", "token"], [[m, t] for m, t in enumerate(tokens)])
    if name in ("embedding", "layer_input"):
        return _table("‖E_i‖ of each member", ["member", "token", "norm"],
                      [[m, t, x] for m, (t, x) in enumerate(zip(tokens, s["norms"]))])
    if name == "qkv":
        return _vector(f"q_{i} ({tokens[i]})", member_row(s, "q", i)) + _vector(f"k_{j} ({tokens[j]})", member_row(s, "k", j)) \
            + _vector(f"v_{j} ({tokens[j]})", member_row(s, "v", j))
    if name == "scores":
        grid = "" if s["grid"] is None else _table("scores Q·Kᵀ/√d_k: row i is question i, column j answer j",
                                                   ["question \\ answer"] + tokens,
                                                   [[t] + row for t, row in zip(tokens, s["grid"])])
        return _vector(f"q_{i}[t] × k_{j}[t], t = 0 … {len(s['terms']) - 1}", s["terms"]) + grid
    if name == "softmax":
        rows = [[m, t, x, e, w] for m, (t, x, e, w) in enumerate(zip(tokens, s["scores"], s["exps"], s["weights"]))]
        rows.append(["Σ", "", "", s["exp_sum"], ""])
        scenes = "".join(_table(f"the article's example: {g['context']}", ["member", "score", "weight"],
                                [list(r) for r in zip(g["members"], g["scores"], g["weights"])], weights=2)
                         for g in s["example"])
        return _table(f"question {i}'s row: weight = exp(s − {s['shift']:.4g}) ÷ Σ exp (the largest score subtracted first)",
                      ["member", "token", "score s", f"exp(s − {s['shift']:.4g})", "weight"], rows, weights=4) + scenes
    if name == "weighted_sum":
        rows = [[m, t, w, c] for m, (t, w, c) in
                enumerate(zip(tokens, _named(d, "softmax")["weights"], s["contributions"]))]
        t, w = s["t"], _named(d, "softmax")["weights"]
        terms = [[m, tok, w[m], v, x] for m, (tok, v, x) in enumerate(zip(tokens, s["v_t"], s["terms"]))] \
            + [["Σ", "sum of the terms", "", "", s["terms_sum"]], ["", f"the model's output_{i}[{t}]", "", "", s["output"][t]]]
        return _vector(f"Σ_j w_{i}j v_j", s["output"]) \
            + _table(f"one coordinate, t = {t} (the output's largest): output_{i}[{t}] = Σ_j w_j · v_j[{t}]",
                     ["member", "token", "w_j", f"v_j[{t}]", "w_j · v_j[t]"], terms, weights=2) \
            + _table("each answer's part", ["member", "token", "weight", "weight × ‖v_j·W_O‖"], rows, weights=2)
    shorter = "" if s["shorter_top"] is None else _words(f"after “{s['shorter_text']}”", s["shorter_top"])
    return _words(f"after “{d['text']}”", s["top"]) + shorter


def _steps(n: int, last: int) -> str:
    """Links under section n: back to the one before, the contents, on to the next."""
    back = f'<a href="#s{n - 1}" rel="prev">← back: section {n - 1}</a>' if n > 1 else ""
    on = f'<a href="#s{n + 1}" rel="next">next: section {n + 1} →</a>' if n < last else ""
    return f'<p class="steps">{back}<a href="#contents">contents</a>{on}</p>'


def _section(d: dict, n: int, s: dict) -> str:
    formulas = (f'<dl class="formulas"><dt>rows (the paper)</dt><dd>{escape(s["formula_paper"])}</dd>'
                f'<dt>columns (the video)</dt><dd>{escape(s["formula_columns"])}</dd></dl>')
    says = "".join(f"<p>{escape(x)}</p>" for x in s["says"])
    return (f'<section id="s{n}"><h2>{n}. {escape(s["title"])}</h2>{formulas}{says}{_numbers(d, s)}'
            f'{_steps(n, len(d["sections"]))}</section>')


def lesson_html(lesson) -> str:
    """The LessonSections as a complete HTML document (str)."""
    d = lesson.to_dict()
    nav = "".join(f'<li><a href="#s{n}">{escape(s["title"])}</a></li>' for n, s in enumerate(d["sections"], 1))
    sections = "".join(_section(d, n, s) for n, s in enumerate(d["sections"], 1))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>If attention were a study group'
            f"</title><style>{STYLE}</style></head><body><h1>If attention were a study group</h1>"
            f"<p>The attention layer of a real model on “{escape(d['text'])}”, following head {d['head']} of layer "
            f"{d['layer']}: member {d['query']}'s question and member {d['key']}'s answer.</p>"
            f"<nav id='contents'><ol>{nav}</ol></nav>{sections}</body></html>\n")
