"""Make docs/img/page.png: the web page explaining the default sentence, with one head open.

Starts `python -m studygroup.web.serve --port 0 --no-warm` (the default model), opens the URL it
prints in Debian's chromium through Playwright, waits for the default sentence's explanation,
selects the last member, opens head 6 of layer 24 (the most decisive head for "Cash or credit card?
I have a lot"), scrolls so that the model view and the open head fill the window, and saves a
1440×900 PNG.

    .venv/bin/python docs/img/make_screenshots.py            # writes docs/img/page.png
    .venv/bin/python docs/img/make_screenshots.py out.png    # writes out.png
    .venv/bin/python docs/img/make_screenshots.py --lesson   # writes docs/img/lesson-*.png

With --lesson it opens Lesson mode on "I have a lot" (the default head: the most decisive head that
is not resting on a sink) and saves the lesson's card at the sections LESSON_SECTIONS, 1440 wide,
as 256-colour PNGs.

    .venv/bin/python docs/img/make_screenshots.py --long     # writes docs/img/long-text-overview.png

With --long it opens LONG_TEXT (a paragraph said five times: 435 members) in the page, opens head
LONG_LAYER.LONG_HEAD, cancels the explain that follows, and saves the head's whole map (one pixel
a cell) as a 256-colour PNG.

    .venv/bin/python docs/img/make_screenshots.py --instruments   # writes docs/img/lens.png, docs/img/patching.png

With --instruments it reads every layer of the default sentence in the logit lens, and runs
activation patching on the patching card's own pair (John and Mary: minutes on a CPU), and saves
each card as a 256-colour PNG.

    .venv/bin/python docs/img/make_screenshots.py --residual   # writes docs/img/residual.png

With --residual it saves the residual stream's card of the default sentence, drawn once it is
explained, as a 256-colour PNG.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from urllib.parse import quote

from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SIZE = {"width": 1440, "height": 900}
LAYER, HEAD = 24, 6
LESSON_TEXT = "I have a lot"
LESSON_SECTIONS = ("scores", "softmax")
LONG_PARAGRAPH = ("Every Thursday evening, Tom and Maria met in the quiet library on the hill to study for the chemistry "
                  "exam together. Tom always forgot his notes, so Maria brought two copies of everything: the formulas, "
                  "the old exam questions and a list of the words the teacher liked. They worked until the librarian "
                  "turned off the lights, then walked down the hill to the bus stop, talking about reactions, "
                  "equilibrium and the strange smell of the laboratory. ")
LONG_TEXT = (LONG_PARAGRAPH * 5).strip()  # said again and again: the map shows the heads that look back a paragraph
LONG_LAYER, LONG_HEAD = 18, 6  # an induction head (`studygroup roles`): it looks one paragraph back


def start_server() -> tuple[subprocess.Popen, str]:
    """`studygroup serve` on a free loopback port, and the URL it prints."""
    cmd = [sys.executable, "-m", "studygroup.web.serve", "--port", "0", "--no-warm"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, seen = time.time() + 120, []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if " at http://" in line:
            return proc, line.split(" at ", 1)[1].split()[0]
    proc.kill()
    sys.exit("studygroup serve printed no URL:\n" + "".join(seen))


def wait_idle(page, timeout: int = 120_000) -> None:
    """Until the story is shown and nothing is being computed."""
    page.locator(".sg-sentences p").first.wait_for(timeout=timeout)
    page.locator(".sg-status[data-kind='']").wait_for(state="attached", timeout=timeout)


def shoot(url: str, out: Path) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=SIZE)
        page.goto(url)
        wait_idle(page)
        chips = page.locator(".sg-chip .sg-chip-main")
        chips.nth(chips.count() - 1).click()  # the last member: whom its question listens to
        page.click(f".sg-thumb[data-layer='{LAYER}'][data-head='{HEAD}']")
        page.locator(f".sg-thumb.sg-open[data-layer='{LAYER}'][data-head='{HEAD}']").wait_for()
        wait_idle(page)
        # The model view beside the open head, down to the head's last line.
        head = page.locator(".sg-head-title").first.evaluate_handle("e => e.closest('section') || e.parentElement")
        bottom = head.evaluate("e => e.getBoundingClientRect().bottom + window.scrollY")
        page.evaluate(f"window.scrollTo(0, {bottom} - {SIZE['height']} + 16)")
        page.mouse.move(0, 0)
        page.screenshot(path=str(out))
        browser.close()


def shoot_lesson(url: str) -> None:
    """docs/img/lesson-<section>.png: the lesson's card at each of LESSON_SECTIONS."""
    from PIL import Image

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=SIZE)
        for name in LESSON_SECTIONS:
            page.goto(f"{url}#mode=lesson&section={name}&text={quote(LESSON_TEXT)}")
            page.locator(f".sg-lesson-body[data-section='{name}'] h2").wait_for(timeout=600_000)
            out = HERE / f"lesson-{name}.png"
            page.locator(".sg-lesson").screenshot(path=str(out))
            Image.open(out).convert("RGB").quantize(256).save(out, optimize=True)
            print(f"wrote {out}")
        browser.close()


