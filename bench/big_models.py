"""The shapes people run, without downloading them: load, explain and generate, time and peak memory.

For each model shape of `shaped_gguf.SHAPES` (llama3.2:3b, llama3.1:8b, gemma3:4b with its vision
tower, qwen3:8b, deepseek-r1:7b; Ollama's default Q4_K_M type mix, random weights), writes the GGUF
into the folder named, then in a process of its own: `studygroup.load(file, cache=False)`, the
default `explain` of T tokens (the bench paragraph repeated, cut to T ids by the file's tokenizer)
and `generate` of N words after them (greedy, end-of-text ignored); prints each step's wall time
and the process's peak resident memory (its own ru_maxrss, read by wait4 even when it dies), then
deletes the file (unless --keep). A model studygroup refuses for its memory prints the refusal's
line: that is its figure.

    python bench/big_models.py FOLDER                                 # every shape, T=256, 16 words
    python bench/big_models.py FOLDER --only llama3.1:8b --T 50 --words 0
    python bench/big_models.py FOLDER --file qwen2.5-coder-1.5b --T 50 --words 0   # a file as it is
    python bench/big_models.py FOLDER --only llama3.1:8b --heads 0 --members 0      # explain's base measures only
    python bench/big_models.py --file FILE --heads -1                                # no explain: load, generate
    python bench/big_models.py FOLDER --only llama3.2:3b --T 64 --steps              # peak memory of each step
    python bench/big_models.py FOLDER --only llama3.1:8b --device cuda --tokenizer small.gguf   # on a GPU

--device cuda loads each model onto the GPU (its matrices dequantized to float32 there) and adds the
GPU's peak allocated memory. --tokenizer takes the shaped files' vocabulary from another GGUF's
tokenizer.* metadata (any file with SmolLM2's vocabulary, e.g. a small shaped file) where the
default model is not installed, as on a lent GPU machine.

--steps also prints, for each step of the child (loading, each of explain's steps as its progress
bars name them, generating), the peak resident memory sampled every STEP_SAMPLE_S from
/proc/self/status, and at that moment its anonymous part (the process's own allocations: float32
buffers, activations, logits) and its file part (the mapped model's pages read, and the libraries).

Disk: each file is 2.0-5.0 GB (shaped_gguf's sizes) and is written only when the folder's disk has
it and 1 GB more free. The CPU and the load (1-minute average) are printed before and after.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cache_check import cpu  # noqa: E402

HERE = Path(__file__).resolve()
SPARE_DISK = 2**30  # bytes left free on the folder's disk after a file is written
STEP_SAMPLE_S = 0.05  # --steps: seconds between two readings of the child's resident memory


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def commit() -> str:
    """The code measured: the short commit, "+" where the work tree differs from it."""
    git = ["git", "-C", str(HERE.parent)]
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout
    return head + ("+" if dirty.strip() else "")


class Steps:
    """Peak resident memory of each step of this process, sampled by a thread of its own: a step is
    the part (loading, explain, generating: `begin`) and the stage its progress bars last named
    (every advance reports it through a Watch)."""

    def __init__(self):
        from studygroup.progress import Watch

        self.watch, self.peaks, self.part = Watch(), {}, "loading"  # peaks: step -> {"rss", "anon", "file"} bytes
        threading.Thread(target=self._sample, daemon=True).start()

    def begin(self, part: str) -> None:
        self.part, self.watch.stage = part, ""

    def _sample(self) -> None:
        while True:
            now, step = resident(), self.part + (f": {self.watch.stage}" if self.watch.stage else "")
            if now["rss"] > self.peaks.get(step, {"rss": -1})["rss"]:
                self.peaks[step] = now
            time.sleep(STEP_SAMPLE_S)

    def figures(self) -> list[dict]:
        return [{"step": step, **{k: round(v / 2**30, 2) for k, v in p.items()}} for step, p in self.peaks.items()]


def resident() -> dict:
    """This process's resident memory now, in bytes: all of it, its anonymous and its file part."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    kib = lambda name: int(fields[name].split()[0]) * 1024  # noqa: E731
    return {"rss": kib("VmRSS"), "anon": kib("RssAnon"), "file": kib("RssFile")}


