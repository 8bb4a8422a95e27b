"""The model's whole window in the page, in chromium: an 8,191-token text (the default model's
context holds 8,192) loads, the open head's overview draws, and a zoom down to labelled cells
shows weights equal to `Run.head(l, h).weights` of the same model at those indices; at 1440×900
and 390×844 (a phone's 3 device pixels per pixel) nothing runs past the viewport's width and no
box cuts off what it holds.

The page's own order is the conclusion, the model view, the open head (its last question) and
its overview, then explain. Explain on 8,191 members takes minutes on two cores
(docs/performance.md, "The page on 8,191 tokens"), and the maps do not need it: the test presses
the page's Cancel once the overview is drawn, as a reader who came for the maps would.
"""
from __future__ import annotations

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


def zoom_at_bottom_left(page) -> dict:
    """One wheel step in at the map's bottom-left corner (the last questions, the first answers),
    then what the map shows once it is drawn."""
    before = page.evaluate(MAP)
    n = before["rows"][1] - before["rows"][0]
    box = page.locator(".sg-map-canvas").bounding_box()
    m = page.evaluate("() => { const m = document.querySelector('.sg-map-canvas').__map; "
                      "return m.spec ? { left: m.geom.left, top: m.geom.top, w: m.geom.cw * m.geom.nC, h: m.geom.ch * m.geom.nR }"
                      " : { left: m.left, top: m.head, w: m.nC, h: m.nR }; }")
    page.mouse.move(box["x"] + m["left"] + 1, box["y"] + m["top"] + m["h"] - 1)
    page.mouse.wheel(0, -120)
    want = max(8, round(n / 2))
    page.wait_for_function("(want) => { const s = document.querySelector('.sg-root').studygroup.mapShown(); "
                           "return s && s.rows[1] - s.rows[0] === want; }", arg=want, timeout=120_000)
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
    while True:  # 8,191 -> 4,096 -> ... -> 256 members a side (cells) -> ... -> 16
        c = zoom_at_bottom_left(page)
        if c["rows"][1] - c["rows"][0] <= 16:
            break
    assert c["mode"] == "cells" and c["notation"] == "paper"
    (a, b), (k0, k1) = c["rows"], c["keys"]
    assert (a, b, k0, k1) == (T - 16, T, 0, 16)  # the pointer's corner stayed under it
    np.testing.assert_allclose(np.array(c["weights"]), W[a:b, k0:k1], atol=1e-6)
    geom = page.evaluate("() => document.querySelector('.sg-map-canvas').__geom")
    assert geom["cw"] >= 13 and geom["ch"] >= 13  # every member labelled (labels no closer than 13 px)
    box = page.locator(".sg-map-canvas").bounding_box()
    page.mouse.move(box["x"] + geom["left"] + geom["cw"] * 0.5, box["y"] + geom["top"] + geom["ch"] * 15.5)
    tip = page.locator(".sg-tip").inner_text()
    assert tip.startswith(f"member {T - 1}'s question") and f"to member {k0}'s answer" in tip, tip
    assert float(tip.split("gives weight ")[1].split(" ")[0]) == pytest.approx(W[T - 1, k0], rel=1e-3)
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
