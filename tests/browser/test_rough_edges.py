"""The page's rough edges, each checked in chromium against the web API's own numbers: silencing
re-sorts the conclusion on an axis that says where it ends and keeps the old values in sight;
a silenced member's chip wears the grids' hatch; an error leaves nothing of the last text; at
1440×900 and 390×844 nothing runs past the viewport and nothing is cut off; a cell says in words
what it holds, and a click opens "why" for it. No request leaves the machine (any is aborted and
fails the test).
"""
from __future__ import annotations

import io
import math
import re

import httpx
import numpy as np
import pytest
from PIL import Image

from studygroup.formats import percent
from conftest import write_tiny_gguf
from studygroup.views.colours import MASK_FACE, MASK_LINE

from .conftest import _serve
from .test_page import DISPLAYED, chip_texts, explain, wait_idle

TEXT = "I have a lot"
#: Long enough that the open head (grids and the member panel) is taller than a 900-pixel screen.
LONGER = " ".join(["the tin can"] * 6)


@pytest.fixture
def local(browser, server_url):
    """A page whose requests to anywhere but the server are aborted and recorded."""
    def make(width=1360, height=1000):
        context = browser.new_context(viewport={"width": width, "height": height})
        origin = server_url.rstrip("/")
        context.tried = []

        def only_local(route):
            url = route.request.url
            if url.startswith(origin) or url.startswith(("data:", "blob:")):
                return route.continue_()
            context.tried.append(url)
            return route.abort()

        context.route("**/*", only_local)
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.errors = errors
        contexts.append(context)
        return page

    contexts = []
    yield make
    for c in contexts:
        assert c.tried == [], f"requests to another host: {c.tried}"
        c.close()


def api(server_url, path, body):
    r = httpx.post(server_url.rstrip("/") + "/api/" + path, json=body, timeout=60)
    r.raise_for_status()
    return r.json()


def silence_and_wait(page, j):
    page.click(f".sg-chip[data-index='{j}'] .sg-mute")
    page.locator(".sg-bars[data-silenced='true']").wait_for()
    page.locator(".sg-grid-weights[data-silenced='true']").wait_for()
    page.locator(".sg-status[data-kind='']").wait_for(state="attached")


BARS = """() => Array.from(document.querySelectorAll('.sg-bars .sg-barrow'), (row) => {
  const track = row.querySelector('.sg-track').getBoundingClientRect();
  const part = (sel) => { const e = row.querySelector(sel); return e ? e.getBoundingClientRect().width / track.width : null; };
  const ghost = row.querySelector('.sg-ghost'), bar = row.querySelector('.sg-bar');
  return { track: track.width, id: Number(row.dataset.id), value: row.querySelector('.sg-value').textContent, bar: part('.sg-bar'), ghost: part('.sg-ghost'),
           ghostOnTop: ghost && bar ? Number(getComputedStyle(ghost).zIndex) > (Number(getComputedStyle(bar).zIndex) || 0) : null,
           ghostBorder: ghost ? getComputedStyle(ghost).borderTopStyle + ' ' + getComputedStyle(ghost).borderTopWidth : null };
})"""


def test_silencing_resorts_the_conclusion_on_a_stated_axis_with_the_old_values(local, server_url, screenshots):
    page = local()
    page.goto(server_url)
    wait_idle(page)
    explain(page, TEXT)
    j = len(chip_texts(page)) - 2
    silence_and_wait(page, j)
    truth = api(server_url, "conclusion", {"text": TEXT, "top": 10, "silence": {"members": [j]}})
    words = {w["id"]: w for w in truth["words"]}
    bars = page.evaluate(BARS)
    after = [words[b["id"]]["prob_after"] for b in bars]
    assert after == sorted(after, reverse=True)  # the silenced run's order
    top = max(max(w["prob_after"], w["prob_before"]) for w in words.values())
    axis = math.ceil(10 * top - 1e-9) / 10
    assert float(page.locator(".sg-bars").get_attribute("data-axis")) == pytest.approx(axis)
    assert f"0 to {round(100 * axis)}%" in page.locator(".sg-axis").inner_text()
    for b in bars:
        w = words[b["id"]]
        assert b["bar"] == pytest.approx(w["prob_after"] / axis, abs=0.01 + 1 / b["track"])  # widths on that axis (1 px at least)
        assert b["ghost"] == pytest.approx(w["prob_before"] / axis, abs=0.01 + 4 / b["track"])  # (its 2 px borders)
        assert b["ghostOnTop"] and b["ghostBorder"] == "dashed 2px"  # the old value's outline is never hidden
        assert "before" in b["value"] and not re.search(r"[-\u2212]0\.0 pts", b["value"])
    assert max(b["bar"] for b in bars) >= 0.5 or axis == 0.1  # the largest bar fills the axis, up to 10%
    note = page.locator(".sg-story-note")
    assert note.is_visible() and "nothing silenced" in note.inner_text()
    page.click(".sg-silenced .sg-link")  # clear all
    page.locator(".sg-bars[data-silenced='false']").wait_for()
    assert not note.is_visible()
    assert page.errors == []


