"""Generation speed: words per second for 64 new words after a 128-member prompt on the default
model, studygroup's `Model.generate` (its defaults: every word's 16 largest weights, their members and the sink kept)
beside transformers' `generate` (float32, sdpa, its cache, min_new_tokens=64) on the same weights,
in the same run; and the bare multiplies of one row (every weight matrix times one vector: the
memory-bandwidth floor of a step). Prints the CPU, each peer's words/s, and the ratio.

    .venv/bin/python bench/generate.py [--repeats 3] [--out bench/results/NAME.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from studygroup.model import threads

threads.set_wait_policy()  # before torch is imported, as the CLI does (studygroup.model.threads)

import studygroup  # noqa: E402
import torch  # noqa: E402

from gpu_prefill import hf_model
from cache_check import cpu
from studygroup.model.weights_cache import load_weights
from studygroup.gguf.model_path import default_model_path

PROMPT, WORDS = 128, 64


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bare_row(model) -> float:
    """Seconds for one row through every weight matrix (no attention, norms or activations)."""
    mats = [w for name, w in model.w.items() if w.dim() == 2 and name not in ("embed", "unembed")]
    mats.append(model.w["unembed"])  # (d_model, vocab), in the layout the pass multiplies
    rows = [torch.randn(1, W.shape[0]) for W in mats]  # (1, in) each

    def run():
        for x, W in zip(rows, mats):
            x @ W  # (1, in) x (in, out) -> (1, out)
    return median_seconds(run, 20)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="write the figures here as JSON")
    args = parser.parse_args()
    ours = studygroup.load()
    config, weights = load_weights(default_model_path())
    theirs = hf_model(config, weights, torch.float32, "cpu")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (PROMPT,), generator=g).tolist()
    ours_ids = []

    def run_ours():
        ours_ids[:] = ours.generate(ids, WORDS, ignore_eos=True).ids

    def run_theirs():
        with torch.inference_mode():
            return theirs.generate(torch.tensor([ids]), max_new_tokens=WORDS, min_new_tokens=WORDS, do_sample=False,
                                   eos_token_id=None, pad_token_id=0)

    t_ours = median_seconds(run_ours, args.repeats)
    t_theirs = median_seconds(run_theirs, args.repeats)
    same = ours_ids == run_theirs()[0, PROMPT:].tolist()
    t_row = bare_row(ours)
    print(f"CPU: {cpu()}, torch threads {torch.get_num_threads()}")
    print(f"{WORDS} words after {PROMPT} members (prefill included), median of {args.repeats}:")
    print(f"  studygroup Model.generate: {WORDS / t_ours:.2f} words/s ({1000 * t_ours / WORDS:.1f} ms a word)")
    print(f"  transformers generate:     {WORDS / t_theirs:.2f} words/s ({1000 * t_theirs / WORDS:.1f} ms a word)")
    print(f"  bare multiplies of one row: {1000 * t_row:.1f} ms (the floor of a step)")
    print(f"  ratio studygroup / transformers: {t_theirs / t_ours:.2f}x; same greedy ids: {same}")
    print(f"  load average (1, 5, 15 min): {os.getloadavg()}")
    if args.out:
        figures = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpu": cpu(), "threads": torch.get_num_threads(),
                   "load_average": os.getloadavg(), "prompt": PROMPT, "words": WORDS, "repeats": args.repeats,
                   "ms_a_word": {"studygroup": 1000 * t_ours / WORDS, "transformers": 1000 * t_theirs / WORDS},
                   "bare_row_ms": 1000 * t_row, "ratio": t_theirs / t_ours, "same_greedy_ids": same}
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
