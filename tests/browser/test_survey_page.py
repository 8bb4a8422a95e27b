"""`serve --survey DIR` in chromium: every head of the model view carries its role over the survey,
with the mean, interval and counts of summary.parquet (read here with pyarrow) on hover; a legend
names the roles; the marks go off and on; the survey's folder name, which looks like markup, stays text."""
from __future__ import annotations

import pytest

from integration.test_survey_web import expected_marks
from studygroup.study.survey.survey import survey

from .conftest import _serve
from .test_page import MARKUP_TEXT, assert_no_markup_ran, explain, wait_idle

#: Each mark's head, data and title.
MARKS = """() => [...document.querySelectorAll('.sg-thumb .sg-survey-mark')].map((m) => ({
  layer: Number(m.parentElement.dataset.layer), head: Number(m.parentElement.dataset.head), role: m.dataset.role,
  mean: Number(m.dataset.mean), low: Number(m.dataset.low), high: Number(m.dataset.high), n: Number(m.dataset.n),
  above: Number(m.dataset.above), title: m.title, solid: !m.classList.contains('sg-hollow')}))"""
FOLDER = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def surveyed(markup_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("survey") / FOLDER
    survey(out, model=str(markup_model.path), corpus="probe", n=6, tokens=16, shard_size=3, workers=1)
    return out


@pytest.fixture(scope="module")
def survey_url(markup_model, surveyed):
    yield from _serve(markup_model.path, "--survey", str(surveyed))


def test_the_model_views_heads_carry_their_survey_role_and_interval(page, survey_url, surveyed, screenshots):
    page.goto(survey_url)
    wait_idle(page)
    expected = expected_marks(surveyed)
    page.wait_for_function(f"() => document.querySelectorAll('.sg-thumb .sg-survey-mark').length === {len(expected)}")
    marks = page.evaluate(MARKS)
    assert len(marks) == len(expected) == 2 * 4
    for m in marks:
        e = expected[m["layer"], m["head"]]
        assert (m["role"], m["mean"], m["low"], m["high"], m["n"], m["above"]) == (
            e["role"], e["mean"], e["low"], e["high"], e["n"], e["above"])
        assert f"head {m['layer']}.{m['head']} over 6 probe sequences: {e['role']} {e['mean']:.4g} " \
               f"[{e['low']:.4g}, {e['high']:.4g}]" in m["title"] and f"on {e['above']} of 6" in m["title"]
        assert m["solid"] == (2 * e["above"] >= e["n"])
    card = page.locator(".sg-survey")
    assert card.locator(".sg-role-key").count() == 6 and "induction head on" in card.inner_text()
    assert FOLDER in card.inner_text()  # the folder's name as text, not markup
    card.screenshot(path=str(screenshots / "page-survey.png"))
    page.locator(".sg-modelview").screenshot(path=str(screenshots / "page-survey-marks.png"))
    card.locator(".sg-survey-toggle input").uncheck()
    assert page.locator(".sg-survey-mark").count() == 6  # the legend's only
    card.locator(".sg-survey-toggle input").check()
    explain(page, MARKUP_TEXT)  # another text: the heads keep their marks
    assert page.evaluate(MARKS) == marks
    assert_no_markup_ran(page)


def test_a_server_without_a_survey_shows_no_survey_card(page, server_url):
    """Nor does the page ask for one (/api/info says there is none), so its console holds no 404."""
    asked, console = [], []
    page.on("request", lambda r: asked.append(r.url))
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    page.goto(server_url)
    wait_idle(page)
    assert page.locator(".sg-survey").is_hidden() and page.locator(".sg-survey-mark").count() == 0
    assert not [u for u in asked if u.endswith("/api/survey")] and console == [], console
    assert page.watch.errors == []