def test_points_never_read_minus_zero(local, server_url):
    page = local()
    page.goto(server_url)
    wait_idle(page)
    explain(page, TEXT)
    for j in range(len(chip_texts(page)) - 1):
        page.click(f".sg-chip[data-index='{j}'] .sg-mute")
        page.locator(".sg-bars[data-silenced='true']").wait_for()
        page.locator(".sg-status[data-kind='']").wait_for(state="attached")
        for v in page.locator(".sg-bars .sg-value").all_inner_texts():
            change = re.search(r"([+\-\u00b1])(\d+\.\d) pts", v)  # the minus of formats.py
            assert change, v
            assert not (change.group(1) == "-" and change.group(2) == "0.0"), v
        page.click(f".sg-chip[data-index='{j}'] .sg-mute")
        page.locator(".sg-bars[data-silenced='false']").wait_for()


def _colours(png: bytes) -> set[tuple[int, int, int]]:
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)  # (H·W, 3)
    return set(map(tuple, np.unique(pixels, axis=0).tolist()))


def _hex(h: str) -> tuple[int, int, int]:
    return tuple(int(h[i:i + 2], 16) for i in (1, 3, 5))


def test_a_silenced_members_chip_wears_the_grids_hatch(local, server_url, screenshots):
    page = local()
    page.goto(server_url)
    wait_idle(page)
    explain(page, TEXT)
    silence_and_wait(page, 1)
    near = lambda cs, c: any(sum(abs(a - b) for a, b in zip(x, c)) <= 6 for x in cs)  # noqa: E731
    muted = _colours(page.locator(".sg-chip[data-index='1'] .sg-chip-main").screenshot())
    heard = _colours(page.locator(".sg-chip[data-index='2'] .sg-chip-main").screenshot())
    assert near(muted, _hex(MASK_FACE)) and near(muted, _hex(MASK_LINE))  # the hatch's face and lines
    assert not near(heard, _hex(MASK_LINE))
    # ... the very lines the weight grid draws for that member's masked cells
    cells = page.evaluate(DISPLAYED, "weights")
    assert cells["reasons"][2][1] == "silenced"
    assert "repeating-linear-gradient" in page.evaluate("() => document.querySelector('.sg-chip[data-index=\"1\"]').style.background")
    page.locator(".sg-input").screenshot(path=str(screenshots / "rough-edges-silenced-chip.png"))


def test_an_error_leaves_nothing_of_the_last_text(local, server_url):
    page = local()
    page.goto(server_url)
    wait_idle(page)
    explain(page, TEXT)
    assert "Key/value head" in page.locator(".sg-head-title").inner_text()
    assert "up to 64 tokens (the model's context)" in page.locator(".sg-limit").inner_text()  # the limit, stated
    page.fill(".sg-text", "ab " * 80)  # past the tiny model's context of 64
    page.click(".sg-go")
    page.locator(".sg-status[data-kind='error']").wait_for()
    assert "context holds 64" in page.locator(".sg-status").inner_text()
    assert page.locator(".sg-head-title").inner_text() == ""
    assert page.locator(".sg-kv").count() == 0 and page.locator(".sg-figs").is_hidden()
    assert page.locator(".sg-chip").count() == 0 and page.locator(".sg-bars .sg-barrow").count() == 0
    assert page.locator(".sg-thumb").count() == 0
    assert page.errors == []


