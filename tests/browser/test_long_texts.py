"""Long texts in the page, in chromium, against `Run.head(l, h).weights` of the same model: the
head's whole map as an overview, zoom and pan (buttons, keyboard, wheel) down to tiles of
labelled cells; the model view's thumbnails as the last member's row; the chips of hundreds of
members scroll, find a word and jump to a member."""
from __future__ import annotations

import httpx
import numpy as np
import pytest

import studygroup
from conftest import write_tiny_gguf

from .conftest import THUMB_PIXELS, _serve
from .test_page import explain, wait_idle
from .test_rough_edges import LAYOUT

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
    # a full-page screenshot resizes the window for a moment, and on a slow machine the page is left
    # scrolled elsewhere: the map is brought back under the pointer before the wheel turns
    canvas.evaluate("(c) => c.scrollIntoView({ block: 'center' })")
    hover = canvas.bounding_box()
    page.mouse.move(hover["x"] + geom["left"] + geom["cw"] * 0.5, hover["y"] + geom["top"] + geom["ch"] * 0.5)
    page.mouse.wheel(0, 200)  # zoom out at the pointer
    page.wait_for_function(f"() => {{ const s = document.querySelector('.sg-root').studygroup.mapShown(); return s.rows[1] - s.rows[0] == {2 * (b2 - a2)}; }}")
    page.keyboard.press("0")
    o = shown(page, "overview")
    assert o["rows"] == [0, T]
    assert page.errors == []


@pytest.mark.parametrize("width, height", [(1440, 900), (390, 844)])
def test_a_long_text_runs_past_no_viewport_and_nothing_is_cut_off(browser, url, screenshots, width, height):
    """The open head of ~400 members: its one-row grids, the whole map and the chips stay inside
    the viewport's width, and a box that clips is one made to scroll (see LAYOUT)."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(url)
    wait_idle(page)
    explain(page, TEXT)
    assert page.locator(".sg-chip").count() > 300
    shown(page, "overview")
    assert page.evaluate("() => Number(document.querySelector('.sg-grid-weights').dataset.cols)") > 300  # the last question's row
    layout = page.evaluate(LAYOUT)
    page.screenshot(path=str(screenshots / f"long-text-page-{width}x{height}.png"), full_page=True)
    assert layout["scroll"] <= layout["W"], layout
    assert layout["wide"] == [] and layout["cut"] == [], layout
    context.close()


def test_the_long_text_fits_a_phone(browser, url, screenshots):
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.goto(url)
    wait_idle(page)
    page.fill(".sg-text", TEXT)
    page.click(".sg-go")  # explained before by this server: its answers may come at once
    page.wait_for_function("() => document.querySelectorAll('.sg-chip').length > 300")
    shown(page, "overview")
    wide = page.evaluate("() => Array.from(document.querySelectorAll('.sg-map, .sg-map *')).filter((e) => e.getBoundingClientRect().right > innerWidth + 1 && !e.closest('.sg-map-wrap canvas')).map((e) => e.className)")
    assert wide == []
    page.locator(".sg-map").screenshot(path=str(screenshots / "long-text-overview-390x844.png"))
    context.close()


#: About 200 members of the default model.
PARAGRAPH = ("Every Thursday evening, Tom and Maria met in the quiet library on the hill to study for the chemistry "
             "exam together. Tom forgot his notes and his two pencils, so after an hour of work, Maria always brought the")
#: Each thumbnail's middle row of pixels in the model view's canvas under its button.
STRIPS = """() => Array.from(document.querySelectorAll('.sg-thumb')).map((b) => {
  const { side, data } = (""" + THUMB_PIXELS + """)(b), mid = Math.floor(side / 2);
  return [Number(b.dataset.layer), Number(b.dataset.head), Array.from(data.slice(4 * mid * side, 4 * (mid + 1) * side))]; })"""


@pytest.fixture(scope="module")
def default_url():
    from studygroup.gguf.model_path import default_model_path

    yield from _serve(str(default_model_path()))


def test_a_long_texts_thumbnails_are_the_last_members_row_as_strips(browser, default_url, default_model, screenshots):
    """At ~200 members the 270 thumbnails differ, and each pixel of a strip is the colour of the
    largest weight of the members it covers in the last member's row."""
    from studygroup.model.record import Record

    text = " ".join([PARAGRAPH] * 4)
    run = default_model.run(text, record=Record(steps=("weights",), rows="last"))
    assert 150 < run.T < 260
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(default_url)
    page.wait_for_function("() => document.querySelector('.sg-text').value !== ''", timeout=120_000)  # /api/info answered
    page.fill(".sg-text", text)
    page.click(".sg-go")
    page.wait_for_function(f"() => {{ const mv = document.querySelector('.sg-root').studygroup.d.modelView; "
                           f"return mv && mv.tokens.length === {run.T} && document.querySelectorAll('.sg-thumb').length === 270; }}",
                           timeout=300_000)
    strips = page.evaluate(STRIPS)
    assert len(strips) == 270
    distinct = {tuple(p) for _, _, p in strips}
    assert len(distinct) > 135, f"only {len(distinct)} different strips of 270"
    W = len(strips[0][2]) // 4
    bins = [page.evaluate("([x, C, W]) => window.StudyGroup.stripBin(x, C, W)", [x, run.T, W]) for x in range(W)]
    assert bins[0][0] == 0 and bins[-1][1] == run.T and all(a[1] == b[0] for a, b in zip(bins, bins[1:]))
    for l, h, pixels in strips:
        row = run["weights", l][h][-1].numpy()  # (T,) the last member's question
        expected = [float(row[a:b].max()) for a, b in bins]
        colours = page.evaluate("(ws) => ws.map((w) => window.StudyGroup.weightColor(w))", expected)
        got = np.array(pixels).reshape(W, 4)[:, :3]
        assert np.abs(got - np.array(colours)).max() <= 3, (l, h)
    page.locator(".sg-modelview").screenshot(path=str(screenshots / "long-text-model-view-strips.png"))
    context.close()
    alone = default_model.run(text, record="none")
    for l, h in ((0, 0), (29, 8)):  # the recording equals the head recomputed on its own
        np.testing.assert_allclose(run["weights", l][h][-1].numpy(), alone.head(l, h).weights[-1].numpy(), atol=1e-6)


