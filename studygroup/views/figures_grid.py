"""Layer × head grids: one square per head (rows are layers, columns query heads grouped by the
key/value head they share), either every head's weights as a thumbnail or one number per head;
the most decisive heads boxed with their rank.
"""
from __future__ import annotations

import numpy as np
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from studygroup.study.mask_reasons import FUTURE, REASONS, VISIBLE
from studygroup.views.figures_style import (MASK_EDGE, MASK_FACE, SCORES_CMAP, WEIGHTS_CMAP, clear_bad, hatch, label,
                                            new_figure, style)

DECISIVE_BOXED = 5  # heads marked with their rank in the layer × head grids
CELL = 0.9  # a head's square in the layer × head grids (one unit per head, the rest is gap)
GROUP_GAP = 0.35  # extra gap between the query heads of two key/value heads


def decisive_pairs(decisive) -> list[tuple[int, int]]:
    """(layer, head) pairs from dicts with "layer" and "head" (explain's `heads`) or from pairs.

    >>> decisive_pairs([{"layer": 24, "head": 6}, (0, 2)])
    [(24, 6), (0, 2)]
    """
    return [(int(d["layer"]), int(d["head"])) if isinstance(d, dict) else (int(d[0]), int(d[1])) for d in decisive]


def _x(h: int, group_size: int) -> float:
    """Left edge of head h's column: query heads sharing a key/value head sit together."""
    return h + GROUP_GAP * (h // group_size)


def _layer_head_axes(ax, n_layers: int, n_heads: int, group_size: int) -> None:
    """Ticks, kv-group labels and separators of a layer × head grid drawn with `_x` columns."""
    ax.set_xlim(-0.15, _x(n_heads - 1, group_size) + 1.05)
    ax.set_ylim(n_layers + 0.05, -0.15)
    ax.set_xticks([_x(h, group_size) + CELL / 2 for h in range(n_heads)], [str(h) for h in range(n_heads)], fontsize=10)
    step = 1 if n_layers <= 32 else 2
    ax.set_yticks([l + CELL / 2 for l in range(0, n_layers, step)], [str(l) for l in range(0, n_layers, step)],
                  fontsize=9 if n_layers > 16 else 11)
    ax.set_xlabel("query head"), ax.set_ylabel("layer")
    ax.tick_params(length=0)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    for g in range(n_heads // group_size):
        left, right = _x(g * group_size, group_size), _x((g + 1) * group_size - 1, group_size) + CELL
        ax.text((left + right) / 2, -0.35, f"kv head {g}", ha="center", va="bottom", fontsize=10)
        if g:
            ax.axvline(left - (1 - CELL + GROUP_GAP) / 2, color="#555555", linewidth=0.8)  # mid-gap


def _mark_decisive(ax, decisive: list[tuple[int, int]], group_size: int) -> None:
    """Box the first DECISIVE_BOXED heads, with their rank in the corner."""
    for rank, (l, h) in enumerate(decisive[:DECISIVE_BOXED], start=1):
        x = _x(h, group_size)
        ax.add_patch(Rectangle((x - 0.04, l - 0.04), CELL + 0.08, CELL + 0.08, fill=False, edgecolor="black",
                               linewidth=2, zorder=3))
        ax.text(x + CELL - 0.02, l + 0.06, str(rank), ha="right", va="top", fontsize=8, fontweight="bold", zorder=4,
                bbox=dict(boxstyle="round,pad=0.12", facecolor="white", edgecolor="black", linewidth=0.6))


def contribution_grid(fig: Figure, ax, values: np.ndarray, decisive, group_size: int, word: str) -> None:
    """Each head's direct contribution to the word's logit (n_layers, n_heads), diverging at 0."""
    L, H = values.shape
    m = max(1e-6, float(np.abs(values).max()))
    norm = TwoSlopeNorm(0.0, -m, m)
    mosaic, extent = _mosaic(values[:, :, None, None], group_size)
    image = ax.imshow(mosaic, cmap=clear_bad(SCORES_CMAP), norm=norm, aspect="auto", interpolation="nearest",
                      extent=extent)
    _layer_head_axes(ax, L, H, group_size)
    _mark_decisive(ax, decisive, group_size)
    bar = fig.colorbar(image, ax=ax, shrink=0.6, pad=0.02)
    bar.set_label(f"direct contribution to the logit of “{label(word)}”")
    ax.set_title(f"Every head's direct push on “{label(word)}”", loc="left", fontsize=12, pad=24)


def model_view_figure(view: dict) -> Figure:
    """Every head's weights as a thumbnail: rows are layers, columns query heads grouped by kv head,
    the most decisive heads boxed with their rank.

    view: `ModelView.to_dict()` (`studygroup.model_view(run)`): "heads" [layer][head] with
    "weights" (R, T) in paper orientation (R = T, or 1: the last question's row) and "rank",
    and "n_kv_heads".

    >>> view = {"n_kv_heads": 1, "heads": [[{"layer": 0, "head": 0, "weights": [[1.0]], "rank": 1}]]}
    >>> model_view_figure(view).axes[0].images[0].get_array().shape
    (40, 40)
    """
    with style():
        maps = np.array([[h["weights"] for h in layer] for layer in view["heads"]], dtype=np.float32)  # (L, H, R, T)
        L, H = maps.shape[:2]
        group_size = H // view["n_kv_heads"]
        full = maps.shape[2] == maps.shape[3]
        fig = new_figure(2.3 + 0.6 * (_x(H - 1, group_size) + 1), 1.6 + (0.42 if full else 0.3) * L)
        ax = fig.subplots()
        ranked = _ranked(view["heads"])
        image = thumbnails(ax, maps, ranked, group_size, view_reasons(view))
        if ranked:
            by = view.get("ranked_by", "").split(" (")[0]
            ax.set_xlabel(f"query head\nboxed: the {min(DECISIVE_BOXED, len(ranked))} most decisive heads"
                          + (f", ranked by {by}" if by else ""), fontsize=11)
        fig.colorbar(image, ax=ax, shrink=0.5, pad=0.02).set_label("weight — fixed 0–1 scale, every head")
        what = "each head's weights (rows: questions)" if full else "each head's last question (its row of weights)"
        ax.set_title(f"The model view: {what}", loc="left", fontsize=12, pad=24)
        return fig


def _ranked(heads: list[list[dict]]) -> list[tuple[int, int]]:
    """(layer, head) of the ranked heads, rank 1 first."""
    ranked = sorted((h for layer in heads for h in layer if h.get("rank") is not None), key=lambda h: h["rank"])
    return [(h["layer"], h["head"]) for h in ranked]


def view_reasons(view: dict) -> np.ndarray | None:
    """(L, H, R, T) mask-reason codes of a model view dict (each head's own, else the view's), or None
    for a view written without them.

    >>> view_reasons({"mask_reasons": [[0, 1], [0, 0]], "heads": [[{"mask_reasons": None}, {"mask_reasons": [[0, 1], [2, 0]]}]]})[0, :, 1].tolist()
    [[0, 0], [2, 0]]
    """
    if view.get("mask_reasons") is None:
        return None
    return np.array([[h.get("mask_reasons") or view["mask_reasons"] for h in layer] for layer in view["heads"]], dtype=int)


def thumbnails(ax, maps: np.ndarray, decisive: list[tuple[int, int]], group_size: int, reasons: np.ndarray | None = None):
    """maps (L, H, R, T) as a layer × head grid of thumbnails, masked cells hatched; the image.

    reasons: (L, H, R, T) codes of study.mask_reasons (None: the causal mask alone). A thumbnail is
    too small to hatch each cell by its reason: every masked cell shows its head's commonest hatch.
    """
    L, H, R, T = maps.shape
    if reasons is None:
        causal = np.arange(T)[None, :] > np.arange(T - R, T)[:, None]  # (R, T), rows at the end
        reasons = np.broadcast_to(np.where(causal, FUTURE, VISIBLE), maps.shape)
    masked = reasons != VISIBLE  # (L, H, R, T)
    for l in range(L):
        for h in range(H):
            hidden = reasons[l, h][masked[l, h]]
            if hidden.size:
                common = REASONS[int(np.bincount(hidden).argmax())]
                ax.add_patch(Rectangle((_x(h, group_size), l), CELL, CELL, facecolor=MASK_FACE, edgecolor=MASK_EDGE,
                                       hatch=hatch(common) + hatch(common)[0], linewidth=0, zorder=0))
    mosaic, extent = _mosaic(np.where(masked, np.nan, maps), group_size)
    image = ax.imshow(mosaic, cmap=clear_bad(WEIGHTS_CMAP), vmin=0, vmax=1, aspect="auto", interpolation="nearest",
                      extent=extent, zorder=1)
    _layer_head_axes(ax, L, H, group_size)
    _mark_decisive(ax, decisive, group_size)
    return image


def _mosaic(W: np.ndarray, group_size: int) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """(L, H, R, T) maps -> one image holding every thumbnail (NaN between them), and its extent,
    so that head h of layer l covers [_x(h), _x(h) + CELL] × [l, l + CELL] of the grid's units.
    One image instead of L × H keeps saving fast (an SVG resamples each image it embeds)."""
    L, H, R, T = W.shape
    cw, ch = T * -(-40 // T), R * -(-40 // R)  # each thumbnail at least 40 × 40 pixels
    left = [round(_x(h, group_size) * cw / CELL) for h in range(H)]
    top = [round(l * ch / CELL) for l in range(L)]
    mosaic = np.full((top[-1] + ch, left[-1] + cw), np.nan, dtype=np.float32)
    for l in range(L):
        for h in range(H):
            block = np.repeat(np.repeat(W[l, h], ch // R, axis=0), cw // T, axis=1)  # (ch, cw)
            mosaic[top[l]:top[l] + ch, left[h]:left[h] + cw] = block
    return mosaic, (0.0, mosaic.shape[1] * CELL / cw, mosaic.shape[0] * CELL / ch, 0.0)