#: Elements that run past the viewport's width, and boxes that cut off what they hold. The text
#: fields are excepted, and so are the boxes made to scroll (a large grid's .sg-canvas-wrap, the
#: long text's whole map in .sg-map-wrap, the member chips' .sg-chips, whose hundreds of members
#: scroll inside it beside a find box) where they do scroll (overflow auto or scroll): what is
#: inside them is reached by scrolling them, so only the box itself must fit the viewport.
LAYOUT = """() => {
  const W = document.documentElement.clientWidth, wide = [], cut = [], SCROLLS = '.sg-canvas-wrap, .sg-map-wrap, .sg-chips';
  const scrolls = (o) => o === 'auto' || o === 'scroll';
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (!r.width && !r.height) continue;
    const box = e.parentElement && e.parentElement.closest(SCROLLS);
    const inside = box && scrolls(getComputedStyle(box).overflowX) && scrolls(getComputedStyle(box).overflowY);
    if (!inside && (r.right > W + 1 || r.left < -1)) wide.push(e.className || e.tagName);
    const s = getComputedStyle(e);
    if (e.matches('textarea, input')) continue;
    const overX = e.scrollWidth > e.clientWidth + 1, overY = e.scrollHeight > e.clientHeight + 1;
    if (e.matches(SCROLLS) && (!overX || scrolls(s.overflowX)) && (!overY || scrolls(s.overflowY))) continue;
    const clips = [s.overflowX, s.overflowY].some((o) => o !== 'visible');
    if (clips && (overX || overY)) cut.push(e.className || e.tagName);
  }
  return { scroll: document.documentElement.scrollWidth, W, wide, cut };
}"""


@pytest.mark.parametrize("width, height", [(1440, 900), (390, 844)])
def test_nothing_runs_past_the_viewport_or_is_cut_off(local, server_url, screenshots, width, height):
    page = local(width, height)
    page.goto(server_url)
    wait_idle(page)
    explain(page, LONGER)
    last = len(chip_texts(page)) - 1
    assert last > 30
    page.click(f".sg-chip[data-index='{last}'] .sg-chip-main")  # the member panel, below the head's grids, a row per answer
    page.locator(".sg-member .sg-listen-row[data-index]").first.wait_for()
    page.click(".sg-continue")  # the generation section with its words, their conclusion and what one heard
    page.locator(".sg-gen-chips .sg-genchip").nth(3).wait_for(timeout=60_000)
    page.locator(".sg-gen-word .sg-gen-heard li").first.wait_for(timeout=60_000)
    layout = page.evaluate(LAYOUT)
    assert layout["scroll"] <= layout["W"], layout
    assert layout["wide"] == [] and layout["cut"] == [], layout
    page.screenshot(path=str(screenshots / f"page-{width}x{height}.png"), full_page=True)


def test_a_cell_says_what_it_holds_and_a_click_opens_why(local, server_url, screenshots):
    page = local()
    page.goto(server_url)
    wait_idle(page)
    explain(page, TEXT)
    tokens = chip_texts(page)
    shown = page.evaluate(DISPLAYED, "weights")
    assert shown["orientation"] == "paper"
    i, j = len(tokens) - 1, 1
    r, c = shown["rows"].index(i), shown["cols"].index(j)
    page.locator(".sg-grid-weights").scroll_into_view_if_needed()
    box = page.locator(".sg-grid-weights").bounding_box()
    geo = page.evaluate("() => document.querySelector('.sg-grid-weights').__geom")
    x, y = box["x"] + geo["left"] + (c + 0.5) * geo["cw"], box["y"] + geo["top"] + (r + 0.5) * geo["ch"]
    page.mouse.move(x, y)
    w = shown["matrix"][r][c]
    tip = page.locator(".sg-tip").inner_text()
    assert tip.startswith(f"member {i}'s question (\u201c{tokens[i]}\u201d) gives weight "), tip
    assert f" to member {j}'s answer (\u201c{tokens[j]}\u201d)" in tip
    assert float(tip.split("gives weight ")[1].split(" ")[0]) == pytest.approx(w, rel=1e-3), tip
    page.mouse.click(x, y)
    why = page.locator(".sg-why")
    why.locator("h3").wait_for()
    d = page.evaluate(DISPLAYED, "weights")
    head, layer = (int(n) for n in re.findall(r"\d+", page.locator(".sg-head-title h3").inner_text()))  # "Head h of layer l"
    truth = api(server_url, "why", {"text": TEXT, "layer": layer, "head": head, "query": i, "key": j})
    text = why.inner_text()
    assert f"Why member {i}'s question" in text and f"member {j}'s answer" in text
    assert float(text.split("gives weight ")[1].split(" ")[0]) == pytest.approx(truth["weight"], rel=1e-3)
    assert truth["weight"] == pytest.approx(d["matrix"][r][c], abs=1e-5)
    score = float(re.search(r"= (\S+) = content", text).group(1).replace("\u2212", "-"))
    assert score == pytest.approx(truth["score"], rel=1e-3, abs=1e-4)
    why.screenshot(path=str(screenshots / "page-why.png"))
    page.click(".sg-why-close")
    assert why.is_hidden()
    assert page.errors == []


