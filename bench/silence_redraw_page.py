"""Silencing redrawn in the browser: the page in Debian's chromium (headless, through Playwright)
over `studygroup serve`, timed from the click that silences until the page has drawn the new
conclusion, every head of the model view and the open head again; p50 and p95.

The page explains the text first (untimed), and its complete ranking in the background is
cancelled before the first round. Every round silences something not silenced before (a member
by its chip's ⊘, then a head: `toggleHead`, what the head view's "Silence this head" calls), so
no answer comes from a cache; after each round the silencing is cleared again (untimed). The
redraw is the promise of the page's own `resilence` (the conclusion, the model view, then the
open head, each drawn as it arrives), then the next frame. The CPU is printed (lscpu).
Target: under 0.3 s at ~44 members on 2 cores.

    .venv/bin/python bench/silence_redraw_page.py               # the default model, 20 rounds
    .venv/bin/python bench/silence_redraw_page.py --rounds 40 --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_page import start_server  # noqa: E402
from silence_redraw import TEXT, cpu, silencings  # noqa: E402

CHROMIUM = os.environ.get("STUDYGROUP_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

#: Keeps the promise of each redraw the page starts (its `resilence`), for the rounds to await.
HOOK = """() => {
  const sg = document.querySelector('.sg-root').studygroup;
  const redraw = sg.resilence.bind(sg);
  sg.resilence = () => (window.__redraw = redraw());
}"""

#: One silencing through the page, timed: until `resilence` has drawn the three views, then a frame.
ROUND = """async (s) => {
  const sg = document.querySelector('.sg-root').studygroup;
  window.__redraw = null;
  const t0 = performance.now();
  if (s.member != null) document.querySelector(`.sg-chip[data-index='${s.member}'] .sg-mute`).click();
  else sg.toggleHead(s.head[0], s.head[1]);
  await window.__redraw;
  await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
  return performance.now() - t0;
}"""

#: Clears the silencing (a redraw from the answers' cache, untimed) and says whether the page shows nothing silenced.
CLEAR = """async () => {
  const sg = document.querySelector('.sg-root').studygroup;
  sg.clearSilencing(); sg.afterSilence();
  await window.__redraw;
  return document.querySelector('.sg-mv-grid').dataset.silenced;
}"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=20, help="silencings measured (default 20)")
    p.add_argument("--text", default=TEXT)
    p.add_argument("--json", default=None, metavar="FILE", help="also write the figures as JSON")
    return p.parse_args(argv)


def explained(page, url: str, text: str) -> int:
    """The page at url with `text` explained, its complete ranking cancelled; its member count."""
    page.goto(url)
    page.locator(".sg-status[data-kind='']").wait_for(state="attached", timeout=600_000)
    page.fill(".sg-text", text)
    before = page.evaluate("() => document.querySelector('.sg-root').studygroup.gen")
    page.click(".sg-go")
    page.wait_for_function(f"() => document.querySelector('.sg-root').studygroup.gen > {before}")
    page.locator(".sg-sentences p").first.wait_for(timeout=1_800_000)
    page.locator(".sg-status[data-kind='']").wait_for(state="attached", timeout=1_800_000)
    cancel = page.locator(".sg-complete button")
    if cancel.count() and cancel.first.is_visible():
        cancel.first.click()
        page.locator(".sg-complete[data-state='stopped']").wait_for(timeout=600_000)
    return page.locator(".sg-chip").count()


def main(argv=None) -> dict:
    args = parse_args(argv)
    from playwright.sync_api import sync_playwright

    proc, url = start_server()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            page.set_default_timeout(600_000)
            T = explained(page, url, args.text)
            info = page.evaluate("() => document.querySelector('.sg-root').studygroup.d.info.model")
            page.evaluate(HOOK)
            seconds = []
            for s in silencings(T, info["n_layers"], info["n_heads"], args.rounds):
                one = {"member": s["silence_members"][0]} if s["silence_members"] else {"head": s["silence_heads"][0]}
                seconds.append(page.evaluate(ROUND, one) / 1000)
                if page.evaluate(CLEAR) != "false":
                    raise SystemExit("the page still shows a silencing after clearing it")
            browser.close()
    finally:
        proc.terminate()
    ordered = sorted(seconds)
    p50, p95 = statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    members, heads = seconds[0::2], seconds[1::2]
    print(f"silence_redraw_page: {info['name']}, T={T} members, {args.rounds} silencings in chromium; {cpu()}")
    print(f"  redraw p50 {p50:.3f} s  p95 {p95:.3f} s   (p50: a member {statistics.median(members):.3f}, "
          f"a head {statistics.median(heads) if heads else float('nan'):.3f}); target: p50 under 0.300 s")
    out = {"cpu": cpu(), "T": T, "rounds": args.rounds, "p50": p50, "p95": p95, "seconds": seconds,
           "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
