"""What proving the cache costs: a warm load with its digest checked against the same load unchecked,
and the cost of a model file's key (its whole-content digest) on a large file.

    python bench/cache_check.py [--reps 15] [--model FILE.gguf] [--key-gb 5]

Warm loads: the default model's weights and tokenizer (`load_weights`, `load_tokenizer`) from a
filled cache, taking turns checked / unchecked (unchecked: `unpack(check=False)`, the same mapping
and views, no digest), each in the same process, medians over --reps; the ratio is checked/unchecked.
A load includes what the model needs before a pass: the run that follows touches every page.
Key: `file_key` on a file of --key-gb GB of random bytes written for the run (first sight: the
whole file hashed; again: the state found), then deleted. Prints one JSON object with the CPU.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path


def cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    return platform.processor()


def warm_loads(model, reps: int) -> dict:
    from studygroup.model import cache_entry
    from studygroup.model.weights_cache import load_tokenizer, load_weights

    load_weights(model), load_tokenizer(model)  # fills the cache
    checked = cache_entry.unpack
    times = {"checked": [], "unchecked": []}
    for _ in range(reps):
        for kind in times:
            cache_entry.unpack = checked if kind == "checked" else functools.partial(checked, check=False)
            t = time.perf_counter()
            config, weights = load_weights(model)
            _touch(weights)
            load_tokenizer(model)
            times[kind].append(time.perf_counter() - t)
            del weights
    cache_entry.unpack = checked
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"checked_s": med["checked"], "unchecked_s": med["unchecked"], "ratio": med["checked"] / med["unchecked"]}


def _touch(weights: dict) -> None:
    """Read one value of every page of every tensor, as the first pass will."""
    for t in weights.values():
        flat = t.reshape(-1) if t.is_contiguous() else t.T.reshape(-1)
        flat[::1024].sum()


def key_cost(gb: float) -> dict:
    from studygroup.model import disk_cache

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.gguf"
        chunk = os.urandom(64 << 20)
        with open(path, "wb") as f:
            for _ in range(int(gb * 2**30) // len(chunk)):
                f.write(chunk)
        t = time.perf_counter()
        disk_cache.file_key(path)
        first = time.perf_counter() - t
        t = time.perf_counter()
        disk_cache.file_key(path)
        again = time.perf_counter() - t
        return {"file_gb": path.stat().st_size / 2**30, "first_sight_s": first, "known_state_s": again}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--model", default=None)
    parser.add_argument("--key-gb", type=float, default=5.0)
    args = parser.parse_args()
    os.environ.setdefault("STUDYGROUP_CACHE_DIR", tempfile.mkdtemp(prefix="sg-bench-cache-"))
    from studygroup.gguf.model_path import resolve_model_path

    model = resolve_model_path(args.model)
    out = {"cpu": cpu(), "model": model.name, "warm_load": warm_loads(model, args.reps)}
    if args.key_gb > 0:
        out["key"] = key_cost(args.key_gb)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