def changing_member(server_url, text):
    """The first member whose silencing changes the conclusion's top word, and /api/conclusion's answer with it silenced."""
    T = len(api(server_url, "conclusion", {"text": text, "top": 10})["tokens"])
    for j in range(T):
        truth = api(server_url, "conclusion", {"text": text, "top": 10, "silence": {"members": [j]}})
        if truth["silenced"][0]["id"] != truth["top"][0]["id"]:
            return j, truth
    pytest.fail(f"no member of {text!r} changes the tiny model's conclusion")


def resolve(data, path):
    """The JSON at a story field such as "silenced[0].prob" or "heads[2].listened[0].weight"."""
    for name, index in re.findall(r"(\w+)(?:\[(\d+)\])?", path):
        data = data[name] if index == "" else data[name][int(index)]
    return data


#: The story's numbers as the page shows them: (the field each names, its text), sentence by sentence.
STORY_VALUES = """() => Array.from(document.querySelectorAll('.sg-sentences p'), (p) =>
  Array.from(p.querySelectorAll('.sg-storyvalue'), (v) => [v.title, v.textContent]))"""


def story_values(parts):
    return [[[p["field"], p["text"]] for p in s if "field" in p] for s in parts]


def test_silencing_retells_the_conclusion_and_explains_the_silenced_run_on_request(local, server_url, screenshots):
    """The story's conclusion sentence is the silenced run's (its numbers /api/conclusion's), the
    other sentences say they were measured with nothing silenced, a button explains the silenced run
    (its numbers /api/explain's with that silencing), and a new silencing or none leaves no stale story."""
    page = local()
    page.goto(server_url)
    wait_idle(page)
    explain(page, TEXT)
    plain = api(server_url, "explain", {"text": TEXT, "top": 10})
    j, truth = changing_member(server_url, TEXT)
    silence_and_wait(page, j)
    told = page.locator(".sg-sentences p.sg-silenced-sentence")
    assert told.count() == 1
    top = truth["silenced"]
    said = told.inner_text()
    assert f"concludes that the next word is \u201c{top[0]['token']}\u201d ({percent(top[0]['prob'])})" in said, said
    shown = page.evaluate(STORY_VALUES)
    conclusion_at = [n for n, s in enumerate(plain["story_parts"]) if s[0].get("about") == "conclusion"]
    assert len(conclusion_at) == 1 and len(shown) == len(plain["story_parts"])
    for field, text in shown[conclusion_at[0]]:
        assert text == percent(resolve(truth, field)), (field, text)
    assert [s for n, s in enumerate(shown) if n != conclusion_at[0]] == \
        [s for n, s in enumerate(story_values(plain["story_parts"])) if n != conclusion_at[0]]  # measured unsilenced
    measured = page.locator(".sg-sentences p").evaluate_all("ps => ps.map(p => [p.dataset.measured, p.title])")
    assert [m for m, _ in measured] == ["silenced" if n == conclusion_at[0] else "unsilenced" for n in range(len(shown))]
    assert all("nothing silenced" in t for m, t in measured if m == "unsilenced")
    note = page.locator(".sg-story-note")
    assert note.is_visible() and "nothing silenced" in note.inner_text()
    page.locator(".sg-story").screenshot(path=str(screenshots / "rough-edges-silenced-story.png"))

    page.click(".sg-story-note .sg-explain-silenced")
    page.locator(".sg-sentences[data-run='silenced']").wait_for(timeout=60_000)
    run = api(server_url, "explain", {"text": TEXT, "top": 10, "silence": {"members": [j]}})
    assert page.evaluate(STORY_VALUES) == story_values(run["story_parts"])
    assert page.locator(".sg-sentences p[data-measured]").count() == 0  # every sentence is that run's
    assert any(f"In this run member {j} " in s for s in page.locator(".sg-sentences p").all_inner_texts())
    assert "silenced run's" in note.inner_text() and page.locator(".sg-explain-silenced").count() == 0
    assert page.locator(".sg-story-progress").is_hidden()
    page.locator(".sg-story").screenshot(path=str(screenshots / "rough-edges-silenced-run-story.png"))

    k = next(x for x in range(len(truth["tokens"]) - 1) if x != j)  # another silencing: the normal state again
    page.click(f".sg-chip[data-index='{k}'] .sg-mute")
    page.locator(".sg-sentences[data-run='unsilenced']").wait_for()
    page.locator(".sg-status[data-kind='']").wait_for(state="attached")
    both = api(server_url, "conclusion", {"text": TEXT, "top": 10, "silence": {"members": sorted([j, k])}})
    for field, text in page.evaluate(STORY_VALUES)[conclusion_at[0]]:
        assert text == percent(resolve(both, field)), (field, text)
    assert page.locator(".sg-explain-silenced").is_enabled()

    page.click(".sg-silenced .sg-link")  # clear all: the unsilenced story, every number explain's
    page.locator(".sg-bars[data-silenced='false']").wait_for()
    assert page.evaluate(STORY_VALUES) == story_values(plain["story_parts"])
    assert page.locator(".sg-silenced-sentence, .sg-sentences p[data-measured]").count() == 0 and not note.is_visible()
    assert page.errors == []


