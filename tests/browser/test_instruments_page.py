"""The page's residual stream, logit lens and activation patching views in chromium, on the tiny
model: the residual stream's chart holds explain's direct contributions and fits a phone and a
desktop with nothing overlapping; the lens has a row per layer and names each member's final word,
and a click on a row opens that layer's heads; patching says its cost, shows its progress, then
both grids with the API's numbers; token text that looks like markup stays text."""
from __future__ import annotations

import pytest

from .conftest import Watch
from .test_page import MARKUP_TEXT, assert_no_markup_ran, explain, wait_idle
from .test_rough_edges import LAYOUT

#: The API's answer to a body, asked from the page (answered from the server's cache when the page asked it first).
API = """async ([path, body]) => (await fetch('/api/' + path, {method: 'POST',
  headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)})).json()"""
#: Each grid's cells' exact values (data-value), row by row.
CELLS = """(sel) => [...document.querySelectorAll(sel + ' tbody tr')].map((tr) =>
  [...tr.querySelectorAll('td')].map((td) => Number(td.dataset.value)))"""
#: Every text the patching's progress line shows, from now on.
RECORD_PROGRESS = """() => { const s = document.querySelector('.sg-patch-job .sg-progress-stage'); window.seenProgress = [];
  new MutationObserver(() => window.seenProgress.push(s.textContent)).observe(s, {childList: true, characterData: true, subtree: true}); }"""
#: 211 members each on the tiny model (seconds of patching, polled every 0.5 s), the last word
#: changed for one of as many tokens.
CLEAN = " ".join(["the tin can"] * 30)
CORRUPTED = CLEAN[:-1] + "t"


#: The residual stream's chart read back, a row per layer: its heads' bar, a tick per head, its MLP's bar, the logit so far.
CHART = """() => [...document.querySelectorAll('.sg-res-layer')].map((r) => ({
  heads: Number(r.querySelector('[data-kind=heads] .sg-res-bar').dataset.value),
  each: [...r.querySelectorAll('.sg-res-tick')].map((t) => Number(t.dataset.value)),
  mlp: Number(r.querySelector('[data-kind=mlp] .sg-res-bar').dataset.value), sofar: Number(r.dataset.sofar)}))"""
#: Pairs of the residual stream card's words and tracks whose boxes overlap (by more than half a pixel).
OVERLAPS = """() => {
  const parts = [...document.querySelectorAll('.sg-residual h2, .sg-res-key, .sg-res-legend > span:not(.sg-res-key), ' +
    '.sg-res-label, .sg-res-track, .sg-res-scale > span, .sg-res-sofar, .sg-res-story p')];
  const boxes = parts.map((e) => e.getBoundingClientRect()), hits = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5 && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5)
      hits.push([parts[i].className || parts[i].tagName, parts[j].className || parts[j].tagName]);
  }
  return { hits, parts: parts.length };
}"""


@pytest.mark.parametrize("width, height", [(390, 844), (1440, 900)])
def test_the_residual_stream_chart_holds_explains_contributions_and_nothing_in_it_overlaps(browser, server_url, screenshots,
                                                                                          width, height):
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.watch = Watch(page)
    page.goto(server_url)
    wait_idle(page)
    page.locator(".sg-res-layer").first.wait_for()
    e = page.evaluate(API, ["explain", {"text": page.input_value(".sg-text"), "top": 10}])  # the page's body: its cached answer
    chart = page.evaluate(CHART)
    assert len(chart) == e["model"]["n_layers"]
    assert [r["each"] for r in chart] == e["contributions"]
    assert [r["heads"] for r in chart] == [sum(row) for row in e["contributions"]]
    assert [r["mlp"] for r in chart] == e["mlp_contributions"]
    sofar = [e["logit_parts"]["embed"] + e["logit_parts"]["position"]]
    for row, mlp in zip(e["contributions"], e["mlp_contributions"]):
        sofar.append(sofar[-1] + (sum(row) + mlp))
    assert [r["sofar"] for r in chart] == sofar[1:]
    assert abs(sofar[-1] + e["logit_parts"]["biases"] - e["logit_parts"]["logit"]) < 1e-3  # the shares add up to the logit
    said = page.locator(".sg-res-story").inner_text()
    assert "softmax ignores" in said and e["runner_up"]["token"] in said
    overlaps = page.evaluate(OVERLAPS)
    assert overlaps["parts"] > 3 * len(chart) and overlaps["hits"] == [], overlaps
    layout = page.evaluate(LAYOUT)
    assert layout["scroll"] <= layout["W"] and layout["wide"] == [] and layout["cut"] == [], layout
    page.locator(".sg-residual").screenshot(path=str(screenshots / f"page-residual-{width}x{height}.png"))
    page.locator(".sg-res-layer").nth(1).click()
    page.locator(".sg-head-title", has_text="of layer 1").wait_for()
    assert page.watch.errors == []
    context.close()


