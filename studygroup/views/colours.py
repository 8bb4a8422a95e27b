"""Every colour the views use, and what each means: one source for the page, the report, the
notebook, the lesson HTML and the figures.

- Weights in [0, 1]: viridis (sequential, colour-blind-safe), always on the absolute 0–1 scale.
- Scores and other signed values: RdBu reversed (diverging, colour-blind-safe), centred on 0,
  blue below, red above, symmetric around 0.
- A cell that cannot be heard: hatched grey, never a colour of either scale, with its reason
  (study.mask_reasons: the future, a silenced member, outside a sliding window) in the legend.

Scales are lists of evenly spaced stops, interpolated linearly in RGB by every view: the page's
script gets them as `StudyGroup.colours` (script_prefix), matplotlib as a colormap built from the
same stops (figures_style.colormap).

>>> weight_rgb(0.0), weight_rgb(1.0)
((68, 1, 84), (253, 231, 37))
>>> score_rgb(0.0, 2.0) == hex_rgb(SCORES[len(SCORES) // 2])
True
"""
from __future__ import annotations

import json

from studygroup.study.mask_reasons import REASONS
from studygroup.study.roles import DEFINITIONS as ROLE_DEFINITIONS
from studygroup.study.sinks import MEANING as SINK_MEANING

#: viridis at 11 even steps, 0 → 1.
WEIGHTS = ("#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c", "#22a884", "#44bf70", "#7ad151",
           "#bddf26", "#fde725")
#: ColorBrewer RdBu reversed, 11 classes: −max (blue) → 0 (near white) → +max (red).
SCORES = ("#053061", "#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7", "#fddbc7", "#f4a582", "#d6604d",
          "#b2182b", "#67001f")
#: A masked cell: this face with lines of this colour (never a colour of WEIGHTS or SCORES).
MASK_FACE, MASK_LINE = "#ececec", "#9a9a9a"
#: Each reason's hatch (matplotlib's hatch letters; the page draws the same directions) and legend.
MASKED = {
    "future": ("/", "masked: the future, which no question hears"),
    "silenced": ("\\", "masked: a silenced member, whose answer nobody hears"),
    "outside_window": ("x", "masked: outside the sliding window"),
}
#: A member the model generated (after the prompt): its label in Okabe–Ito vermillion, italic, with
#: this mark after it (the mark also in plain text, where there is no colour), and the legend's words.
GENERATED, GENERATED_MARK = "#D55E00", "*"
GENERATED_LEGEND = "* a word the model generated after the prompt"
#: Okabe–Ito orange and blue: before (text a) and after (text b) in comparisons.
BEFORE, AFTER = "#E69F00", "#0072B2"
#: Okabe–Ito orange and sky blue: the residual stream's two writers, a layer's heads and its MLP
#: (neither "for" nor "against"), in the figure and the page.
ATTENTION, THINKING = "#E69F00", "#56B4E9"
#: A head's strongest role (studygroup.study.roles): Okabe–Ito, categorical and colour-blind-safe,
#: with the short label a thumbnail carries.
ROLES = {"previous": ("#D55E00", "prev"), "duplicate": ("#CC79A7", "dup"), "induction": ("#009E73", "ind"),
         "sink": ("#E69F00", "sink"), "local": ("#56B4E9", "loc"), "broad": ("#F0E442", "brd")}
ROLES_LEGEND = "each head's strongest role, its colour deeper the larger that role's score (0–1)"
WEIGHTS_NAME, SCORES_NAME = "viridis", "RdBu_r"
WEIGHTS_LEGEND = "weight (softmax): viridis on a fixed 0–1 scale, the same in every head"
SCORES_LEGEND = "score q·k/√d_head: blue below 0, red above, centred on 0"
CONTRIBUTION_LEGEND = "blue: against, red: for"


