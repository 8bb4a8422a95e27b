"""Bar charts: the next words' probabilities, their shift between two texts, heads' changes, and
whom one head's last question listened to. Probabilities as percentages (one decimal under 10%).
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from studygroup.views import colours
from studygroup.views.figures_style import (AFTER, BEFORE, SINK_TAG, answer_axis, colour_generated, generated_patch,
                                            label, new_figure, signed_percent, style)
from studygroup.formats import percent

RAISES, LOWERS = colours.SCORES[-2], colours.SCORES[1]  # the scores scale's ends, as in the contribution grid
SHIFT_SHOWN = 10  # words in a compare figure
ATTENTION, THINKING = "#E69F00", "#56B4E9"  # the residual stream's two writers (neither "for" nor "against")


def conclusion_figure(top: list[dict] | None, shift: list[dict] | None = None,
                      names: tuple[str, str] = ("before", "after")) -> Figure:
    """Horizontal bars of the next words' probabilities, most likely on top.

    top: [{"token", "prob"}] (explain's `top`). shift: [{"token", "prob_a", "prob_b"}] (compare's
    `shift`): then two bars per word, `names` in the legend, and the signed change beside them.

    >>> float(conclusion_figure(None, [{"token": "␣of", "prob_a": 0.5, "prob_b": 0.9}]).axes[0].patches[0].get_width())
    50.0
    """
    with style():
        rows = top if shift is None else shift[:SHIFT_SHOWN]
        fig = new_figure(8.5, 1.8 + (0.42 if shift is None else 0.62) * len(rows))
        ax = fig.subplots()
        if shift is None:
            conclusion_bars(ax, rows)
        else:
            shift_bars(ax, rows, names)
        return fig


def conclusion_bars(ax, top: list[dict]) -> None:
    """explain's `top` on `ax`: one bar per word, its probability beside it."""
    y = np.arange(len(top))
    probs = np.array([100 * w["prob"] for w in top])
    ax.barh(y, probs, color=AFTER, height=0.7)
    for yi, w in zip(y, top):
        _value(ax, 100 * w["prob"], yi, percent(w["prob"]), 11)
    _word_axis(ax, top, probs.max(initial=1.0), header=False)
    ax.set_title("The group's conclusion: the next word", loc="left")


def shift_bars(ax, shift: list[dict], names: tuple[str, str]) -> None:
    """compare's `shift` on `ax`: before (a) and after (b) bars per word, the signed change on the right."""
    y = np.arange(len(shift))
    a = np.array([100 * w["prob_a"] for w in shift])
    b = np.array([100 * w["prob_b"] for w in shift])
    ax.barh(y - 0.2, a, height=0.38, color=BEFORE, label=names[0])
    ax.barh(y + 0.2, b, height=0.38, color=AFTER, label=names[1])
    for yi, w in zip(y, shift):
        _value(ax, 100 * w["prob_a"], yi - 0.2, percent(w["prob_a"]), 10)
        _value(ax, 100 * w["prob_b"], yi + 0.2, percent(w["prob_b"]), 10)
        change = w.get("change", w["prob_b"] - w["prob_a"])
        ax.text(1.01, yi, signed_percent(change), transform=ax.get_yaxis_transform(), va="center",
                fontsize=11, fontweight="bold")
    _word_axis(ax, shift, max(a.max(initial=1.0), b.max(initial=1.0)), header=True)
    ax.text(1.01, -0.9, "shift", transform=ax.get_yaxis_transform(), va="center", fontsize=11, style="italic")
    ax.legend(loc="lower right", frameon=False, fontsize=10)
    ax.set_title("The conclusion before and after", loc="left")


