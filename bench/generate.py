"""Generation speed: words per second for 64 new words after a 128-member prompt on the default
model, studygroup's `Model.generate` (its defaults: every word's 16 largest weights, their members and
the sink kept) beside transformers' `generate` (float32, sdpa, its cache, min_new_tokens=64) on the
same weights, in turns in the same run, and llama.cpp's greedy loop where bench/build_llama.sh built it
(its own process; the Q4_1 file as it is, 8-bit activations). The floors of a step: the bare
multiplies of one row by every float32 weight matrix, and by every matrix as the file's blocks (what
studygroup's step multiplies). Prints the CPU, each peer's words/s and the ratio.

    .venv/bin/python bench/generate.py [--repeats 3] [--out bench/results/NAME.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from studygroup.model import threads

threads.set_wait_policy()  # before torch is imported, as the CLI does (studygroup.model.threads)

import studygroup  # noqa: E402
import torch  # noqa: E402

from gpu_prefill import hf_model  # noqa: E402
from cache_check import cpu  # noqa: E402
from processes import child_env, llama_available  # noqa: E402
from studygroup.model import row_kernels  # noqa: E402
from studygroup.model.weights_cache import load_weights  # noqa: E402
from studygroup.gguf.model_path import default_model_path  # noqa: E402

PROMPT, WORDS = 128, 64

#: llama.cpp's greedy loop, in a process of its own: argv = model, ids (JSON), words, threads; prints seconds (JSON).
LLAMA_LOOP = """
import json, sys, time
import numpy as np
from llama_cpp import Llama
path, ids, words, threads, repeats = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
llm = Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False)
def run():
    llm.reset(); llm.eval(ids); out = []
    for _ in range(words):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))  # the last position's
        out.append(int(np.argmax(logits))); llm.eval([out[-1]])
    return out
run(); times = []
for _ in range(repeats):
    t = time.perf_counter(); out = run(); times.append(time.perf_counter() - t)
print(json.dumps({"seconds": times, "ids": out}))
"""


def in_turns(runs: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each run, after one warm-up each, taking turns (run 1 of each, run 2 of each,
    …) so that a busy spell on the machine falls on every peer alike."""
    for fn in runs.values():
        fn()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def bare_rows(model) -> dict:
    """Runs of one row through every weight matrix (no attention, norms or activations): float32, and
    the file's blocks as the step multiplies them."""
    mats = [w for name, w in model.w.items() if w.dim() == 2 and name not in ("embed", "unembed")]
    mats.append(model.w["unembed"])  # (d_model, vocab), in the layout the pass multiplies
    rows = [torch.randn(1, W.shape[0]) for W in mats]  # (1, in) each
    blocks = list(row_kernels.lean_matrices_of(model).values())
    block_rows = [torch.randn(1, B.n_in) for B in blocks]

    def float32():
        for x, W in zip(rows, mats):
            x @ W  # (1, in) x (in, out) -> (1, out)

    def from_blocks():
        for x, B in zip(block_rows, blocks):
            B(x)
    return {"bare float32 multiplies": float32, "bare block multiplies": from_blocks} if blocks else {
        "bare float32 multiplies": float32}


def llama_cpp(ids: list[int], repeats: int) -> dict | None:
    """llama.cpp's greedy loop timed in its own process, or None where it is not built."""
    if not llama_available():
        return None
    done = subprocess.run([sys.executable, "-c", LLAMA_LOOP, str(default_model_path()), json.dumps(ids), str(WORDS),
                           str(torch.get_num_threads()), str(repeats)], capture_output=True, text=True,
                          env=child_env("llama.cpp"))
    if done.returncode:
        print(f"llama.cpp failed: {done.stderr.strip()[-300:]}")
        return None
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {"seconds": statistics.median(out["seconds"]), "ids": out["ids"]}


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
    got = {}

    def run_ours():
        got["ours"] = ours.generate(ids, WORDS, ignore_eos=True).ids

    def run_theirs():
        with torch.inference_mode():
            out = theirs.generate(torch.tensor([ids]), max_new_tokens=WORDS, min_new_tokens=WORDS, do_sample=False,
                                  eos_token_id=None, pad_token_id=0)
        got["theirs"] = out[0, PROMPT:].tolist()

    load = [os.getloadavg()]
    t = in_turns({"studygroup": run_ours, "transformers": run_theirs}, args.repeats)
    rows = in_turns(bare_rows(ours), 20)
    llama = llama_cpp(ids, args.repeats)
    load.append(os.getloadavg())
    t_ours, t_theirs = t["studygroup"], t["transformers"]
    print(f"CPU: {cpu()}, torch threads {torch.get_num_threads()}; kernels: {'blocks' if rows.get('bare block multiplies') else 'float32 only'}")
    print(f"{WORDS} words after {PROMPT} members (prefill included), medians of {args.repeats} in turns:")
    print(f"  studygroup Model.generate: {WORDS / t_ours:.2f} words/s ({1000 * t_ours / WORDS:.1f} ms a word)")
    print(f"  transformers generate:     {WORDS / t_theirs:.2f} words/s ({1000 * t_theirs / WORDS:.1f} ms a word)")
    if llama:
        print(f"  llama.cpp greedy loop:     {WORDS / llama['seconds']:.2f} words/s ({1000 * llama['seconds'] / WORDS:.1f} ms a word); "
              f"shares {shared(llama['ids'], got['ours'])} of {WORDS} words with studygroup")
    for name, seconds in rows.items():
        print(f"  {name} of one row: {1000 * seconds:.1f} ms")
    print(f"  ratio studygroup / transformers: {t_theirs / t_ours:.2f}x; same greedy ids: {got['ours'] == got['theirs']}")
    print(f"  load average (1, 5, 15 min) before and after: {load}")
    if args.out:
        figures = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpu": cpu(), "threads": torch.get_num_threads(),
                   "load_average": load, "prompt": PROMPT, "words": WORDS, "repeats": args.repeats,
                   "ms_a_word": {"studygroup": 1000 * t_ours / WORDS, "transformers": 1000 * t_theirs / WORDS,
                                 **({"llama.cpp": 1000 * llama["seconds"] / WORDS} if llama else {})},
                   "bare_row_ms": {name: 1000 * s for name, s in rows.items()}, "ratio": t_theirs / t_ours,
                   "same_greedy_ids": got["ours"] == got["theirs"],
                   **({"llama_cpp_shared_words": shared(llama["ids"], got["ours"])} if llama else {})}
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=1)


def shared(a: list[int], b: list[int]) -> int:
    """How many words two continuations share before they part."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


if __name__ == "__main__":
    main()
