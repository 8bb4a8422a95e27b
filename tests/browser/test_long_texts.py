"""Long texts in the page, in chromium, against `Run.head(l, h).weights` of the same model: the
head's whole map as an overview, zoom and pan (buttons, keyboard, wheel) down to tiles of
labelled cells; the model view's thumbnails as the last member's row; the chips of hundreds of
members scroll, find a word and jump to a member."""
from __future__ import annotations

import numpy as np
import pytest

import studygroup
from conftest import write_tiny_gguf

from .conftest import _serve
from .test_page import explain, wait_idle

#: About 400 members of the tiny model's vocabulary.
TEXT = " ".join(["the tin can"] * 57)
SHOWN = "() => document.querySelector('.sg-root').studygroup.mapShown()"
OPEN = "() => { const s = document.querySelector('.sg-root').studygroup; return [s.ui.layer, s.ui.head]; }"


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("long19") / "long.gguf", context=600).path


@pytest.fixture(scope="module")
def url(long_model):
    yield from _serve(long_model, "--max-tokens", "600")


@pytest.fixture(scope="module")
def reference(long_model):
    """Run.head(l, h).weights of TEXT, by (layer, head), on the model the server holds."""
    model = studygroup.load(str(long_model))
    run = model.run(TEXT, record="none")
    return lambda l, h: run.head(l, h).weights.numpy()


@pytest.fixture
def long_page(browser, url):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    wait_idle(page)
    explain(page, TEXT)
    page.errors = errors
    yield page
    context.close()


def shown(page, mode):
    page.locator(f".sg-map-canvas[data-mode='{mode}']").wait_for()
    page.wait_for_function("() => !document.querySelector('.sg-map-caption').dataset.kind")
    return page.evaluate(SHOWN)


def test_the_overview_zooms_and_pans_down_to_cells_equal_to_the_runs_weights(long_page, reference, screenshots):
    page = long_page
    l, h = page.evaluate(OPEN)
    W = reference(l, h)
    T = W.shape[0]
    assert T > 300
    o = shown(page, "overview")
    assert o["rows"] == [0, T] and o["keys"] == [0, T] and o["block"] == 1 and o["size"] == [T, T]
    np.testing.assert_allclose(np.array(o["max"]).reshape(T, T), W, atol=1e-6)
    page.screenshot(path=str(screenshots / "long-text-overview-1440x900.png"), full_page=True)
    page.click(".sg-map-controls button[aria-label='zoom in']")  # T/2 members a side: a tile of cells
    page.wait_for_function("() => document.querySelector('.sg-root').studygroup.mapShown().mode === 'cells'")
    c = shown(page, "cells")
    n = round(T / 2)
    (a, b), (k0, k1) = c["rows"], c["keys"]
    assert b - a == n and k1 - k0 == n
    np.testing.assert_allclose(np.array(c["weights"]), W[a:b, k0:k1], atol=1e-6)
    canvas = page.locator(".sg-map-canvas")
    canvas.focus()
    for key in ("+", "+", "+", "ArrowRight", "ArrowDown"):  # 25 members a side, moved by 6 each way
        page.keyboard.press(key)
    page.wait_for_function("() => { const s = document.querySelector('.sg-root').studygroup.mapShown(); return s.rows[1] - s.rows[0] < 30; }")
    c = shown(page, "cells")
    (a2, b2), (j0, j1) = c["rows"], c["keys"]
    assert b2 - a2 == j1 - j0 and b2 - a2 < 30 and j0 > k0 and a2 > a
    np.testing.assert_allclose(np.array(c["weights"]), W[a2:b2, j0:j1], atol=1e-6)
    # every member of a close zoom is labelled: cells of at least 13 px each
    assert page.evaluate("() => document.querySelector('.sg-map-canvas').__geom.cw") >= 13
    hover = canvas.bounding_box()
    geom = page.evaluate("() => document.querySelector('.sg-map-canvas').__geom")
    page.mouse.move(hover["x"] + geom["left"] + geom["cw"] * 0.5, hover["y"] + geom["top"] + geom["ch"] * (b2 - a2 - 0.5))
    tip = page.locator(".sg-tip")
    assert f"member {b2 - 1}'s question" in tip.inner_text() and f"member {j0}'s answer" in tip.inner_text()
    page.screenshot(path=str(screenshots / "long-text-cells-1440x900.png"), full_page=True)
    page.mouse.wheel(0, 200)  # zoom out at the pointer
    page.wait_for_function(f"() => {{ const s = document.querySelector('.sg-root').studygroup.mapShown(); return s.rows[1] - s.rows[0] == {2 * (b2 - a2)}; }}")
    page.keyboard.press("0")
    o = shown(page, "overview")
    assert o["rows"] == [0, T]
    assert page.errors == []


def test_the_long_text_fits_a_phone(browser, url, screenshots):
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.goto(url)
    wait_idle(page)
    explain(page, TEXT)
    shown(page, "overview")
    wide = page.evaluate("() => Array.from(document.querySelectorAll('.sg-map, .sg-map *')).filter((e) => e.getBoundingClientRect().right > innerWidth + 1 && !e.closest('.sg-map-wrap canvas')).map((e) => e.className)")
    assert wide == []
    page.locator(".sg-map").screenshot(path=str(screenshots / "long-text-overview-390x844.png"))
    context.close()
