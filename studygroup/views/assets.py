"""The page's files (views/static/) and its script, joined in one listed order.

The script is small plain files by concern, each adding to one namespace (`window.StudyGroup`),
not ES modules: a report opened from a file cannot import modules. `page_script()` joins them in
SCRIPTS order after the colours (views.colours), and the web page (/static/page.js), the report
and the notebook view all use that one string. There is no build step.

>>> page_script().startswith("window.StudyGroup = window.StudyGroup || {};")
True
"""
from __future__ import annotations

from importlib import resources

from studygroup.views.colours import script_prefix

#: The page's script files, in the order they run: each may use what the files before it defined.
SCRIPTS = (
    "format.js",      # numbers, percentages, a member's text as nodes, DOM helpers
    "colour.js",      # the scales of StudyGroup.colours as functions; the hatch of a masked cell
    "grid.js",        # drawing a head's grid, its legend, a thumbnail; masked cells and their reasons
    "api.js",         # the client of the web API (docs/web-api.md)
    "instance.js",    # one view on one root element: its skeleton and state
    "session.js",     # asking the server (page) or showing embedded data (report, notebook)
    "jobs.js",        # long computations: their progress polled, a Cancel button
    "complete.js",    # the quick ranking replaced by the complete one, measured in the background
    "members.js",     # the members as chips: select, hover, silence
    "finder.js",      # among hundreds of chips: find a word, jump to a member
    "conclusion.js",  # the top next words, before and after silencing, and a comparison's shift
    "story.js",       # the sentences of `explain`, with members as chips
    "generation.js",  # Continue: generated members, each word's conclusion and attention, both continuations
    "model_view.js",  # every head as a thumbnail, layer × head
    "head.js",        # one head: its score and weight grids
    "map.js",         # a long text's head map: the overview, zoom and pan down to tiles of cells
    "listening.js",   # the selected member's question: weights and contributions
    "saving.js",      # PNG and JSON downloads
    "lesson.js",      # Lesson mode: the article's sections on the text, one head; the state in the URL
    "residual.js",    # the residual stream at the last member: what each layer's heads and MLP add (a view of its own)
    "lens.js",        # the logit lens: a layer × member grid of top words (a view of its own, sg.view)
    "patching.js",    # activation patching: two texts, the cost, then the layer × member and head grids
    "survey.js",      # a survey's corpus roles marked on the model view's heads (a view of its own, sg.view)
    "mount.js",       # StudyGroup.mount and the page's automatic start
)
#: The other files the page is made of, and their media types.
PAGE_FILES = {"page.html": "text/html; charset=utf-8", "page.css": "text/css; charset=utf-8"}


def static_text(name: str) -> str:
    """One file of views/static/ as text."""
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def page_script() -> str:
    """The whole script: the colours, then SCRIPTS in order, each under a comment naming its file.

    ValueError if any part holds '</script' or '<!--' (it is inlined in <script> blocks).
    """
    parts = [script_prefix()] + [f"/* ---- {name} ---- */\n" + static_text(name) for name in SCRIPTS]
    js = "\n".join(parts)
    if "</script" in js.lower() or "<!--" in js:
        raise ValueError("the page's script must not contain '</script' or '<!--': it is inlined in a <script> block")
    return js