def test_hundreds_of_chips_scroll_and_find_a_word_and_a_member(browser, url, screenshots):
    text = " ".join(["the tin can"] * 60) + " a red box " + " ".join(["the tin can"] * 10)
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(url)
    wait_idle(page)
    page.fill(".sg-text", text)
    page.click(".sg-go")
    page.wait_for_function("() => document.querySelectorAll('.sg-chip').length > 450")
    tokens = page.evaluate("() => document.querySelector('.sg-root').studygroup.tokens()")
    T = len(tokens)
    assert 450 < T <= 600
    box = page.locator(".sg-chips")
    height = box.evaluate("(b) => [b.clientHeight, b.scrollHeight]")
    assert height[0] <= 240 and height[1] > 3 * height[0]  # bounded, and scrolls
    # where each occurrence of a word begins, read from the members' own text
    joined, starts = "", []
    for t in tokens:
        starts.append(len(joined))
        joined += t.replace("␣", " ").replace("↵", "\n").replace("⇥", "\t")
    member_at = lambda i: max(j for j, s in enumerate(starts) if s <= i)  # noqa: E731
    red = member_at(joined.index("red"))
    page.fill(".sg-find-word", "red")
    page.press(".sg-find-word", "Enter")
    assert page.evaluate("() => document.querySelector('.sg-root').studygroup.ui.selected") == red
    assert "1 of 1" in page.locator(".sg-find-said").inner_text()
    page.wait_for_function("() => document.querySelector('.sg-root').studygroup.store.d.explanation")
    page.press(".sg-find-word", "Enter")  # red again: the only one
    page.evaluate("() => { const sg = document.querySelector('.sg-root').studygroup; sg.update({ explanation: Object.assign({}, sg.store.d.explanation) }); }")
    assert "1 of 1" in page.locator(".sg-find-said").inner_text()  # the members drawn again (an answer arriving) keep it

    def visible_in_box(j):
        return page.evaluate("""(j) => { const b = document.querySelector('.sg-chips').getBoundingClientRect();
          const c = document.querySelector('.sg-chip[data-index="' + j + '"]').getBoundingClientRect();
          return c.top >= b.top - 1 && c.bottom <= b.bottom + 1; }""", j)

    assert visible_in_box(red)
    tins = []
    at = joined.find("tin")
    while at >= 0:
        tins.append(member_at(at))
        at = joined.find("tin", at + 1)
    page.fill(".sg-find-word", "TIN")  # case ignored; the next after the selected member
    page.press(".sg-find-word", "Enter")
    nxt = next(j for j in tins if j > red)
    assert page.evaluate("() => document.querySelector('.sg-root').studygroup.ui.selected") == nxt
    page.press(".sg-find-word", "Enter")
    assert page.evaluate("() => document.querySelector('.sg-root').studygroup.ui.selected") == next(j for j in tins if j > nxt)
    page.fill(".sg-find-index", str(T - 3))
    page.press(".sg-find-index", "Enter")
    assert page.evaluate("() => document.querySelector('.sg-root').studygroup.ui.selected") == T - 3 and visible_in_box(T - 3)
    page.fill(".sg-find-index", "5")
    page.press(".sg-find-index", "Enter")
    assert page.evaluate("() => document.querySelector('.sg-root').studygroup.ui.selected") == 5 and visible_in_box(5)
    page.fill(".sg-find-index", str(T + 100))
    page.press(".sg-find-index", "Enter")
    assert page.locator(".sg-find-said").inner_text() == f"The members are numbered 0 to {T - 1}."
    assert page.evaluate("() => document.querySelector('.sg-root').studygroup.ui.selected") == 5
    page.fill(".sg-find-word", "zebra")
    page.press(".sg-find-word", "Enter")
    assert "is not in the text" in page.locator(".sg-find-said").inner_text()
    page.locator(".sg-input").screenshot(path=str(screenshots / "long-text-chips-find.png"))
    context.close()


