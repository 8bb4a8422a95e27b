"""explain's printed estimate against its measured time, on a real English paragraph cut to T
tokens (Python's own documentation of naming and binding, `pydoc_data.topics`, as shipped with the
interpreter), in one process, warm.

For each T: the speed probe (`studygroup.model.estimate.speed`) and the estimate explain prints
(before the run: the stopping rule's least two batches of heads, the heads at the middle layer),
then explain's own work timed (wall and process CPU seconds, the load average before and after),
and the estimate again from what the run measured (its heads' layers, its members, its in-head
copies). The run's layer-rows are counted through a hook and checked against the work model's.

    .venv/bin/python bench/explain_estimate.py --out bench/results/       # T = 50, 384, 600
    .venv/bin/python bench/explain_estimate.py --T 384 --reps 2
    .venv/bin/python bench/explain_estimate.py --model qwen2.5-coder-1.5b --T 50 --no-warm

Each T also prints the estimate of explain with every head measured exactly (measure_heads="all");
--estimate-only prints the estimates alone (the probe, no explain run).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import studygroup  # before torch: its threads wait as studygroup sets them

sys.path.insert(0, str(Path(__file__).resolve().parent))
from explain_complete import commit, cpu, save  # noqa: E402

TOPIC = "naming"  # pydoc_data.topics: "Naming and binding", prose


def paragraph(tokenizer, T: int) -> str:
    """The longest prefix of the topic's prose (underlines and runs of spaces removed) that
    tokenizes to at most T tokens."""
    from pydoc_data.topics import topics
    text = re.sub(r"\s+", " ", re.sub(r"\n[*=-]{3,}\n", "\n", topics[TOPIC])).strip()
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(tokenizer.encode(text[:mid])) <= T else (lo, mid - 1)
    return text[:lo]


def one(model, T: int, only_estimate: bool = False) -> dict:
    """The estimate before and after, and the measured time, of explain on T tokens (only_estimate:
    the estimates alone, explain not run)."""
    from studygroup.model import estimate
    from studygroup.model.model import Model
    from studygroup.study import explain, explain_cost

    ids = model.ids(paragraph(model.tokenizer, T))
    c, T = model.config, len(ids)
    strategy = (explain.LastQuestion if T > explain.LONG_T else explain.EveryQuestion)(model, ids)
    start = time.perf_counter()
    speed = estimate.speed(model, T)
    probe_s = time.perf_counter() - start
    heads, members, work, further = strategy.expected(None, None)
    every_head = strategy.expected("all", None)[2].seconds(speed, c, T)  # measure_heads="all", as estimated
    if only_estimate:
        return {"T": T, "probe_s": round(probe_s, 2), "announced_s": round(work.seconds(speed, c, T), 1),
                "announced_heads": heads, "every_head_estimate_s": round(every_head, 1), "heads": c.n_layers * c.n_heads,
                "load": round(os.getloadavg()[0], 2),
                "speed_ms_per_row": {k: round(getattr(speed, k) * 1e3, 4) for k in ("text", "gradient", "copy")}}
    rows, mlp, probe = [0], Model._mlp, estimate.speed
    Model._mlp = lambda self, l, x, buffers: (rows.__setitem__(0, rows[0] + x.shape[0] * x.shape[1]), mlp(self, l, x, buffers))[1]
    estimate.speed = lambda model, T: speed  # the announcement reuses the probe above, outside the time
    try:
        load, wall, cpu_s = os.getloadavg()[0], time.perf_counter(), time.process_time()
        e = explain.explain(model, ids)
        wall, cpu_s = time.perf_counter() - wall, time.process_time() - cpu_s
    finally:
        Model._mlp, estimate.speed = mlp, probe
    measured = [h.layer for h in e.heads if h.silence_effect is not None]
    sentence = 0 if e.last_sentence is None else len(e.last_sentence.token_ids)
    if T > explain.LONG_T:
        done = explain_cost.last_question(c, T, [h.layer for h in e.heads], len(e.members), sentence)
    else:
        done = explain_cost.every_question(c, T, measured, [(h.layer, x.index) for h in e.heads for x in h.listened
                                                            if x.effect_in_head is not None],
                                           [m.index for m in e.members if m.effect is not None],
                                           sentence)
    before = work.seconds(speed, c, T)
    if further is not None:  # the announced least, plus each further batch the rule went on to
        before += (len(measured) - heads) / explain.STOP_AFTER * further.seconds(speed, c, T)
    return {"T": T, "probe_s": round(probe_s, 2), "speed_ms_per_row": {k: round(getattr(speed, k) * 1e3, 4)
                                                                      for k in ("text", "gradient", "copy")},
            "announced_s": round(work.seconds(speed, c, T), 1), "announced_heads": heads,
            "heads_measured": len(measured) or len(e.heads), "estimate_with_heads_measured_s": round(before, 1),
            "estimate_of_what_ran_s": round(done.seconds(speed, c, T), 1), "wall_s": round(wall, 1),
            "cpu_s": round(cpu_s, 1), "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
            "measured_over_estimate": round(wall / done.seconds(speed, c, T), 2),
            "every_head_estimate_s": round(every_head, 1), "heads": c.n_layers * c.n_heads,
            "rows_counted": rows[0], "rows_modelled": round(done.rows)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, nargs="+", default=[50, 384, 600])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--model", default=None, help="a path or a packaged name (default: the default model)")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm-up explain (a large model's takes minutes)")
    ap.add_argument("--estimate-only", action="store_true", help="print the estimates without running explain")
    ap.add_argument("--out", type=Path, default=None, help="also write the figures as JSON into this folder")
    args = ap.parse_args()
    model = studygroup.load(args.model)
    from studygroup.study import explain
    if not (args.no_warm or args.estimate_only):
        explain.explain(model, "Cash or credit card? I have a lot")  # warm: kernels and caches
    out = {"commit": commit(), "cpu": cpu(), "model": model.config.label, "runs": []}
    for _ in range(args.reps):
        for T in args.T:
            out["runs"].append(one(model, T, args.estimate_only))
            print(out["runs"][-1], file=sys.stderr, flush=True)
    for r in out["runs"]:
        if args.estimate_only:
            print(f"T={r['T']}: announced {r['announced_s']} s with {r['announced_heads']} heads; every one of the "
                  f"{r['heads']} heads exactly: estimated {r['every_head_estimate_s']} s; load {r['load']}")
            continue
        print(f"T={r['T']}: estimate {r['estimate_of_what_ran_s']} s (announced {r['announced_s']} s with "
              f"{r['announced_heads']} heads; {r['heads_measured']} measured), took {r['wall_s']} s wall, "
              f"{r['cpu_s']} CPU s, load {r['load_before']}-{r['load_after']}: {r['measured_over_estimate']}x; "
              f"every one of the {r['heads']} heads exactly: estimated {r['every_head_estimate_s']} s")
    if args.out:
        save(out, args.out, "explain-estimate" + ("-only" if args.estimate_only else ""))


if __name__ == "__main__":
    main()
