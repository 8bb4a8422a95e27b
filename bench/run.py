"""studygroup against transformers and llama.cpp, every peer measured in the same run, printed as ratios.

    .venv/bin/python bench/run.py           # full run, writes bench/results/<date>.json (~20 min, 2 cores)
    .venv/bin/python bench/run.py --quick   # CI: T=32, one repeat, no warm-up, targets not judged
    .venv/bin/python bench/run.py --show bench/results/<date>.json   # print a saved run again

Prefill: each peer (program, mode) is a process of its own (bench/worker.py), loaded once. For
each T the peers take turns, warm-up first, then rep by rep (peer 1, peer 2, …, peer 1, …), so a
slow spell on the machine hits every peer alike. The ids are real text (a paragraph repeated to
T tokens), the same for every peer. Memory is each process's own peak (ru_maxrss), read after
each T in increasing order, so it is the peak of that T. A peer whose T×T maps would not fit in
the memory available is skipped with its estimate, not run.

Start-up: whole processes, timed from spawn to exit (bench/start.py and `studygroup explain`),
cold (an empty STUDYGROUP_CACHE_DIR per run) and warm; the peak is the child's own (wait4).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import importlib.metadata
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import report
from processes import HERE, REPO, Worker, child_env, llama_available, mem_available_gib, timed_run

#: Project-owned prose, repeated to T tokens, so that every peer reads the same real text.
PARAGRAPH = (
    "See and question the attention layer of a real language model, as a study group: the tokens "
    "of a text are members who ask questions, offer answers of a certain nature, weigh each other's "
    "answers and reach a conclusion, the next word. Real numbers from a real model, offline, on a "
    "laptop CPU, checked against Hugging Face transformers and llama.cpp. "
)
SETTLE_S = 2.0  # seconds the machine rests after a cold start's cache is removed
SENTENCE = "Cash or credit card? I have a lot"  # the article's sentence, as `studygroup explain` shows it

#: (program, mode, label, group), in the order the peers take their turns. The groups run one
#: after the other, each with only its own processes alive: the T×T maps of the "maps" group need
#: the memory that idle peers of the "speed" group would hold. Every ratio compares peers of one group.
PEERS = [
    ("ours", "none", 'studygroup, record="none"', "speed"),
    ("ours", "default", 'studygroup, record="default"', "speed"),
    ("ours", "last_row", "studygroup, last row of every head", "speed"),
    ("transformers", "sdpa", "transformers, sdpa", "speed"),
    ("transformers", "eager", "transformers, eager", "speed"),
    ("llama.cpp", "prefill", "llama.cpp (Q4_1 weights as they are)", "speed"),
    ("ours", "bf16", 'studygroup, bfloat16, record="none"', "speed"),
    ("ours", "all", 'studygroup, record="all"', "maps"),
    ("ours", "maps16", "studygroup, every full map only (float16)", "maps"),
    ("ours", "maps_on_demand", "studygroup, every full map on demand (float32)", "maps"),
    ("transformers", "eager_attn", "transformers, eager + output_attentions", "maps"),
]
GROUPS = ("speed", "maps")
BF16_MAX_T = 512  # bfloat16 is emulated without AVX-512-BF16/AMX: ~10× slower, so short texts only there
ALL_MAX_T = 2048  # record="all" keeps every step of every row: at 8192, 293 s a run and 15 GiB, with no peer left
SLOW_S = 10.0  # at the longest T, a peer whose warm-up took longer than this gets --long-reps runs


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.show:  # the ratios formed again from the saved figures: today's targets judge them
        saved = json.loads(Path(args.show).read_text())
        saved["ratios"] = report.ratios(saved)
        print(report.markdown(saved))
        return 0
    results = measure(args)
    results["ratios"] = report.ratios(results)
    out = Path(args.out) if args.out else HERE / "results" / f"{datetime.date.today()}{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(report.markdown(results))
    print(f"\nresults: {out}")
    return 0


def parse(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="CI: T=32, one run, no warm-up, no targets judged")
    p.add_argument("--model", type=Path, default=None, help="GGUF file (default: SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=None, help="T values, e.g. 128,512")
    p.add_argument("--reps", type=int, default=None, help="timed runs per peer and T after the warm-up (default 5)")
    p.add_argument("--long-reps", type=int, default=3, help="runs at the longest T for peers slower than 10 s")
    p.add_argument("--startup-reps", type=int, default=None, help="timed whole starts per program (default 5)")
    p.add_argument("--no-llama", action="store_true", help="leave llama.cpp out even when it is installed")
    p.add_argument("--skip-startup", action="store_true", help="prefill only")
    p.add_argument("--only", default=None, help="comma-separated program:mode list, e.g. ours:none,transformers:sdpa")
    p.add_argument("--out", default=None, help="results file (default bench/results/<date>.json)")
    p.add_argument("--show", default=None, help="print the tables of a saved results file and exit")
    args = p.parse_args(argv)
    args.lengths = args.lengths or ([32] if args.quick else [128, 512, 2048, 8192])
    args.reps = args.reps or (1 if args.quick else 5)
    args.startup_reps = args.startup_reps or (1 if args.quick else 5)
    args.warmup = 0 if args.quick else 1
    return args


def measure(args) -> dict:
    from peers import default_model_path

    model = (args.model or default_model_path()).resolve()
    with_llama = llama_available() and not args.no_llama
    chosen = [p for p in PEERS if (p[0] != "llama.cpp" or with_llama) and
              (args.only is None or f"{p[0]}:{p[1]}" in args.only.split(","))]
    if chosen[:1] != PEERS[:1]:
        chosen.insert(0, PEERS[0])  # tokenizes the text and gives the sizes
    work = Path(tempfile.mkdtemp(prefix="studygroup-bench-"))
    results = {"meta": meta(args, model, with_llama, work), "prefill": [], "load": [], "startup": []}
    try:
        ids = measure_prefill(args, model, chosen, work, results)
        results["meta"]["loadavg_after_prefill"] = os.getloadavg()
        if not args.skip_startup:
            measure_startup(args, model, ids, with_llama, work, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["meta"]["loadavg_end"] = os.getloadavg()
    return results


# ---- prefill ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    """One peer: a mode of a program, served by a worker process."""

    worker: Worker
    mode: str
    label: str

    @property
    def program(self) -> str:
        return self.worker.program

    @property
    def error(self) -> str | None:
        return self.worker.mode_error(self.mode)


def start_workers(args, model: Path, chosen, cache: Path, logs: Path) -> list[Slot]:
    """A process per peer (--quick: per program), loaded one after the other (--quick: all at once)."""
    groups: dict[tuple, list] = {}
    for program, mode, label, _ in chosen:
        groups.setdefault((program,) if args.quick else (program, mode), []).append((mode, label))
    slots = {}
    for key, members in groups.items():
        modes = [mode for mode, _ in members]
        w = Worker(key[0], modes, model, max(args.lengths), cache, logs)
        if not args.quick:  # one at a time, so that load times are not shared-CPU times
            if w.wait_ready().get("error"):  # once more: a failed import can be a passing state of the machine
                progress(f"{key}: {w.error}; starting it again")
                w.close()
                w = Worker(key[0], modes, model, max(args.lengths), cache, logs)
                w.wait_ready()
        slots.update({(key[0], mode): Slot(w, mode, label) for mode, label in members})
    return [slots[(program, mode)] for program, mode, _, _ in chosen]  # the peers' turn order


def measure_prefill(args, model: Path, chosen, work: Path, results: dict) -> dict[str, list[int]]:
    """Group by group (--quick: all at once): load the peers, then per T let them take turns.

    Returns the ids of the paragraph and of the sentence (tokenized by the first peer, ours).
    """
    (work / "logs").mkdir(parents=True)
    ids = sizes = None
    for group in [None] if args.quick else GROUPS:
        slots = start_workers(args, model, [p for p in chosen if group in (None, p[3])], work / "cache", work / "logs")
        if not slots:
            continue
        record_loads(slots, results)
        if ids is None:
            ids, sizes = tokenize(slots[0])
            results["meta"]["sizes"] = sizes
        try:
            for T in args.lengths:
                results["meta"].setdefault("loadavg_per_T", {})[f"{group}:{T}"] = os.getloadavg()
                results["prefill"] += prefill_at(args, T, repeat_to(ids["paragraph"], T), slots, sizes)
        finally:
            for w in {slot.worker for slot in slots}:
                w.close()
    return ids


def record_loads(slots: list[Slot], results: dict) -> None:
    for slot in slots:
        ready = slot.worker.wait_ready()
        progress(f"{slot.label}: " + (f"failed to load: {slot.error}" if slot.error else
                                      f"loaded in {ready['modes'][slot.mode]['load_s']:.2f} s"))
        results["load"].append({"program": slot.program, "mode": slot.mode, "label": slot.label, "error": slot.error,
                                "import_s": ready.get("import_s"), "load_s": ready.get("modes", {}).get(slot.mode, {}).get("load_s"),
                                "maxrss_mib": ready.get("maxrss_mib"), "cache": "warm" if results["load"] else "cold"})


def tokenize(ours: Slot) -> tuple[dict[str, list[int]], dict]:
    """The ids of the paragraph and the sentence, and the model's sizes, from one of our peers."""
    if ours.error:
        raise SystemExit(f"studygroup could not load the model: {ours.error}")
    ids = {name: ours.worker.ask("tokenize", mode=ours.mode, text=text)["ids"]
           for name, text in (("paragraph", PARAGRAPH), ("sentence", SENTENCE))}
    return ids, ours.worker.ask("sizes", mode=ours.mode)["sizes"]


