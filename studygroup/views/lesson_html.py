"""The lesson as one self-contained HTML page: no scripts, no network, every text escaped."""
from __future__ import annotations

from html import escape

from studygroup.views import colours

STYLE = """
body { font: 16px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.5rem; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
caption { text-align: left; font-style: italic; padding-bottom: 0.25rem; }
th, td { border: 1px solid #ddd; padding: 0.15rem 0.5rem; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.masked { background: MASKED_BACKGROUND; }
pre { background: #f6f6f6; padding: 0.75rem; overflow-x: auto; white-space: pre-wrap; }
nav ol { columns: 2; }
p.steps { display: flex; gap: 1.5rem; font-size: 0.9rem; }
""".replace("MASKED_BACKGROUND", colours.mask_css())


def _cell(x, shade: bool) -> str:
    if x is None:
        return f'<td class="masked" title="{escape(colours.MASKED["future"][1])}"></td>'  # the lesson silences nobody
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        style = ""
        if shade and 0.0 <= x <= 1.0:  # weights: one absolute 0–1 scale, the same in every table and view
            rgb = colours.weight_rgb(x)
            style = f' style="background: rgb{rgb}; color: {colours.ink(rgb)}"'
        return f'<td class="num"{style} title="{float(x):.4g}">{float(x):.4g}</td>'
    return f"<td>{escape(str(x))}</td>"


def _block(b) -> str:
    if b.kind == "text":
        return f"<p>{escape(b.text)}</p>"
    if b.kind == "code":
        return f"<pre>{escape(b.text)}</pre>"
    head = "".join(f"<th>{escape(str(h))}</th>" for h in b.header)
    body = "".join("<tr>" + "".join(_cell(x, b.shade) for x in row) + "</tr>" for row in b.rows)
    return f"<table><caption>{escape(b.caption)}</caption><tr>{head}</tr>{body}</table>"


def _steps(n: int, last: int) -> str:
    """Links under section n: back to the one before, the contents, on to the next."""
    back = f'<a href="#s{n - 1}" rel="prev">← back: section {n - 1}</a>' if n > 1 else ""
    on = f'<a href="#s{n + 1}" rel="next">next: section {n + 1} →</a>' if n < last else ""
    return f'<p class="steps">{back}<a href="#contents">contents</a>{on}</p>'


def lesson_html(lesson) -> str:
    """The Lesson as a complete HTML document (str)."""
    texts = " and ".join(f"“{escape(t)}”" for t in lesson.texts)
    nav = "".join(f'<li><a href="#s{s.number}">{escape(s.title)}</a></li>' for s in lesson.sections)
    last = len(lesson.sections)
    sections = "".join(f'<section id="s{s.number}"><h2>{s.number}. {escape(s.title)}</h2>'
                       + "".join(_block(b) for b in s.blocks) + _steps(s.number, last) + "</section>"
                       for s in lesson.sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>If attention were a study group'
            f"</title><style>{STYLE}</style></head><body><h1>If attention were a study group</h1>"
            f"<p>The attention layer of a real model on {texts}, following head {lesson.head} of layer "
            f"{lesson.layer}.</p><nav id='contents'><ol>{nav}</ol></nav>{sections}</body></html>\n")