def measure(path: str, T: int, words: int, heads=None, members=None, steps: bool = False, device: str = "cpu") -> dict:
    """In this process: load, explain T ids (measure_heads=heads, measure_members=members; None: explain's
    defaults), generate `words`; the figures (a refusal: its line). steps: also each step's peak memory."""
    import studygroup  # before torch, as a user's program does (studygroup sets torch's threads)
    from studygroup.progress import watching

    seen = Steps() if steps else None
    with watching(seen.watch) if steps else contextlib.nullcontext():
        figures = _measure(path, T, words, heads, members, seen.begin if steps else lambda part: None, device)
    return figures | ({"steps": seen.figures()} if steps else {})


def _measure(path: str, T: int, words: int, heads, members, begin, device: str = "cpu") -> dict:
    """measure's work; begin(part) names each part as it starts."""
    import studygroup

    start = time.perf_counter()
    try:
        model = studygroup.load(path, cache=False, device=device)
    except studygroup.StudyGroupError as e:
        return {"refused": str(e), "load_s": round(time.perf_counter() - start, 1)}
    figures = {"load_s": round(time.perf_counter() - start, 1), "model": model.config.label}
    ids = ids_of(model, T)
    figures |= {"T": len(ids), "heads": model.config.n_layers * model.config.n_heads}
    if heads != -1:
        start = time.perf_counter()
        begin("explain")
        e = studygroup.explain(model, ids, measure_heads=heads, measure_members=members)
        figures |= {"explain_s": round(time.perf_counter() - start, 1), "predicted": e.predicted.token}
    if words:
        start = time.perf_counter()
        begin("generate")
        g = model.generate(ids, words, ignore_eos=True)
        took = time.perf_counter() - start
        figures |= {"words": len(g.words), "generate_s": round(took, 1), "words_per_s": round(len(g.words) / took, 2)}
    if device == "cuda":
        import torch

        figures |= {"gpu": torch.cuda.get_device_name(), "gpu_peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
    return figures


def ids_of(model, T: int) -> list[int]:
    """T ids of the bench paragraph, repeated, in the model's tokenizer."""
    from run import PARAGRAPH

    once = model.tokenizer.encode(PARAGRAPH)
    return (once * (T // len(once) + 1))[:T]


def run_child(path: Path, T: int, words: int, bounds: list[str]) -> dict:
    """`measure` in a child process; its own peak resident memory from wait4, whatever its end.
    bounds: the --heads/--members/--steps arguments, passed on."""
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen([sys.executable, str(HERE), "--measure", str(path), "--T", str(T), "--words", str(words),
                                  *bounds],
                                 stdout=out, stderr=subprocess.PIPE, text=True)
        err = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().strip()
    figures = json.loads(text.splitlines()[-1]) if child.returncode == 0 and text else {
        "failed": f"exit {child.returncode}: {err.strip().splitlines()[-1] if err.strip() else 'no message'}"}
    return figures | {"peak_gib": round(usage.ru_maxrss / 2**20, 2)}


def shaped_file(name: str, folder: Path, tokenizer: str | None = None) -> tuple[Path | None, dict]:
    """Write the shape `name` into `folder` (with the tokenizer.* metadata of the GGUF `tokenizer`,
    None: the default model's): (its path, figures), or (None, why not)."""
    import shaped_gguf
    from studygroup.gguf.container import read_gguf

    s = shaped_gguf.SHAPES[name]
    size = shaped_gguf.file_bytes(s)
    free = shutil.disk_usage(folder).free
    if free < size + SPARE_DISK:
        return None, {"skipped": f"{size / 1e9:.1f} GB to write, {free / 1e9:.1f} GB free in {folder}"}
    path = folder / f"{name.replace(':', '-')}-random-q4_k_m.gguf"
    start = time.perf_counter()
    fields = None if tokenizer is None else {k: v for k, v in read_gguf(tokenizer).fields.items() if k.startswith("tokenizer.")}
    shaped_gguf.write(s, path, tokenizer=fields)
    return path, {"file_gb": round(path.stat().st_size / 1e9, 2), "write_s": round(time.perf_counter() - start, 1)}


def row(name: str, f: dict) -> str:
    """One Markdown row: model, file, load, explain, generate, peak (or the refusal)."""
    if "refused" in f or "failed" in f or "skipped" in f:
        why = f.get("refused") or f.get("failed") or f.get("skipped")
        return f"| {name} | {f.get('file_gb', '')} GB | {why} | | | {f.get('peak_gib', '')} GiB |"
    gen = f"{f['generate_s']} s ({f['words_per_s']} words/s)" if "generate_s" in f else "—"
    explain = f"{f['explain_s']} s" if "explain_s" in f else "not run"
    gpu = f"; GPU {f['gpu_peak_gib']} GiB" if "gpu_peak_gib" in f else ""
    return (f"| {name} | {f.get('file_gb', '')} GB | {f['load_s']} s | {explain} ({f['T']} tokens) "
            f"| {gen} | {f['peak_gib']} GiB{gpu} |")


def step_lines(f: dict) -> str:
    """Under a row, each step's peak memory (--steps), else nothing."""
    return "".join(f"\n    {s['rss']:5.2f} GiB (anonymous {s['anon']:5.2f}, file {s['file']:5.2f}) {s['step']}"
                   for s in f.get("steps", []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", help="where the files are written (and deleted after)")
    ap.add_argument("--only", default="", help="comma-separated shape names (default: every one)")
    ap.add_argument("--file", action="append", default=[], help="measure this model (a path or a packaged name) as it is")
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--words", type=int, default=16)
    ap.add_argument("--heads", type=int, help="heads explain silences exactly (default: explain's own rule; -1: no explain)")
    ap.add_argument("--members", type=int, help="members explain silences exactly (default: explain's own rule)")
    ap.add_argument("--keep", action="store_true", help="keep the files written")
    ap.add_argument("--steps", action="store_true", help="also the peak memory of each step (anonymous and file parts)")
    ap.add_argument("--out", help="also write the figures, the CPU, the load and the commit as JSON")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--tokenizer", help="a GGUF whose tokenizer.* metadata the shaped files take (default: the default model's)")
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # the child: one model, figures as JSON
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.T, args.words, args.heads, args.members, args.steps, args.device),
                         ensure_ascii=False))
        return
    import shaped_gguf

    names = [n for n in args.only.split(",") if n] or ([] if args.file else list(shaped_gguf.SHAPES))
    unknown = [n for n in names if n not in shaped_gguf.SHAPES]
    if unknown or (names and not args.folder):
        sys.exit(f"big_models: {'unknown shapes ' + ', '.join(unknown) if unknown else 'name a folder to write into'}"
                 f" (shapes: {', '.join(shaped_gguf.SHAPES)})")
    bounds = [*(["--heads", str(args.heads)] if args.heads is not None else []),
              *(["--members", str(args.members)] if args.members is not None else []),
              *(["--steps"] if args.steps else []), "--device", args.device]
    run = {"cpu": cpu(), "load_before": load_average(), "commit": commit(), "T": args.T, "words": args.words,
           "heads": args.heads, "members": args.members, "device": args.device}
    print(f"CPU: {run['cpu']}; load {run['load_before']}; code {run['commit']}; T={args.T}, {args.words} words"
          f"{'; explain ' + ' '.join(bounds) if bounds else ''}", flush=True)
    print("| model | file | load | explain | generate | peak RSS |\n|---|---|---|---|---|---|", flush=True)
    results = {}
    for name in names:
        path, figures = shaped_file(name, Path(args.folder), args.tokenizer)
        if path is not None:
            try:
                figures |= run_child(path, args.T, args.words, bounds)
            finally:
                if not args.keep:
                    path.unlink()
        results[name] = figures
        print(row(name, figures) + step_lines(figures), flush=True)
    for model in args.file:
        results[model] = run_child(model, args.T, args.words, bounds)
        print(row(model, results[model]) + step_lines(results[model]), flush=True)
    run |= {"load_after": load_average(), "results": results}
    print(f"load after: {run['load_after']}")
    if args.out:
        Path(args.out).write_text(json.dumps(run, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
