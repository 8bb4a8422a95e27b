"""The page's complete ranking on the default model, through `studygroup serve` as the page asks:
the quick explain (the default), then the complete one (measure_heads "all") as a job, its
progress polled every 0.5 s as the page does, while a head is opened every second (/api/head, a
short request that takes its turn between the job's layers).

For each length: the quick and the complete explain's wall time (and the quick one's again after
the complete one), the heads each measured, how many
of the complete ranking's top 5 the quick ranking lacks, whether the progress only grew, and the
open-head requests' latency (p50, max) during the job, and the longest time the job ran without
ending a layer (when no waiting request gets its turn). After one warm-up explain of another text. Prints one JSON object with the CPU and the
load average.

    .venv/bin/python bench/complete_ranking.py --lengths 13,47 --json bench/results/FILE.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cache_check import cpu  # noqa: E402
from long_explain import text_of  # noqa: E402
from long_page import start_server  # noqa: E402


def follow(base: str, job: str, seen: list) -> None:
    """(seconds, steps) of the job every 0.5 s, as the page polls, until it is no longer waiting or running."""
    t0 = time.perf_counter()
    while True:
        time.sleep(0.5)
        r = httpx.post(f"{base}/api/progress", json={"job": job}, timeout=30)
        if r.status_code == 200:
            seen.append((time.perf_counter() - t0, r.json()["steps"]))
            if r.json()["state"] not in ("waiting", "running"):
                return


def longest_still(seen: list) -> float:
    """The longest time the job's steps did not change (no layer ended: no turn for a waiting request)."""
    longest, since = 0.0, 0.0
    for (t, s), (_, s_before) in zip(seen[1:], seen):
        since = since if s == s_before else t
        longest = max(longest, t - since)
    return round(longest, 1)


def heads_of(e: dict) -> list[tuple[int, int]]:
    return [(h["layer"], h["head"]) for h in e["heads"]]


def one_length(client: httpx.Client, base: str, T: int) -> dict:
    text = text_of(T)
    client.post(f"{base}/api/conclusion", json={"text": text}).raise_for_status()  # the page's first request
    t = time.perf_counter()
    quick = client.post(f"{base}/api/explain", json={"text": text, "top": 10}).json()
    quick_s = time.perf_counter() - t
    job, polls, opened, done = f"bench-complete-{T}", [], [], threading.Event()
    follower = threading.Thread(target=lambda: follow(base, job, polls), daemon=True)
    follower.start()

    def open_heads():  # the page's short requests meanwhile: a different head each second
        with httpx.Client(timeout=600) as c:
            for k in range(10_000):
                if done.wait(1.0):
                    return
                t0 = time.perf_counter()
                c.post(f"{base}/api/head", json={"text": text, "layer": k % 30, "head": k % 9}).raise_for_status()
                opened.append(time.perf_counter() - t0)
    opener = threading.Thread(target=open_heads, daemon=True)
    opener.start()
    t = time.perf_counter()
    complete = client.post(f"{base}/api/explain", json={"text": text, "top": 10, "measure_heads": "all", "job": job}).json()
    complete_s = time.perf_counter() - t
    done.set()
    opener.join(60)
    follower.join(60)
    t = time.perf_counter()  # the quick explain again, once the job's shapes are warm (top 9: not the cached answer)
    client.post(f"{base}/api/explain", json={"text": text, "top": 9}).raise_for_status()
    again_s = time.perf_counter() - t
    opened.sort()
    top5 = heads_of(complete)[:5]
    return {"T": len(quick["tokens"]), "quick_s": round(quick_s, 2), "quick_heads_measured": quick["heads_measured"],
            "quick_again_s": round(again_s, 2),
            "complete_s": round(complete_s, 2), "complete_heads_measured": complete["heads_measured"],
            "complete_top5": top5, "top5_missing_from_quick": [h for h in top5 if h not in heads_of(quick)],
            "progress_polls": len(polls), "progress_monotone": all(a[1] <= b[1] for a, b in zip(polls, polls[1:])),
            "longest_without_a_layer_s": longest_still(polls),
            "heads_opened_during_job": len(opened),
            "open_head_p50_s": round(opened[len(opened) // 2], 3) if opened else None,
            "open_head_max_s": round(opened[-1], 3) if opened else None}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="13,47")
    ap.add_argument("--json", default=None, metavar="FILE")
    args = ap.parse_args(argv)
    proc, base = start_server()
    try:
        with httpx.Client(timeout=3600) as client:
            client.post(f"{base}/api/explain", json={"text": "I have a lot"}).raise_for_status()  # warm: the first pass's costs
            runs = [one_length(client, base, int(T)) for T in args.lengths.split(",")]
    finally:
        proc.terminate()
        proc.wait(30)
    out = {"runs": runs, "cpu": cpu(), "load_average": os.getloadavg()}
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
