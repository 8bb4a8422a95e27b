"""The researcher's instruments against their peers, in one run on the default model:

- activation patching over 30 layers × T members (resid_pre, attn_out, mlp_out) and every head,
  against the same grid done with transformers hooks, each cell a full pass of the corrupted text
  (the peer's time per cell is the median of a sample of cells spread over the four grids, times
  the number of cells; `--every-cell` runs them all);
- the logit lens against one recorded pass (`model.run(text)`, the default recording): the
  default lens (the last member after every layer) and the grid of every member (`all_positions`).

    .venv/bin/python bench/instruments.py [--tokens 20] [--sample 60] [--reps 5] [--lens-only] [--out FILE.json]

Prints medians, ratios (ours / the peer's: below 1, ours is faster), the CPU and the load.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from studygroup.model import threads  # noqa: E402

threads.set_wait_policy()  # as the CLI: before torch is imported (both programs run with it)
import torch  # noqa: E402

import studygroup  # noqa: E402
from studygroup.gguf.model_path import default_model_path  # noqa: E402
from studygroup.study.lens import lens  # noqa: E402
from studygroup.study.patching import GRIDS, patch  # noqa: E402

CLEAN = "When Mary and John went to the store after school on a rainy day, John gave a drink to"
CORRUPTED = "When Mary and John went to the store after school on a rainy day, Mary gave a drink to"


def cpu() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name")), platform.processor())
    return f"{name}, {os.cpu_count()} cores"


def cut(model, text: str, T: int) -> list[int]:
    ids = model.ids(text)
    return (ids * (T // len(ids) + 1))[:T] if len(ids) < T else ids[-T:]


def timed(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def their_model(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                attn_implementation="sdpa").eval()


class HookedCells:
    """The peer: transformers, one full pass of the corrupted text per cell, a hook putting the clean
    run's value in (captured once from its own clean pass)."""

    def __init__(self, theirs, clean, corrupted, d_head):
        self.theirs, self.clean, self.corrupted, self.d_head = theirs, clean, corrupted, d_head
        self.values = {}
        hooks = []
        for l, b in enumerate(theirs.model.layers):
            hooks += [b.register_forward_pre_hook(lambda m, a, k, l=l: self.values.__setitem__(("resid_pre", l), (a[0] if a else k["hidden_states"]).clone()), with_kwargs=True),
                      b.self_attn.register_forward_hook(lambda m, i, o, l=l: self.values.__setitem__(("attn_out", l), o[0].clone())),
                      b.mlp.register_forward_hook(lambda m, i, o, l=l: self.values.__setitem__(("mlp_out", l), o.clone())),
                      b.self_attn.o_proj.register_forward_pre_hook(lambda m, a, l=l: self.values.__setitem__(("heads", l), a[0].clone()))]
        self.run(clean)
        for h in hooks:
            h.remove()

    def run(self, ids):
        with torch.no_grad():
            return self.theirs(torch.tensor([ids]), use_cache=False, logits_to_keep=1).logits[0, -1]

    def cell(self, grid: str, l: int, i: int):
        b = self.theirs.model.layers[l]
        v = self.values[(grid, l)]

        def put(t):
            t = t.clone()
            if grid == "heads":
                t[0, :, i * self.d_head:(i + 1) * self.d_head] = v[0, :, i * self.d_head:(i + 1) * self.d_head]
            else:
                t[0, i] = v[0, i]
            return t

        if grid == "resid_pre":
            h = b.register_forward_pre_hook(lambda m, a, k: ((put(a[0]), *a[1:]), k) if a else (a, {**k, "hidden_states": put(k["hidden_states"])}), with_kwargs=True)
        elif grid == "heads":
            h = b.self_attn.o_proj.register_forward_pre_hook(lambda m, a: (put(a[0]), *a[1:]))
        else:
            module = b.self_attn if grid == "attn_out" else b.mlp
            h = module.register_forward_hook(lambda m, inp, o: (put(o[0]), *o[1:]) if isinstance(o, tuple) else put(o))
        try:
            return self.run(self.corrupted)
        finally:
            h.remove()


