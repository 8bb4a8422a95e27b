"""Lesson mode in a real browser (chromium, headless): the sections in order with the keyboard, every
number drawn equal to /api/lesson's, the state in the URL, markup in token text kept as text.
Screenshots of each section at 1440×900 and 390×844 go to artifacts/screenshots/lesson/."""
from __future__ import annotations

import json
import time
from urllib.parse import quote

import pytest

import studygroup

from studygroup.study.lesson_sections import SECTIONS

from .test_page import MARKUP_TEXT, assert_no_markup_ran, only_loopback

BODY = ".sg-lesson-body"
SIZES = {"desktop": (1440, 900), "phone": (390, 844)}


def wait_section(page, name, timeout=60_000):
    page.locator(f"{BODY}[data-section='{name}'] h2").wait_for(timeout=timeout)


def api_lesson(page, url, d):
    """/api/lesson's answer for what the page shows (text, head, question, answer, silencing)."""
    body = {"text": d["text"], "layer": d["layer"], "head": d["head"], "query": d["query"], "key": d["key"],
            "silence": {"members": d["silenced_members"], "heads": d["silenced_heads"]}}
    r = page.request.post(url + "api/lesson", data=json.dumps(body), headers={"Content-Type": "application/json"})
    assert r.ok, r.text()
    return r.json()


def at(data, path):
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def check_numbers(page, api):
    """Every number of the section shown: data-value is the API's value at data-path, and its text
    is that value rounded (4 significant digits, or a percentage)."""
    cells = page.eval_on_selector_all(f"{BODY} [data-path]", "ns => ns.map(n => [n.dataset.path, n.dataset.value, n.textContent])")
    assert cells, "the section shows no numbers"
    for path, value, text in cells:
        expected = at(api, path)
        assert float(value) == pytest.approx(expected, rel=1e-12, abs=1e-300), path
        if text.endswith("%"):  # within half of its last digit
            decimals = len(text[:-1].partition(".")[2])
            assert abs(float(text[:-1]) - 100 * expected) <= 0.5 * 10 ** -decimals + 1e-9, (path, text)
        else:
            assert float(text) == pytest.approx(expected, rel=5e-3, abs=1e-300), (path, text)
    return len(cells)


def lesson_data(page):
    return page.evaluate("() => document.querySelector('.sg-root').studygroup.lesson.data")


def test_sections_in_order_with_the_keyboard_equal_the_api(browser, server_url, screenshots):
    folder = screenshots / "lesson"
    folder.mkdir(exist_ok=True)
    for size, (w, h) in SIZES.items():
        context = browser.new_context(viewport={"width": w, "height": h})
        page = context.new_page()
        requests, errors = [], []
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server_url + "#text=I%20have%20a%20lot&mode=lesson")
        wait_section(page, SECTIONS[0])
        d = lesson_data(page)
        assert d["tokens"] and d["query"] == len(d["tokens"]) - 1
        api = api_lesson(page, server_url, d)
        assert api == d
        page.locator(BODY).click(position={"x": 2, "y": 2})  # focus outside any text field
        shown = 0
        for n, name in enumerate(SECTIONS):
            if n:
                page.keyboard.press("ArrowRight")
            wait_section(page, name)
            assert f"section={name}" in page.url
            if name != "members":
                shown += check_numbers(page, api)
            width = page.evaluate("() => document.documentElement.scrollWidth")
            assert width <= w, f"{name} at {size}: the page is {width} px wide"
            page.screenshot(path=str(folder / f"{n + 1}-{name}-{size}.png"), full_page=True)
        assert shown > 100
        page.keyboard.press("ArrowRight")  # past the last: stays
        wait_section(page, SECTIONS[-1])
        page.keyboard.press("ArrowLeft")
        wait_section(page, SECTIONS[-2])
        page.focus(".sg-text")  # in a text field the arrows move the caret, not the lesson
        page.keyboard.press("ArrowLeft")
        wait_section(page, SECTIONS[-2])
        page.locator(BODY).click(position={"x": 2, "y": 2})
        page.keyboard.press("Escape")
        page.locator(".sg-lesson").wait_for(state="hidden")
        assert "mode=explore" in page.url and page.locator(".sg-modelview").is_visible()
        only_loopback(requests, server_url)
        assert errors == []
        context.close()