def shoot_long(url: str) -> None:
    """docs/img/long-text-overview.png: head LONG_LAYER.LONG_HEAD's whole map on LONG_TEXT."""
    from PIL import Image

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": SIZE["width"], "height": 1600})  # the whole map in view
        page.goto(url)
        page.locator(".sg-status[data-kind='']").wait_for(state="attached", timeout=600_000)
        page.fill(".sg-text", LONG_TEXT)
        page.click(".sg-go")
        page.locator(".sg-mv-grid .sg-thumb").first.wait_for(timeout=600_000)
        page.click(f".sg-thumb[data-layer='{LONG_LAYER}'][data-head='{LONG_HEAD}']")
        page.locator(".sg-map canvas").wait_for(timeout=600_000)
        cancel = page.locator(".sg-job button")
        if cancel.count() and cancel.first.is_visible():
            cancel.first.click()
        page.mouse.move(0, 0)
        out = HERE / "long-text-overview.png"
        page.locator(".sg-map").screenshot(path=str(out))
        Image.open(out).convert("RGB").quantize(256).save(out, optimize=True)
        print(f"wrote {out}")
        browser.close()


def save_cards(url: str, prepare, cards: tuple[tuple[str, str], ...]) -> None:
    """Opens the page on the default sentence, runs prepare(page), and saves each (name, selector)
    card as docs/img/NAME.png in 256 colours."""
    from PIL import Image

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=SIZE)
        page.goto(url)
        wait_idle(page, 600_000)
        prepare(page)
        page.mouse.move(0, 0)
        for name, card in cards:
            out = HERE / f"{name}.png"
            page.locator(card).screenshot(path=str(out))
            Image.open(out).convert("RGB").quantize(256).save(out, optimize=True)
            print(f"wrote {out}")
        browser.close()


def shoot_residual(url: str) -> None:
    """docs/img/residual.png: the residual stream's card of the default sentence."""
    save_cards(url, lambda page: page.locator(".sg-res-layer").first.wait_for(), (("residual", ".sg-residual"),))


def run_instruments(page) -> None:
    """Reads every layer in the lens and runs patching on the card's own pair of texts."""
    page.click(".sg-lens-go")
    page.locator(".sg-lens-grid").wait_for(timeout=600_000)
    page.click(".sg-patch-go")
    page.locator(".sg-patch-grid[data-grid='heads']").wait_for(timeout=1_200_000)


def shoot_instruments(url: str) -> None:
    """docs/img/lens.png and docs/img/patching.png: the two cards under the model view, run."""
    save_cards(url, run_instruments, (("lens", ".sg-lens"), ("patching", ".sg-patching")))


def main() -> None:
    lesson, long, instruments = ("--lesson" in sys.argv[1:], "--long" in sys.argv[1:], "--instruments" in sys.argv[1:])
    residual = "--residual" in sys.argv[1:]
    names = [a for a in sys.argv[1:] if a not in ("--lesson", "--long", "--instruments", "--residual")]
    out = Path(names[0]) if names else HERE / "page.png"
    proc, url = start_server()
    try:
        if lesson:
            shoot_lesson(url)
        elif long:
            shoot_long(url)
        elif instruments:
            shoot_instruments(url)
        elif residual:
            shoot_residual(url)
        else:
            shoot(url, out)
            print(f"wrote {out}")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