def _value(ax, x: float, y: float, text: str, size: int) -> None:
    """A bar's value, just past its end."""
    ax.annotate(text, (x, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=size)


def _word_axis(ax, words: list[dict], largest: float, header: bool) -> None:
    """Words down the side, most likely on top (room above them for a header); percent along."""
    ax.set_yticks(np.arange(len(words)), [label(w["token"]) for w in words], fontsize=12)
    ax.set_ylim(len(words) - 0.5, -1.2 if header else -0.6)
    ax.set_xlim(0, min(100.0, largest) * 1.2 + 2)
    ax.set_xlabel("probability of the next word (%)")


def head_changes(ax, heads: list[dict], word: str) -> None:
    """compare's `heads`: each head's change of direct contribution, signed bars."""
    y = np.arange(len(heads))
    change = np.array([h["change"] for h in heads])
    ax.barh(y, change, color=[RAISES if c >= 0 else LOWERS for c in change], height=0.6)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(y, [f"L{h['layer']} H{h['head']}" for h in heads], fontsize=11)
    ax.set_ylim(len(heads) - 0.5, -0.7)
    ax.set_xlabel(f"change of direct contribution to the logit of “{label(word)}” (b − a)")
    ax.set_title("Heads whose push changed most", loc="left")


def listening_bars(ax, head: dict, asker: str, shown: int = 20, generated_from: int | None = None) -> None:
    """explain's top head: whom the last question weighs, and what each answer contributed.
    generated_from: the first member the model generated (their labels marked and coloured), or None."""
    listened = sorted(head["listened"][:shown], key=lambda x: x["index"])  # ranked by effect_in_head; reading order
    x = np.arange(len(listened))
    weight = np.array([m["weight"] for m in listened])
    contribution = np.array([m["contribution"] for m in listened])
    share = contribution / max(contribution.sum(), 1e-12)
    ax.bar(x - 0.2, weight, width=0.38, color="#3b528b", label="weight (softmax)")
    ax.bar(x + 0.2, share, width=0.38, color="#5ec962", label="share of weight × answer size ‖v·W_O‖")
    ax.set_xticks(x, [label(m["token"]) + colours.generated_mark(m["index"], generated_from)
                      + (SINK_TAG if m.get("is_sink") else "") for m in listened],
                  rotation=45, ha="right", rotation_mode="anchor", fontsize=11 if len(x) <= 12 else 9)
    colour_generated(ax.get_xticklabels(), [m["index"] for m in listened], generated_from)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of the question's answer")
    ax.set_xlabel(answer_axis(any(m.get("is_sink") for m in listened)))
    handles = ax.get_legend_handles_labels()[0]
    if any(colours.generated_mark(m["index"], generated_from) for m in listened):
        handles.append(generated_patch())
    ax.legend(handles=handles, loc="upper right", frameon=False, fontsize=10)
    ax.set_title(f"Layer {head['layer']}, head {head['head']} (most decisive): the question of “{label(asker)}”",
                 loc="left")


def residual_stream(ax, contributions: list[list[float]], mlps: list[float], embed: float, word: str) -> None:
    """The residual stream along the predicted word's unembedding direction at the last member: per
    layer the heads' direct contributions (summed) and the MLP's, side by side, and the logit built
    so far (the embedding's share, then each layer's added) as a line."""
    heads = np.array(contributions, dtype=float).sum(1)  # (n_layers,)
    mlp = np.array(mlps, dtype=float)  # (n_layers,)
    x = np.arange(len(mlp))
    ax.bar(x - 0.2, heads, width=0.4, color=ATTENTION, label="attention: the layer's heads")
    ax.bar(x + 0.2, mlp, width=0.4, color=THINKING, label="thinking alone: the layer's MLP")
    ax.plot(x, embed + np.cumsum(heads + mlp), color="black", linewidth=1.2, marker=".", label="the logit so far")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlabel("layer")
    ax.set_ylabel(f"logit of “{label(word)}”")
    ax.set_title("The residual stream at the last member", loc="left", fontsize=11)
    ax.legend(fontsize=8, loc="upper left", frameon=False)