def progress(message: str) -> None:
    """One line on stderr, so a long run shows where it is (stdout holds the tables)."""
    print(f"[bench {datetime.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def repeat_to(ids: list[int], T: int) -> list[int]:
    """The paragraph's ids repeated and cut to exactly T tokens."""
    return (ids * math.ceil(T / len(ids)))[:T]


def prefill_at(args, T: int, ids: list[int], slots: list[Slot], sizes: dict) -> list[dict]:
    """Every peer's prefill at one T: warm-up, then timed runs taken in turns."""
    rows, active = {}, []
    for slot in slots:
        rows[slot] = {"program": slot.program, "mode": slot.mode, "label": slot.label, "T": T, "seconds": [],
                      "top1": None, "maxrss_mib": None, "skipped": None, "error": slot.error}
        if slot.error is None:
            rows[slot]["skipped"] = why_skip(slot, T, sizes)
            if rows[slot]["skipped"] is None:
                active.append(slot)
    reps = {slot: args.reps for slot in active}
    for r in range(args.warmup + max(args.long_reps, args.reps)):
        for slot in [s for s in active if r < args.warmup + reps[s]]:
            answer, row = slot.worker.ask("prefill", mode=slot.mode, ids=ids), rows[slot]
            row["maxrss_mib"] = answer.get("maxrss_mib", row["maxrss_mib"])
            if "error" in answer:
                row["error"] = answer["error"]
                active.remove(slot)
                continue
            row["top1"] = answer["top1"]
            progress(f"T={T} {slot.label}: {'warm-up' if r < args.warmup else f'run {r - args.warmup + 1}'} "
                     f"{answer['seconds']:.3f} s, peak {answer['maxrss_mib']:,.0f} MiB")
            if r >= args.warmup:
                row["seconds"].append(answer["seconds"])
            elif T == max(args.lengths) and answer["seconds"] > SLOW_S:
                reps[slot] = min(args.reps, args.long_reps)
    for row in rows.values():
        row["median_s"] = statistics.median(row["seconds"]) if row["seconds"] else None
        row["reps"] = len(row["seconds"])
    return list(rows.values())


def why_skip(slot: Slot, T: int, sizes: dict) -> str | None:
    """A reason not to run this peer at T (bf16 past BF16_MAX_T where it is emulated, record="all"
    past ALL_MAX_T; maps that cannot fit), or None."""
    from studygroup.model.model import native_bfloat16
    if slot.mode == "bf16" and T > BF16_MAX_T and not native_bfloat16():
        return f"bfloat16 measured up to T={BF16_MAX_T} only (emulated on this CPU)"
    if slot.program == "ours" and slot.mode == "all" and T > ALL_MAX_T:
        return (f'record="all" measured up to T={ALL_MAX_T} only: past it, every step of every row takes '
                f"~1.3 MB a token (15 GiB at 8,192) and transformers' maps do not fit to compare with")
    need = 1.3 * estimate_gib(slot.program, slot.mode, T, sizes["n_layers"], sizes["n_heads"])  # 1.3: measured margin
    have = mem_available_gib()
    if need > 0.8 * have - 0.5:  # leave room for the machine's other work
        return f"needs ≈{need:.0f} GiB for its T×T maps, {have:.0f} GiB available: estimated, not run"
    return None


def estimate_gib(program: str, mode: str, T: int, n_layers: int, n_heads: int) -> float:
    """Memory the T×T maps take, beyond the model: kept maps plus ~4 one-layer maps in flight.

    >>> round(estimate_gib("transformers", "eager_attn", 2048, 30, 9), 1)
    5.1
    """
    layer = n_heads * T * T * 4 / 2**30  # one layer's float32 (n_heads, T, T) maps, GiB
    kept = {("ours", "all"): 2 * n_layers, ("ours", "maps16"): n_layers / 2, ("ours", "maps_on_demand"): 0,
            ("transformers", "eager_attn"): n_layers, ("transformers", "eager"): 0}
    if (program, mode) in (("ours", "default"), ("ours", "all")):  # every map kept up to 256 tokens, none past
        return (2 * n_layers + 4) * layer if T <= 256 else 4 * layer
    return (kept[(program, mode)] + 4) * layer if (program, mode) in kept else 0.0


# ---- start-up --------------------------------------------------------------------------------
def measure_startup(args, model: Path, ids: dict, with_llama: bool, work: Path, results: dict) -> None:
    """Whole processes from spawn to exit, taking turns like the prefill peers."""
    sentence = ",".join(map(str, ids["sentence"]))
    start = lambda program: [sys.executable, str(HERE / "start.py"), program, str(model), sentence]  # noqa: E731
    programs = [
        ("explain_cold", "ours", "studygroup explain (sentence), empty cache", explain_argv(model), "cold"),
        ("explain_warm", "ours", "studygroup explain (sentence), warm cache", explain_argv(model), "warm"),
        ("ours_cold", "ours", "studygroup: import, load, forward; empty cache", start("ours"), "cold"),
        ("ours_warm", "ours", "studygroup: import, load, forward; warm cache", start("ours"), "warm"),
        ("transformers", "transformers", "transformers: import, GGUF load, forward", start("transformers"), None),
    ]
    if with_llama:
        programs.append(("llama.cpp", "llama.cpp", "llama.cpp: import, load, prefill", start("llama.cpp"), None))
    entries = {name: {"name": name, "program": program, "label": label, "cache": cache, "wall_s": [], "maxrss_mib": [],
                      "phases": [], "top1": None, "error": None, "output": None}
               for name, program, label, _, cache in programs}
    for r in range(args.warmup + args.startup_reps):
        progress(f"start-up, {'warm-up' if r < args.warmup else f'run {r - args.warmup + 1}'}")
        turn = [(entries[name], argv, program, cache) for name, program, _, argv, cache in programs
                if entries[name]["error"] is None]
        if args.quick:  # all at once: quick runs check that every start works, not how fast
            with concurrent.futures.ThreadPoolExecutor(len(turn)) as pool:
                list(pool.map(lambda t: run_start(*t, work, timed=True), turn))
            continue
        for entry, argv, program, cache in turn:
            run_start(entry, argv, program, cache, work, timed=r >= args.warmup)
    for entry in entries.values():
        entry["median_s"] = statistics.median(entry["wall_s"]) if entry["wall_s"] else None
        entry["maxrss_mib"] = max(entry["maxrss_mib"], default=None)
        entry["phases"] = {k: statistics.median(p[k] for p in entry["phases"]) for k in ("import_s", "load_s", "forward_s")
                           } if entry["phases"] else None
    results["startup"] = list(entries.values())


def explain_argv(model: Path) -> list[str]:
    """`studygroup explain SENTENCE` as a user types it (--model only for a file not the default)."""
    from peers import default_model_path

    script = Path(sys.executable).parent / "studygroup"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "studygroup.cli"]
    argv += ["explain", SENTENCE]
    return argv if model == default_model_path().resolve() else argv + ["--model", str(model)]


