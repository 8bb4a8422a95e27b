"""The page, the HTML report and the notebook view in a real browser (chromium, headless).

What is checked: the views appear; the orientation switch transposes the grid; a member's
question opens; silencing recomputes the conclusion and shows the old value; the keyboard works;
text that looks like markup stays text (no dialog, no <img>); nothing is asked of another host;
the report and two notebook views work from file:// with the network cut.
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest

import studygroup
from studygroup.views import payloads
from studygroup.views import report

from .conftest import MARKUP_TOKENS, THUMB_PIXELS

ROOT = ".sg-root"
DISPLAYED = "(kind) => document.querySelector('.sg-root').studygroup.displayed(kind)"
MARKUP_TEXT = "a <img src=x onerror=alert(1)> b </script> <s> {{7*7}} \"q\" 'x'"


#: How many thumbnails of the model view are drawn: opaque at the centre of the canvas under their button.
DRAWN_THUMBS = """() => [...document.querySelectorAll('.sg-thumb')].filter((b) => {
  const { side, data } = (""" + THUMB_PIXELS + """)(b);
  return data[4 * (Math.floor(side / 2) * side + Math.floor(side / 2)) + 3] === 255;
}).length"""


#: How many computations the page has started (a new text, a silencing).
GEN = "() => document.querySelector('.sg-root').studygroup.gen"


def wait_idle(page, timeout=60_000):
    """Until the story is there and nothing is being computed."""
    page.locator(".sg-sentences p").first.wait_for(timeout=timeout)
    page.locator(".sg-status[data-kind='']").wait_for(state="attached", timeout=timeout)


def explain(page, text, other=""):
    """The page's explanation of text (compared with other), its views drawn. The click starts a new
    computation (the page's `gen` grows); its answers may all come from the server's cache, too
    fast for its "busy" status to be seen."""
    page.fill(".sg-text", text)
    page.fill(".sg-other", other)
    before = page.evaluate(GEN)
    page.click(".sg-go")
    page.wait_for_function(f"() => ({GEN})() > {before}")
    wait_idle(page)


def chip_texts(page, root=ROOT):
    return page.locator(f"{root} .sg-chip .sg-chip-main").all_inner_texts()


def only_loopback(requests, origin):
    others = [u for u in requests if not (u.startswith(origin) or u.startswith(("data:", "blob:")))]
    assert not others, f"requests to another host: {others}"


def assert_no_markup_ran(page):
    assert page.watch.dialogs == [], page.watch.dialogs
    assert page.locator("img").count() == 0
    assert page.watch.errors == [], page.watch.errors


def test_page_explain_orient_select_silence(page, server_url, screenshots):
    page.goto(server_url)
    wait_idle(page)
    explain(page, "I have a lot")
    tokens = chip_texts(page)
    assert "".join(tokens).replace("␣", " ") == "I have a lot"
    assert page.locator(".sg-bars .sg-barrow").count() == 10
    assert page.locator(".sg-thumb").count() == 2 * 4 and page.locator(".sg-thumb .sg-rank").count() >= 1

    # the orientation switch transposes the grid
    before = page.evaluate(DISPLAYED, "weights")
    assert before["orientation"] == "paper" and before["rows"] == list(range(len(tokens)))
    page.click(".sg-orient button[data-notation='columns']")
    page.locator(".sg-grid-weights[data-orientation='columns']").wait_for()
    after = page.evaluate(DISPLAYED, "weights")
    assert after["rows"] == before["cols"] and after["cols"] == before["rows"]
    T = len(tokens)
    for i in range(T):
        for j in range(T):
            assert after["matrix"][j][i] == pytest.approx(before["matrix"][i][j], abs=1e-6)
    assert all(sum(after["matrix"][j][i] for j in range(T)) == pytest.approx(1, abs=1e-5) for i in range(T))

    # click a member: its question's weights and each answer's contribution
    last = T - 1
    page.click(f".sg-chip[data-index='{last}'] .sg-chip-main")
    assert page.locator(".sg-chip.sg-selected").count() == 1
    assert page.locator(".sg-member .sg-listen-row[data-index]").count() == T  # the last question hears everyone
    page.click(".sg-chip[data-index='2'] .sg-chip-main")
    assert page.locator(".sg-member .sg-listen-row[data-index]").count() == 3  # member 2 hears members 0-2

    # silence a member: the conclusion is recomputed, the old values stay as ghost bars
    old = page.locator(".sg-bars .sg-value").all_inner_texts()
    page.click(f".sg-chip[data-index='{last - 1}'] .sg-mute")
    page.locator(".sg-bars[data-silenced='true']").wait_for()
    assert page.locator(".sg-chip.sg-muted").count() == 1
    assert page.locator(".sg-bars .sg-ghost").count() >= 10
    new = page.locator(".sg-bars .sg-value").all_inner_texts()
    assert new != old and any("pts" in v and not v.endswith("0.0 pts") for v in new)
    # ... and every head is drawn again as it listens in that run: nobody else hears the member
    page.locator(".sg-mv-grid[data-silenced='true']").wait_for()
    page.locator(".sg-grid-weights[data-silenced='true']").wait_for()
    silenced = page.evaluate(DISPLAYED, "weights")
    assert silenced["orientation"] == "columns"  # (the switch above): column i is question i
    assert all(silenced["matrix"][last - 1][i] == 0 for i in range(T) if i != last - 1)
    note = f"Silenced in this run: member {last - 1} ({tokens[last - 1]}): nobody hears its answer"
    assert note in page.locator(".sg-check").inner_text() and note in page.locator(".sg-mv-legend").inner_text()
    page.click(".sg-silenced .sg-link")  # clear all
    page.locator(".sg-bars[data-silenced='false']").wait_for()
    page.locator(".sg-mv-grid[data-silenced='false']").wait_for()
    page.locator(".sg-grid-weights[data-silenced='false']").wait_for()
    assert page.evaluate(DISPLAYED, "weights")["matrix"] == after["matrix"]

    # silence a head from the head view
    page.click(".sg-silence-head")
    page.locator(".sg-bars[data-silenced='true']").wait_for()
    assert page.locator(".sg-thumb.sg-muted").count() == 1

    page.screenshot(path=str(screenshots / "page.png"), full_page=True)
    only_loopback(page.watch.requests, server_url.rstrip("/"))
    assert_no_markup_ran(page)


#: What the page holds and draws after a silencing: its conclusion and model view as it received
#: them, the open head's place and its weight grid as drawn.
SHOWN = """() => {
  const sg = document.querySelector('.sg-root').studygroup;
  return { conclusion: sg.d.conclusion, modelView: sg.d.modelView, layer: sg.ui.layer, head: sg.ui.head,
           notation: sg.ui.notation, weights: sg.displayed('weights'), n_heads: sg.d.info.model.n_heads };
}"""
#: Silences member j (its chip's ⊘) or head [l, h] (what "Silence this head" calls) and waits for the
#: page's redraw of the conclusion, the model view and the open head (its `resilence`) to end.
SILENCE = """async (s) => {
  const sg = document.querySelector('.sg-root').studygroup;
  const redraw = sg.resilence.bind(sg);
  let done = null;
  sg.resilence = () => (done = redraw());
  if (s.member != null) document.querySelector(`.sg-chip[data-index='${s.member}'] .sg-mute`).click();
  else sg.toggleHead(s.head[0], s.head[1]);
  delete sg.resilence;
  await done;
}"""


def test_a_silencing_redraws_every_view_with_the_apis_numbers(page, server_url):
    """After a silencing (a member, then a head beside it), the conclusion, every head of the model
    view and the open head are those the API gives for that silencing, asked for here apart."""
    page.goto(server_url)
    wait_idle(page)
    explain(page, "I have a lot")
    clean = page.evaluate(SHOWN)
    l, h = clean["layer"], clean["head"]
    other = [l, (h + 1) % clean["n_heads"]]
    page.evaluate(SILENCE, {"member": 2})
    page.evaluate(SILENCE, {"head": other})
    shown = page.evaluate(SHOWN)
    silencing = {"silence": {"members": [2], "heads": [other]}}
    ask = lambda path, body: page.request.post(server_url + "api/" + path, data={"text": "I have a lot", **body, **silencing}).json()  # noqa: E731
    assert shown["conclusion"] == ask("conclusion", {"top": 10})
    assert shown["modelView"] == ask("model_view", {})
    assert shown["modelView"]["heads"] != clean["modelView"]["heads"]  # the silenced run's weights, not the last ones
    head = ask("head", {"layer": l, "head": h, "notation": shown["notation"]})
    assert (shown["layer"], shown["head"]) == (l, h)
    assert [x for row in shown["weights"]["matrix"] for x in row] == pytest.approx([x for row in head["weights"] for x in row], abs=1e-6)
    assert shown["weights"]["matrix"] != clean["weights"]["matrix"]
    assert_no_markup_ran(page)


#: Chooses how the silenced are taken out in the ⊘ control (a resample's text typed in its input) and
#: waits for the redraw it starts.
ABLATE = """async (a) => {
  const sg = document.querySelector('.sg-root').studygroup;
  const redraw = sg.resilence.bind(sg);
  let done = null;
  sg.resilence = () => (done = redraw());
  const select = document.querySelector('.sg-ablation');
  select.value = a.kind;
  select.dispatchEvent(new Event('change'));
  if (a.from != null) {
    const input = document.querySelector('.sg-ablation-from');
    input.value = a.from;
    input.dispatchEvent(new Event('change'));
  }
  delete sg.resilence;
  await done;
}"""


@pytest.mark.parametrize("kind", ["mean", "resample"])
def test_the_silencings_ablation_redraws_every_view_and_the_story_names_it(page, server_url, kind):
    """The ⊘ control's choice (mean, or resample from a typed text of as many tokens): the conclusion,
    the model view and the open head are the API's for that ablation, and the silenced conclusion's
    sentence names it."""
    tokens = lambda t: len(page.request.post(server_url + "api/conclusion", data={"text": t}).json()["tokens"])  # noqa: E731
    ablation = {"kind": kind}
    if kind == "resample":
        ablation["from"] = next(t for t in ("an ear then the tin", "I have a tin", "You have a lot", "I had a lot", "I have a cat")
                                if tokens(t) == tokens("I have a lot"))
    page.goto(server_url)
    wait_idle(page)
    explain(page, "I have a lot")
    page.evaluate(SILENCE, {"member": 2})
    zero = page.evaluate(SHOWN)
    page.evaluate(ABLATE, ablation)
    shown = page.evaluate(SHOWN)
    body = {"text": "I have a lot", "silence": {"members": [2], "heads": []}, "ablation": ablation}
    ask = lambda path, extra: page.request.post(server_url + "api/" + path, data={**body, **extra}).json()  # noqa: E731
    assert shown["conclusion"] == ask("conclusion", {"top": 10}) and shown["conclusion"] != zero["conclusion"]
    assert shown["modelView"] == ask("model_view", {})
    head = ask("head", {"layer": shown["layer"], "head": shown["head"], "notation": shown["notation"]})
    assert [x for row in shown["weights"]["matrix"] for x in row] == pytest.approx([x for row in head["weights"] for x in row], abs=1e-6)
    story = page.locator(".sg-silenced-sentence").first.inner_text()
    assert f"With the silencing by {ablation['kind']} ablation" in story
    assert page.locator(".sg-ablation").input_value() == ablation["kind"]
    taken = "its key and value replaced by their mean" if kind == "mean" else "its key and value taken from the other text"
    assert f"Taken out by {kind} ablation in this run: member 2 (" in page.locator(".sg-check").inner_text()
    assert taken in page.locator(".sg-check").inner_text() and "nobody hears" not in page.locator(".sg-check").inner_text()
    assert_no_markup_ran(page)


def test_job_ids_are_128_random_bits(page, server_url):
    """The fault sweep: the page's job ids held about 41 random bits (Math.random after the time)."""
    jobs = []
    page.on("request", lambda r: jobs.append(r.post_data_json["job"]) if r.method == "POST" and not
            r.url.endswith(("/api/progress", "/api/cancel")) and "job" in (r.post_data_json or {}) else None)
    page.goto(server_url)
    wait_idle(page)
    explain(page, "the tin can", "can")
    assert len(jobs) >= 2 and len(set(jobs)) == len(jobs), jobs
    assert all(re.fullmatch("[0-9a-f]{32}", job) for job in jobs), jobs


def test_markup_in_tokens_shows_as_typed(page, server_url, screenshots):
    page.goto(server_url)
    wait_idle(page)
    explain(page, MARKUP_TEXT, other="<b>bold</b> " + MARKUP_TEXT)
    tokens = chip_texts(page)
    for t in MARKUP_TOKENS:
        assert t.replace(" ", "␣") in tokens
    assert "".join(tokens).replace("␣", " ") == MARKUP_TEXT
    story = page.locator(".sg-story").inner_text()
    assert "<b>bold</b>" in story  # the other context, quoted in the comparison's story, as text
    assert page.locator(".sg-shift .sg-barrow").count() > 0
    # the head grid's labels are drawn on a canvas; the selected member's panel is text
    page.click(".sg-chip[data-index='2'] .sg-chip-main")
    assert "<img␣src=x␣onerror=alert(1)>" in page.locator(".sg-member").inner_text()
    page.screenshot(path=str(screenshots / "page-markup.png"), full_page=True)
    only_loopback(page.watch.requests, server_url.rstrip("/"))
    assert_no_markup_ran(page)


def test_keyboard(page, server_url):
    page.goto(server_url)
    wait_idle(page)
    page.focus(".sg-chip[data-index='1'] .sg-chip-main")
    page.keyboard.press("Enter")
    assert page.locator(".sg-chip[data-index='1'].sg-selected").count() == 1
    page.keyboard.press("Tab")  # the chip's silence control
    page.keyboard.press("Tab")  # the next chip
    page.keyboard.press("Enter")
    assert page.locator(".sg-chip[data-index='2'].sg-selected").count() == 1
    page.keyboard.press("Escape")
    assert page.locator(".sg-selected").count() == 0
    page.focus(".sg-thumb[data-layer='0'][data-head='0']")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    page.locator(".sg-thumb.sg-open[data-layer='1'][data-head='1']").wait_for()
    page.locator(".sg-head-title h3", has_text="Head 1 of layer 1").wait_for()


def _cut_network(context, tried):
    def handle(route):
        if not route.request.url.startswith("file:"):
            tried.append(route.request.url)
            return route.abort()
        return route.continue_()
    context.route("**/*", handle)


@pytest.fixture(scope="module")
def markup_studygroup(markup_model):
    return studygroup.load(markup_model.path)


def test_report_opens_from_disk_with_the_network_cut(browser, markup_studygroup, tmp_path, screenshots):
    path = report.write_report(payloads.report_data(markup_studygroup, MARKUP_TEXT, text_a="a lot"), tmp_path / "r.html")
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    tried = []
    _cut_network(context, tried)
    page = context.new_page()
    from .conftest import Watch
    page.watch = Watch(page)
    page.goto(path.as_uri())
    page.locator(".sg-sentences p").first.wait_for()
    assert "".join(chip_texts(page)).replace("␣", " ") == MARKUP_TEXT
    assert page.evaluate(DRAWN_THUMBS) == 2 * 4
    assert page.locator(".sg-shift .sg-barrow").count() > 0
    page.locator(".sg-grid-weights[data-orientation='paper']").wait_for()
    before = page.evaluate(DISPLAYED, "weights")
    page.click(".sg-orient button[data-notation='columns']")
    page.locator(".sg-grid-weights[data-orientation='columns']").wait_for()
    after = page.evaluate(DISPLAYED, "weights")
    assert after["rows"] == before["cols"] and len(after["matrix"]) == len(before["matrix"][0])
    page.click(".sg-chip[data-index='2'] .sg-mute")  # precomputed: the predicted word's ghost bar
    assert page.locator(".sg-bars .sg-ghost").count() >= 1
    page.screenshot(path=str(screenshots / "report.png"), full_page=True)
    assert tried == [] and all(u.startswith("file:") for u in page.watch.requests), tried
    assert_no_markup_ran(page)
    context.close()


def test_two_notebook_views_on_one_page(browser, markup_studygroup, tmp_path):
    a = studygroup.explain(markup_studygroup, MARKUP_TEXT)
    b = studygroup.explain(markup_studygroup, "I have a lot")
    html = "<!doctype html><meta charset=utf-8><body>" + report.notebook_html(a) + "<hr>" + report.notebook_html(b)
    path = tmp_path / "notebook.html"
    path.write_text(html, encoding="utf-8")
    context = browser.new_context()
    tried = []
    _cut_network(context, tried)
    page = context.new_page()
    from .conftest import Watch
    page.watch = Watch(page)
    page.goto(path.as_uri())
    roots = page.locator(".sg-root")
    assert roots.count() == 2
    roots.nth(1).locator(".sg-sentences p").first.wait_for()
    first, second = [roots.nth(i).locator(".sg-chip .sg-chip-main").all_inner_texts() for i in (0, 1)]
    assert "".join(first).replace("␣", " ") == MARKUP_TEXT and "".join(second).replace("␣", " ") == "I have a lot"
    ids = page.evaluate("() => Array.from(document.querySelectorAll('[id]'), (e) => e.id)")
    assert len(ids) == len(set(ids))
    roots.nth(1).locator(".sg-chip[data-index='1'] .sg-chip-main").click()
    assert roots.nth(1).locator(".sg-selected").count() >= 1 and roots.nth(0).locator(".sg-selected").count() == 0
    assert roots.nth(0).locator(".sg-thumb").count() == 2 * 4  # every head, coloured by its contribution
    assert tried == []
    assert_no_markup_ran(page)
    context.close()


#: Per cell of the open head's weight grid: its reason, and whether every pixel of it is grey
#: (the hatch's face and lines) and whether any pixel has the colour of a zero weight.
CELL_PIXELS = """() => {
  const sg = window.StudyGroup, inst = document.querySelector('.sg-root').studygroup;
  const canvas = document.querySelector('.sg-grid-weights'), geo = canvas.__geom, r = canvas.width / canvas.clientWidth;
  const ctx = canvas.getContext('2d'), zero = sg.weightColor(0), shown = inst.displayed('weights');
  const cells = [];
  for (let i = 0; i < geo.nR; i++) for (let j = 0; j < geo.nC; j++) {
    const x = Math.round((geo.left + j * geo.cw + 2) * r), y = Math.round((geo.top + i * geo.ch + 2) * r);
    const d = ctx.getImageData(x, y, Math.round((geo.cw - 4) * r), Math.round((geo.ch - 4) * r)).data;
    let grey = true, zeroColour = false;
    for (let p = 0; p < d.length; p += 4) {
      if (Math.abs(d[p] - d[p + 1]) > 6 || Math.abs(d[p + 1] - d[p + 2]) > 6) grey = false;
      if (Math.abs(d[p] - zero[0]) < 8 && Math.abs(d[p + 1] - zero[1]) < 8 && Math.abs(d[p + 2] - zero[2]) < 8) zeroColour = true;
    }
    cells.push({ i, j, reason: shown.reasons[i][j], grey, zeroColour });
  }
  return cells;
}"""


def test_silenced_and_future_cells_are_drawn_masked_alike(page, server_url, screenshots):
    page.goto(server_url)
    wait_idle(page)
    explain(page, "I have a lot")
    page.click(".sg-chip[data-index='1'] .sg-mute")
    page.locator(".sg-grid-weights[data-silenced='true']").wait_for()
    page.locator(".sg-status[data-kind='']").wait_for(state="attached")
    page.mouse.move(0, 0)
    cells = page.evaluate(CELL_PIXELS)
    by_reason = {}
    for c in cells:
        by_reason.setdefault(c["reason"], []).append(c)
    T = len(chip_texts(page))
    assert {(c["i"], c["j"]) for c in by_reason["future"]} == {(i, j) for i in range(T) for j in range(T) if j > i}
    assert {(c["i"], c["j"]) for c in by_reason["silenced"]} == {(i, 1) for i in range(1, T)}
    for c in by_reason["future"] + by_reason["silenced"]:
        assert c["grey"] and not c["zeroColour"], c  # hatched, never the colour of a zero weight
    assert not any(c["grey"] for c in by_reason["visible"])
    legend = page.locator(".sg-legend-weights").get_attribute("data-reasons")
    assert legend == "future silenced"
    # the model view's thumbnails: the silenced member's column is masked too (a pixel of the last question's cell)
    thumb_grey = page.evaluate("""(T) => {
      const { side, data } = (""" + THUMB_PIXELS + """)(document.querySelector('.sg-thumb')), s = side / T;
      const at = 4 * (Math.ceil((T - 1) * s) * side + Math.ceil(s)), d = data.slice(at, at + 3);  // inside cell (T-1, 1)
      return Math.abs(d[0] - d[1]) <= 6 && Math.abs(d[1] - d[2]) <= 6;
    }""", T)
    assert thumb_grey
    page.locator(".sg-head").screenshot(path=str(screenshots / "page-silenced-head.png"))
    page.screenshot(path=str(screenshots / "page-silenced.png"), full_page=True)
    assert_no_markup_ran(page)


def test_a_long_text_asks_for_windows_never_the_whole_grid(page, long_server_url):
    """Past 256 members the head opens on its last question, and "show more" asks for the last
    256 × 256 of the grid, never every question (a view holds at most 256 × 256 cells)."""
    bodies = []
    page.on("request", lambda r: bodies.append(r.post_data) if r.url.endswith("/api/head") else None)
    page.goto(long_server_url)
    wait_idle(page)
    explain(page, " ".join(["the tin can"] * 40))  # 281 members
    page.locator(".sg-grid-weights[data-rows='1']").wait_for()
    full = page.locator(".sg-full")
    assert full.is_visible() and full.inner_text() == "Show the last 256 × 256 of the grid"
    full.click()
    page.locator(".sg-grid-weights[data-rows='256'][data-cols='256']").wait_for()
    shown = page.evaluate(DISPLAYED, "weights")
    assert shown["rows"] == list(range(25, 281)) and shown["cols"] == list(range(25, 281))
    assert bodies and not any('"rows":"all"' in b.replace(" ", "") for b in bodies), bodies
    page.click(".sg-chip[data-index='280'] .sg-chip-main")  # the last question: its 256 answers shown
    assert page.locator(".sg-member .sg-listen-row[data-index]").count() == 40  # the 40 largest
    assert page.watch.errors == [], page.watch.errors


#: A text in which "␣the" comes three times; the story names its first copy and its last.
REPEATED = "in the library to study for the chemistry exam. Maria always brought the"


def test_story_chips_are_the_members_story_parts_name(page, server_url):
    """Each member chip of the story selects the member its piece names, a repeated word included:
    a click on the story's first "␣the" opens that member's question, not the last copy's."""
    page.goto(server_url)
    wait_idle(page)
    explain(page, REPEATED)
    parts = page.evaluate("() => document.querySelector('.sg-root').studygroup.d.explanation.story_parts")
    named = [p["member"] for s in parts for p in s if "member" in p]
    chips = page.locator(".sg-sentences .sg-storychip")
    assert chips.evaluate_all("els => els.map(e => Number(e.dataset.index))") == named
    tokens = page.evaluate("() => document.querySelector('.sg-root').studygroup.d.explanation.tokens")
    repeated = [i for i in named if tokens.count(tokens[i]) > 1 and tokens.index(tokens[i]) != i]
    assert repeated  # a later copy of a repeated word is named by its own index
    first = tokens.index("\u2423the")
    last = len(tokens) - 1 - tokens[::-1].index("\u2423the")
    assert first < last and first in named and last in named
    chips.filter(has_text="\u2423the").first.click()
    page.locator(".sg-member h3").wait_for()
    assert page.locator(".sg-chips .sg-chip.sg-selected").evaluate_all("els => els.map(e => Number(e.dataset.index))") == [first]
    assert f"(member {first})" in page.locator(".sg-member h3").inner_text()
    assert page.evaluate("() => document.querySelector('.sg-root').studygroup.ui.selected") == first


SINKS = """([l, h]) => { const e = document.querySelector('.sg-root').studygroup.d.explanation;
  return e.heads.find((x) => x.layer === l && x.head === h).sinks; }"""


#: Whether the head card shows head [l, h] drawn from its own answer (its grids shown) and the member
#: panel below it is that head's.
PANEL_OF = """([l, h]) => { const t = document.querySelector('.sg-head-title h3'), f = document.querySelector('.sg-figs');
  const m = document.querySelector('.sg-member h3');
  return Boolean(t && t.textContent.startsWith('Head ' + h + ' of layer ' + l) && f && !f.hidden &&
    m && m.textContent.endsWith(' in head ' + h + ' of layer ' + l) && document.querySelector('.sg-member .sg-listen-row[data-index]')); }"""


def test_what_a_head_listened_to_names_its_attention_sinks(page, server_url):
    page.goto(server_url)
    wait_idle(page)
    explain(page, "a tin")  # heads 1.0 and 0.1 of the tiny model give member 0 >= 0.3 of every question's weight
    T = len(chip_texts(page))
    page.click(f".sg-chip[data-index='{T - 1}'] .sg-chip-main")
    page.locator(".sg-member .sg-listen-row[data-index]").first.wait_for()
    opened = page.locator(".sg-thumb.sg-open")  # the head the page opens first (one not resting on a sink)
    first = (int(opened.get_attribute("data-layer")), int(opened.get_attribute("data-head")))
    # the plain explanation is written out under the first panel that shows a sink, then only on hover
    noted = first if page.evaluate(SINKS, list(first)) else (1, 0)
    if noted == first:
        assert "says nothing about what the question asks" in page.locator(".sg-member .sg-sink-note").inner_text()
    for layer, head in [(1, 0), (0, 1)]:
        page.click(f".sg-thumb[data-layer='{layer}'][data-head='{head}']")
        page.wait_for_function(PANEL_OF, arg=[layer, head])  # not the last head's panel, still there until this one's answer
        sinks = page.evaluate(SINKS, [layer, head])
        assert 0 in sinks  # (the rule in studygroup.study.sinks)
        if (layer, head) == noted:
            assert "says nothing about what the question asks" in page.locator(".sg-member .sg-sink-note").inner_text()
        rows = page.locator(".sg-member .sg-listen-row[data-index]")
        assert rows.count() == T
        for n in range(T):
            row = rows.nth(n)
            tagged = row.locator(".sg-sink-tag")
            assert tagged.count() == (int(row.get_attribute("data-index")) in sinks)
        tag = page.locator(".sg-member .sg-sink-tag").first
        assert tag.inner_text().strip() == "attention sink" and "does not need" in tag.get_attribute("title")
        assert page.locator(".sg-member .sg-sink-note").count() == ((layer, head) == noted)


def colour_by(page, what):
    """Presses the model view's "colour by" button `what` (weight or role) and waits until it is on."""
    page.click(f".sg-colour-by button[data-colour-by='{what}']")
    page.locator(f".sg-colour-by button[data-colour-by='{what}'][aria-pressed='true']").wait_for()


ROLE_NAMES = ("previous", "duplicate", "induction", "sink", "local", "broad")


def test_the_model_view_colours_and_labels_heads_by_their_strongest_role(page, server_url):
    page.goto(server_url)
    wait_idle(page)
    explain(page, "an ear then the tin, " * 4 + "an ear")  # past 9 members: local, the last 9, is not the whole row
    assert page.locator(".sg-thumb .sg-role").count() == 0  # weights by default
    colour_by(page, "role")
    heads = page.evaluate("() => document.querySelector('.sg-root').studygroup.d.modelView.heads")
    labels = []
    for layer, head in [(0, 0), (0, 3), (1, 1), (1, 2)]:
        roles = heads[layer][head]["roles"]
        strongest = max(ROLE_NAMES, key=lambda name: roles[name])  # first of equals, as the page's order
        label = page.locator(f".sg-thumb[data-layer='{layer}'][data-head='{head}'] .sg-role")
        assert label.get_attribute("data-role") == strongest
        labels.append(label.inner_text())
        title = page.locator(f".sg-thumb[data-layer='{layer}'][data-head='{head}']").get_attribute("title")
        assert f"strongest role: {strongest}" in title
    assert page.locator(".sg-thumb .sg-role").count() == 2 * 4
    assert len(set(labels)) > 1  # the heads checked do not all share one role
    keys = page.locator(".sg-mv-legend .sg-role-key")
    assert [keys.nth(n).get_attribute("data-role") for n in range(keys.count())] == list(ROLE_NAMES)
    colour_by(page, "weight")
    assert page.locator(".sg-thumb .sg-role").count() == 0 and page.locator(".sg-mv-legend .sg-role-key").count() == 0


def test_colour_by_role_on_a_text_too_short_to_tell_says_so_instead_of_a_label(page, server_url, screenshots):
    page.goto(server_url)
    wait_idle(page)
    explain(page, "I have a lot of")
    colour_by(page, "role")
    untold = page.evaluate("() => document.querySelector('.sg-root').studygroup.d.modelView.roles_untold")
    assert untold and "too few to name a role" in untold
    assert page.locator(".sg-thumb .sg-role").count() == 0 and page.locator(".sg-mv-legend .sg-role-key").count() == 0
    said = page.locator(".sg-mv-legend .sg-role-untold").inner_text()
    assert said.startswith("No head's role is named on this text") and untold in said
    assert "strongest role" not in page.locator(".sg-thumb").first.get_attribute("title")
    page.locator(".sg-modelview").screenshot(path=str(screenshots / "roles-untold.png"))


def test_explore_opens_on_the_first_head_not_resting_on_a_sink_with_the_sink_head_one_click_away(page, server_url):
    """The explanation's first_head opens (the most decisive head not resting on a sink). The tiny
    model has no head resting on a sink, so the explanation is answered as one where the most
    decisive head rests on one: that head is one click away, named with its weight on its sinks."""
    def rested(route):
        e = route.fetch().json()
        e["heads"][0]["sink_weight"] = 0.99
        e["first_head"] = [e["heads"][1]["layer"], e["heads"][1]["head"]]
        route.fulfill(json=e)

    page.route("**/api/explain", rested)
    page.goto(server_url + "#text=I%20have%20a%20lot")
    wait_idle(page)
    e = page.evaluate("() => document.querySelector('.sg-root').studygroup.d.explanation")
    top, first = e["heads"][0], e["first_head"]
    page.locator(f".sg-thumb.sg-open[data-layer='{first[0]}'][data-head='{first[1]}']").wait_for()
    said = page.locator(".sg-head-title .sg-sink-first")
    assert f"The most decisive head, {top['layer']}.{top['head']}, rests on a sink (99% of its last question's weight)" in said.inner_text()
    said.locator("button").click()
    page.locator(f".sg-thumb.sg-open[data-layer='{top['layer']}'][data-head='{top['head']}']").wait_for()
    assert page.locator(".sg-head-title .sg-sink-first").count() == 0
    assert page.watch.errors == []
