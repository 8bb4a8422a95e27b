"""The complete ranking in the page, in chromium: where explain's default measured only some heads,
the page shows that quick ranking first, then measures every head exactly in the background with
its progress in words, and replaces the ranking (the decisive heads, the model view's numbers, the
story) with the API's complete result; Cancel, or a new text, stops the background job."""
from __future__ import annotations

import httpx
import pytest

from conftest import write_tiny_gguf

from .conftest import _serve
from .test_page import wait_idle

#: 24 layers × 8 heads: more heads than explain's default measures past HEADS_ALL_MAX_T members, and
#: enough that measuring every head exactly takes seconds (4.1 s on a 2-core EPYC) at TEXT's length.
N_LAYERS, N_HEADS = 24, 8
ALL = N_LAYERS * N_HEADS
#: 351 members: every head measured exactly lasts long enough to be followed, on a machine several times faster too.
TEXT = " ".join(["the tin can"] * 50)
SHOWN = """() => { const s = document.querySelector('.sg-root').studygroup; return {
  heads: s.d.explanation.heads.map((h) => [h.layer, h.head]),
  listed: [...document.querySelectorAll('.sg-declist button')].map((b) => b.textContent),
  ranked: [...document.querySelectorAll('.sg-thumb.sg-ranked')].map((b) => [Number(b.dataset.layer), Number(b.dataset.head),
           Number(b.querySelector('.sg-rank').textContent)]),
  titles: Object.fromEntries([...document.querySelectorAll('.sg-thumb')].map((b) => [b.dataset.layer + '.' + b.dataset.head, b.title])),
  said: document.querySelector('.sg-decisive .sg-hint').textContent,
  story: [...document.querySelectorAll('.sg-sentences p')].map((p) => p.textContent).join(' ') }; }"""


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("heads") / "heads.gguf", n_layers=N_LAYERS, n_heads=N_HEADS,
                           n_kv_heads=2, context=600).path
    yield from _serve(path, "--max-tokens", "600")


@pytest.fixture
def page(browser, url):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    p = context.new_page()
    p.errors = []
    p.on("pageerror", lambda e: p.errors.append(str(e)))
    p.goto(url)
    wait_idle(p)
    yield p
    context.close()


