"""One head's grids as a figure: the weights (0–1) and the scores (centred on 0), side by side.

Paper orientation: rows are questions (the member asking), columns answers (the member heard);
each row of weights sums to 1. Columns orientation (3Blue1Brown): the transpose; each column sums
to 1. Masked cells are hatched by their reason (the head's "mask_reasons": the future, a silenced
member, …), as on the page, and the legend names each reason shown. Long texts show the last
question(s) only.
"""
from __future__ import annotations

import textwrap

import matplotlib
import numpy as np
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from studygroup.errors import InputError
from studygroup.study.mask_reasons import FUTURE, REASONS, SILENCED, VISIBLE
from studygroup.views import colours
from studygroup.views.figures_style import (MASK_EDGE, MASK_FACE, SCORES_CMAP, SINK_TAG, WEIGHTS_CMAP, answer_axis,
                                            clear_bad, colour_generated, generated_patch, hatch, label, new_figure,
                                            style)

#: A head's figure draws every question's row up to this many members, else the last (or last_rows): a
#: figure labels each member on both axes, and past this many the labels no longer read.
FIGURE_GRID_MAX_T = 32
CELL_VALUES_MAX = 12  # grids up to this many members per side print their values
STRIP_ROWS = 3  # paper grids of this few questions (of more members) are stacked, not side by side
TICK_LABELS_MAX = 48  # past this many members, label every k-th one