@pytest.fixture(scope="module")
def slow_url(tmp_path_factory):
    """A server on a tiny model of 32 layers × 8 heads: its explain of 489 members lasts seconds (7.6 s
    on a 2-core EPYC), long enough to be followed and cancelled on a machine several times faster
    (the 2-layer model's ends before the page's first look)."""
    path = write_tiny_gguf(tmp_path_factory.mktemp("slow19") / "slow.gguf", n_layers=32, n_heads=8, n_kv_heads=2,
                           context=600).path
    yield from _serve(path, "--max-tokens", "600")


def test_a_long_explain_shows_its_progress_and_can_be_cancelled(browser, slow_url):
    url = slow_url
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    jobs = []
    page.on("request", lambda r: jobs.append(r.post_data_json) if r.url.endswith("/api/explain") else None)
    page.goto(url)
    wait_idle(page)
    page.fill(".sg-text", " ".join(["can the tin"] * 70))
    page.click(".sg-go")
    running = page.locator(".sg-progress[data-state='running']")
    running.wait_for(timeout=120_000)
    assert "/" in page.locator(".sg-progress .sg-progress-stage").inner_text()
    first = int(running.get_attribute("data-steps"))
    page.wait_for_function(f"() => Number(document.querySelector('.sg-progress').dataset.steps) > {first}")
    page.click(".sg-progress button")
    page.locator(".sg-status[data-kind='error']").wait_for(timeout=30_000)
    assert "cancelled" in page.locator(".sg-status").inner_text()
    assert page.locator(".sg-progress").is_hidden()
    job = jobs[-1]["job"]
    state = httpx.post(url.rstrip("/") + "/api/progress", json={"job": job}).json()
    assert state["state"] == "cancelled"
    context.close()


@pytest.fixture(scope="module")
def wide_url(tmp_path_factory):
    """A server on a tiny model of 64 layers and a context of 4096: one pass of 3,011 members lasts
    seconds (4.3 s on a 2-core EPYC), so the conclusion of such a text runs long enough to be
    followed and cancelled on a machine several times faster."""
    path = write_tiny_gguf(tmp_path_factory.mktemp("wide19") / "wide.gguf", n_layers=64, n_heads=8, n_kv_heads=2,
                           d_head=32, d_mlp=512, context=4096).path
    yield from _serve(path)


def test_a_long_texts_views_show_their_progress_and_can_be_cancelled(browser, wide_url):
    """The page's first requests on a long text (the conclusion, the model view and the head: each
    the text's pass or part of it) show the progress bar and Cancel; Cancel stops the one running,
    and the status says what was not computed and how to ask again."""
    import re

    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    jobs = []
    page.on("request", lambda r: jobs.append(r.post_data_json) if r.url.endswith("/api/conclusion") else None)
    page.goto(wide_url)
    wait_idle(page)
    page.fill(".sg-text", " ".join(["the tin can"] * 430))
    page.click(".sg-go")
    page.wait_for_function("() => document.querySelector('.sg-status').textContent.startsWith('Reading the members')")
    running = page.locator(f".sg-progress[data-job='{jobs[-1]['job']}'][data-state='running']")
    running.wait_for(timeout=60_000)  # the conclusion's
    # its stage reads "starting" until the server's first report of the pass
    page.wait_for_function("() => document.querySelector('.sg-progress .sg-progress-stage').textContent.includes('layer by layer')",
                           timeout=60_000)
    page.click(".sg-progress button")  # the conclusion's, or the view asked after it if it ended meanwhile
    page.locator(".sg-status[data-kind='error']").wait_for(timeout=30_000)
    said = page.locator(".sg-status").inner_text()
    assert re.match(r"Stopped: (the text's conclusion|the model view|head \d+ of layer \d+) was cancelled on request\. "
                    r"(Press Explain|Click its thumbnail)", said), said
    assert page.locator(".sg-progress").is_hidden()
    assert page.locator(".sg-sentences").inner_text().startswith("No story for this text: the computation stopped")
    job = page.locator(".sg-progress").get_attribute("data-job")
    assert httpx.post(wide_url.rstrip("/") + "/api/progress", json={"job": job}).json()["state"] == "cancelled"
    context.close()
