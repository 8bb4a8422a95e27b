"""`studygroup explain` on the model's whole window: wall time and the process's peak memory.

Runs the CLI as a user would, on a text of T tokens (the bench paragraph repeated, then cut with
the model's own tokenizer, so that it is exactly T tokens), and reads the child's peak resident
memory (ru_maxrss) when it exits. Target (issue 6): 8,191 tokens under 2 GB.

    .venv/bin/python bench/long_explain.py --T 8191           # explain's own choice of candidates
    .venv/bin/python bench/long_explain.py --T 8191 --all     # every member and every head silenced
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import PARAGRAPH  # noqa: E402


def text_of(T: int) -> str:
    """A text of T tokens for the default model (T - 1 where no cut gives exactly T): the longest
    prefix of the paragraph repeated that tokenizes to at most T tokens."""
    import studygroup

    tok = studygroup.load().tokenizer
    long = PARAGRAPH * (T // len(tok.encode(PARAGRAPH)) + 2)
    lo, hi = 0, len(long)  # the prefix long[:lo] fits; long[:hi + 1] does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(tok.encode(long[:mid])) <= T else (lo, mid - 1)
    return long[:lo]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=8191)
    ap.add_argument("--out", default=None, help="also write the figures as JSON")
    ap.add_argument("--all", action="store_true", help="silence every member and every head (default: explain's own choice)")
    args = ap.parse_args()
    script = Path(sys.executable).with_name("studygroup")
    argv = [str(script), "explain", text_of(args.T), "--json"]  # ~40 kB: one argument is allowed 128 kB
    if args.all:
        argv += ["--measure-members", "all", "--measure-heads", "all"]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if done.returncode != 0:
        sys.exit(f"studygroup explain failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    e = json.loads(done.stdout)
    figures = {"T": len(e["token_ids"]), "wall_s": round(wall, 1), "peak_mib": round(peak_mib),
               "scope": e.get("scope"), "heads_silenced": e.get("heads_silenced"),
               "members_silenced": e.get("members_silenced"), "predicted": e["predicted"]["token"]}
    print(json.dumps(figures, ensure_ascii=False, indent=1))
    print(f"explain on {figures['T']} tokens: {wall:.0f} s wall, peak {peak_mib:,.0f} MiB "
          f"({'under' if peak_mib < 2000 / 1.048576 else 'OVER'} the 2 GB target)", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(figures, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
