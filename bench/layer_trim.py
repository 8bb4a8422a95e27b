"""What handing the heap's free pages back after every layer costs and saves: one recorded pass
(the page's: every head's last row and what the direct contributions need) of T tokens, with the
trim after every layer and without it (`studygroup.model.heap.trims_each_layer` forced either
way; `trims_each_layer_by_default` says which the pass does unforced), in turns. For each: the process's CPU seconds, wall seconds, minor page faults, and its peak resident
memory above what it held before the pass (psutil, every 0.02 s). Prints one JSON object.

    .venv/bin/python bench/layer_trim.py --T 8191 --reps 1
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

import studygroup  # before torch: its threads sleep between passes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cache_check import cpu  # noqa: E402
from explain_complete import commit, save  # noqa: E402
from long_explain import text_of  # noqa: E402


def one_pass(model, ids, record, trim: bool) -> dict:
    import psutil

    from studygroup.model import heap

    proc, peak, on = psutil.Process(), [0], [True]

    def sample():
        while on[0]:
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.02)

    real = heap.trims_each_layer
    heap.trims_each_layer = lambda resid_bytes: trim  # forced, whatever the length
    base = proc.memory_info().rss
    watcher = threading.Thread(target=sample)
    watcher.start()
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    try:
        model.run(ids, record=record)
    finally:
        heap.trims_each_layer = real
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    on[0] = False
    watcher.join()
    return {"trim": trim, "cpu_s": round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 1),
            "wall_s": round(t1 - t0, 1), "minor_faults": r1.ru_minflt - r0.ru_minflt,
            "peak_above_mib": (peak[0] - base) >> 20,
            "trims_each_layer_by_default": real(len(ids) * model.config.d_model * 4)}


def main(argv=None) -> dict:
    from studygroup.model.record import Record
    from studygroup.study import attribution

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=8191)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--save", action="store_true", help="write bench/results/<date>-<commit>-layer-trim-T<T>.json")
    args = ap.parse_args(argv)
    model = studygroup.load()
    ids = model.ids(text_of(args.T))
    record = Record(steps=("weights", *attribution.NEEDED_STEPS), rows="last")
    model.run(ids[:256], record="none")  # warm
    load_before = os.getloadavg()
    passes = [one_pass(model, ids, record, trim) for _ in range(args.reps) for trim in (False, True)]
    out = {"T": len(ids), "passes": passes, "cpu": cpu(), "load_average_before": load_before,
           "load_average_after": os.getloadavg(), "commit": commit()}
    print(json.dumps(out, indent=1))
    if args.save:
        save(out, Path(__file__).parent / "results", f"layer-trim-T{len(ids)}")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
