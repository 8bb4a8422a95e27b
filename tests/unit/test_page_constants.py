"""The page's script repeats a few of the server's limits: each must equal the one it mirrors.

The page asks for what the server answers (a window of cells, an overview's blocks, a number of
words, the texts whose grids it shows whole); a limit that drifts on one side makes the page ask
for what the server refuses, or leave out what it shows elsewhere.
"""
import math
import re
from pathlib import Path

import pytest

from studygroup.study import model_view, overview, window
from studygroup.web import bodies

STATIC = Path(__file__).resolve().parents[2] / "studygroup" / "views" / "static"


def js_constant(file: str, name: str) -> int:
    """`const NAME = 123;` in a page script, as an int."""
    found = re.findall(rf"\bconst {name} = (\d+);", (STATIC / file).read_text())
    assert len(found) == 1, f"{file} defines {name} {len(found)} times"
    return int(found[0])


@pytest.mark.parametrize("file, name, expected", [
    ("map.js", "FULL_MAPS_MAX_T", model_view.FULL_MAPS_MAX_T),  # shorter texts: every cell shown above
    ("map.js", "TILE", math.isqrt(window.MAX_CELLS)),  # one /api/head window of TILE × TILE cells
    ("head.js", "WINDOW_SIDE", math.isqrt(window.MAX_CELLS)),
    ("map.js", "SIDE", overview.SIDE),  # the most blocks an overview holds on a side
    ("generation.js", "MAX_WORDS", bodies.MAX_WORDS),  # words one /api/generate streams at most
])
def test_the_page_mirrors_the_servers_limits(file, name, expected):
    assert js_constant(file, name) == expected


def test_a_limit_is_a_square():
    assert math.isqrt(window.MAX_CELLS) ** 2 == window.MAX_CELLS


def test_the_page_words_an_ablation_as_the_story_does():
    """format.js's TAKEN_OUT: how a mean or resample ablation takes a member and a head out, in the
    words of studygroup.study.story (the CLI's): [member, head] per kind."""
    from studygroup.study.story import MEMBER_TAKEN_OUT, TAKEN_OUT

    text = (STATIC / "format.js").read_text()
    for kind in ("mean", "resample"):
        found = re.findall(rf'{kind}: \["([^"]+)", "([^"]+)"\]', text)
        assert found == [(MEMBER_TAKEN_OUT[kind], TAKEN_OUT[kind])], kind