def run_start(entry: dict, argv: list[str], program: str, cache: str | None, work: Path, timed: bool) -> None:
    """One whole start; a cold one gets a fresh, empty cache dir that is removed afterwards."""
    cache_dir = Path(tempfile.mkdtemp(dir=work)) if cache == "cold" else work / "cache"
    try:
        t = timed_run(argv, child_env(program, cache_dir))
    finally:
        if cache == "cold":  # then let its 0.5 GB of writes and their removal settle, untimed: a start
            shutil.rmtree(cache_dir, ignore_errors=True)  # right after them ran ~0.5 s slower here
            os.sync()
            time.sleep(SETTLE_S)
    if t.status != 0:
        entry["error"] = f"exit status {t.status}: " + " | ".join(t.stderr.strip().splitlines()[-3:])
        return
    if "explain" not in argv:  # bench/start.py reports its phases on its last line
        inside = json.loads(t.stdout.strip().splitlines()[-1])
        entry["top1"] = inside.pop("top1")
        if timed:
            entry["phases"].append(inside)
    else:
        entry["output"] = t.stdout[:4000]
    if timed:
        entry["wall_s"].append(t.wall_s)
        entry["maxrss_mib"].append(t.maxrss_mib)


# ---- what was measured on ----------------------------------------------------------------------
def meta(args, model: Path, with_llama: bool, work: Path) -> dict:
    def version(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    git = lambda *a: subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True).stdout.strip()  # noqa: E731
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "argv": sys.argv[1:], "quick": args.quick, "model": str(model), "model_bytes": model.stat().st_size,
        "lengths": args.lengths, "reps": args.reps, "long_reps": args.long_reps, "warmup": args.warmup,
        "startup_reps": args.startup_reps,
        "cpu": next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), platform.processor()),
        "cores": os.cpu_count(), "avx512": any(f.startswith("avx512") for f in flags),
        "bf16_native": any(f in flags for f in ("avx512_bf16", "amx_bf16")),
        "mem_total_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "versions": {name: version(name) for name in ("torch", "transformers", "gguf", "studygroup")},
        "llama_cpp": llama_version() if with_llama else None,
        "git_commit": git("rev-parse", "HEAD"), "studygroup_dirty": bool(git("status", "--porcelain", "--", "studygroup")),
        "loadavg_start": os.getloadavg(),
    }


def llama_version() -> str | None:
    from processes import LLAMA_DIR

    found = sorted(LLAMA_DIR.glob("llama_cpp_python-*.dist-info"))
    return found[-1].name.split("-")[1] if found else importlib.metadata.version("llama_cpp_python")


if __name__ == "__main__":
    sys.exit(main())