def test_the_url_restores_text_section_head_and_silencing(page, server_url):
    page.goto(server_url + "#text=I%20have%20a%20lot%20of&mode=lesson")
    wait_section(page, "members")
    page.select_option(".sg-lesson-head", "1.3")
    page.locator(".sg-lesson-head").wait_for()
    page.wait_for_function("() => { const d = document.querySelector('.sg-root').studygroup.lesson.data; return d && d.layer === 1 && d.head === 3; }")
    page.locator(".sg-lesson-next").click()
    page.locator(".sg-lesson-next").click()
    page.locator(".sg-lesson-next").click()
    page.locator(".sg-lesson-next").click()
    wait_section(page, "scores")
    page.click(".sg-chip[data-index='1'] .sg-mute")  # silence member 1
    page.wait_for_function("() => { const d = document.querySelector('.sg-root').studygroup.lesson.data; return d && d.silenced_members.length === 1; }", timeout=60_000)
    wait_section(page, "scores")
    page.click(".sg-lesson-pick .sg-orient button[data-notation='columns']")
    url, before = page.url, lesson_data(page)
    assert "silence=1" in url and "head=1.3" in url and "notation=columns" in url

    other = page.context.new_page()
    asked = []
    other.on("request", lambda r: asked.append(r.url) if r.url.endswith("/api/lesson") else None)
    other.goto(url)
    wait_section(other, "scores")
    other.wait_for_function("() => { const d = document.querySelector('.sg-root').studygroup.lesson.data; return d && d.silenced_members.length === 1; }", timeout=60_000)
    assert lesson_data(other) == before
    assert other.input_value(".sg-text") == "I have a lot of"
    assert other.input_value(".sg-lesson-head") == "1.3"
    assert other.locator(".sg-lesson-pick button[data-notation='columns']").get_attribute("aria-pressed") == "true"
    other.locator(".sg-chip[data-index='1'] .sg-mute[aria-pressed='true']").wait_for(timeout=60_000)  # the explore view too
    assert "silence=1" in other.url
    other.wait_for_load_state("networkidle")  # the explore view has settled its silencing
    assert len(asked) == 1, "the lesson the URL names is computed once, not again when the explore view has its silencing"
    assert check_numbers(other, api_lesson(other, server_url, before)) > 10


def test_markup_in_tokens_stays_text_in_the_lesson(page, server_url):
    page.goto(server_url + "#mode=lesson&text=" + quote(MARKUP_TEXT))
    wait_section(page, "members")
    members = page.locator(".sg-lesson-member .sg-tok").all_inner_texts()
    assert "<img␣src=x␣onerror=alert(1)>" in members  # one member, shown as typed (␣ marks its spaces)
    for _ in SECTIONS[1:]:
        page.locator(".sg-lesson-next").click()
    wait_section(page, "conclusion")
    assert_no_markup_ran(page)


