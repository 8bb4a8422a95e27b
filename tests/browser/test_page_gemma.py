"""The page on Gemma 3 270M (`studygroup serve --model gemma-3-270m`): it loads, explains, shows
every one of its 72 heads, and its head view's rows are weights that sum to 1."""
from __future__ import annotations

import pytest

from .conftest import _serve
from .test_page import DISPLAYED, chip_texts, only_loopback, wait_idle


@pytest.fixture(scope="module")
def gemma_url():
    yield from _serve("gemma-3-270m")


def test_the_page_explains_with_gemma(page, gemma_url, screenshots):
    page.goto(gemma_url)
    wait_idle(page, timeout=300_000)
    page.fill(".sg-text", "I have a lot")
    page.fill(".sg-other", "")
    page.click(".sg-go")
    page.locator(".sg-status[data-kind='busy']").wait_for(state="attached")
    wait_idle(page, timeout=300_000)
    assert "".join(chip_texts(page)).replace("␣", " ") == "<bos>I have a lot"
    assert page.locator(".sg-thumb").count() == 18 * 4  # every head of the model view
    first = page.locator(".sg-bars .sg-barrow .sg-word").first.inner_text()
    assert first == "␣of"  # transformers: " of" 0.854 after "I have a lot" (issue 18)
    shown = page.evaluate(DISPLAYED, "weights")
    T = len(shown["rows"])
    assert all(sum(shown["matrix"][i]) == pytest.approx(1, abs=1e-5) for i in range(T))
    assert "rescales" in page.locator(".sg-sentences").inner_text()
    page.screenshot(path=str(screenshots / "page-gemma.png"), full_page=True)
    only_loopback(page.watch.requests, gemma_url.rstrip("/"))
    assert page.watch.errors == []