def _tick_positions(n: int) -> list[int]:
    """Which of n members get a tick label: all up to TICK_LABELS_MAX, else every k-th and the last."""
    step = 1 if n <= TICK_LABELS_MAX else -(-n // TICK_LABELS_MAX)
    return sorted({*range(0, n, step), n - 1})


def _paper(values, notation: str, T: int, what: str, dtype=float) -> np.ndarray:
    """Nested lists in `notation` (masked cells None) -> array (R, T) in paper orientation, NaN where None."""
    try:
        a = np.array([[np.nan if x is None else x for x in row] for row in values], dtype=dtype)
    except (TypeError, ValueError):
        raise InputError(f"a head's {what} must be a rectangular grid of numbers") from None
    a = a.T if notation == "columns" else a
    if a.ndim != 2 or a.shape[1] != T or not 1 <= a.shape[0] <= T:
        side = "rows" if notation == "paper" else "columns"
        raise InputError(f"a head's {what} should have {T} answers for each question ({T} members), and "
                         f"one question per {side[:-1]}; got a {'×'.join(map(str, np.shape(values)))} grid")
    return a


def paper_grids(head: dict) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """A head dict's weights and scores in paper orientation, and its mask.

    head: {"tokens": T strings, "notation": "paper" | "columns", "weights": (R, T) (paper) or
    (T, R) (columns) nested lists, optional "scores" (same shape, masked cells None), optional
    "mask" (True = may hear)}. The R questions are the last R members. Returns weights (R, T),
    scores (R, T) or None, and mask (R, T) bool: from "mask", else "mask_reasons", else the scores'
    None cells, else causal.

    >>> W, S, mask = paper_grids({"tokens": ["A", "b"], "notation": "columns", "weights": [[1.0, 0.5], [0.0, 0.5]]})
    >>> W.tolist(), S, mask.tolist()
    ([[1.0, 0.0], [0.5, 0.5]], None, [[True, False], [True, True]])
    """
    T, notation = len(head["tokens"]), head.get("notation", "paper")
    if notation not in ("paper", "columns"):
        raise InputError(f"notation must be 'paper' or 'columns', not {notation!r}")
    W = _paper(head["weights"], notation, T, "weights")
    S = None if head.get("scores") is None else _paper(head["scores"], notation, T, "scores")
    R = W.shape[0]
    if head.get("mask") is not None:
        mask = _paper(head["mask"], notation, T, "mask", dtype=bool)
    elif head.get("mask_reasons") is not None:
        mask = _paper(head["mask_reasons"], notation, T, "mask_reasons", dtype=int) == VISIBLE
    elif S is not None and np.isnan(S).any():
        mask = ~np.isnan(S)
    else:
        mask = np.arange(T)[None, :] <= np.arange(T - R, T)[:, None]  # causal, rows aligned at the end
    if (S is not None and S.shape != W.shape) or mask.shape != W.shape:
        raise InputError(f"a head's weights, scores and mask must have the same shape; weights are {W.shape}")
    return W, S, mask


def paper_reasons(head: dict, mask: np.ndarray) -> np.ndarray:
    """(R, T) codes of study.mask_reasons in paper orientation: the head's "mask_reasons", or, for a
    head written without them, from `mask` (R, T): a later answer is the future, an earlier one a
    silenced member's.

    >>> paper_reasons({"tokens": ["A", "b"]}, np.array([[True, False], [False, True]])).tolist()
    [[0, 1], [2, 0]]
    """
    T, R = len(head["tokens"]), mask.shape[0]
    if head.get("mask_reasons") is not None:
        return _paper(head["mask_reasons"], head.get("notation", "paper"), T, "mask_reasons", dtype=int)
    later = np.arange(T)[None, :] > np.arange(T - R, T)[:, None]  # (R, T), rows aligned at the end
    return np.where(mask, VISIBLE, np.where(later, FUTURE, SILENCED))


def head_figure(head: dict, notation: str = "paper", last_rows: int | None = None) -> Figure:
    """The weight grid (viridis, 0–1) and the score grid (diverging at 0) of one head, side by side.

    head: as `paper_grids` reads it, plus optional "layer", "head", "kv_head", "sinks" (the members
    tagged as the head's attention sinks on the answers' axis), "generated_from" (the first member
    the model generated: its label and those after it marked, in colours.GENERATED). notation: the
    orientation to draw ("paper": rows are questions; "columns": the transpose). last_rows: how
    many of the last questions to show (default: all up to FIGURE_GRID_MAX_T members, else 1).

    >>> head = {"tokens": ["A", "␣b"], "weights": [[1.0, 0.0], [0.4, 0.6]], "scores": [[0.3, None], [-1.0, 0.2]]}
    >>> head_figure(head, "columns").axes[0].images[0].get_array().shape
    (2, 2)
    """
    if notation not in ("paper", "columns"):
        raise InputError(f"notation must be 'paper' or 'columns', not {notation!r}")
    with style():
        W, S, mask = paper_grids(head)
        reasons = paper_reasons(head, mask)
        T, R = len(head["tokens"]), W.shape[0]
        shown = min(R, last_rows if last_rows else (R if T <= FIGURE_GRID_MAX_T else 1))
        W, mask, reasons = W[-shown:], mask[-shown:], reasons[-shown:]
        S = None if S is None else S[-shown:]
        questions = list(range(T - shown, T))
        panels = 1 if S is None else 2
        strip = notation == "paper" and shown <= STRIP_ROWS < T  # a few long rows: one panel above the other
        fig = _head_canvas(shown, T, notation, panels, strip)
        axes = fig.subplots(panels if strip else 1, 1 if strip else panels, squeeze=False).flatten()
        members = _Members(head["tokens"], list(head.get("sinks") or ()), head.get("generated_from"))
        _head_grid(fig, axes[0], W, mask, reasons, members, questions, notation, "weights")
        if S is not None:
            _head_grid(fig, axes[1], S, mask, reasons, members, questions, notation, "scores")
        _legend(fig, reasons, members.generated_from is not None and members.generated_from < T)
        fig.suptitle(_head_title(head, shown, T), fontsize=14, fontweight="bold")
        _fit_captions(fig)
        return fig


def _fit_captions(fig: Figure) -> None:
    """Wrap each axis caption that is longer than its side of the grid (or of the colour bar), so
    that no caption runs into the next panel's; the layout then makes room for the extra lines."""
    original: dict = {}
    for _ in range(3):  # wrapping changes the layout, which changes the room: settles in one or two rounds
        fig.canvas.draw()
        too_long = [(text, room) for text, room in _captions(fig) if _length(text) > room + 1]
        if not too_long:
            return
        for text, room in too_long:
            whole = original.setdefault(text, text.get_text().replace("\n", " "))
            chars = max(12, int(len(whole) * room / _length(text, whole)) - 2)
            text.set_text(textwrap.fill(whole, chars))


def _captions(fig: Figure):
    """(caption, the length in pixels of the side it labels) for every axis caption of the figure."""
    for ax in fig.axes:
        box = ax.get_window_extent()
        for text, room in ((ax.xaxis.label, box.width), (ax.yaxis.label, box.height)):
            if text.get_text():
                yield text, room


def _length(text, whole: str | None = None) -> float:
    """A caption's extent along its own direction, in pixels (of `whole` on one line, when given)."""
    box = text.get_window_extent()
    along = box.height if text.get_rotation() % 180 == 90 else box.width
    return along if whole is None else along * len(whole) / max(map(len, text.get_text().split("\n")))


def _head_title(head: dict, shown: int, T: int) -> str:
    name = ""
    if "layer" in head and "head" in head:
        kv = f" (key/value head {head['kv_head']})" if head.get("kv_head") is not None else ""
        name = f"Layer {head['layer']}, head {head['head']}{kv}"
    part = "" if shown == T else (f" — the last question of {T} members" if shown == 1
                                  else f" — the last {shown} questions of {T} members")
    return name + part


def _head_canvas(R: int, T: int, notation: str, panels: int, strip: bool) -> Figure:
    """A figure sized so that cells stay readable: ~0.5 inch when values are printed, smaller for more."""
    if strip:
        return new_figure(min(18.0, max(8.0, 0.3 * T + 3.5)), panels * (0.5 * R + 2.4) + 0.8)
    cell = 0.5 if T <= CELL_VALUES_MAX else max(0.12, 7.0 / T)
    across, down = (T, R) if notation == "paper" else (R, T)
    w, h = max(3.2, across * cell), max(1.2, down * cell)
    return new_figure(panels * (w + 2.4) + 0.4, h + 2.6)


class _Members:
    """The members as the axes label them: tokens (T,), the answers that are sinks, the first generated member."""

    def __init__(self, tokens: list[str], sinks: list[int], generated_from: int | None):
        self.tokens, self.sinks, self.generated_from = tokens, sinks, generated_from

    def label(self, i: int, as_answer: bool) -> str:
        sink = SINK_TAG if as_answer and i in self.sinks else ""
        return label(self.tokens[i]) + colours.generated_mark(i, self.generated_from) + sink


def _head_grid(fig: Figure, ax, grid: np.ndarray, mask: np.ndarray, reasons: np.ndarray, members: _Members,
               questions: list[int], notation: str, kind: str) -> None:
    """One grid (R questions × T answers, paper orientation) drawn in `notation` on `ax`."""
    values = np.ma.masked_array(grid, mask=~mask | np.isnan(grid))
    shown = values if notation == "paper" else values.T
    if kind == "weights":
        cmap, norm, legend = clear_bad(WEIGHTS_CMAP), matplotlib.colors.Normalize(0, 1), "weight (softmax)"
    else:
        m = max(1e-6, float(np.nanmax(np.abs(np.where(mask, grid, np.nan)))))
        cmap, norm, legend = clear_bad(SCORES_CMAP), TwoSlopeNorm(0.0, -m, m), "score q·k/√d_head"
    image = ax.imshow(shown, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest", zorder=1)
    _hatch_background(ax, reasons if notation == "paper" else reasons.T)
    _axis_labels(ax, members, questions, notation)
    if max(shown.shape) <= CELL_VALUES_MAX:
        _cell_values(ax, shown, cmap, norm, 2 if kind == "weights" else 1)
    ax.set_title("Weights" if kind == "weights" else "Scores (before the mask)", pad=10 if notation == "paper" else 24)
    bar = fig.colorbar(image, ax=ax, shrink=0.9, pad=0.02)
    bar.set_label(legend + (" — fixed 0–1 scale" if kind == "weights" else " — centred on 0"))
    if kind == "weights":
        _sum_note(ax, notation)
    for side in ("top", "right"):
        ax.spines[side].set_visible(True)


def _hatch_background(ax, reasons: np.ndarray) -> None:
    """Hatched rectangles under the grid, by reason (rows × columns as drawn): its transparent
    (masked) cells show them. One rectangle of the commonest reason, one per cell of the others."""
    rows, cols = reasons.shape
    hidden = reasons[reasons != VISIBLE]
    common = int(np.bincount(hidden).argmax()) if hidden.size else FUTURE
    ax.add_patch(Rectangle((-0.5, -0.5), cols, rows, facecolor=MASK_FACE, edgecolor=MASK_EDGE,
                           hatch=hatch(REASONS[common]), linewidth=0, zorder=0))
    for (r, c), code in np.ndenumerate(reasons):
        if code not in (VISIBLE, common):
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, facecolor=MASK_FACE, edgecolor=MASK_EDGE,
                                   hatch=hatch(REASONS[code]), linewidth=0, zorder=0.5))