def test_a_silenced_head_round_trips_through_the_url(page, server_url):
    """Silencing a head in the explore view writes it to the URL (silence_heads=layer.head); the URL
    reopened in a new page silences that same head, and the conclusion shown is that run's."""
    page.goto(server_url + "#text=I%20have%20a%20lot")
    page.locator(".sg-sentences p").first.wait_for(timeout=60_000)
    page.click(".sg-thumb[data-layer='1'][data-head='3']")
    page.locator(".sg-thumb.sg-open[data-layer='1'][data-head='3']").wait_for()
    page.click(".sg-silence-head")
    page.locator(".sg-bars[data-silenced='true']").wait_for(timeout=60_000)
    page.wait_for_function("() => location.hash.includes('silence_heads=1.3')")
    url = page.url
    assert "silence=" not in url

    other = page.context.new_page()
    other.goto(url)
    other.locator(".sg-bars[data-silenced='true']").wait_for(timeout=60_000)
    state = "() => { const s = document.querySelector('.sg-root').studygroup; return [[...s.ui.headsSilenced], [...s.ui.members], s.d.conclusion.silenced_heads]; }"
    other.wait_for_function(f"() => JSON.stringify(({state})()[2]) === '[[1,3]]'", timeout=60_000)
    assert other.evaluate(state) == [["1.3"], [], [[1, 3]]]
    assert other.locator(".sg-thumb.sg-muted").evaluate_all("els => els.map(e => [e.dataset.layer, e.dataset.head])") == [["1", "3"]]
    assert "layer 1 head 3" in other.locator(".sg-silenced .sg-pill").inner_text()
    assert "silence_heads=1.3" in other.url
    assert page.watch.errors == []


OPEN_HEAD = "() => { const s = document.querySelector('.sg-root').studygroup; return [s.ui.layer, s.ui.head]; }"


def url_head(page):
    """The head the URL names, as [layer, head] (None when it names none)."""
    head = page.evaluate("() => new URLSearchParams(location.hash.slice(1)).get('head')")
    return None if head is None else [int(x) for x in head.split(".")]


def settled(page):
    """Waits until the explanation is drawn (the last step that may open another head; hidden in Lesson
    mode) and the page is idle."""
    page.locator(".sg-sentences p").first.wait_for(state="attached", timeout=60_000)
    page.wait_for_load_state("networkidle")


def other_head(not_this):
    """A head of the tiny model (2 layers × 4 heads) other than not_this."""
    return [1, 3] if not_this != [1, 3] else [1, 2]


def test_the_explore_head_its_notation_and_the_member_round_trip_through_the_url(page, server_url):
    """In Explore, opening a head, turning its notation and selecting a member write the URL
    (head=L.H, notation=columns, member=J); the URL reopened in a new page shows the same."""
    page.goto(server_url + "#text=I%20have%20a%20lot%20of")
    settled(page)
    layer, head = other_head(page.evaluate(OPEN_HEAD))
    page.click(f".sg-thumb[data-layer='{layer}'][data-head='{head}']")
    page.locator(f".sg-thumb.sg-open[data-layer='{layer}'][data-head='{head}']").wait_for()
    assert url_head(page) == [layer, head]
    page.click(".sg-head .sg-orient button[data-notation='columns']")
    page.click(".sg-chip[data-index='2'] .sg-chip-main")
    page.wait_for_function("() => /notation=columns/.test(location.hash) && /member=2/.test(location.hash)")
    url = page.url
    assert "mode=explore" in url and url_head(page) == [layer, head]

    other = page.context.new_page()
    other.goto(url)
    settled(other)
    assert other.evaluate(OPEN_HEAD) == [layer, head]
    other.locator(f".sg-thumb.sg-open[data-layer='{layer}'][data-head='{head}']").wait_for()
    assert other.locator(".sg-head .sg-orient button[data-notation='columns']").get_attribute("aria-pressed") == "true"
    other.wait_for_function("() => document.querySelector('.sg-root').studygroup.displayed('weights')?.orientation === 'columns'")
    assert other.evaluate("() => document.querySelector('.sg-root').studygroup.ui.selected") == 2
    assert other.locator(".sg-chip.sg-selected").get_attribute("data-index") == "2"
    assert url_head(other) == [layer, head] and "member=2" in other.url and "notation=columns" in other.url
    assert page.watch.errors == []


def test_a_url_head_opens_in_explore_and_an_unknown_one_falls_back_to_the_first_ranked(page, server_url):
    page.goto(server_url + "#mode=explore&head=1.3&text=I%20have%20a%20lot")
    settled(page)
    assert page.evaluate(OPEN_HEAD) == [1, 3]
    assert url_head(page) == [1, 3]

    other = page.context.new_page()  # a new page: a goto that changes only the hash loads nothing
    other.goto(server_url + "#mode=explore&head=9.0&text=I%20have%20a%20lot")
    settled(other)
    shown = other.evaluate(OPEN_HEAD)
    assert None not in shown and shown != [9, 0] and url_head(other) == shown
    assert page.watch.errors == []


