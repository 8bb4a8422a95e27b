"""Speed on Qwen2.5-Coder-1.5B (Q4_K_M): a pass over T tokens and greedy generation, studygroup (the
file's blocks, as it loads this model by default) against llama.cpp (the same file as it is, 8-bit
activations) and transformers (the same file dequantized to float32, sdpa attention), all with the
same number of threads.

Each peer is a process of its own, one after the other (so that each one's threads and memory are
its own): it loads, runs one warm-up, then `--repeats` timed passes over T tokens (the last
position's logits only) and `--repeats` timed generations of `--words` words after the first
`--prompt` tokens (its prefill included, every word the most likely one, end of text ignored).
The ids are the same for every peer: a paragraph of project-owned text repeated to T tokens.
Prints the CPU, the load average before and after each peer, medians, tokens/s and words/s, the
process's CPU seconds of a pass and of a generation (every thread's work, and llama.cpp's threads'
spinning; on a machine busy with other work they show the work where the wall clock shows the
waits for a core), the ratios studygroup / llama.cpp and studygroup / transformers, and whether the peers' top-1 and
generated words agree.

llama.cpp's worker threads spin while they wait: run this on an otherwise idle machine, and read the
load it prints beside every figure.

    bash bench/build_llama.sh        # once: llama-cpp-python into .bench/llama
    .venv/bin/python bench/qwen_speed.py [--T 512] [--prompt 128] [--words 32] [--repeats 3]
        [--model qwen2.5-coder-1.5b] [--only studygroup,llama.cpp,transformers] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from cache_check import cpu
from processes import child_env, llama_available, mem_available_gib
from run import PARAGRAPH

HERE = Path(__file__).resolve().parent
#: The peers: our program name, peers.make's program, its mode, and what the table calls it.
PEERS = {"studygroup": ("ours", "none", "studygroup, the file's blocks"),
         "llama.cpp": ("llama.cpp", "prefill", "llama.cpp, the file as it is"),
         "transformers": ("transformers", "sdpa", "transformers, float32, sdpa")}


# ---- a peer, in its own process ---------------------------------------------------------------
def generate(peer, program: str, ids: list[int], words: int) -> list[int]:
    """`words` greedy words after `ids` from a loaded peer (bench/peers.py), end of text ignored."""
    if program == "ours":
        return peer.model.generate(ids, words, ignore_eos=True).ids
    if program == "llama.cpp":
        import numpy as np

        llm, out = peer.llm, []
        llm.reset()
        llm.eval(ids)
        for _ in range(words):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))  # the last position's
            out.append(int(np.argmax(logits)))
            llm.eval([out[-1]])
        return out
    import torch

    with torch.inference_mode():
        out = peer.model.generate(torch.tensor([ids]), max_new_tokens=words, min_new_tokens=words, do_sample=False,
                                  eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


def timed(fn, repeats: int) -> tuple[list[float], list[float], object]:
    """(seconds of each of `repeats` runs after one warm-up, the process's CPU seconds of each, the last
    run's answer). CPU seconds count every thread's work and spin, not the waits for a core."""
    answer = fn()
    seconds, cpu_seconds = [], []
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        answer = fn()
        seconds.append(time.perf_counter() - start)
        cpu_seconds.append(time.process_time() - cpu_start)
    return seconds, cpu_seconds, answer


def child(name: str, spec: dict) -> dict:
    """Load one peer and time its passes and generations; the figures as a JSON-able dict."""
    program, mode, _ = PEERS[name]
    if program == "ours":
        from studygroup.model import threads

        threads.set_wait_policy()  # before torch is imported, as the CLI does
    import torch

    import peers

    torch.set_num_threads(peers.THREADS)
    start = time.perf_counter()
    peer = peers.make(program, mode, Path(spec["model"]), n_ctx=spec["n_ctx"])
    load_s = time.perf_counter() - start
    ids, prompt = spec["ids"], spec["ids"][:spec["prompt"]]
    pass_s, pass_cpu_s, top1 = timed(lambda: peer.prefill(ids), spec["repeats"])
    generate_s, generate_cpu_s, words = timed(lambda: generate(peer, program, prompt, spec["words"]), spec["repeats"])
    return {"load_s": load_s, "pass_s": pass_s, "generate_s": generate_s, "pass_cpu_s": pass_cpu_s,
            "generate_cpu_s": generate_cpu_s, "top1": top1, "words": words,
            "threads": peers.THREADS, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# ---- the run ----------------------------------------------------------------------------------
def text_ids(path: Path, T: int) -> list[int]:
    """T ids of PARAGRAPH repeated, as the file's tokenizer reads it."""
    from studygroup.model.weights_cache import load_tokenizer

    tokenizer = load_tokenizer(path)
    ids = tokenizer.encode(PARAGRAPH)
    return (ids * (T // len(ids) + 1))[:T]


def run_peer(name: str, spec: dict) -> dict:
    """One peer's figures from a process of its own, with the load average before and after it."""
    before = os.getloadavg()
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", name],
                          input=json.dumps(spec), capture_output=True, text=True, env=child_env(PEERS[name][0]))
    after = os.getloadavg()
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}",
                "load_average": [before, after]}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load_average": [before, after]}