#: The status line's height in every state it takes from now on (recorded each frame): "" empty, else its data-kind.
STATUS_HEIGHTS = """() => { const s = document.querySelector('.sg-status'); window.statusHeights = {};
  const look = () => { const k = s.textContent ? s.dataset.kind || 'plain' : 'empty';
    (window.statusHeights[k] = window.statusHeights[k] || new Set()).add(Math.round(s.getBoundingClientRect().height * 10) / 10);
    requestAnimationFrame(look); };
  look(); }"""


def test_the_status_line_keeps_its_height_busy_or_idle_so_nothing_below_it_jumps(local, server_url):
    """The page under the status line stays where it is when a computation starts and ends."""
    page = local()
    page.goto(server_url)
    wait_idle(page)
    page.evaluate(STATUS_HEIGHTS)
    explain(page, TEXT)
    silence_and_wait(page, 1)
    page.wait_for_timeout(100)
    seen = page.evaluate("() => Object.fromEntries(Object.entries(window.statusHeights).map(([k, v]) => [k, [...v]]))")
    assert "busy" in seen, seen
    assert len({h for hs in seen.values() for h in hs}) == 1, seen


def heads_server(tmp_path_factory, name: str, n_heads: int, n_kv_heads: int):
    """A server of a tiny model of n_heads heads a layer in n_kv_heads key/value groups: its URL, yielded."""
    yield from _serve(write_tiny_gguf(tmp_path_factory.mktemp(name) / f"{name}.gguf", n_heads=n_heads, n_kv_heads=n_kv_heads).path)


@pytest.fixture(scope="module")
def nine_heads_url(tmp_path_factory):
    """The default model's heads: 9 a layer in 3 key/value groups."""
    yield from heads_server(tmp_path_factory, "nine", 9, 3)


#: The model view's grid, and its card's content box (inside its border and padding, left and right), in pixels of the viewport.
GRID_AND_CARD = """
  const grid = document.querySelector('.sg-mv-grid'), card = grid.closest('.sg-card'), s = getComputedStyle(card), r = card.getBoundingClientRect();
  const inner = { left: r.left + parseFloat(s.borderLeftWidth) + parseFloat(s.paddingLeft),
                  right: r.right - parseFloat(s.borderRightWidth) - parseFloat(s.paddingRight) };"""
#: The card's content box, and every thumbnail's box and the sheet's; the grid's scrolled width against its own.
THUMB_BOXES = """() => {""" + GRID_AND_CARD + """
  const box = (e) => { const b = e.getBoundingClientRect(); return { left: b.left, right: b.right, width: b.width }; };
  return { inner, thumbs: [...grid.querySelectorAll('.sg-thumb')].map(box), sheet: box(grid.querySelector('.sg-mv-sheet')),
           scroll: grid.scrollWidth, width: grid.clientWidth };
}"""


def outside_card(boxes):
    """The thumbnails' and the sheet's boxes (THUMB_BOXES) that run past the card's content box."""
    inner = boxes["inner"]
    return [b for b in boxes["thumbs"] + [boxes["sheet"]] if b["left"] < inner["left"] - 0.5 or b["right"] > inner["right"] + 0.5]


