"""The model's whole window in the page, in chromium: an 8,191-token text (the default model's
context holds 8,192) loads, the open head's overview draws, and a zoom down to labelled cells
shows weights equal to `Run.head(l, h).weights` of the same model at those indices; at 1440×900
and 390×844 (a phone's 3 device pixels per pixel) nothing runs past the viewport's width and no
box cuts off what it holds.

The page's own order is the conclusion, the model view, the open head (its last question) and
its overview, then explain. Explain on 8,191 members takes minutes on two cores
(docs/performance.md, "The page on 8,191 tokens"), and the maps do not need it: the test presses
the page's Cancel once the overview is drawn, as a reader who came for the maps would. The two
tests take 5-6 minutes on two cores at a load average of 2-5: the server's two passes, the
reference's pass up to the head's layer, then 9 zooms.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from .conftest import _serve
from .test_long_texts import OPEN, PARAGRAPH, shown
from .test_rough_edges import LAYOUT

#: The longest text the default model takes with a next word to predict.
T = 8191
#: How long the page may take to draw its first map: the server's two passes of 8,191 members (the
#: conclusion's, then one up to the open head's layer) take minutes on a loaded 2-core machine.
LONG_WAIT_MS = 600_000
MAP = "() => document.querySelector('.sg-root').studygroup.mapShown()"
#: How far from the map's edges the zoom's mark is, in members (see the zoom's test).
EDGE = 200


def text_of(tokenizer, n: int) -> str:
    """The longest prefix of PARAGRAPH repeated that is at most n tokens long."""
    long = (PARAGRAPH + " ") * (n // len(tokenizer.encode(PARAGRAPH)) + 2)
    lo, hi = 0, len(long)  # long[:lo] fits; long[:hi + 1] does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(tokenizer.encode(long[:mid])) <= n else (lo, mid - 1)
    return long[:lo]


@pytest.fixture(scope="module")
def whole_text(default_model):
    text = text_of(default_model.tokenizer, T)
    assert len(default_model.ids(text)) == T  # a text of exactly the window less one
    return text


@pytest.fixture(scope="module")
def weights_of(default_model, whole_text):
    """Run.head(l, h).weights of the whole text, (T, T), by (layer, head): a pass up to layer l, once."""
    made = {}

    def weights(l, h):
        if (l, h) not in made:
            made[l, h] = default_model.before_pass(whole_text).head(l, h).weights.numpy()
        return made[l, h]
    return weights


@pytest.fixture(scope="module")
def url():
    """A server of the default model that takes texts up to its whole context."""
    from studygroup.gguf.model_path import default_model_path

    yield from _serve(str(default_model_path()))


def load_and_cancel_explain(browser, url, text, **context_args):
    """A page that has explained `text` up to its open head's overview; the explain after it cancelled."""
    context = browser.new_context(**context_args)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(url)
    page.wait_for_function("() => document.querySelector('.sg-text').value !== ''", timeout=120_000)  # /api/info answered
    page.fill(".sg-text", text)
    page.click(".sg-go")
    page.locator(".sg-map-canvas[data-mode='overview']").wait_for(timeout=LONG_WAIT_MS)
    page.locator(".sg-progress:not([hidden]) button").click(timeout=LONG_WAIT_MS)  # explain's Cancel
    page.locator(".sg-status[data-kind='error']").wait_for(timeout=120_000)
    assert "cancelled" in page.locator(".sg-status").inner_text()
    return context, page


#: Member pair (question i, answer j) brought into view (its map's box and the window scrolled to
#: it): the middle of the cell, or of the overview's block, that holds it, in the viewport's pixels.
#: (The middle of a block, not of the member: at 1/16 of a pixel a member, the last one's middle
#: is on the map's edge, where the pointer is off the map.)
IN_VIEW = """([i, j]) => {
  const canvas = document.querySelector('.sg-map-canvas'), m = canvas.__map, s = document.querySelector('.sg-root').studygroup.mapShown();
  const [left, top, per, b] = m.spec ? [m.geom.left, m.geom.top, m.geom.cw, 1] : [m.left, m.head, m.px, m.d.block];
  const middle = (at, from) => (Math.floor((at - from) / b) + 0.5) * b * per;  // pixels from the map's corner
  const x = left + middle(j, s.keys[0]), y = top + middle(i, s.rows[0]), wrap = canvas.parentElement;
  wrap.scrollLeft = x - wrap.clientWidth / 2; wrap.scrollTop = y - wrap.clientHeight / 2;
  let r = canvas.getBoundingClientRect();
  window.scrollBy(r.left + x - innerWidth / 2, r.top + y - innerHeight / 2);
  r = canvas.getBoundingClientRect();
  return [r.left + x, r.top + y]; }"""


def point_at(page, i: int, j: int) -> None:
    """The pointer on the map's cell of member i's question × member j's answer."""
    x, y = page.evaluate(IN_VIEW, [i, j])
    page.mouse.move(x, y)


