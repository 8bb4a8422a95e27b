"""`studygroup head` on the model's whole window: wall time and peak memory of each way to ask.

Runs the CLI as a user would, on a text of T tokens (the bench paragraph repeated and cut with
the model's own tokenizer, as bench/long_explain.py does), once per case, each in its own process
whose peak resident memory (ru_maxrss, from wait4) is read when it exits. Target (issue 17): within
2 GB for 8,191 tokens with any window of up to 256 × 256 cells, text or --json; past 256 members
without a window, --json refuses (exit 2). Prints one JSON object with the CPU.

    .venv/bin/python bench/head_window.py --T 8191 --layer 29 --head 8
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cache_check import cpu  # noqa: E402
from long_explain import text_of  # noqa: E402

CASES = {
    "text, no window (the last question)": [],
    "text, --rows -256: --keys -256:": ["--rows=-256:", "--keys=-256:"],
    "--json --rows -256: --keys -256:": ["--json", "--rows=-256:", "--keys=-256:"],
    "--json --rows 0:256 --keys 0:256": ["--json", "--rows=0:256", "--keys=0:256"],
    "--json --rows -1: (every answer)": ["--json", "--rows=-1:"],
    "--json, no window (refused)": ["--json"],
}


#: Runs argv and says its peak memory: RUSAGE_CHILDREN of a process with that one child.
PEAK = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
        "print('PEAK_KIB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r.returncode)")


def measure(argv: list[str]) -> dict:
    """One run of argv: exit status, wall seconds, peak MiB, bytes and lines printed."""
    start = time.perf_counter()
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}  # this checkout's studygroup
    done = subprocess.run([sys.executable, "-c", PEAK, *argv], capture_output=True, env=env)
    wall = time.perf_counter() - start
    err = done.stderr.decode("utf-8", "replace").strip().splitlines()
    peak_kib = int(err.pop().split()[1])
    return {"rc": done.returncode, "wall_s": round(wall, 1), "peak_mib": round(peak_kib / 1024),
            "stdout_bytes": len(done.stdout), "stdout_lines": done.stdout.count(b"\n"),
            "widest_line": max((len(l.decode("utf-8", "replace")) for l in done.stdout.splitlines()), default=0),
            "stderr": " ".join(err)[-300:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=8191)
    ap.add_argument("--layer", type=int, default=29)
    ap.add_argument("--head", type=int, default=8)
    args = ap.parse_args()
    script = Path(sys.executable).with_name("studygroup")
    text = text_of(args.T)
    base = [str(script), "head", text, "--layer", str(args.layer), "--head", str(args.head)]
    figures = {"cpu": cpu(), "T": args.T, "layer": args.layer, "head": args.head, "cases": {}}
    for name, extra in CASES.items():
        figures["cases"][name] = measure(base + extra)
        print(f"{name}: {figures['cases'][name]}", file=sys.stderr)
    print(json.dumps(figures, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
