"""The page's requests on the model's whole window: an 8,191-token text explained and its maps
browsed through `studygroup serve`, with the server's peak memory.

Starts `python -m studygroup.web.serve --no-warm` as a user would, then asks what the page asks,
in its order: /api/conclusion, /api/model_view, the open head (/api/head, its last question),
/api/explain as a job (its progress polled, as the page does), the head's overview
(/api/overview of the whole map), tiles of 256 × 256 cells (/api/overview, one block per
cell) at random places, and the lesson on the open head (/api/lesson, as Lesson mode asks). The server's resident memory (psutil, on its pid and children) is sampled
every 0.2 s. Target (issue 19): on 2 cores, the server under 2 GB. Prints one JSON object
with the CPU and the load average.

    .venv/bin/python bench/long_page.py --T 8191 --json bench/results/FILE.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cache_check import cpu  # noqa: E402
from long_explain import text_of  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TILE = 256


def start_server() -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "studygroup.web.serve", "--port", "0", "--no-warm"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in proc.stdout:
        if " at http://127.0.0.1:" in line:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # keep its pipe drained
            return proc, line.split(" at ", 1)[1].split()[0].rstrip("/")
    raise SystemExit("studygroup serve exited before printing its URL")


class Peak:
    """The largest resident memory of a process and its children, sampled in a thread."""

    def __init__(self, pid: int, every: float = 0.2):
        self.proc, self.every, self.bytes, self.on = psutil.Process(pid), every, 0, True
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while self.on:
            try:
                rss = self.proc.memory_info().rss + sum(c.memory_info().rss for c in self.proc.children(recursive=True))
            except psutil.Error:
                return
            self.bytes = max(self.bytes, rss)
            time.sleep(self.every)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=8191)
    ap.add_argument("--tiles", type=int, default=10)
    ap.add_argument("--json", default=None, metavar="FILE")
    args = ap.parse_args(argv)
    text = text_of(args.T)
    proc, base = start_server()
    peak = Peak(proc.pid)
    times, peaks, out = {}, {}, {"T": args.T}
    try:
        with httpx.Client(timeout=3600) as client:
            def ask(name, path, body):
                t = time.perf_counter()
                r = client.post(f"{base}/api/{path}", json=body)
                r.raise_for_status()
                times[name] = round(time.perf_counter() - t, 3)
                peaks[name] = round(peak.bytes / 2**20)  # the server's peak so far, after this step
                return r.json()

            ask("conclusion", "conclusion", {"text": text, "top": 10})
            mv = ask("model_view", "model_view", {"text": text})
            layer, head = next((h["layer"], h["head"]) for row in mv["heads"] for h in row if h["rank"] == 1)
            out["head"] = [layer, head]
            ask("head_last_question", "head", {"text": text, "layer": layer, "head": head})
            polls = []
            poller = threading.Thread(target=lambda: poll(base, "bench-explain", polls), daemon=True)
            poller.start()
            e = ask("explain", "explain", {"text": text, "top": 10, "job": "bench-explain"})
            out["explain_scope"], out["predicted"] = e.get("scope"), e.get("predicted")
            out["progress_polls"] = len(polls)
            out["progress_monotone"] = all(a <= b for a, b in zip(polls, polls[1:]))
            o = ask("overview_whole_map", "overview", {"text": text, "layer": layer, "head": head})
            out["overview_block"], out["overview_size"] = o["block"], o["size"]
            rng, tiles = random.Random(0), []
            for _ in range(args.tiles):
                a, c = rng.randrange(0, args.T - TILE), rng.randrange(0, args.T - TILE)
                t = time.perf_counter()
                client.post(f"{base}/api/overview", json={"text": text, "layer": layer, "head": head,
                                                          "rows": [a, a + TILE], "keys": [c, c + TILE]}).raise_for_status()
                tiles.append(time.perf_counter() - t)
            tiles.sort()
            out["tile_p50_s"], out["tile_p95_s"] = round(tiles[len(tiles) // 2], 3), round(tiles[-1], 3)
            lesson = ask("lesson", "lesson", {"text": text, "layer": layer, "head": head})
            out["lesson_bytes"] = len(json.dumps(lesson))
    finally:
        peak.on = False
        proc.terminate()
        proc.wait(30)
    out.update(times=times, server_peak_mib_after=peaks, server_peak_mib=round(peak.bytes / 2**20), cpu=cpu(),
               load_average=os.getloadavg())
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


def poll(base: str, job: str, steps: list) -> None:
    """The job's steps, every 0.5 s, until it is no longer waiting or running (as the page polls)."""
    while True:
        time.sleep(0.5)
        r = httpx.post(f"{base}/api/progress", json={"job": job}, timeout=30)
        if r.status_code != 200:
            continue
        p = r.json()
        steps.append(p["steps"])
        if p["state"] not in ("waiting", "running"):
            return


if __name__ == "__main__":
    main(sys.argv[1:])
