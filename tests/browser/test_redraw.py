"""The page's redraw after a silencing, in chromium: the model view's thumbnails (buttons over one
canvas) are the same elements before and after, each cell's pixel under its button the colour of
the weight the API gives for the silenced run; the conclusion, the model view and the open head
are asked for at once and each is drawn as it arrives; an answer for a silencing that has changed
since is dropped.
"""
from __future__ import annotations

from studygroup.study.mask_reasons import SILENCED, VISIBLE

from .conftest import THUMB_PIXELS
from .test_page import SILENCE, explain, wait_idle

TEXT = "I have a lot"

#: Every thumbnail's element and the model view's one canvas, kept on the page to compare with those of a later redraw.
MARK = """() => {
  window.__thumbs = [...document.querySelectorAll('.sg-thumb')];
  window.__sheet = document.querySelector('.sg-mv-grid canvas');
}"""
#: Whether the page shows the thumbnails MARK kept and no other, over the canvas MARK kept, the model view's only one.
SAME = """() => {
  const now = [...document.querySelectorAll('.sg-thumb')], canvases = [...document.querySelectorAll('.sg-mv-grid canvas')];
  return now.length === window.__thumbs.length && window.__thumbs.every((b, n) => now[n] === b && b.isConnected) &&
    canvases.length === 1 && canvases[0] === window.__sheet && window.__sheet.isConnected;
}"""
#: Each thumbnail's cells: the weight the page holds, the colour of that weight on the page's scale, the
#: cell's reason (a code of study/mask_reasons.py) and the pixel at the cell's centre (a short text: a cell is
#: several pixels wide) in the model view's canvas under the thumbnail's button.
CELLS = """() => {
  const sg = document.querySelector('.sg-root').studygroup, mv = sg.d.modelView, video = sg.ui.notation === 'columns';
  const thumbPixels = """ + THUMB_PIXELS + """, cells = [];
  for (const b of document.querySelectorAll('.sg-thumb')) {
    const l = Number(b.dataset.layer), h = Number(b.dataset.head), { side, data: px } = thumbPixels(b);
    const w = mv.heads[l][h].weights, why = mv.heads[l][h].mask_reasons || mv.mask_reasons, T = w.length, s = side / T;
    for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {
      const [row, col] = video ? [j, i] : [i, j];  // the video's thumbnail is the paper's transposed
      const at = 4 * (Math.floor((row + 0.5) * s) * side + Math.floor((col + 0.5) * s));
      cells.push({ l, h, i, j, weight: w[i][j], reason: why[i][j], colour: StudyGroup.weightColor(w[i][j]), pixel: [px[at], px[at + 1], px[at + 2]] });
    }
  }
  return cells;
}"""
#: Keeps the promise of every redraw the page starts (its `resilence`), in window.__redraws.
KEEP_REDRAWS = """() => {
  const sg = document.querySelector('.sg-root').studygroup;
  const redraw = sg.resilence.bind(sg);
  window.__redraws = [];
  sg.resilence = () => { const p = redraw(); window.__redraws.push(p); return p; };
}"""
SHOWN = "() => document.querySelector('.sg-root').studygroup.d.modelView"


def assert_cells_drawn(cells):
    """Each heard cell's pixel is exactly its weight's colour; each masked one is the hatch's grey."""
    for c in cells:
        if c["reason"] == VISIBLE:
            assert c["pixel"] == c["colour"], c
        else:
            r, g, b = c["pixel"]
            assert abs(r - g) <= 6 and abs(g - b) <= 6, c


def test_a_silencing_redraws_the_thumbnails_in_place_with_the_new_weights(page, server_url):
    page.goto(server_url)
    wait_idle(page)
    explain(page, TEXT)
    page.evaluate(MARK)
    before = page.evaluate(CELLS)
    assert_cells_drawn(before)
    page.evaluate(SILENCE, {"member": 2})
    assert page.evaluate(SHOWN)["silenced_members"] == [2]
    assert page.evaluate(SAME)  # the same elements, their pixels redrawn
    after = page.evaluate(CELLS)
    assert_cells_drawn(after)
    assert [c["weight"] for c in after] != [c["weight"] for c in before]
    T = 1 + max(c["i"] for c in after)
    assert {(c["i"], c["j"]) for c in after if c["reason"] == SILENCED} == {(i, 2) for i in range(2, T)}  # nobody hears member 2
    # the video orientation: the same elements again, every thumbnail transposed
    page.click(".sg-orient button[data-notation='columns']")
    page.locator(".sg-grid-weights[data-orientation='columns']").wait_for()
    assert page.evaluate(SAME)
    assert_cells_drawn(page.evaluate(CELLS))
    assert page.watch.errors == []


