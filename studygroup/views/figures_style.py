"""How every figure looks and is written: matplotlib settings, colours, labels, PNG/SVG files.

Figures are built and saved under STYLE (never set globally): the bundled DejaVu Sans, `$` shown
literally (no mathtext, no TeX), SVG text kept as text. Colours come from views.colours, as on the
page: weights on one sequential scale fixed at 0–1, scores and other signed values on a diverging
scale centred on 0, masked cells hatched by their reason, never white.
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Colormap, LinearSegmentedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from studygroup.errors import InputError
from studygroup.views import colours
from studygroup.views.output_file import check_writable, write_whole
from studygroup.formats import fixed

STYLE = {"font.family": ["DejaVu Sans"], "font.size": 12, "text.usetex": False, "text.parse_math": False,
         "svg.fonttype": "none", "svg.hashsalt": "studygroup", "axes.titlesize": 13, "axes.titleweight": "bold",
         "axes.spines.top": False, "axes.spines.right": False, "savefig.bbox": "tight"}
#: The page's scales as colormaps: the same stops, interpolated the same way (linear in RGB).
WEIGHTS_CMAP = LinearSegmentedColormap.from_list(colours.WEIGHTS_NAME, colours.WEIGHTS)
SCORES_CMAP = LinearSegmentedColormap.from_list(colours.SCORES_NAME, colours.SCORES)
MASK_FACE, MASK_EDGE = colours.MASK_FACE, colours.MASK_LINE  # hatched background that masked (transparent) cells show
BEFORE, AFTER = colours.BEFORE, colours.AFTER
DPI = 200
SUBSTITUTES = {"␍": "\\r"}  # readable glyphs DejaVu Sans lacks, and what to show instead


@contextmanager
def style():
    """Build or save a figure inside this: STYLE applies there only (matplotlib's rcParams are restored)."""
    with matplotlib.rc_context(STYLE):
        yield


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of width × height inches, laid out by matplotlib's constrained layout."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)  # drawn off-screen: no display, no pyplot state
    return fig


def clear_bad(cmap: Colormap) -> Colormap:
    """The colormap with masked cells transparent, so the hatched background shows through."""
    return cmap.with_extremes(bad=(0, 0, 0, 0))


def hatch(reason: str) -> str:
    """matplotlib's hatch for a masked cell with this reason (tripled: denser lines)."""
    return 3 * colours.MASKED[reason][0]


@lru_cache(maxsize=1)
def _font_chars() -> frozenset[int]:
    from matplotlib import font_manager, ft2font

    path = font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans"), fallback_to_default=True)
    return frozenset(ft2font.FT2Font(path).get_charmap())


SINK_TAG = " (attention sink)"  # after a sink member's label


def colour_generated(labels, indices: list[int], generated_from: int | None) -> None:
    """The tick labels (matplotlib Text) of generated members in colours.GENERATED, italic;
    indices: each label's member."""
    for text, i in zip(labels, indices):
        if colours.generated_mark(i, generated_from):
            text.set_color(colours.GENERATED), text.set_fontstyle("italic")


def generated_patch() -> Patch:
    """A legend entry for the generated members' labels: their colour and the mark's words."""
    return Patch(facecolor=colours.GENERATED, edgecolor=colours.GENERATED,
                 label=colours.GENERATED_LEGEND + " (its label in this colour)")


def answer_axis(with_sink: bool) -> str:
    """The answers' axis title; where a sink is shown, with the plain explanation of one."""
    return ("answer from… (the member heard; an attention sink takes weight the head does not need)" if with_sink
            else "answer from… (the member heard)")


def label(token: str, limit: int = 18) -> str:
    """A member or word as the figures print it: every character one DejaVu Sans can draw.

    Readable forms (␣ space, ↵ newline, ⇥ tab) stay; a glyph the font lacks becomes a visible
    substitute ('\\r' for ␍, '<U+4F60>' otherwise); long tokens are cut with '…'.

    >>> label("␣have"), label("你"), label("$x$")
    ('␣have', '<U+4F60>', '$x$')
    """
    known = _font_chars()
    text = "".join(c if ord(c) in known else SUBSTITUTES.get(c, f"<U+{ord(c):04X}>") for c in token)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def signed_percent(change: float) -> str:
    """A change of probability in percentage points, signed; decimals as in `percent`; a change that
    rounds to zero reads "+0.0 pts" (the figures' minus is matplotlib's, "−").

    >>> signed_percent(0.40), signed_percent(-0.005), signed_percent(-0.0001)
    ('+40 pts', '−0.5 pts', '+0.0 pts')
    """
    text = fixed(100 * abs(change), 1 if abs(change) < 0.1 else 0)
    return ("−" if change < 0 and text.strip("0.") else "+") + text + " pts"


def check_path(path, kind: str | None = None) -> str:
    """The kind of figure file `path` names ("png" or "svg"); InputError if it is another kind (or
    not `kind`, when given) or cannot be written. Call it before a long computation, so that a bad
    path fails at once.

    >>> check_path("/tmp/explain.svg")
    'svg'
    """
    if str(path).strip() == "":
        raise InputError(f"the file name is empty: give one such as figure.{kind or 'png'}")
    p = Path(path)
    ending = p.suffix.lower().lstrip(".")
    if kind is not None and ending != kind:
        raise InputError(f"cannot save a {kind.upper()} figure as {p.name!r}: the file name must end in .{kind}")
    if ending not in ("png", "svg"):
        raise InputError(f"cannot save a figure as {p.name!r}: the file name must end in .png or .svg")
    check_writable(path, f"figure.{ending}")
    return ending


def save(fig: Figure, path) -> Path:
    """Write `fig` as PNG (DPI dots per inch) or SVG (text kept as text), by the file's extension.

    Raises InputError for another extension or a path that cannot be written.
    """
    kind = check_path(path)
    with style():
        return write_whole(path, lambda f: fig.savefig(f, format=kind, dpi=DPI, facecolor="white",
                                                       metadata={"Date": None} if kind == "svg" else {}))