def test_escape_from_the_lesson_leaves_the_url_on_the_head_explore_shows(page, server_url):
    page.goto(server_url + "#text=I%20have%20a%20lot&mode=lesson")
    wait_section(page, "members")
    settled(page)
    explore = page.evaluate(OPEN_HEAD)
    lesson = other_head(explore)
    page.select_option(".sg-lesson-head", ".".join(map(str, lesson)))
    page.wait_for_function(f"() => {{ const d = document.querySelector('.sg-root').studygroup.lesson.data; return d && d.layer === {lesson[0]} && d.head === {lesson[1]}; }}")
    wait_section(page, "members")
    assert url_head(page) == lesson
    page.locator(BODY).click(position={"x": 2, "y": 2})
    page.keyboard.press("Escape")
    page.locator(".sg-lesson").wait_for(state="hidden")
    assert "mode=explore" in page.url
    assert url_head(page) == page.evaluate(OPEN_HEAD) == explore
    page.locator(".sg-modes button[data-mode='lesson']").click()  # back in Lesson: the lesson's head again
    wait_section(page, "members")
    assert url_head(page) == lesson
    assert page.watch.errors == []


#: What the page shows, as a user sees it: the address, the mode, the text, the members, the conclusion,
#: the head open and what the lesson's card holds.
SHOWN = """() => {
  const r = document.querySelector('.sg-root'), s = r.studygroup, txt = (sel) => [...r.querySelectorAll(sel)].map((n) => n.textContent);
  const card = r.querySelector('.sg-lesson');
  return { hash: location.hash, lessonClass: r.classList.contains('sg-mode-lesson'),
    pressed: txt('.sg-modes button[aria-pressed=true]'), text: r.querySelector('.sg-text').value,
    chips: txt('.sg-chip .sg-chip-main'), bars: txt('.sg-bars .sg-barrow'), head: [s.ui.layer, s.ui.head],
    title: r.querySelector('.sg-head-title').textContent, lessonShown: card.checkVisibility(),
    lessonBody: card.checkVisibility() ? r.querySelector('.sg-lesson-body').textContent : null,
    lessonSection: s.lesson.on ? s.lesson.section : null, lessonData: s.lesson.on && s.lesson.data ? s.lesson.data.text : null };
}"""


def test_changing_only_the_hash_shows_what_a_fresh_load_of_the_new_address_shows(page, server_url):
    page.goto(server_url + "#text=Cash+or+credit+card%3F+I+have+a+lot&mode=lesson&section=softmax&head=1.0")
    wait_section(page, "softmax")
    settled(page)
    new = "#text=The+cat+sat+on+the&mode=explore&head=1.3"
    page.evaluate(f"() => {{ location.hash = {json.dumps(new)}; }}")
    page.wait_for_function("() => document.querySelector('.sg-text').value === 'The cat sat on the'")
    settled(page)
    page.wait_for_function("() => /mode=explore/.test(location.hash)")

    fresh = page.context.new_page()
    fresh.goto(server_url + new)
    settled(fresh)
    after, expected = page.evaluate(SHOWN), fresh.evaluate(SHOWN)
    assert expected["head"] == [1, 3] and expected["pressed"] == ["Explore"] and not expected["lessonShown"]
    assert after == expected
    assert page.watch.errors == []


def shown_paths(page):
    return page.eval_on_selector_all(f"{BODY} [data-path]", "ns => ns.map(n => n.dataset.path)")


