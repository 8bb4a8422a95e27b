"""The survey's cost: N probe sequences of T tokens on the default model with the local pool, then
on a Ray started on this machine, in one run. Prints the wall times, their ratio, sequences/s,
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
    print(f"CPU: {cpu()}; {os.cpu_count()} cores; {args.n} probe sequences of {args.tokens} tokens")
    times = {}
    with tempfile.TemporaryDirectory() as d:
        for runner in ("local", "ray"):
            out = Path(d) / runner
            with Memory() as memory:
                t = time.perf_counter()
                studygroup.survey(out, corpus="probe", n=args.n, tokens=args.tokens, model=args.model,
                                  ray="local" if runner == "ray" else None)
                times[runner] = time.perf_counter() - t
            print(f"{runner}: {times[runner]:.1f} s, {args.n / times[runner]:.2f} sequences/s, "
                  f"{times[runner] / args.n * os.cpu_count():.2f} s per sequence per core; {memory.line()}")
        same = pq.read_table(Path(d) / "local" / "summary.parquet").equals(pq.read_table(Path(d) / "ray" / "summary.parquet"))
    print(f"ray / local: {times['ray'] / times['local']:.2f}; summaries equal bit for bit: {same}")


def cpu() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "unknown")


class Memory:
    """Peak RSS and USS of each worker process (the driver's descendants that score shards), sampled every 0.5 s."""

    def __enter__(self):
        self.peak, self.done = {}, threading.Event()
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
                        m = c.memory_full_info()
                        rss, uss = self.peak.get(c.pid, (0, 0))
                        self.peak[c.pid] = (max(rss, m.rss), max(uss, m.uss))
                except psutil.Error:
                    pass

    def line(self) -> str:
        if not self.peak:
            return "no worker seen"
        rss = max(r for r, _ in self.peak.values()) / 2**20
        uss = max(u for _, u in self.peak.values()) / 2**20
        return f"{len(self.peak)} workers, peak per worker: RSS {rss:.0f} MiB, USS {uss:.0f} MiB"


def _is_worker(p: psutil.Process) -> bool:
    line = " ".join(p.cmdline())
    return "spawn_main" in line or "ShardWorker" in p.name() or "ShardWorker" in line


if __name__ == "__main__":
    main()