def show(spec: dict, got: dict) -> None:
    """Print each peer's medians and the ratios against studygroup."""
    T, words = len(spec["ids"]), spec["words"]
    print(f"CPU: {cpu()}; {spec['threads']} threads each; model {Path(spec['model']).name}")
    print(f"pass over {T} tokens and {words} words after {spec['prompt']} tokens, medians of {spec['repeats']}:")
    for name, r in got.items():
        label = PEERS[name][2]
        if "error" in r:
            print(f"  {label}: failed: {r['error']}")
            continue
        p, g = statistics.median(r["pass_s"]), statistics.median(r["generate_s"])
        load = " → ".join(f"{a[0]:.2f}" for a in r["load_average"])
        cpu_s = f"CPU {statistics.median(r['pass_cpu_s']):.2f} s and {statistics.median(r['generate_cpu_s']):.2f} s; " \
            if "pass_cpu_s" in r else ""
        print(f"  {label}: {T / p:.1f} tokens/s ({p:.2f} s a pass), {words / g:.2f} words/s ({g:.2f} s); {cpu_s}"
              f"load {r['load_s']:.1f} s, peak {r['peak_mib']:.0f} MiB; top-1 {r['top1']}; load average {load}")
    ours = got.get("studygroup", {})
    for name, r in got.items():
        if name == "studygroup" or "error" in r or "error" in ours or not ours:
            continue
        pass_ratio = statistics.median(r["pass_s"]) / statistics.median(ours["pass_s"])
        word_ratio = statistics.median(r["generate_s"]) / statistics.median(ours["generate_s"])
        print(f"  studygroup / {name}: pass {pass_ratio:.2f}x, generation {word_ratio:.2f}x "
              f"(above 1: studygroup faster); same top-1 {r['top1'] == ours['top1']}, "
              f"first {shared(r['words'], ours['words'])} of {words} words the same")


def shared(a: list[int], b: list[int]) -> int:
    """How many words two continuations share before they part."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="a packaged name or a GGUF file")
    parser.add_argument("--T", type=int, default=512, help="tokens of the timed pass")
    parser.add_argument("--prompt", type=int, default=128, help="tokens before the generated words")
    parser.add_argument("--words", type=int, default=32, help="words generated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=",".join(PEERS), help="peers, comma-separated")
    parser.add_argument("--out", help="write the figures here as JSON")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, json.loads(sys.stdin.read()))))
        return
    from studygroup.model.packaged import model_file

    import peers

    path = Path(model_file(args.model))
    names = [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in PEERS]
    if unknown or not 0 < args.prompt <= args.T:
        parser.error(f"unknown peers {unknown}: {', '.join(PEERS)}" if unknown else "--prompt must be 1 to --T")
    if "llama.cpp" in names and not llama_available():
        print("llama.cpp is not built (bash bench/build_llama.sh): its row is left out")
        names.remove("llama.cpp")
    spec = {"model": str(path), "ids": text_ids(path, args.T), "prompt": args.prompt, "words": args.words,
            "repeats": args.repeats, "n_ctx": max(args.T, args.prompt + args.words) + 16, "threads": peers.THREADS}
    print(f"memory available at the start: {mem_available_gib():.1f} GiB")
    got = {name: run_peer(name, spec) for name in names}
    show(spec, got)
    if args.out:
        Path(args.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpu": cpu(),
                                              **{k: v for k, v in spec.items() if k != "ids"}, "T": args.T,
                                              "peers": got}, indent=1))


if __name__ == "__main__":
    main()