def read_lens(page):
    page.click(".sg-lens-go")
    page.locator(".sg-lens-grid").wait_for(timeout=60_000)


#: Whether the patching's progress line has shown its patched passes' count ("…: 637/1274 (0.4 s)").
PATCHED_PASSES_SEEN = r"""() => (window.seenProgress || []).some((s) => /^patched passes, layer by layer: \d+\/\d+ \(\d+\.\d s\)$/.test(s))"""


def hold_answers(page, url):
    """The server's answers to the page's requests to url, fetched and kept from the page until `release`."""
    held = []

    def hold(route):
        held.append((route, route.fetch(timeout=120_000)))
    page.route(url, hold)
    return held


def release(page, url, held):
    """Every answer `hold_answers` kept (waiting for the first), given to the page; later requests to url go straight through."""
    for _ in range(1200):
        if held:
            break
        page.wait_for_timeout(100)
    assert held, f"no request to {url} in 120 s"
    for route, answer in held:
        route.fulfill(response=answer)
    page.unroute(url)


def run_patching(page, clean, corrupted):
    page.fill(".sg-patch-clean", clean)
    page.fill(".sg-patch-corrupted", corrupted)
    page.click(".sg-patch-go")
    page.locator(".sg-patch-grid[data-grid='heads']").wait_for(timeout=120_000)


def test_the_lens_has_a_row_per_layer_and_a_click_on_one_opens_that_layer(page, server_url, screenshots):
    page.goto(server_url)
    wait_idle(page)
    read_lens(page)
    d = page.evaluate(API, ["lens", {"text": page.input_value(".sg-text"), "top": 5, "all_positions": True}])
    assert page.locator(".sg-lens-row").count() == len(d["layers"]) == d["model"]["n_layers"]
    assert page.evaluate(CELLS, ".sg-lens-grid") == [[c["final_prob"] for c in row] for row in d["layers"]]
    finals = page.locator(".sg-lens-final td")
    assert [float(v) for v in finals.evaluate_all("(tds) => tds.map((td) => td.dataset.value)")] == [w["prob"] for w in d["final"]]
    assert all(w["token"] in t for w, t in zip(d["final"], finals.evaluate_all("(tds) => tds.map((td) => td.title)")))
    page.locator(".sg-lens").screenshot(path=str(screenshots / "page-lens.png"))
    page.locator(".sg-lens-row").nth(1).click()
    page.locator(".sg-thumb.sg-open[data-layer='1']").wait_for()
    page.locator(".sg-head-title", has_text="of layer 1").wait_for()
    assert page.watch.errors == []


def test_patching_says_its_cost_shows_progress_then_both_grids_with_the_apis_numbers(page, long_server_url, screenshots):
    page.goto(long_server_url)
    wait_idle(page)
    page.fill(".sg-patch-clean", CLEAN)
    page.fill(".sg-patch-corrupted", CORRUPTED)
    page.wait_for_function("() => /^Before it runs, 211 members: patching 637 places in each of 2 layers/"
                           ".test(document.querySelector('.sg-patch-cost').textContent)")
    page.evaluate(RECORD_PROGRESS)
    held = hold_answers(page, "**/api/patch")
    page.click(".sg-patch-go")
    page.wait_for_function(PATCHED_PASSES_SEEN, timeout=120_000)  # polled while its answer is held, however fast the machine
    release(page, "**/api/patch", held)
    page.locator(".sg-patch-grid[data-grid='heads']").wait_for(timeout=120_000)
    d = page.evaluate(API, ["patch", {"clean": CLEAN, "corrupted": CORRUPTED}])
    for kind in ("resid_pre", "heads"):
        assert page.evaluate(CELLS, f".sg-patch-grid[data-grid='{kind}']") == d["grids"][kind]["normalised"], kind
    page.click(".sg-patch-kinds button[data-kind='mlp_out']")
    assert page.evaluate(CELLS, ".sg-patch-grid[data-grid='mlp_out']") == d["grids"]["mlp_out"]["normalised"]
    assert page.locator(".sg-patch-story p").all_inner_texts() == d["story"]
    assert "0 = corrupted, 1 = clean" in page.locator(".sg-patch-legend").inner_text()
    page.locator(".sg-patching").screenshot(path=str(screenshots / "page-patching.png"))
    assert page.watch.errors == []


def test_markup_in_the_lens_and_patching_stays_text(page, server_url):
    page.goto(server_url)
    wait_idle(page)
    explain(page, MARKUP_TEXT)
    read_lens(page)
    assert "</script>" in page.locator(".sg-lens-grid thead").inner_text()
    run_patching(page, MARKUP_TEXT, "b" + MARKUP_TEXT[1:])
    heading = page.locator(".sg-patch-grid[data-grid='resid_pre'] thead").inner_text()
    assert "<img\u2423src=x\u2423onerror=alert(1)>" in heading and "</script>" in heading  # ␣ marks its spaces
    assert_no_markup_ran(page)
