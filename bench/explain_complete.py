"""explain's own wall time (after loading, warm) with every head and member measured exactly,
against the candidate-based settings, at several lengths, in one run: the figures that set
explain's complete-by-default lengths (`studygroup.study.explain.HEADS_ALL_MAX_T`, `MEMBERS_ALL_MAX_T`).

    .venv/bin/python bench/explain_complete.py                 # T = 10, 47, 64, 300, 512
    .venv/bin/python bench/explain_complete.py --T 10 47 --modes candidates all

Modes: `candidates` (16 heads, 24 members: explain's settings before it measured everything),
`all` (every head and every member), `heads` (every head, no member), `members` (every member, no
head), `none` (neither: the pass with a gradient and the rest), `default` (explain's own choice).
Prints one JSON object: the CPU, the threads, the load average, and seconds per (T, mode).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_explain import text_of  # noqa: E402

MODES = {"candidates": {"silence_heads": 16, "silence_members": 24}, "all": {"silence_heads": "all", "silence_members": "all"},
         "heads": {"silence_heads": "all", "silence_members": 0}, "members": {"silence_heads": 0, "silence_members": "all"},
         "none": {"silence_heads": 0, "silence_members": 0}, "default": {}}
ARTICLE = "Cash or credit card? I have a lot"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, nargs="+", default=[10, 47, 64, 300, 512])
    ap.add_argument("--modes", nargs="+", default=["candidates", "all", "heads", "members", "default"], choices=list(MODES))
    args = ap.parse_args()
    import studygroup  # before torch: its threads then wait passively between passes
    model = studygroup.load()
    import torch
    from studygroup.study.explain import analyse
    analyse(model, ARTICLE, silence_heads=1, silence_members=1)  # warm
    out = {"cpu": cpu_name(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "load_average_before": os.getloadavg(), "seconds": {}}
    for T in args.T:
        text = ARTICLE if T == 10 else text_of(T)
        row = out["seconds"][str(len(model.ids(text)))] = {}
        for mode in args.modes:
            start = time.perf_counter()
            e = analyse(model, text, **MODES[mode]).explanation
            row[mode] = round(time.perf_counter() - start, 2)
            if mode == "default":
                row["default_heads"], row["default_members"] = e.heads_silenced, e.members_silenced
            print(f"T={T} {mode}: {row[mode]} s", file=sys.stderr, flush=True)
    out["load_average_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
