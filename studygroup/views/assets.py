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
    "store.js",       # the page's state and the guards every answer passes (the text's generation, the silencing)
    "jobs.js",        # long computations: their progress polled, a Cancel button
    "instance.js",    # one page on one root: its views, in this list's order, and the commands they share
    "session.js",     # a text step by step (page) or embedded data (report, notebook); the silencing redraw
    # the views, each registered with StudyGroup.view: the page mounts them in this order
    "members.js",     # the text and its members as chips: select, hover, silence
    "finder.js",      # among hundreds of chips: find a word, jump to a member (part of members.js's card)
    "generation.js",  # Continue: generated members, each word's conclusion and attention, both continuations
    "conclusion.js",  # the top next words, before and after silencing, and a comparison's shift
    "story.js",       # the sentences of `explain`, with members as chips; the decisive heads
    "complete.js",    # the quick ranking replaced by the complete one, measured in the background
    "model_view.js",  # every head as a thumbnail, layer × head
    "head.js",        # one head: its score and weight grids
    "map.js",         # a long text's head map: the overview, zoom and pan down to tiles of cells
    "listening.js",   # the selected member's question: weights and contributions
    "saving.js",      # PNG and JSON downloads (the model view's and the head's buttons)
    "lesson.js",      # Lesson mode: the article's sections on the text, one head; the state in the URL
    "residual.js",    # the residual stream at the last member: what each layer's heads and MLP add
    "lens.js",        # the logit lens: a layer × member grid of top words
    "patching.js",    # activation patching: two texts, the cost, then the layer × member and head grids
    "survey.js",      # a survey's corpus roles marked on the model view's heads
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
