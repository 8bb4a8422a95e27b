"""Weights kept as the file's blocks against the float32 path, in the same run: for each model, a
process of its own per way (STUDYGROUP_WEIGHTS=blocks or float32, no disk cache: the float32 way
dequantizes at load as a first use does; blocks-saved: kept as blocks, with every activation of the
pass with a gradient kept for its backward pass instead of each layer computed again) loads it,
makes one pass over T tokens (recording nothing: the pass's own time, median of `--repeats`), then
`explain`s the same T tokens, and reports its peak memory (ru_maxrss, which counts the mapped file's pages it read) and each time. Prints the CPU
and the load, each row, and per model the ratios blocks / float32 and blocks / blocks-saved of the
pass's time (target ≤ 1.25), of explain's time and of peak memory.

    .venv/bin/python bench/memory.py [--models default,gemma-3-270m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b]
        [--tokens 512] [--heads N] [--members N] [--repeats 3] [--ways blocks,blocks-saved,float32]
        [--out bench/results/NAME.json]

--heads and --members go to explain's silence_heads and silence_members (its defaults otherwise);
--explain base runs explain's base run alone (the recorded pass with a gradient to every head's gate),
for models whose whole explain takes too long on the machine at hand.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from cache_check import cpu
from processes import child_env

MODELS = ("default", "gemma-3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
#: blocks-saved: kept as blocks, but the pass with a gradient keeps every layer's activations for the
#: backward pass (the peer of `Weights.checkpointed`, which keeps a layer's input and computes it again).
WAYS = ("blocks", "blocks-saved", "float32")
#: A text long enough for 2,048 tokens in every model's tokenizer, cut to --tokens.
TEXT = ("def fibonacci(n):\n    # the n-th Fibonacci number, computed twice over\n"
        "    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n\n") * 200

CHILD = """
import json, resource, statistics, sys, time
from studygroup.model import threads
threads.set_wait_policy()
t0 = time.perf_counter()
import studygroup
from studygroup.study.explain import explain
name, tokens, heads, members, repeats, part, way = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
if way == "blocks-saved":  # the peer: every activation kept for the backward pass, none computed again
    from studygroup.model.packed import Weights
    Weights.checkpointed = lambda self, l, layer, x, quiet: layer(x)
model = studygroup.load(None if name == "default" else name, cache=False)
load_s = time.perf_counter() - t0
ids = model.tokenize(sys.stdin.read())[:tokens]
rss_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
passes = []
for _ in range(repeats):
    t = time.perf_counter()
    model.run(ids, record="none")
    passes.append(time.perf_counter() - t)
t = time.perf_counter()
if part == "full":
    predicted = explain(model, ids, silence_heads=heads, silence_members=members).predicted.token
else:  # explain's base run: the pass that records, with a gradient to every head's gate
    from studygroup.model.record import resolve
    from studygroup.study.effects import gradient_run
    run, _ = gradient_run(model, ids, resolve("default", len(ids), model.config.n_layers))
    predicted = model.tokenizer.decode([int(run.last_logits.argmax())])
explain_s = time.perf_counter() - t
print(json.dumps({"load_s": load_s, "pass_s": statistics.median(passes), "explain_s": explain_s, "tokens": len(ids),
                  "kept_bytes": model.w.blocks_bytes, "rss_load": rss_load,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "predicted": predicted}))
"""


def measure(model: str, way: str, args) -> dict:
    """One process: load, passes, explain; its figures."""
    env = child_env("studygroup") | {"STUDYGROUP_WEIGHTS": way.split("-")[0]}
    p = subprocess.run([sys.executable, "-c", CHILD, model, str(args.tokens), json.dumps(args.heads),
                        json.dumps(args.members), str(args.repeats), args.explain, way], input=TEXT, capture_output=True, text=True,
                       env=env, cwd=Path(__file__).resolve().parents[1])
    if p.returncode != 0:
        raise SystemExit(f"{model} ({way}) failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--members", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--explain", choices=("full", "base"), default="full",
                    help="base: explain's base run only (the recorded pass with a gradient to every head's gate)")
    ap.add_argument("--ways", default=",".join(WAYS), help="comma-separated, of " + ", ".join(WAYS))
    ap.add_argument("--out")
    args = ap.parse_args()
    print(f"CPU: {cpu()}; load before: {os.getloadavg()}", flush=True)
    rows = []
    for model in args.models.split(","):
        got = {}
        for way in args.ways.split(","):
            r = got[way] = measure(model, way, args)
            rows.append({"model": model, "way": way, **r})
            print(f"{model:20s} {way:12s} T={r['tokens']:5d} load {r['load_s']:6.2f} s  pass {r['pass_s']:7.3f} s  "
                  f"{args.explain} explain {r['explain_s']:7.1f} s  peak {r['peak_rss'] / 2**30:5.2f} GiB "
                  f"(after load {r['rss_load'] / 2**30:5.2f})  predicts {r['predicted']!r}; "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
        for peer in ("float32", "blocks-saved"):
            if "blocks" in got and peer in got:
                b, f = got["blocks"], got[peer]
                print(f"{model:20s} blocks / {peer}: pass {b['pass_s'] / f['pass_s']:.2f}× (target ≤ 1.25), "
                      f"{args.explain} explain {b['explain_s'] / f['explain_s']:.2f}×, "
                      f"peak memory {b['peak_rss'] / f['peak_rss']:.2f}×, load {b['load_s'] / f['load_s']:.2f}×")
    print(f"load after: {os.getloadavg()}")
    if args.out:
        Path(args.out).write_text(json.dumps({"cpu": cpu(), "args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
