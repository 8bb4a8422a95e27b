"""Silencing redrawn in the browser: the page in Debian's chromium (headless, through Playwright)
over `studygroup serve`, timed from the click that silences until the page has drawn the new
conclusion, every head of the model view and the open head again; p50 and p95.

The page explains the text first (untimed), and its complete ranking in the background is
cancelled before the first round. Every round silences something not silenced before (a member
by its chip's ⊘, then a head: `toggleHead`, what the head view's "Silence this head" calls), so
no answer comes from a cache; after each round the silencing is cleared again (untimed). The
redraw is the promise of the page's own `resilence` (the conclusion, the model view, then the
open head, each drawn as it arrives), then the next frame. The CPU is printed (lscpu), and the
load average at the start and at the end. Beside each round's wall time, the CPU seconds it took
of the server and of chromium's processes (the browser, its renderer, its GPU and utility
processes, which raster and composite): a machine busy with other work stretches the wall time
far more than these.

The peer of each redraw is the page's first draw of a text: after every second silencing, the
page's text is set to one the server has not seen (the bench's text with its last word replaced,
`silence_redraw.first_texts`) and the same redraw draws its three views, nothing silenced, its
pass made whole; then the bench's text is drawn again (untimed, from the answers' cache).
Printed: p50 and p95 against the target and against the first draw's p50, and how many
thumbnails each redraw painted (the page paints those whose weights or masked cells changed).

--avx2 starts the server with torch's kernels, oneDNN's and MKL's kept to AVX2 (ATEN_CPU_CAPABILITY=avx2,
ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2), as on a CPU without AVX-512; the redraw's passes use no compiled kernel
of studygroup's (that one multiplies generation's steps). Target: under 0.3 s at ~44 members on 2 cores.

    .venv/bin/python bench/silence_redraw_page.py               # the default model, 20 rounds
    .venv/bin/python bench/silence_redraw_page.py --rounds 40 --json out.json
    .venv/bin/python bench/silence_redraw_page.py --avx2        # the server's torch, oneDNN and MKL kept to AVX2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_page import start_server  # noqa: E402
from silence_redraw import TARGET_S, TEXT, against, avx2_env, cpu, first_texts, percentiles, silencings  # noqa: E402

CHROMIUM = os.environ.get("STUDYGROUP_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

#: Keeps the promise of each redraw the page starts (its `resilence`), for the rounds to await.
HOOK = """() => {
  const sg = document.querySelector('.sg-root').studygroup;
  const redraw = sg.resilence.bind(sg);
  sg.resilence = () => (window.__redraw = redraw());
}"""

#: One silencing through the page, timed: until `resilence` has drawn the three views, then a frame;
#: or (s.text) the first draw of a new text, nothing silenced. Seconds and the thumbnails painted.
ROUND = """async (s) => {
  const sg = document.querySelector('.sg-root').studygroup;
  window.__redraw = null;
  const t0 = performance.now();
  if (s.text != null) { sg.d.text = s.text; sg.heads.clear(); sg.resilence(); }  // a text's views, none kept
  else if (s.member != null) document.querySelector(`.sg-chip[data-index='${s.member}'] .sg-mute`).click();
  else sg.toggleHead(s.head[0], s.head[1]);
  await window.__redraw;
  await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
  return [(performance.now() - t0) / 1000, (document.querySelector('.sg-mv-grid').__painted || []).length];
}"""
#: The bench's text drawn again after a first draw (untimed, from the answers' cache).
BACK = """async (text) => {
  const sg = document.querySelector('.sg-root').studygroup;
  sg.d.text = text; sg.heads.clear(); sg.resilence();
  await window.__redraw;
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
    p.add_argument("--avx2", action="store_true", help="the server's torch, oneDNN and MKL kept to AVX2 (as on a CPU without AVX-512)")
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


def cpu_seconds(server_pid: int) -> tuple[float, float]:
    """The CPU seconds (user and system) spent so far by the server and by chromium's processes
    (this bench's descendants named chrom…)."""
    server = browser = 0.0
    for p in psutil.Process().children(recursive=True):
        try:
            t, name = p.cpu_times(), p.name()
        except psutil.Error:  # ended meanwhile
            continue
        if p.pid == server_pid:
            server += t.user + t.system
        elif "chrom" in name:
            browser += t.user + t.system
    return server, browser


def timed_round(page, one: dict, server_pid: int) -> tuple[float, int, float, float]:
    """ROUND for one silencing: its wall seconds, the thumbnails it painted, and the CPU seconds it
    took of the server and of chromium."""
    s0, b0 = cpu_seconds(server_pid)
    took, n = page.evaluate(ROUND, one)
    s1, b1 = cpu_seconds(server_pid)
    return took, n, s1 - s0, b1 - b0


def main(argv=None) -> dict:
    args = parse_args(argv)
    from playwright.sync_api import sync_playwright

    if args.avx2:  # the server's environment, and cpu()'s line
        os.environ.update(avx2_env())
    load_at_start = os.getloadavg()[0]
    proc, url = start_server()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            page.set_default_timeout(600_000)
            T = explained(page, url, args.text)
            info = page.evaluate("() => document.querySelector('.sg-root').studygroup.d.info.model")
            page.evaluate(HOOK)
            seconds, painted, cpu_s, firsts, fresh = [], [], [], [], iter(first_texts(args.text, args.rounds))
            for r, s in enumerate(silencings(T, info["n_layers"], info["n_heads"], args.rounds)):
                one = {"member": s["silence_members"][0]} if s["silence_members"] else {"head": s["silence_heads"][0]}
                took, n, server_s, browser_s = timed_round(page, one, proc.pid)
                seconds.append(took), painted.append(n), cpu_s.append((server_s, browser_s))
                if page.evaluate(CLEAR) != "false":
                    raise SystemExit("the page still shows a silencing after clearing it")
                if r % 2 == 1:  # the peer: a text's first draw, then the bench's text again
                    firsts.append(page.evaluate(ROUND, {"text": next(fresh)})[0])
                    page.evaluate(BACK, args.text)
            browser.close()
    finally:
        proc.terminate()
    p50, p95 = percentiles(seconds)
    first_p50, first_p95 = percentiles(firsts)
    members, heads = seconds[0::2], seconds[1::2]
    print(f"silence_redraw_page: {info['name']}, T={T} members, {args.rounds} silencings in chromium; {cpu()} "
          f"(at the start {load_at_start:.1f})")
    print(f"  first draw p50 {first_p50:.3f} s  p95 {first_p95:.3f} s   ({len(firsts)} texts not seen before, nothing silenced)")
    print(f"  redraw {against(p50, p95, first_p50)}   (p50: a member {statistics.median(members):.3f}, "
          f"a head {statistics.median(heads) if heads else float('nan'):.3f}; thumbnails painted p50: a member "
          f"{statistics.median(painted[0::2]):.0f}, a head {statistics.median(painted[1::2]) if heads else float('nan'):.0f} "
          f"of {info['n_layers'] * info['n_heads']}); target: p50 under {TARGET_S:.3f} s")
    server_p50, browser_p50 = (statistics.median(x[k] for x in cpu_s) for k in (0, 1))
    print(f"  CPU s a redraw, p50: server {server_p50:.3f}, chromium {browser_p50:.3f}")
    out = {"cpu": cpu(), "load_at_start": load_at_start, "T": T, "rounds": args.rounds, "p50": p50, "p95": p95,
           "first_draw": {"p50": first_p50, "p95": first_p95, "seconds": firsts}, "to_target": p50 / TARGET_S,
           "to_first_draw": p50 / first_p50,
           "cpu_p50": {"server": server_p50, "chromium": browser_p50}, "cpu_seconds": cpu_s, "seconds": seconds, "painted": painted, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
