"""The survey's cost: N probe sequences of T tokens on the default model with the local pool (one
worker per core, one thread each), with one worker of as many threads, then on a Ray started on
this machine, in one run. Prints the wall times, their ratios, sequences/s, the load,
each worker's peak memory (RSS, and USS: the pages only it holds, the weights' mapped pages being
shared through the page cache) and the CPU, and checks that both summaries are equal bit for bit.

    .venv/bin/python bench/survey.py              # 1,000 sequences of 64 tokens
    .venv/bin/python bench/survey.py --n 100      # quicker
"""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--model", default=None)
    args = p.parse_args()
    import pyarrow.parquet as pq

    import studygroup

    studygroup.load(args.model)  # the weights cache written once, before the workers map it
    cores = os.cpu_count()
    print(f"CPU: {cpu()}; {cores} cores; {args.n} probe sequences of {args.tokens} tokens; load {load()}")
    runners = {"local": dict(workers=cores), f"local 1 worker x {cores} threads": dict(workers=1, threads=cores),
               "ray": dict(ray="local")}
    times = {}
    with tempfile.TemporaryDirectory() as d:
        for name, how in runners.items():
            with Memory() as memory:
                t = time.perf_counter()
                studygroup.survey(Path(d) / name, corpus="probe", n=args.n, tokens=args.tokens, model=args.model, **how)
                times[name] = time.perf_counter() - t
            print(f"{name}: {times[name]:.1f} s, {args.n / times[name]:.2f} sequences/s, "
                  f"{times[name] / args.n * cores:.2f} s per sequence per core; {memory.line()} "
                  f"({sum(memory.cpu.values()) / args.n:.3f} s per sequence); load {load()}")
        summary = {name: pq.read_table(Path(d) / name / "summary.parquet") for name in runners}
        same = summary["local"].equals(summary["ray"])
        close = max_difference(summary["local"], summary[f"local 1 worker x {cores} threads"])
    print(f"ray / local: {times['ray'] / times['local']:.2f}; local summaries equal Ray's bit for bit: {same}")
    print(f"1 x {cores} threads / {cores} x 1: {times[f'local 1 worker x {cores} threads'] / times['local']:.2f}; "
          f"largest difference of their means: {close:.1e}")


def load() -> str:
    """The load averages over 1, 5 and 15 minutes (`uptime`'s)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def max_difference(a, b) -> float:
    """The largest |difference| of two summaries' means (NaN where both are NaN left out)."""
    import numpy as np

    x, y = a["mean"].to_numpy(), b["mean"].to_numpy()
    return float(np.nanmax(np.abs(x - y)))


def cpu() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "unknown")


class Memory:
    """Peak RSS and USS of each worker process (the driver's descendants that score shards), sampled every 0.5 s."""

    def __enter__(self):
        self.peak, self.cpu, self.done = {}, {}, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self.done.wait(0.5):
            for c in me.children(recursive=True):
                try:
                    if _is_worker(c):
                        m, t = c.memory_full_info(), c.cpu_times()
                        rss, uss = self.peak.get(c.pid, (0, 0))
                        self.peak[c.pid] = (max(rss, m.rss), max(uss, m.uss))
                        self.cpu[c.pid] = t.user + t.system
                except psutil.Error:
                    pass

    def line(self) -> str:
        if not self.peak:
            return "no worker seen"
        rss = max(r for r, _ in self.peak.values()) / 2**20
        uss = max(u for _, u in self.peak.values()) / 2**20
        return (f"{len(self.peak)} workers, peak per worker: RSS {rss:.0f} MiB, USS {uss:.0f} MiB; "
                f"their CPU time {sum(self.cpu.values()):.0f} s")


def _is_worker(p: psutil.Process) -> bool:
    line = " ".join(p.cmdline())
    return "spawn_main" in line or "ShardWorker" in p.name() or "ShardWorker" in line


if __name__ == "__main__":
    main()
