"""Generation to the model's whole window: peak resident memory and wall time (target: 2 GB).

A child process loads the default model and generates with `ignore_eos=True` until the context is
full (prompt + words = 8,192 members), then reports its timings and the bytes of what it keeps
(the key/value cache, each word's record); the parent reads the child's peak resident memory
(ru_maxrss, RUSAGE_CHILDREN) when it exits. Generating all 8,192 words takes far too long on two
shared cores (a word is ~80 ms at the start and grows with the window), so by default the prompt
is 8,000 members (the bench paragraph's ids repeated) and the last 192 words are generated: the
cache and the rows are at the full window. Each word's record does not grow with the window
(27 KB a word for the default model), so the output also states the bound for 8,192 generated
words: the measured peak plus the records of the words not generated.

    .venv/bin/python bench/generate_window.py [--prompt 8000] [--out]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))


def child(prompt: int) -> dict:
    """Generate to the window after `prompt` members; timings and kept bytes, as a dict."""
    from studygroup.model import threads

    threads.set_wait_policy()  # before torch is imported, as the CLI does
    import studygroup
    import torch
    from run import PARAGRAPH

    model = studygroup.load()
    context = model.config.context_length
    one = model.tokenizer.encode(PARAGRAPH)
    ids = (one * (prompt // len(one) + 1))[:prompt]
    times = []
    start = time.perf_counter()
    g = model.generate(ids, context - prompt, ignore_eos=True, on_word=lambda w: times.append(time.perf_counter()))
    wall = time.perf_counter() - start
    L, H = model.config.n_layers, model.config.n_heads
    record = sum(t.numel() * t.element_size() for w in g.words for t in (w.members, w.weights, w.sink)) / len(g.words)
    cache = sum(t.numel() * t.element_size() for t in g._talk.cache.k + g._talk.cache.v)
    steps = [b - a for a, b in zip(times, times[1:])]
    return {"context": context, "prompt": prompt, "words": len(g.words), "members": prompt + len(g.words),
            "wall_s": round(wall, 1), "prefill_s": round(times[0] - start, 1),
            "ms_a_word_first_10": round(1000 * sum(steps[:10]) / max(1, len(steps[:10])), 1),
            "ms_a_word_last_10": round(1000 * sum(steps[-10:]) / max(1, len(steps[-10:])), 1),
            "record_bytes_a_word": int(record), "kv_cache_mib": round(cache / 2**20),
            "threads": torch.get_num_threads(), "layers_heads": [L, H]}


def cpu() -> dict:
    """The CPU's name and the vector flags that choose torch's kernels."""
    info = Path("/proc/cpuinfo").read_text()
    name = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    return {"name": name, "cores": os.cpu_count(), "avx2": "avx2" in flags,
            "avx512": any(f.startswith("avx512") for f in flags), "amx": any(f.startswith("amx") for f in flags)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=8000, help="members before the words (the rest of the window is generated)")
    ap.add_argument("--out", action="store_true", help="also write bench/results/<date>-<commit>-generate-window.json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.prompt)))
        return
    load_before = os.getloadavg()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    env = os.environ | {"PYTHONPATH": str(REPO)}  # this checkout's studygroup
    done = subprocess.run([sys.executable, __file__, "--child", "--prompt", str(args.prompt)],
                          capture_output=True, text=True, env=env, check=True)
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    run = json.loads(done.stdout.strip().splitlines()[-1])
    unmade = run["context"] - run["words"]  # words a generation from one member would add
    bound = peak_mib + unmade * run["record_bytes_a_word"] / 2**20
    figures = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "commit": commit, "cpu": cpu(), "load_average_before": load_before,
               "load_average_after": os.getloadavg(), **run, "peak_mib": round(peak_mib),
               "peak_mib_bound_all_generated": round(bound),
               "what": f"{run['prompt']} prompt members (the bench paragraph's ids repeated), then {run['words']} "
                       f"words generated to the full window of {run['context']}"}
    print(json.dumps(figures, indent=1))
    if args.out:
        path = REPO / "bench" / "results" / f"{time.strftime('%Y-%m-%d')}-{commit}-generate-window.json"
        path.write_text(json.dumps(figures, indent=1) + "\n")
        print(f"written: {path.relative_to(REPO)}", file=sys.stderr)


if __name__ == "__main__":
    main()