def zoom_at(page, i: int, j: int) -> dict:
    """One wheel step in with the pointer on the cell (or block) of member i's question × member j's
    answer, which stays under it, then what the map shows once it is drawn."""
    before = page.evaluate(MAP)
    want = max(8, math.floor((before["rows"][1] - before["rows"][0]) / 2 + 0.5))  # as the page rounds (Math.round)
    point_at(page, i, j)
    page.mouse.wheel(0, -120)
    try:
        page.wait_for_function("(want) => { const s = document.querySelector('.sg-root').studygroup.mapShown(); "
                               "return s && s.rows[1] - s.rows[0] === want; }", arg=want, timeout=120_000)
    except Exception as e:  # what the page says instead
        now = page.evaluate(MAP)
        raise AssertionError(f"no zoom to {want} members a side: the map shows {now['rows']} x {now['keys']}; its caption: "
                             f"{page.locator('.sg-map-caption').inner_text()!r}; errors: {page.errors}") from e
    return shown(page, "cells" if want <= 256 else "overview")


def test_the_whole_window_loads_and_zooms_to_labelled_cells_equal_to_the_runs_weights(browser, url, whole_text, weights_of,
                                                                                     screenshots):
    context, page = load_and_cancel_explain(browser, url, whole_text, viewport={"width": 1440, "height": 900})
    W = weights_of(*page.evaluate(OPEN))
    assert W.shape == (T, T)
    o = shown(page, "overview")
    assert o["rows"] == [0, T] and o["keys"] == [0, T] and o["block"] == 16 and o["size"] == [512, 512]
    padded = np.zeros((512 * 16, 512 * 16), np.float32)  # weights are >= 0: a zero pad changes no block's largest
    padded[:T, :T] = W
    largest = padded.reshape(512, 16, 512, 16).max(axis=(1, 3))
    np.testing.assert_allclose(np.array(o["max"]).reshape(512, 512), largest, atol=1e-6)
    page.screenshot(path=str(screenshots / "whole-window-overview-1440x900.png"), full_page=True)
    # A question near the end and the answer it gives the most weight, both EDGE members from the
    # map's edges: a pixel of the first overview is 16 members, so the pointer can land a block off
    # its mark; the zoom keeps the member under it where it is, so a mark EDGE members in stays in.
    i = T - EDGE
    j = EDGE + int(W[i, EDGE:i - EDGE].argmax())
    while True:  # 8,191 -> 4,096 -> ... -> 256 members a side (cells) -> ... -> 16, the pointer on (i, j)
        c = zoom_at(page, i, j)
        if c["rows"][1] - c["rows"][0] <= 16:
            break
    assert c["mode"] == "cells" and c["notation"] == "paper"
    (a, b), (k0, k1) = c["rows"], c["keys"]
    assert b - a == k1 - k0 == 16 and a <= i < b and k0 <= j < k1, c  # the pair under the pointer stayed in the window
    np.testing.assert_allclose(np.array(c["weights"]), W[a:b, k0:k1], atol=1e-6)
    geom = page.evaluate("() => document.querySelector('.sg-map-canvas').__geom")
    assert geom["cw"] >= 13 and geom["ch"] >= 13  # every member labelled (labels no closer than 13 px)
    point_at(page, i, j)
    tip = page.locator(".sg-tip").inner_text()
    assert tip.startswith(f"member {i}'s question") and f"to member {j}'s answer" in tip, tip
    assert float(tip.split("gives weight ")[1].split(" ")[0]) == pytest.approx(W[i, j], rel=1e-3)
    page.screenshot(path=str(screenshots / "whole-window-cells-1440x900.png"), full_page=True)
    layout = page.evaluate(LAYOUT)
    assert layout["scroll"] <= layout["W"] and layout["wide"] == [] and layout["cut"] == [], layout
    assert page.errors == []
    context.close()


STRIP_PIXEL = """([kind, j]) => { const c = document.querySelector('.sg-grid-' + kind), g = c.__geom, r = c.width / parseFloat(c.style.width);
  return Array.from(c.getContext('2d').getImageData(Math.floor((g.left + (j + 0.5) * g.cw) * r), Math.floor((g.top + g.ch / 2) * r), 1, 1).data); }"""


def test_the_whole_window_fits_a_phone(browser, url, whole_text, weights_of, screenshots):
    """The 8,191-member row of the grids above the map is 33,000 pixels long: at a phone's 3 device
    pixels per pixel past what a canvas holds, so it is drawn at fewer, and drawn."""
    context, page = load_and_cancel_explain(browser, url, whole_text, viewport={"width": 390, "height": 844},
                                            device_scale_factor=3, is_mobile=True, has_touch=True)
    shown(page, "overview")
    assert page.evaluate("() => document.querySelectorAll('.sg-chip').length") == T
    assert page.evaluate("() => Number(document.querySelector('.sg-grid-weights').dataset.cols)") == T
    row = weights_of(*page.evaluate(OPEN))[T - 1]  # (T,) the last question, as the grids show it
    for j in (0, T - 1):  # the strip's first and last cells wear their weights' colours
        want = page.evaluate("(w) => window.StudyGroup.weightColor(w)", float(row[j]))
        got = page.evaluate(STRIP_PIXEL, ["weights", j])
        assert got[3] == 255 and max(abs(x - y) for x, y in zip(got[:3], want)) <= 3, (j, got, want)
    layout = page.evaluate(LAYOUT)
    page.screenshot(path=str(screenshots / "whole-window-390x844.png"), full_page=True, scale="css")
    assert layout["scroll"] <= layout["W"] and layout["wide"] == [] and layout["cut"] == [], layout
    assert page.errors == []
    context.close()