def test_a_silencing_asks_for_the_three_views_at_once_and_draws_each_as_it_comes(page, server_url):
    """With the model view's answer held back, the conclusion and the open head of the silenced run
    are drawn (the page asked for all three at once) and the page still says it is busy. Two more
    silencings meanwhile ask nothing until that redraw is answered; then the page asks once, for
    the latest silencing, and draws it (the server's queue never holds more than one redraw)."""
    page.goto(server_url)
    wait_idle(page)
    explain(page, TEXT)
    page.evaluate(KEEP_REDRAWS)
    held, asked = [], []
    page.on("request", lambda r: asked.append(r.url.rsplit("/", 1)[-1]) if "/api/" in r.url else None)
    page.route("**/api/model_view", lambda route: held.append(route) if not held else route.continue_())
    page.click(".sg-chip[data-index='2'] .sg-mute")
    page.locator(".sg-bars[data-silenced='true']").wait_for(timeout=10_000)
    page.locator(".sg-grid-weights[data-silenced='true']").wait_for(timeout=10_000)
    assert len(held) == 1 and page.locator(".sg-mv-grid").get_attribute("data-silenced") == "false"
    assert page.locator(".sg-status").get_attribute("data-kind") == "busy"
    asked.clear()
    page.click(".sg-chip[data-index='1'] .sg-mute")  # two more silencings before the first one's model view came
    page.click(".sg-chip[data-index='3'] .sg-mute")
    page.wait_for_function("() => window.__redraws.length === 3")
    page.wait_for_timeout(300)
    assert asked == []  # nothing asked while a redraw is out
    held[0].continue_()  # the first silencing's model view, which the page drops: the silencing changed
    page.evaluate("() => Promise.all(window.__redraws)")
    assert sorted(asked) == ["conclusion", "head", "model_view"]  # one redraw more, for the latest silencing
    assert page.evaluate(SHOWN)["silenced_members"] == [1, 2, 3]
    assert page.evaluate("() => document.querySelector('.sg-root').studygroup.d.conclusion.silenced_members") == [1, 2, 3]
    assert page.locator(".sg-status").get_attribute("data-kind") == ""
    assert page.watch.errors == []


#: The busy status's spinner: its opacity now, and the paint containment of the status line.
SPINNER = """() => {
  const status = document.querySelector('.sg-status');
  return { opacity: getComputedStyle(status, '::before').opacity, contain: getComputedStyle(status).contain };
}"""


def test_a_short_wait_shows_no_spinner_and_a_status_change_repaints_its_line_alone(page, server_url):
    """A redraw that is answered within 0.6 s shows the busy words without a turning spinner (whose
    frames would take the cores from the redraw); a wait that lasts longer shows it. The status line
    contains its paint, so its words changing twice a redraw do not repaint the views."""
    page.goto(server_url)
    wait_idle(page)
    explain(page, TEXT)
    held = []
    page.route("**/api/model_view", lambda route: held.append(route) if not held else route.continue_())
    page.click(".sg-chip[data-index='2'] .sg-mute")
    page.wait_for_function("() => document.querySelector('.sg-status').dataset.kind === 'busy'")
    assert page.evaluate(SPINNER)["opacity"] == "0"
    page.wait_for_timeout(900)
    shown = page.evaluate(SPINNER)
    assert shown["opacity"] == "1"
    assert shown["contain"] in ("content", "strict") or "paint" in shown["contain"].split()  # content: layout paint style
    held[0].continue_()
    page.locator(".sg-mv-grid[data-silenced='true']").wait_for(timeout=10_000)
    assert page.locator(".sg-status").get_attribute("data-kind") == ""
    assert page.watch.errors == []


#: The page's model view: each head's weights as the page holds them, and the heads its last drawing painted.
PAGE_VIEW = """() => {
  const grid = document.querySelector('.sg-mv-grid'), mv = document.querySelector('.sg-root').studygroup.d.modelView;
  return { weights: mv.heads.map((row) => row.map((h) => h.weights.map((r) => [...r]))), painted: grid.__painted };
}"""


def api_view(page, server_url, members=(), heads=()):
    """The API's whole model view (the lists, not packed): {"l.h": (its weights, its masked cells)}."""
    body = {"text": TEXT, "silence_members": list(members), "silence_heads": [list(p) for p in heads]}
    mv = page.request.post(server_url.rstrip("/") + "/api/model_view", data=body).json()
    return {f"{h['layer']}.{h['head']}": (h["weights"], h.get("mask_reasons") or mv["mask_reasons"])
            for row in mv["heads"] for h in row}


def test_a_silencing_repaints_only_the_thumbnails_that_changed(page, server_url):
    """A silenced head leaves the thumbnails of its layer and those below it as drawn (their weights
    are the unsilenced run's): the page paints exactly the heads whose weights or masked cells differ
    between the API's answers before and after, asks once for each view, and holds the API's numbers."""
    page.goto(server_url)
    wait_idle(page)
    explain(page, TEXT)
    asked = []
    page.on("request", lambda r: asked.append(r.url.rsplit("/", 1)[-1]) if "/api/" in r.url else None)
    before, painted = api_view(page, server_url), []
    for members, heads in (((), [(0, 1)]), ((2,), [(0, 1)])):
        asked.clear()
        page.evaluate(SILENCE, {"member": members[0]} if members else {"head": heads[0]})
        assert sorted(asked) == ["conclusion", "head", "model_view"]  # each view asked once
        after, shown = api_view(page, server_url, members, heads), page.evaluate(PAGE_VIEW)
        changed = {k for k in after if after[k] != before[k]}
        assert changed and sorted(shown["painted"]) == sorted(changed)
        assert {f"{l}.{h}": w for l, row in enumerate(shown["weights"]) for h, w in enumerate(row)} == {k: w for k, (w, _) in after.items()}
        assert_cells_drawn(page.evaluate(CELLS))  # the thumbnails left as drawn show the new answer too
        painted.append(set(shown["painted"]))
        before = after
    assert not any(k.startswith("0.") for k in painted[0])  # the head's own layer and those below: as drawn
    assert len(painted[1]) == 8  # a silenced member: every head's questions after it hear one member less
    assert page.evaluate(SHOWN)["silenced_members"] == [2]
    assert page.watch.errors == []