def api(url, path, body):
    r = httpx.post(url.rstrip("/") + "/api/" + path, json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def explain_in_page(page, text):
    page.fill(".sg-text", text)
    page.click(".sg-go")
    page.locator(".sg-status[data-kind='busy']").wait_for(state="attached")
    wait_idle(page, timeout=120_000)


def ranking(heads):
    return [[h["layer"], h["head"]] for h in heads]


def test_the_quick_ranking_comes_first_and_the_complete_one_replaces_it(page, url, screenshots):
    explain_in_page(page, TEXT)
    quick = page.evaluate(SHOWN)
    quick_api = api(url, "explain", {"text": TEXT})
    assert quick_api["heads_measured"] < ALL
    assert quick["heads"] == ranking(quick_api["heads"])
    assert f"{quick_api['heads_measured']} of {ALL} heads measured exactly" in quick["said"]
    shown = 8  # numbered in the model view: the decisive heads listed under the story
    assert sorted(quick["ranked"], key=lambda r: r[2]) == [[l, h, r + 1] for r, (l, h) in enumerate(quick["heads"][:shown])]
    for r, (l, h) in enumerate(quick["heads"][:quick_api["heads_measured"]]):  # every measured head's rank, on hover
        assert f"ranked {r + 1} of {quick_api['heads_measured']}" in quick["titles"][f"{l}.{h}"]
    box = page.locator(".sg-complete")
    page.locator(".sg-complete[data-state='running']").wait_for(timeout=60_000)
    words = box.inner_text()
    page.locator(".sg-story").screenshot(path=str(screenshots / "complete-ranking-running.png"))
    assert "Measuring every head exactly in the background" in words and "%" in words, words
    page.locator(".sg-complete[data-state='done']").wait_for(timeout=120_000)
    assert f"Complete: all {ALL} heads measured exactly, each silenced at every position" in box.inner_text()
    assert box.locator("button").is_hidden()
    complete = page.evaluate(SHOWN)
    page.locator(".sg-story").screenshot(path=str(screenshots / "complete-ranking-done.png"))
    complete_api = api(url, "explain", {"text": TEXT, "measure_heads": "all"})
    assert complete["heads"] == ranking(complete_api["heads"]) and len(complete["heads"]) == ALL
    assert complete["listed"] == [f"layer {h['layer']} head {h['head']} (kv {h['kv_head']}): " + page.evaluate(
        "(x) => StudyGroup.signed(x, 3)", h["silence_effect"]) for h in complete_api["heads"][:8]]
    assert sorted(complete["ranked"], key=lambda r: r[2]) == [[l, h, r + 1] for r, (l, h) in enumerate(ranking(complete_api["heads"])[:shown])]
    assert all(f"ranked {r + 1} of {ALL}" in complete["titles"][f"{l}.{h}"] for r, (l, h) in enumerate(complete["heads"]))
    assert f"all {ALL}, each silenced at every position" in complete["said"]
    assert f"{quick_api['heads_measured']} of {ALL} heads were measured exactly" in quick["story"]
    assert f"All {ALL} heads were measured exactly" in complete["story"] and f"of {ALL} heads" not in complete["story"]
    assert not page.errors


STOPS = {"cancel": "Stopped on request", "silencing": "Stopped (the silencing changed)"}


def test_cancel_a_silencing_change_and_a_new_text_stop_the_background_job(page, url):
    jobs, cancels = [], []
    page.on("request", lambda r: jobs.append(r.post_data_json) if r.url.endswith("/api/explain") else None)
    page.on("request", lambda r: cancels.append(r.post_data_json["job"]) if r.url.endswith("/api/cancel") else None)
    for text, stop in ((" ".join(["the can tin"] * 50), "cancel"), (" ".join(["can tin the"] * 50), "silencing"),
                       (" ".join(["tin the can"] * 50), "new text")):
        explain_in_page(page, text)
        quick_heads = page.evaluate(SHOWN)["heads"]
        # stopped as soon as the page has asked for it: a fast CPU ends the job in about a second,
        # sometimes before the page's first look at its progress shows it running
        page.wait_for_function("() => { const b = document.querySelector('.sg-complete'); "
                               "return b && b.dataset.job && ['waiting', 'running'].includes(b.dataset.state); }", timeout=60_000)
        job = jobs[-1]["job"]
        assert jobs[-1]["measure_heads"] == "all" and jobs[-1]["text"] == text
        if stop == "new text":
            page.fill(".sg-text", "the tin")
            page.click(".sg-go")
        else:
            page.click(".sg-complete button" if stop == "cancel" else ".sg-chip[data-index='3'] .sg-mute")
            page.locator(".sg-complete[data-state='stopped']").wait_for(timeout=30_000)
            said = page.locator(".sg-complete").inner_text()
            assert said.startswith(STOPS[stop] + ": the ranking is the quick one"), said
            assert page.evaluate(SHOWN)["heads"] == quick_heads
        state = None
        for _ in range(100):
            state = api(url, "progress", {"job": job})["state"]
            if state not in ("waiting", "running"):
                break
            page.wait_for_timeout(100)
        assert job in cancels, stop  # the page asked the server to stop it
        if stop == "new text" and state == "done":  # it ended before the cancel arrived (~0.1 s after the click):
            wait_idle(page)  # then its answer must not be drawn over the new text's
            assert page.evaluate("() => document.querySelector('.sg-root').studygroup.d.explanation.text") == "the tin"
            continue
        assert state == "cancelled", (stop, state)
    wait_idle(page)
    assert page.locator(".sg-complete").is_hidden()
    assert not page.errors