def lenses(model, ids: list[int], reps: int) -> dict:
    """The lens (the default, and every member), one recorded pass and one with recording off,
    interleaved rep by rep so that a change of load falls on all alike: medians of the wall time
    and of the process's CPU time (the steadier of the two on a loaded machine), in seconds, and
    the ratios of each."""
    fns = {"ours_lens_s": lambda: lens(model, ids), "ours_lens_grid_s": lambda: lens(model, ids, all_positions=True),
           "one_recorded_pass_s": lambda: model.run(ids), "one_pass_recording_off_s": lambda: model.run(ids, record="none")}
    wall, cpu_s = {k: [] for k in fns}, {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm-up
    for _ in range(reps):
        for k, fn in fns.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            wall[k].append(time.perf_counter() - start)
            cpu_s[k].append(time.process_time() - start_cpu)
    out = {}
    for tag, times in (("", wall), ("cpu_", cpu_s)):
        m = {k: statistics.median(v) for k, v in times.items()}
        one, bare = m["one_recorded_pass_s"], m["one_pass_recording_off_s"]
        out.update({tag + k: v for k, v in m.items()})
        out.update({tag + "lens_ratio": m["ours_lens_s"] / one, tag + "lens_grid_ratio": m["ours_lens_grid_s"] / one,
                    tag + "lens_ratio_recording_off": m["ours_lens_s"] / bare,
                    tag + "lens_grid_ratio_recording_off": m["ours_lens_grid_s"] / bare})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--sample", type=int, default=60, help="cells the peer runs (spread over the grids)")
    ap.add_argument("--every-cell", action="store_true", help="the peer runs every cell")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--lens-only", action="store_true", help="only the lens and the pass (no patching, no transformers)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    model = studygroup.load()
    c, T = model.config, args.tokens
    clean, corrupted = cut(model, CLEAN, T), cut(model, CORRUPTED, T)
    lens_report = lenses(model, clean, args.reps)
    print(f"lens of the last member after every layer (the default): {lens_report['ours_lens_s'] * 1000:.0f} ms, "
          f"every one of the {T} members (all_positions): {lens_report['ours_lens_grid_s'] * 1000:.0f} ms, one recorded "
          f"pass {lens_report['one_recorded_pass_s'] * 1000:.0f} ms: {lens_report['lens_ratio']:.2f}× and "
          f"{lens_report['lens_grid_ratio']:.2f}×; one pass with recording off "
          f"{lens_report['one_pass_recording_off_s'] * 1000:.0f} ms: {lens_report['lens_ratio_recording_off']:.2f}× and "
          f"{lens_report['lens_grid_ratio_recording_off']:.2f}×; in CPU seconds {lens_report['cpu_lens_ratio']:.2f}×, "
          f"{lens_report['cpu_lens_grid_ratio']:.2f}×, {lens_report['cpu_lens_ratio_recording_off']:.2f}×, "
          f"{lens_report['cpu_lens_grid_ratio_recording_off']:.2f}×   ({cpu()}; load {load_before:.1f} → {os.getloadavg()[0]:.1f})")
    if args.lens_only:
        if args.out:
            Path(args.out).write_text(json.dumps({"cpu": cpu(), "load_before": load_before, "load_after": os.getloadavg()[0],
                                                  "T": T, **lens_report, "torch": torch.__version__}, indent=2) + "\n")
        return
    ours_patch = timed(lambda: patch(model, clean, corrupted), max(1, args.reps // 2))
    result = patch(model, clean, corrupted)
    theirs = their_model(default_model_path())
    peer = HookedCells(theirs, clean, corrupted, c.d_head)
    cells = [(g, l, i) for g in GRIDS for l in range(c.n_layers) for i in range(c.n_heads if g == "heads" else T)]
    chosen = cells if args.every_cell else cells[::max(1, len(cells) // args.sample)]
    times, worst = [], 0.0
    for g, l, i in chosen:
        start = time.perf_counter()
        logits = peer.cell(g, l, i)
        times.append(time.perf_counter() - start)
        m = float(logits[result.answer.id] - logits[result.wrong.id])
        grid = result.grids[g].raw
        worst = max(worst, abs(m - grid[l][i]))
    peer_grid = statistics.median(times) * len(cells) if not args.every_cell else sum(times)
    report = {
        "cpu": cpu(), "load_before": load_before, "load_after": os.getloadavg()[0], "T": T, "cells": len(cells),
        "peer_cells_run": len(chosen), "ours_patch_s": ours_patch, "peer_patch_s": peer_grid,
        "patch_ratio": ours_patch / peer_grid, "largest_cell_difference": worst, **lens_report,
        "torch": torch.__version__, "threads": torch.get_num_threads(),
    }
    print(json.dumps(report, indent=2))
    print(f"\npatching {c.n_layers} layers × {T} members + {c.n_layers * c.n_heads} heads ({len(cells)} cells): "
          f"ours {ours_patch:.1f} s, transformers hooks {peer_grid:.1f} s "
          f"({'every cell' if args.every_cell else f'{len(chosen)} cells sampled, median × {len(cells)}'}): "
          f"{report['patch_ratio']:.2f}×; largest cell difference {worst:.2e}")
    print(f"({report['cpu']}; load {load_before:.1f} → {report['load_after']:.1f})")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