@pytest.mark.parametrize("notation", ["paper", "columns"])
def test_qkv_softmax_and_weighted_sum_are_worked_out_with_labels_apart_and_scales(browser, long_server_url, screenshots, notation):
    """Q, K and V: every member's label on its own line (a cell at least 15 px across on the labelled
    side) and a colour scale with its numbers; softmax: exp(s_j − max) and Σ; the weighted sum: one
    coordinate's terms w_j · v_j[t] and their sum. Every number equals /api/lesson's."""
    page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    text = quote("an ear then the tin, " * 12)
    page.goto(long_server_url + f"#text={text}&mode=lesson&section=qkv&head=1.3" + ("&notation=columns" if notation == "columns" else ""))
    wait_section(page, "qkv")
    d = lesson_data(page)
    n = len(d["sections"][SECTIONS.index("qkv")]["members"])
    assert n >= 43  # enough members that cells sized by the page's width alone would be under 15 px
    api = api_lesson(page, long_server_url, d)
    check_numbers(page, api)
    q = SECTIONS.index("qkv")
    assert {f"sections.{q}.scales.{m}" for m in "qkv"} <= set(shown_paths(page))
    cells = page.eval_on_selector_all(f"{BODY} canvas.sg-matrix", "cs => cs.map(c => [+c.dataset.across, +c.dataset.down, c.dataset.labelled])")
    assert len(cells) == 3
    for across, down, labelled in cells:
        assert (down if "rows" in labelled else across) >= 15, (across, down, labelled)
    page.screenshot(path=str(screenshots / "lesson" / f"qkv-{notation}-long.png"), full_page=False)
    page.locator(BODY).click(position={"x": 2, "y": 2})
    for name, wanted in (("scores", None), ("softmax", ("exps.", "exp_sum", "shift")), ("weighted_sum", ("terms.", "terms_sum", "v_t."))):
        page.keyboard.press("ArrowRight")
        wait_section(page, name)
        if wanted:
            check_numbers(page, api)
            paths = shown_paths(page)
            k = SECTIONS.index(name)
            assert all(any(p.startswith(f"sections.{k}.{w}") for p in paths) for w in wanted), (name, wanted)
    t = api["sections"][SECTIONS.index("weighted_sum")]["t"]
    assert f"output_{d['query']}[{t}] = Σ_j w_j · v_j[{t}]" in page.locator(BODY).inner_text()


def test_a_silenced_lessons_conclusion_says_so_and_compares_the_context_with_nothing_silenced(page, server_url):
    """The lesson of a run with a member silenced: every section says so; the conclusion lists this
    run's next words, the same text's with nothing silenced, and the shorter text's (nothing
    silenced), each with the API's numbers, and its sentences name the silencing."""
    page.goto(server_url + "#text=I%20have%20a%20lot%20of&mode=lesson&section=conclusion&silence=1")
    wait_section(page, "conclusion")
    page.wait_for_function("() => { const d = document.querySelector('.sg-root').studygroup.lesson.data; "
                           "return d && d.silenced_members.length === 1; }", timeout=60_000)
    wait_section(page, "conclusion")
    page.wait_for_function(f"() => document.querySelectorAll('{BODY} .sg-lesson-silenced').length === 1 && "
                           f"document.querySelectorAll('{BODY} caption').length === 3", timeout=60_000)
    note = page.locator(f"{BODY} .sg-lesson-silenced").inner_text()
    assert "Silenced in this run: member 1" in note, note
    captions = page.locator(f"{BODY} caption").all_inner_texts()
    assert captions == ["“I have a lot of”, this run", "“I have a lot of”, nothing silenced", "“have a lot of”, nothing silenced"], captions
    says = page.locator(f"{BODY} .sg-says").all_inner_texts()
    d = lesson_data(page)
    assert f"with member 1 (“{d['tokens'][1]}”) silenced" in says[0] and "with nothing silenced it is" in says[0], says
    assert "nothing silenced)" in says[1], says
    api = api_lesson(page, server_url, d)
    conclusion = api["sections"][-1]
    assert conclusion["unsilenced_top"] and conclusion["top"] != conclusion["unsilenced_top"]
    assert check_numbers(page, api) >= 3 * len(conclusion["top"])
    assert page.watch.errors == []


