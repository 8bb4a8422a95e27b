"""Where one word of generation spends its time, on Qwen2.5-Coder-1.5B (the file's blocks): the
whole lean step (`studygroup.model.step.LeanStep`) against its parts, each timed alone over the same
weights, in turns (word, multiplies, kernel, attention, word, …) so that a busy spell on the machine
falls on all alike. Each word is the one after a 128-member cache (random keys and values: the
attention's time depends on their number, not their values).

- word: one call of the lean step (every layer, the unembedding's logits);
- multiplies: every matrix of the word through the step's own objects (row_kernels), on a random row;
- kernel: the same matrices as one `sg_matvec` call each, straight from ctypes (no Python around);
- unembedding: its multiply alone (part of both of the above);
- attention: the 28 layers' `attend_row` calls.

The word less the multiplies and attention is the Python and torch around them (norms, RoPE, the
cache's writes, the gate). Prints the CPU, `uptime` before and after, and medians in milliseconds
of the wall clock and of the process's CPU time (all its threads: on a machine busy with other
work, the wall clock counts the waits for a core, the CPU time the work).

    .venv/bin/python bench/word_time.py [--repeats 20] [--threads 2] [--model qwen2.5-coder-1.5b]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from studygroup.model import threads

threads.set_wait_policy()  # before torch is imported, as the CLI does (studygroup.model.threads)

import torch  # noqa: E402

import studygroup  # noqa: E402
from cache_check import cpu  # noqa: E402
from studygroup.model import row_kernels  # noqa: E402
from studygroup.model.kv_cache import Cache  # noqa: E402
from studygroup.model.step import LeanStep  # noqa: E402

PROMPT = 128  # members in the cache before each word


def parts(step: LeanStep) -> dict:
    """The timed parts of one word: name -> a function of no arguments."""
    c, g = step.c, torch.Generator().manual_seed(0)
    matrices = [lw[n] for lw in step.layers for n in ("W_QKV", "W_O", "W_gate_up", "W_down")] + [step.unembed]
    rows = [torch.randn(1, M.n_in, generator=g) for M in matrices]
    lib = row_kernels.library()
    calls = [(m.qtype, m.data.ctypes.data, x.data_ptr(), torch.empty(m.n_out), m.n_out, m.n_in)
             for M, x in zip(matrices, rows) for m in M.parts]
    q = torch.randn(c.n_heads, c.d_head, generator=g)  # (H, d)
    w = torch.empty(c.n_heads, PROMPT + 1)  # (H, P + 1)

    def word():
        step.cache.T = PROMPT
        step(0)

    def kernel():
        for qtype, W, x, y, n_out, n_in in calls:
            lib.sg_matvec(qtype, W, x, y.data_ptr(), n_out, n_in)

    def attention():
        for l in range(c.n_layers):
            row_kernels.attend_row(q, step.cache.k[l][0], step.cache.v[l][0], 0, step.scale, w)

    return {"word": word, "multiplies": lambda: [M(x) for M, x in zip(matrices, rows)], "kernel": kernel,
            "unembedding": lambda: step.unembed(rows[-1]), "attention": attention}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu()}; torch threads {torch.get_num_threads()}; {os.popen('uptime').read().strip()}")
    model = studygroup.load(args.model)
    c = model.config
    cache = Cache(c, PROMPT + 1, model.device, model.dtype)
    for kv in (cache.k, cache.v):
        for t in kv:
            t.normal_()
    step = LeanStep(model, cache)
    timed = parts(step)
    times = {name: ([], []) for name in timed}  # wall, CPU
    with torch.inference_mode():
        for fn in timed.values():
            fn()  # warm-up
        for _ in range(args.repeats):
            for name, fn in timed.items():
                t, cpu_t = time.perf_counter(), time.process_time()
                fn()
                times[name][0].append(1e3 * (time.perf_counter() - t))
                times[name][1].append(1e3 * (time.process_time() - cpu_t))
    print(f"{'':12} {'wall ms':>8} {'fastest':>8} {'CPU ms':>8}   (CPU: every thread of the process, medians)")
    ms = {}
    for name, (wall, cpu_ms) in times.items():
        ms[name] = statistics.median(wall), statistics.median(cpu_ms)
        print(f"{name:12} {ms[name][0]:8.1f} {min(wall):8.1f} {ms[name][1]:8.1f}")
    rest = [ms["word"][i] - ms["multiplies"][i] - ms["attention"][i] for i in (0, 1)]
    print(f"{'rest':12} {rest[0]:8.1f} {'':8} {rest[1]:8.1f}   (word − multiplies − attention)")
    print(f"uptime after: {os.popen('uptime').read().strip()}")


if __name__ == "__main__":
    main()