def _legend(fig: Figure, reasons: np.ndarray, generated: bool) -> None:
    """One hatched patch per reason the grid shows, with its words from views.colours, and the
    generated members' mark where the axes show one."""
    shown = [REASONS[k] for k in sorted(set(reasons.flatten().tolist()) - {VISIBLE})]
    handles = [Patch(facecolor=MASK_FACE, edgecolor=MASK_EDGE, hatch=hatch(r), label=colours.MASKED[r][1]) for r in shown]
    if generated:
        handles.append(generated_patch())
    if handles:
        fig.legend(handles=handles, loc="outside lower left", frameon=False, fontsize=10, handlelength=1.6,
                   handleheight=1.2, ncols=len(handles))


def _axis_labels(ax, members: _Members, questions: list[int], notation: str) -> None:
    """Members on both axes; the answers that are the head's attention sinks tagged so, the axis
    saying what one is; the generated members marked and coloured."""
    answers = list(range(len(members.tokens)))
    q_ticks, a_ticks = _tick_positions(len(questions)), _tick_positions(len(answers))
    q_members, a_members = [questions[i] for i in q_ticks], a_ticks
    q_labels = [members.label(i, as_answer=False) for i in q_members]
    a_labels = [members.label(i, as_answer=True) for i in a_members]
    size = 11 if len(answers) <= 24 else 9 if len(answers) <= TICK_LABELS_MAX else 8
    q_name = "question from…" + ("" if len(questions) <= STRIP_ROWS else " (the member asking)")
    a_name = answer_axis(any(i in members.sinks for i in a_ticks))
    if notation == "paper":
        ax.set_yticks(q_ticks, q_labels, fontsize=size)
        ax.set_xticks(a_ticks, a_labels, fontsize=size, rotation=60, ha="right", rotation_mode="anchor")
        ax.set_ylabel(q_name), ax.set_xlabel(a_name)
        colour_generated(ax.get_yticklabels(), q_members, members.generated_from)
        colour_generated(ax.get_xticklabels(), a_members, members.generated_from)
    else:
        ax.set_xticks(q_ticks, q_labels, fontsize=size, rotation=60, ha="right", rotation_mode="anchor")
        ax.set_yticks(a_ticks, a_labels, fontsize=size)
        ax.set_xlabel(q_name), ax.set_ylabel(a_name)
        colour_generated(ax.get_xticklabels(), q_members, members.generated_from)
        colour_generated(ax.get_yticklabels(), a_members, members.generated_from)


def _cell_values(ax, shown: np.ma.MaskedArray, cmap, norm, digits: int) -> None:
    for (r, c), v in np.ndenumerate(shown.filled(np.nan)):
        if np.isfinite(v):
            red, green, blue, _ = cmap(norm(v))
            ink = "white" if 0.299 * red + 0.587 * green + 0.114 * blue < 0.5 else "black"
            ax.text(c, r, _rounded(v, digits), ha="center", va="center", fontsize=9, color=ink, zorder=2)


def _rounded(v: float, digits: int) -> str:
    """v with `digits` decimals, never '-0.00'."""
    text = f"{v:.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def _sum_note(ax, notation: str) -> None:
    if notation == "paper":
        ax.text(1.015, 0.5, "each row sums to 1 →", transform=ax.transAxes, rotation=90, ha="left", va="center",
                fontsize=10, style="italic")
    else:
        ax.text(0.5, 1.01, "each column sums to 1 ↓", transform=ax.transAxes, ha="center", va="bottom",
                fontsize=10, style="italic")