def hex_rgb(colour: str) -> tuple[int, int, int]:
    """'#rrggbb' -> (r, g, b) in 0–255."""
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def ramp(stops, t: float) -> tuple[int, int, int]:
    """The colour at t in [0, 1] (clipped) of evenly spaced stops, linear in RGB, rounded."""
    x = min(1.0, max(0.0, float(t))) * (len(stops) - 1)
    i = min(len(stops) - 2, int(x))
    a, b, f = hex_rgb(stops[i]), hex_rgb(stops[i + 1]), x - i
    return tuple(int(round(u + f * (v - u))) for u, v in zip(a, b))


def weight_rgb(w: float) -> tuple[int, int, int]:
    """A weight's colour (0–1, absolute)."""
    return ramp(WEIGHTS, w)


def score_rgb(s: float, largest: float) -> tuple[int, int, int]:
    """A signed value's colour on a scale symmetric around 0 that reaches ±largest."""
    return ramp(SCORES, 0.5 + 0.5 * s / largest if largest > 0 else 0.5)


def ink(rgb: tuple[int, int, int]) -> str:
    """Text colour readable on `rgb`: black on light, white on dark."""
    return "#111" if 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] > 140 else "#fff"


def generated_mark(i: int, generated_from: int | None) -> str:
    """GENERATED_MARK after member i's label if the model generated it (i >= generated_from), else "".

    >>> [generated_mark(i, 2) for i in range(3)], generated_mark(5, None)
    (['', '', '*'], '')
    """
    return GENERATED_MARK if generated_from is not None and i >= generated_from else ""


def generated_line(generated_from: int | None, T: int) -> list[str]:
    """The legend of the mark in words for T members of which generated_from on were generated; [] for a text.

    >>> generated_line(3, 5)
    ['* a word the model generated after the prompt: members 3 to 4; the prompt: members 0 to 2']
    """
    if generated_from is None:
        return []
    if generated_from >= T:
        return [f"the members are the prompt alone (0 to {T - 1}): the words the model generated come after them"]
    return [f"{GENERATED_LEGEND}: members {generated_from} to {T - 1}; the prompt: members 0 to {generated_from - 1}"]


def mask_css() -> str:
    """A CSS background for a masked cell in HTML (the lesson's tables, a silenced member's chip): the hatch of the grids."""
    return f"repeating-linear-gradient(45deg, {MASK_FACE} 0 3px, {MASK_LINE} 3px 4px)"


def as_dict() -> dict:
    """The scales, the mask and the legends as the page's script reads them (`StudyGroup.colours`).

    masked.reasons is indexed by the codes of study.mask_reasons (0: visible, which is not masked).
    """
    reasons = [{"name": name, "hatch": MASKED[name][0], "legend": MASKED[name][1]} if name in MASKED
               else {"name": name, "hatch": None, "legend": None} for name in REASONS]
    return {"weights": {"name": WEIGHTS_NAME, "stops": list(WEIGHTS), "legend": WEIGHTS_LEGEND},
            "scores": {"name": SCORES_NAME, "stops": list(SCORES), "legend": SCORES_LEGEND},
            "contribution": {"legend": CONTRIBUTION_LEGEND},
            "masked": {"face": MASK_FACE, "line": MASK_LINE, "css": mask_css(), "reasons": reasons},
            "roles": {"colours": {k: c for k, (c, _) in ROLES.items()}, "labels": {k: a for k, (_, a) in ROLES.items()},
                      "definitions": ROLE_DEFINITIONS, "legend": ROLES_LEGEND},
            "sink": {"meaning": f"An attention sink: {SINK_MEANING}."},
            "generated": {"colour": GENERATED, "mark": GENERATED_MARK, "legend": GENERATED_LEGEND},
            "before": BEFORE, "after": AFTER, "writers": {"attention": ATTENTION, "thinking": THINKING}}


def script_prefix() -> str:
    """The first line of the page's script: `StudyGroup.colours`, from this module."""
    return ("window.StudyGroup = window.StudyGroup || {};\n"
            f"window.StudyGroup.colours = {json.dumps(as_dict(), ensure_ascii=True)};\n")