@pytest.mark.parametrize("width, height", [(1440, 900), (390, 844), (360, 800)])
def test_every_thumbnail_lies_inside_the_model_views_card(browser, nine_heads_url, width, height):
    context = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=3 if width < 500 else 1)
    page = context.new_page()
    page.goto(nine_heads_url)
    explain(page, TEXT)
    page.locator(".sg-thumb").first.wait_for()
    boxes = page.evaluate(THUMB_BOXES)
    assert len(boxes["thumbs"]) == 2 * 9
    assert outside_card(boxes) == [], boxes["inner"]
    assert boxes["scroll"] <= boxes["width"], boxes
    sides = {round(b["width"]) for b in boxes["thumbs"]}
    assert len(sides) == 1 and min(sides) >= 12, sides  # one side for every thumbnail, none too small to read
    if width >= 1000:
        assert sides == {26}, sides  # room to spare: the full size
        page.set_viewport_size({"width": 390, "height": 844})  # the window made a phone's width: drawn again to fit
        page.wait_for_function("() => document.querySelector('.sg-thumb').getBoundingClientRect().width < 26")
        boxes = page.evaluate(THUMB_BOXES)
        assert outside_card(boxes) == [], boxes["inner"]
        assert len({round(b["width"]) for b in boxes["thumbs"]}) == 1
    context.close()


@pytest.fixture(scope="module")
def wide_heads_url(tmp_path_factory):
    """Llama 3 8B's heads: 32 a layer in 8 key/value groups."""
    yield from heads_server(tmp_path_factory, "wide", 32, 8)


#: The grid's box, the card's content box, the page's and the grid's scrolled widths, the box of the
#: open thumbnail's ring (4 pixels round it) and of every rank's badge with its head, and the thumbnails' sides.
RING_BOXES = """() => {""" + GRID_AND_CARD + """
  const box = (b, out = 0) => ({ left: b.left - out, right: b.right + out, top: b.top - out, bottom: b.bottom + out });
  return { card: inner,
           grid: box(grid.getBoundingClientRect()), ring: box(document.querySelector('.sg-thumb.sg-open').getBoundingClientRect(), 4),
           badges: [...grid.querySelectorAll('.sg-rank')].map((e) => ({ head: +e.closest('.sg-thumb').dataset.head, ...box(e.getBoundingClientRect()) })),
           page: document.documentElement.scrollWidth, window: innerWidth, scroll: grid.scrollWidth, width: grid.clientWidth,
           sides: [...new Set([...grid.querySelectorAll('.sg-thumb')].map((e) => Math.round(e.getBoundingClientRect().width)))] };
}"""


def inside(b, outer, across=True):
    """Whether box b lies inside outer (across: left to right too, else only top to bottom)."""
    down = b["top"] >= outer["top"] - 0.5 and b["bottom"] <= outer["bottom"] + 0.5
    return down and (not across or (b["left"] >= outer["left"] - 0.5 and b["right"] <= outer["right"] + 0.5))


def test_a_model_too_wide_for_a_phone_scrolls_sideways_inside_its_card_with_the_open_ring_shown(browser, wide_heads_url):
    """32 heads at the smallest thumbnail need more than a phone's card: the grid scrolls inside it
    (the page itself does not), and the open head's ring and the ranks' badges show whole at either
    end of the scroll, the first head's column and the last's."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=3)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(wide_heads_url)
    explain(page, TEXT)
    page.locator(".sg-thumb").first.wait_for()
    for layer, head, scroll in ((1, 31, "g.scrollWidth"), (0, 0, "0")):
        page.locator(f".sg-thumb[data-layer='{layer}'][data-head='{head}']").click()  # scrolled into view to be clicked
        page.locator(f".sg-thumb.sg-open[data-layer='{layer}'][data-head='{head}']").wait_for()
        page.evaluate(f"() => {{ const g = document.querySelector('.sg-mv-grid'); g.scrollLeft = {scroll}; }}")
        b = page.evaluate(RING_BOXES)
        assert b["sides"] == [12], b["sides"]
        assert b["scroll"] > b["width"] and b["page"] <= b["window"], b  # the grid scrolls, not the page
        assert b["card"]["left"] - 0.5 <= b["grid"]["left"] and b["grid"]["right"] <= b["card"]["right"] + 0.5, b
        assert inside(b["ring"], b["grid"]), (b["ring"], b["grid"])
        assert b["badges"] and all(inside(x, b["grid"], across=x["head"] == head) for x in b["badges"]), (b["badges"], b["grid"])
    assert errors == []
    context.close()
