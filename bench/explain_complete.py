"""explain's own wall time (after loading, warm) with every head and member measured exactly,
against explain's candidate-based default, at several lengths, in one run: the figures that set
explain's complete-by-default lengths (`studygroup.study.explain.HEADS_ALL_MAX_T`, `MEMBERS_ALL_MAX_T`).

    .venv/bin/python bench/explain_complete.py --out bench/results/   # T = 10, 47, 64, 300, 512
    .venv/bin/python bench/explain_complete.py --T 10 47 --modes default all --reps 3
    .venv/bin/python bench/explain_complete.py --T 12 16 24 32 --modes    # the costs of one copy only

Modes: `all` (every head and every member), `default` (explain's own choice), `candidates` (16
heads, 24 members), `heads` (every head, no member), `members` (every member, no head), `none`
(neither: the pass with a gradient and the rest). The modes take turns (A, B, A, B, ...) so that a
busy spell of a shared machine hits each alike; the load average is read before and after every
measurement, and each measurement gives wall and process CPU seconds (CPU seconds grow less than
wall seconds when other processes share the cores).

Before the modes, at each T, the cost of one copy is timed on its own: `head copy` (30 heads, one
per layer, silenced at every position: `effects.head_log_probs`), `member copy` (every member, or
64 spread over the text: `effects.member_log_probs`) and the pass with a gradient. Where `all`
would take longer than --limit-s by those costs, it is not run and its time is given as
`all_extrapolated` (the pass with a gradient + 270 head copies + T member copies), labelled so.
Prints one JSON object; --out DIR writes it to DIR/<date>-<commit>-explain-complete.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_explain import text_of  # noqa: E402

MODES = {"candidates": {"silence_heads": 16, "silence_members": 24}, "all": {"silence_heads": "all", "silence_members": "all"},
         "heads": {"silence_heads": "all", "silence_members": 0}, "members": {"silence_heads": 0, "silence_members": "all"},
         "none": {"silence_heads": 0, "silence_members": 0}, "default": {}}
ARTICLE = "Cash or credit card? I have a lot"
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu() -> dict:
    """lscpu's model name and which of FLAGS the CPU has."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        out = ""
    info = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    flags = set(info.get("Flags", "").split())
    return {"model_name": info.get("Model name", "").strip(), "cores": os.cpu_count(),
            "flags": {f: f in flags for f in FLAGS}}


def timed(f) -> dict:
    """Run f(); its wall and process CPU seconds and the 1-minute load average before and after."""
    load, wall, cpu_s = os.getloadavg()[0], time.perf_counter(), time.process_time()
    value = f()
    return {"wall_s": round(time.perf_counter() - wall, 3), "cpu_s": round(time.process_time() - cpu_s, 3),
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2), "value": value}


def copy_costs(model, ids: list[int]) -> dict:
    """Seconds of the pass with a gradient, of one head copy and of one member copy at len(ids)."""
    from studygroup.study import effects, explain
    c, T = model.config, len(ids)
    run, _ = effects.gradient_run(model, ids, explain.recording(T))
    token = int(run.last_logits.argmax())
    resid = {l: run[f"layers.{l}.resid_pre"] for l in range(c.n_layers)}
    heads = [(l, l % c.n_heads) for l in range(c.n_layers)]
    members = list(range(T)) if T <= 64 else [round(i * (T - 1) / 63) for i in range(64)]
    out = {"gradient_pass": timed(lambda: effects.gradient_run(model, ids, explain.recording(T)) and None),
           "heads_timed": len(heads), "members_timed": len(members)}
    out["head_copies"] = timed(lambda: effects.head_log_probs(model, ids, token, heads, resid) is None)
    out["member_copies"] = timed(lambda: effects.member_log_probs(model, ids, token, members,
                                                                  effects.keys_and_values(run)) is None)
    for k in ("gradient_pass", "head_copies", "member_copies"):
        out[k].pop("value")
    out["per_head_s"] = round(out["head_copies"]["wall_s"] / len(heads), 4)
    out["per_member_s"] = round(out["member_copies"]["wall_s"] / len(members), 4)
    n_heads = c.n_layers * c.n_heads
    out["all_extrapolated_s"] = round(out["gradient_pass"]["wall_s"] + n_heads * out["per_head_s"]
                                      + T * out["per_member_s"], 1)
    return out


def measure(model, text: str, mode: str) -> dict:
    from studygroup.study.explain import analyse
    m = timed(lambda: analyse(model, text, **MODES[mode]).explanation)
    e = m.pop("value")
    m.update(heads_measured=e.heads_measured, members_measured=e.members_measured)
    return m


def save(out: dict, folder: Path, what: str) -> None:
    """Write out as bench/results' files are named: <date>-<commit measured>-<what>.json in folder."""
    path = folder / f"{datetime.date.today()}-{out['commit']}-{what}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}", file=sys.stderr)


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, nargs="+", default=[10, 47, 64, 300, 512])
    ap.add_argument("--modes", nargs="*", default=["all", "default"], choices=list(MODES))
    ap.add_argument("--reps", type=int, default=2, help="turns of each mode (A, B, A, B, ...)")
    ap.add_argument("--limit-s", type=float, default=600, help="skip `all` where it would take longer")
    ap.add_argument("--out", type=Path, help="folder for <date>-<commit>-explain-complete.json")
    args = ap.parse_args()
    import studygroup  # before torch: its threads then wait passively between passes
    model = studygroup.load()
    import torch
    from studygroup.study.explain import analyse
    analyse(model, ARTICLE, silence_heads=1, silence_members=1)  # warm
    out = {"commit": commit(), "cpu": cpu(), "torch_threads": torch.get_num_threads(),
           "load_average_before": os.getloadavg(), "by_T": {}}
    for T in args.T:
        text = ARTICLE if T == 10 else text_of(T)
        ids = model.ids(text)
        row = out["by_T"][str(len(ids))] = {"copy_costs": copy_costs(model, ids), "runs": []}
        modes = [m for m in args.modes
                 if not (m == "all" and row["copy_costs"]["all_extrapolated_s"] > args.limit_s)]
        if len(modes) < len(args.modes):
            row["all_skipped"] = f"extrapolated {row['copy_costs']['all_extrapolated_s']} s > --limit-s {args.limit_s}"
        for rep in range(args.reps):
            for mode in modes:
                row["runs"].append({"mode": mode, "rep": rep, **measure(model, text, mode)})
                print(f"T={len(ids)} {mode} #{rep}: {row['runs'][-1]}", file=sys.stderr, flush=True)
        row["least_wall_s"] = {m: min(r["wall_s"] for r in row["runs"] if r["mode"] == m) for m in modes if args.reps}
        if "all" in modes and "default" in modes:
            row["all_over_default"] = round(row["least_wall_s"]["all"] / row["least_wall_s"]["default"], 2)
    out["load_average_after"] = os.getloadavg()
    text = json.dumps(out, indent=1)
    print(text)
    if args.out is not None:
        save(out, args.out, "explain-complete")


if __name__ == "__main__":
    main()