def test_a_lesson_answered_after_the_urls_silencing_is_drawn_is_asked_once_and_shown(page, server_url):
    """The URL's lesson (the default head) is asked with its silencing before the text is drawn; the
    explore view then silences the same and the lesson is asked again while its answer is on its way
    (held back here), and again once it named its head: both are the same question, so the one
    answer is shown and nothing is asked twice."""
    asked = []

    def late(route):
        asked.append(route.request.post_data_json)
        answer = route.fetch()
        time.sleep(3)  # the explore view draws the text and its silencing meanwhile
        route.fulfill(response=answer)

    page.route("**/api/lesson", late)
    page.goto(server_url + "#text=a%20tin%20can%20of&mode=lesson&section=conclusion&silence=1")
    page.locator(".sg-chip[data-index='1'] .sg-mute[aria-pressed='true']").wait_for(state="attached", timeout=60_000)
    wait_section(page, "conclusion")
    page.wait_for_load_state("networkidle")
    d = lesson_data(page)
    assert d["silenced_members"] == [1]
    assert len(asked) == 1, asked
    assert "layer" not in asked[0] and f"head={d['layer']}.{d['head']}" in page.url
    wait_section(page, "conclusion")
    assert check_numbers(page, api_lesson(page, server_url, d)) > 0
    assert page.watch.errors == []


def test_a_silencing_chosen_in_explore_is_the_lessons_when_the_lesson_is_opened_again(page, server_url):
    page.goto(server_url + "#text=a%20tin%20can%20of&mode=lesson&section=conclusion")
    wait_section(page, "conclusion")
    assert lesson_data(page)["silenced_members"] == []
    page.locator(".sg-modes button[data-mode='explore']").click()
    page.locator(".sg-lesson").wait_for(state="hidden")
    page.click(".sg-chip[data-index='1'] .sg-mute")  # silence member 1 in Explore
    page.wait_for_function("() => location.hash.includes('silence=1')", timeout=60_000)
    page.locator(".sg-modes button[data-mode='lesson']").click()
    page.wait_for_function("() => { const d = document.querySelector('.sg-root').studygroup.lesson.data; "
                           "return d && d.silenced_members.length === 1; }", timeout=60_000)
    wait_section(page, "conclusion")
    d = lesson_data(page)
    assert d["silenced_members"] == [1] and "silence=1" in page.url
    assert check_numbers(page, api_lesson(page, server_url, d)) > 0
    assert page.watch.errors == []


SILENCED_CONCLUSION = "() => { const c = document.querySelector('.sg-root').studygroup.d.conclusion; return c && c.silenced; }"


@pytest.mark.parametrize("kind", ["mean", "resample"])
def test_how_the_silenced_are_taken_out_round_trips_through_the_url(page, server_url, markup_model, kind):
    """Mean ablation, or resample ablation from another text of as many tokens, chosen for a silenced
    member: the URL says so (and names the resample's text), and reopening it takes the member out
    the same way, with the API's numbers for that ablation, which are neither of the other two's."""
    text, tiny = "I have a lot of", studygroup.load(markup_model.path)
    other_text = next(t for t in ("We had a bit to", "I have a bit of", "You have a few of")
                      if len(tiny.tokenize(t)) == len(tiny.tokenize(text)))  # resample needs as many tokens
    page.goto(server_url + "#text=I%20have%20a%20lot%20of&mode=explore&silence=1")
    page.locator(".sg-chip[data-index='1'] .sg-mute[aria-pressed='true']").wait_for(timeout=60_000)
    page.wait_for_function(SILENCED_CONCLUSION, timeout=60_000)
    page.select_option(".sg-ablation", kind)
    if kind == "resample":
        page.fill(".sg-ablation-from", other_text)
        page.press(".sg-ablation-from", "Tab")  # its change event
    page.wait_for_function("(kind) => { const c = document.querySelector('.sg-root').studygroup.d.conclusion; "
                           "return c && c.ablation && c.ablation.kind === kind && location.hash.includes('ablation=' + kind); }",
                           arg=kind, timeout=60_000)
    url, before = page.url, page.evaluate("() => document.querySelector('.sg-root').studygroup.d.conclusion")
    assert "silence=1" in url and ("ablation_from=" in url) == (kind == "resample")

    other = page.context.new_page()
    other.goto(url)
    other.wait_for_function(SILENCED_CONCLUSION, timeout=60_000)
    assert other.input_value(".sg-ablation") == kind
    if kind == "resample":
        assert other.input_value(".sg-ablation-from") == other_text
    assert other.evaluate("() => document.querySelector('.sg-root').studygroup.d.conclusion") == before
    ablations = {"zero": {}, "mean": {"ablation": {"kind": "mean"}}, "resample": {"ablation": {"kind": "resample", "from": other_text}}}
    silenced = {k: page.request.post(server_url + "api/conclusion", headers={"Content-Type": "application/json"}, data=json.dumps(
        {"text": text, "top": 10, "silence": {"members": [1], "heads": []}, **body})).json()["silenced"] for k, body in ablations.items()}
    assert silenced[kind] == before["silenced"]
    assert all(silenced[k] != before["silenced"] for k in ablations if k != kind)
    assert page.watch.errors == []


