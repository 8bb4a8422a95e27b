"""A survey's report: report.html (per role a layer × head grid of mean scores, the interval and
the count on hover, the top heads; two surveys side by side) and one PNG per role, in
<first survey's folder>/report/. Reads finished surveys only; never calls the model."""
from __future__ import annotations

import math
from html import escape
from pathlib import Path

import numpy as np

from studygroup.study.roles import DEFINITIONS
from studygroup.study.survey.summary import ROLE_ORDER, Survey
from studygroup.views import colours
from studygroup.views.figures_style import WEIGHTS_CMAP, new_figure, save, style
from studygroup.views.output_file import write_text

FIRST_DEFINITION = "weight on member 0 (Gu et al.'s importance score of the first token)"
ROLES_SHOWN = (*ROLE_ORDER, "first")


def write_report(surveys: list[Survey], top: int = 5) -> Path:
    """Write report.html and <role>.png into the first survey's folder's report/; returns the HTML's path."""
    folder = Path(surveys[0].folder) / "report"
    folder.mkdir(exist_ok=True)
    for role in ROLES_SHOWN:
        save(role_figure(surveys, role), folder / f"{role}.png")
    return write_text(folder / "report.html", report_html(surveys, top))


def grid(s: Survey, role: str) -> tuple[np.ndarray, dict]:
    """(n_layers, n_heads) mean scores of `role` (NaN where unscored) and the HeadSummary of each (layer, head)."""
    heads = {(h.layer, h.head): h for h in s.heads if h.role == role}
    L, H = max(l for l, _ in heads) + 1, max(h for _, h in heads) + 1
    means = np.full((L, H), np.nan)
    for (l, h), x in heads.items():
        means[l, h] = x.mean
    return means, heads


def role_figure(surveys: list[Survey], role: str):
    """One panel per survey: the layer × head grid of `role`'s mean, viridis on 0–1."""
    with style():
        fig = new_figure(4.2 * len(surveys) + 1, 6.5)
        axes = fig.subplots(1, len(surveys), squeeze=False)[0]
        for ax, s in zip(axes, surveys):
            means, _ = grid(s, role)
            image = ax.imshow(means, cmap=WEIGHTS_CMAP, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
            ax.set(xlabel="head", ylabel="layer")
            ax.set_title(f"{role}\n{s.model}\n{s.sequences} {s.corpus} sequences", fontsize=10)
        fig.colorbar(image, ax=list(axes), label=f"mean {role} score over sequences (0–1)")
    return fig


def _label(s: Survey) -> str:
    return f"{s.model}, {s.sequences} {s.corpus} sequences"


def report_html(surveys: list[Survey], top: int) -> str:
    sections = "".join(_role_section(surveys, role, top) for role in ROLES_SHOWN)
    stories = "".join(f"<h2>{escape(_label(s))}</h2><p>{escape(s.description)}; folder {escape(s.folder)}</p><ul>"
                      + "".join(f"<li>{escape(line)}</li>" for line in s.story()) + "</ul>" for s in surveys)
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>studygroup survey</title>"
            f"<style>{CSS}</style></head><body><h1>Head roles over a corpus</h1>{stories}"
            f"<p>A head is an X head on a sequence when its X score there is at least {surveys[0].threshold}. "
            f"Intervals: 95% bootstrap over sequences. Colours: viridis on a fixed 0–1 scale.</p>{sections}</body></html>")


def _role_section(surveys: list[Survey], role: str, top: int) -> str:
    definition = DEFINITIONS.get(role, FIRST_DEFINITION)
    panels = "".join(f"<div class=panel><h3>{escape(_label(s))}</h3>{_grid_table(s, role)}{_top_table(s, role, top)}</div>"
                     for s in surveys)
    return f"<section><h2>{role}</h2><p>{escape(definition)}; <a href='{role}.png'>{role}.png</a></p>{panels}</section>"


def _grid_table(s: Survey, role: str) -> str:
    means, heads = grid(s, role)
    L, H = means.shape
    head_row = "<tr><th>layer</th>" + "".join(f"<th>{h}</th>" for h in range(H)) + "</tr>"
    rows = "".join(f"<tr><th>{l}</th>" + "".join(_cell(s, heads[l, h], role) for h in range(H)) + "</tr>" for l in range(L))
    return f"<table class=grid>{head_row}{rows}</table>"


def _cell(s: Survey, x, role: str) -> str:
    if math.isnan(x.mean):
        return f"<td class=none title='head {x.layer}.{x.head}: no sequence scores {role}'></td>"
    rgb = colours.weight_rgb(x.mean)
    return f"<td style='background:rgb{rgb}' title='{escape(s.said(x))}'></td>"


def _top_table(s: Survey, role: str, top: int) -> str:
    rows = "".join(f"<tr><td>{h.layer}.{h.head}</td><td>{h.mean:.3f}</td><td>[{h.low:.3f}, {h.high:.3f}]</td>"
                   f"<td>{h.above} of {h.n}</td></tr>" for h in s.top(role, top))
    return ("<table class=top><tr><th>head</th><th>mean</th><th>95% interval</th><th>sequences where it is one</th>"
            f"</tr>{rows}</table>")


CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;max-width:90em}
section{margin:2em 0}.panel{display:inline-block;vertical-align:top;margin-right:2em}
table.grid{border-collapse:collapse}table.grid td{width:14px;height:12px;padding:0}
table.grid th{font-size:9px;font-weight:normal;padding:0 3px}td.none{background:#ececec}
table.top td,table.top th{padding:2px 8px;text-align:left}"""
