"""Where studygroup's time goes: one prefill under torch.profiler, or a whole start under cProfile.

    .venv/bin/python bench/profile_run.py prefill --mode all --T 2048   # torch ops by self CPU time
    .venv/bin/python bench/profile_run.py start                         # load + explain, by cumulative time

For the figures that bench/run.py prints: it finds a gap, this shows which operations make it.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import peers
from run import PARAGRAPH, SENTENCE, repeat_to


def profile_prefill(mode: str, T: int, rows: int) -> None:
    """One warm-up, then one profiled prefill; torch ops sorted by self CPU time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    peer = peers.make("ours", mode, peers.default_model_path())
    ids = repeat_to(peer.tokenize(PARAGRAPH), T)
    peer.prefill(ids)
    start = time.perf_counter()
    peer.prefill(ids)
    print(f"mode={mode} T={T}: {time.perf_counter() - start:.3f} s unprofiled, {torch.get_num_threads()} threads")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        peer.prefill(ids)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def profile_start(rows: int) -> None:
    """Import, warm load and `explain` of the article's sentence, under cProfile, by cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    from studygroup import cli

    cli.main(["explain", SENTENCE])
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(rows)
    print(out.getvalue())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    pre = sub.add_parser("prefill")
    pre.add_argument("--mode", default="none", choices=peers.OURS_MODES)
    pre.add_argument("--T", type=int, default=2048)
    sub.add_parser("start")
    p.add_argument("--rows", type=int, default=25)
    args = p.parse_args()
    profile_prefill(args.mode, args.T, args.rows) if args.what == "prefill" else profile_start(args.rows)


if __name__ == "__main__":
    main()
