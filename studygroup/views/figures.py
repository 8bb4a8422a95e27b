"""Figures for slides and papers: the study layer's results drawn with matplotlib, saved as PNG or SVG.

Every function takes plain data (the results' `to_dict()`: nested dicts, lists and numbers) and
returns a `matplotlib.figure.Figure`; nothing here computes the model. One figure per command:

- `explain_figure(Explanation.to_dict())`: the next words, the most decisive head's last
  question, and the layer × head grid with the decisive heads ranked;
- `compare_figure(Comparison.to_dict())`: the next words before and after, with the signed shift;
- `head_view_figure(HeadView.to_dict())`: the head's weight and score grids.

The panels alone: `head_figure`, `model_view_figure`, `conclusion_figure`. `save(fig, path)`
writes a PNG or an SVG by the extension; `check_path(path)` refuses a bad one before the work.

>>> fig = conclusion_figure([{"token": "␣of", "prob": 0.96}, {"token": "␣on", "prob": 0.017}])
>>> save(fig, "conclusion.png")
PosixPath('conclusion.png')
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from studygroup.views import colours
from studygroup.views.figures_bars import (SHIFT_SHOWN, conclusion_bars, conclusion_figure, head_changes, listening_bars, residual_stream,
                                     shift_bars)
from studygroup.views.figures_grid import (DECISIVE_BOXED, contribution_grid, decisive_pairs, model_view_figure, thumbnails,
                                          view_reasons)
from studygroup.views.figures_head import head_figure, paper_grids
from studygroup.views.figures_style import check_path, label, new_figure, save, style

__all__ = ["check_path", "compare_figure", "conclusion_figure", "explain_figure", "head_figure", "head_view_figure",
           "label", "model_view_figure", "paper_grids", "save"]


def explain_figure(explanation: dict, view: dict | None = None) -> Figure:
    """`studygroup explain` on one slide: the next words, the most decisive head's last question,
    and the layer × head grid: every head's direct contribution to the predicted word's logit, or,
    given `view`, every head's weights as a thumbnail; the most decisive heads boxed with their rank.

    explanation: `Explanation.to_dict()`. view: `ModelView.to_dict()` of the same text (optional).
    """
    with style():
        e, fig = explanation, new_figure(16, 9)
        left, right = fig.subfigures(1, 2, width_ratios=[1.6, 1.0])
        top_ax, head_ax = left.subplots(2, 1, height_ratios=[1.0, 1.1])
        conclusion_bars(top_ax, e["top"])
        if e["heads"]:
            T, g = len(e["tokens"]), e.get("generated_from")
            listening_bars(head_ax, e["heads"][0], label(e["tokens"][-1]) + colours.generated_mark(T - 1, g),
                           generated_from=g)
        else:
            head_ax.set_axis_off()
        model, decisive = e["model"], decisive_pairs(e["heads"])
        grid_ax, stream_ax = right.subplots(2, 1, height_ratios=[2.4, 1.0])
        group_size = model["n_heads"] // model["n_kv_heads"]
        residual_stream(stream_ax, e["contributions"], e["mlp_contributions"], e["logit_parts"]["embed"],
                        e["predicted"]["token"])
        if view is None:
            contribution_grid(right, grid_ax, np.array(e["contributions"], dtype=float), decisive, group_size,
                               e["predicted"]["token"])
        else:
            maps = np.array([[h["weights"] for h in layer] for layer in view["heads"]], dtype=np.float32)
            image = thumbnails(grid_ax, maps, decisive, group_size, view_reasons(view))
            right.colorbar(image, ax=grid_ax, shrink=0.6, pad=0.02).set_label("weight — fixed 0–1 scale")
            grid_ax.set_title("Every head's weights", loc="left", fontsize=12, pad=24)
        grid_ax.set_xlabel(f"query head\nboxed: the {min(DECISIVE_BOXED, len(decisive))} heads whose silencing "
                           f"moves p(“{label(e['predicted']['token'])}”) most, by rank", fontsize=11)
        fig.suptitle(_quoted(e), fontsize=15, fontweight="bold")
        return fig


def _quoted(e: dict, limit: int = 70) -> str:
    text = e.get("text")
    text = "".join(label(t, limit=60) for t in e["tokens"]) if text is None else text
    return "“" + label(text.replace("\n", "↵"), limit) + "”"


def compare_figure(comparison: dict) -> Figure:
    """`studygroup compare` on one slide: the next words before (text a) and after (text b), with
    the signed shift, and the heads whose direct push on the followed word changed most.

    comparison: `Comparison.to_dict()`.
    """
    with style():
        c = comparison
        shift = c["shift"][:SHIFT_SHOWN]
        fig = new_figure(16, max(6.0, 1.8 + 0.62 * len(shift)))
        bars, heads = fig.subplots(1, 2, width_ratios=[1.6, 1.0])
        shift_bars(bars, shift, (f"a: {_quoted(c['a'], 40)}", f"b: {_quoted(c['b'], 40)}"))
        if c.get("heads"):
            head_changes(heads, c["heads"], c["word"])
        else:
            heads.set_axis_off()
        fig.suptitle(f"What the longer context does to “{label(c['word'])}”", fontsize=15, fontweight="bold")
        return fig


def head_view_figure(head: dict, last_rows: int | None = None) -> Figure:
    """The figure of `studygroup head`: both grids of the head dict, in its own notation.

    >>> head_view_figure({"tokens": ["A"], "notation": "columns", "weights": [[1.0]]}).axes[0].get_title()
    'Weights'
    """
    return head_figure(head, head.get("notation", "paper"), last_rows)