def test_a_url_naming_members_and_heads_the_text_and_model_lack_leaves_them_out_and_says_so_once(page, server_url):
    """A pasted address with a member past the text's end, a head past the model's and an unknown
    section: what holds is shown (member 1 silenced, the lesson's own head, its first section), and one
    line names what was left out; no chip reads "undefined", and no error is drawn in the lesson."""
    page.goto(server_url + "#text=I%20have%20a%20lot&mode=lesson&section=nosuch&head=99.99&silence=1,50&silence_heads=0.1,40.0")
    wait_section(page, "members")
    page.wait_for_function("() => { const d = document.querySelector('.sg-root').studygroup.lesson.data; "
                           "return d && d.silenced_members.length === 1; }", timeout=60_000)
    page.locator(".sg-status[data-kind='error']").wait_for(timeout=60_000)
    status = page.locator(".sg-status").inner_text()
    assert "head 99.99" in status and "member 50" in status and "head 40.0" in status and "left out" in status, status
    d = lesson_data(page)
    assert d["silenced_members"] == [1] and d["silenced_heads"] == [[0, 1]]
    assert page.locator(".sg-lesson-head").count() == 1  # the lesson's own head, chosen by the page
    pills = page.locator(".sg-pill").all_inner_texts()
    assert pills and not any("undefined" in x for x in pills), pills
    assert page.locator(f"{BODY} .sg-error").count() == 0
    assert "silence=1&" in page.url + "&" and "silence_heads=0.1" in page.url and "40.0" not in page.url
    assert page.watch.errors == []


def test_the_lessons_head_outlives_a_reload_in_explore(page, server_url):
    """Lesson on head 1.3, Esc to Explore (whose head the URL's `head` then names), reload: back in
    Lesson the head is 1.3 again, as without the reload."""
    page.goto(server_url + "#text=I%20have%20a%20lot%20of&mode=lesson&section=scores&head=1.3")
    page.wait_for_function("() => { const d = document.querySelector('.sg-root').studygroup.lesson.data; return d && d.layer === 1 && d.head === 3; }", timeout=60_000)
    page.locator(BODY).click(position={"x": 2, "y": 2})
    page.keyboard.press("Escape")
    page.locator(".sg-lesson").wait_for(state="hidden")
    settled(page)
    assert "mode=explore" in page.url and "lesson_head=1.3" in page.url
    page.reload()
    settled(page)
    page.locator(".sg-modes button[data-mode='lesson']").click()
    page.wait_for_function("() => { const d = document.querySelector('.sg-root').studygroup.lesson.data; return d && d.layer === 1 && d.head === 3; }", timeout=60_000)
    assert url_head(page) == [1, 3] and "lesson_head" not in page.url
    assert page.watch.errors == []
