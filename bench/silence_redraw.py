"""Silencing redrawn through the HTTP API, as the page does it: /api/conclusion, /api/model_view and
/api/head (the open head; the thumbnails and the head's vectors packed, as the page asks for them),
one after another with the same silencing; p50 and p95 of the sum.

Two apps over one loaded model, each behind its own uvicorn on loopback, measured in turns in the
same run: the app as `serve` makes it (one silenced pass, kept, serves all three requests) and the
same app keeping no pass (`Limits(runs_kept=0)`: each request makes its own pass: the
conclusion's before-and-after, the model view and the head each their own). torch's workers
sleep at once, as `studygroup serve` has them (unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set).
Every round silences something not silenced before (a member, then a head), so no finished
answer is served from the answers' cache. A head's run starts from the kept unsilenced run at the
head's layer, and a member's at the member's row, so the heads' layers are spread over the model
and the members over the text (a click may land on any of them). Printed: the p50 of the member
rounds and of the head rounds too, the slowest round, the CPU seconds of each redraw, the CPU
(lscpu) and the load average. Target: under 0.3 s at ~44 members on 2 cores.

The peer of each redraw is the first draw of a text: the same three requests, nothing silenced, for
a text the app has not seen (the bench's text with its last word replaced, a new word each time),
so that its pass is made whole; one after every second silencing, on the app as `serve` makes it.
Printed: each app's p50 and p95 against the target and against the first draw's p50.

--avx2 keeps torch's kernels, oneDNN's and MKL's to AVX2 (ATEN_CPU_CAPABILITY=avx2,
ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2, set before torch starts: the bench runs
itself again with them), as on
a CPU without AVX-512. studygroup's compiled kernel (model/row_kernels.py, built for this CPU)
multiplies generation's steps only; the bench says whether the redraws used it.

    .venv/bin/python bench/silence_redraw.py                # the default model, 20 rounds
    .venv/bin/python bench/silence_redraw.py --rounds 40 --model FILE.gguf --json out.json
    .venv/bin/python bench/silence_redraw.py --avx2         # torch, oneDNN and MKL kept to AVX2
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

import studygroup  # before torch: its thread policy (studygroup/__init__.py)

TEXT = ("Every Thursday evening, Tom and Maria met in the quiet library on the hill to study for the chemistry "
        "exam together. Tom forgot his notes and his two pencils, so after an hour of work, Maria always brought the")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=20, help="silencings measured per app (default 20)")
    p.add_argument("--model", default=None, metavar="PATH", help="GGUF file (default: the default model)")
    p.add_argument("--text", default=TEXT)
    p.add_argument("--json", default=None, metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--avx2", action="store_true", help="keep torch, oneDNN and MKL to AVX2 (as on a CPU without AVX-512)")
    return p.parse_args(argv)


#: The vector instruction sets named in the CPU's description, and what lscpu calls them.
INSTRUCTION_SETS = {"AVX2": "avx2", "AVX-512": "avx512f", "AMX": "amx_tile"}
#: Variables that keep torch, oneDNN and MKL (torch's sgemm) to fewer instruction sets than the CPU has.
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
#: Their values for a CPU with AVX2 and no AVX-512 (--avx2).
AVX2_ONLY = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
#: The redraw's target, seconds (p50 at ~44 members on 2 cores).
TARGET_S = 0.3
#: Last words for the first draws' texts: each a text the app has not seen.
FIRST_WORDS = (" book", " cake", " tea", " map", " pen", " bag", " box", " key", " cup", " hat", " coat", " ball",
               " lamp", " bell", " shoe", " kite", " milk", " rice", " salt", " soap", " rope", " coin", " card", " note")


def avx2_env() -> dict:
    """os.environ with torch, oneDNN and MKL kept to AVX2 (a value set already wins)."""
    return {**AVX2_ONLY, **os.environ}


def with_avx2(argv) -> None:
    """Run this bench again with torch, oneDNN and MKL kept to AVX2, unless they are already (torch reads
    its limit once, when it starts its kernels); exits with its status."""
    if all(os.environ.get(k) for k in AVX2_ONLY):
        return
    raise SystemExit(subprocess.run([sys.executable, *sys.argv[:1], *argv], env=avx2_env()).returncode)


def first_texts(text: str, n: int) -> list[str]:
    """n texts the app has not seen: text with its last word replaced by FIRST_WORDS[k], round and round
    with a number after it once the words run out."""
    stem = text.rsplit(" ", 1)[0]
    return [stem + FIRST_WORDS[k % len(FIRST_WORDS)] + (f" {k // len(FIRST_WORDS)}" if k >= len(FIRST_WORDS) else "")
            for k in range(n)]


def percentiles(seconds) -> tuple[float, float]:
    """(p50, p95) of seconds."""
    ordered = sorted(seconds)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def against(p50: float, p95: float, first_p50: float) -> str:
    """The p50 and p95 against the target and against the first draw's p50, in words."""
    return (f"p50 {p50:.3f} s  p95 {p95:.3f} s: p50 {p50 / TARGET_S:.2f}x the target ({TARGET_S:.3f} s), "
            f"{p50 / first_p50:.2f}x the first draw (p50 {first_p50:.3f} s)")


def cpu() -> str:
    """The CPU's model name, its vector instruction sets (and any limit set on those torch uses),
    the cores this process may use and the load average."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        name = next((l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name")), "unknown CPU")
        flags = next((l.split(":", 1)[1].split() for l in out.splitlines() if l.startswith("Flags")), [])
    except (OSError, subprocess.SubprocessError):
        name, flags = "unknown CPU (no lscpu)", []
    sets = " ".join(k for k, flag in INSTRUCTION_SETS.items() if flag in flags) or "no AVX2"
    limits = "".join(f"; {v}={os.environ[v]}" for v in ISA_LIMITS if v in os.environ)
    return f"{name} ({sets}{limits}), {len(os.sched_getaffinity(0))} cores, load average {os.getloadavg()[0]:.1f}"


def serve(app):
    """app behind uvicorn on a free loopback port, in a thread: (its URL, the server)."""
    import uvicorn

    from studygroup.web.serve import bind, url

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return url(sock).rstrip("/"), server


def silencings(T: int, L: int, H: int, n: int):
    """n silencings, each new: members and heads in turns. Since a run silencing a head computes
    the layers from the head's on, and one silencing a member the rows from the member's on, the
    heads' layers are spread over the model (every 7th layer from the last, round and round) and
    the members over members 1 … T - 2 (each the next by a stride of about 0.38·(T - 2) that
    shares no factor with T - 2, round and round: every member once before any twice).

    >>> [s["silence_members"][0] for s in silencings(12, 30, 9, 8) if s["silence_members"]]
    [1, 8, 5, 2]
    """
    N = T - 2
    stride = next(s for s in range(max(1, round(0.38 * N)), N + 1) if math.gcd(s, N) == 1)
    members = iter(1 + (stride * k) % N for k in range(N))
    heads = iter((L - 1 - (7 * k) % L, (k // L) % H) for k in range(L * H))  # every layer where 7 and L share no factor
    for r in range(n):
        j = next(members, None) if r % 2 == 0 else None
        yield {"silence_members": [j], "silence_heads": []} if j is not None else \
            {"silence_members": [], "silence_heads": [list(next(heads))]}


def redraw(client, base: str, text: str, layer: int, head: int, silencing: dict) -> dict:
    """The page's three requests after a silencing; seconds each and their sum, and the CPU
    seconds this process (server and client) spent on them: a figure a busy machine inflates less."""
    times, cpu_before = {}, _cpu_seconds()
    for name, body in (("conclusion", {"text": text, "top": 10}), ("model_view", {"text": text, "packed": True}),
                       ("head", {"text": text, "layer": layer, "head": head, "notation": "paper", "packed": True})):
        t = time.perf_counter()
        r = client.post(f"{base}/api/{name}", json={**body, **silencing})
        r.read()
        if r.status_code != 200:
            raise SystemExit(f"/api/{name} answered {r.status_code}: {r.text[:300]}")
        times[name] = time.perf_counter() - t
    times["sum"] = sum(times.values())
    times["cpu"] = _cpu_seconds() - cpu_before
    return times


def _cpu_seconds() -> float:
    """User and system CPU seconds of this process so far, every thread's."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.avx2:
        with_avx2(sys.argv[1:] if argv is None else list(argv))
    load_at_start = os.getloadavg()[0]
    if not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & set(os.environ):  # as `studygroup serve` has them: workers
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # that sleep at once (studygroup.model.threads), set before torch
    model = studygroup.load(args.model)
    import httpx

    from studygroup.web.app import Limits, create_app

    T, c = len(model.tokenize(args.text)), model.config
    apps = {"one pass kept": Limits(), "no pass kept": Limits(runs_kept=0)}
    urls = {name: serve(create_app(model, limits))[0] for name, limits in apps.items()}
    layer, head = c.n_layers - 1, 0
    figures = {name: [] for name in apps}
    firsts, fresh = [], iter(first_texts(args.text, args.rounds))
    nothing = {"silence_members": [], "silence_heads": []}
    with httpx.Client(timeout=600) as client:
        for base in urls.values():  # the page's first view of the text: nothing silenced
            for name, body in (("conclusion", {"text": args.text}), ("model_view", {"text": args.text, "packed": True}),
                               ("head", {"text": args.text, "layer": layer, "head": head, "packed": True})):
                client.post(f"{base}/api/{name}", json=body).raise_for_status()
        for r, silencing in enumerate(silencings(T, c.n_layers, c.n_heads, args.rounds)):
            order = list(apps) if r % 2 == 0 else list(apps)[::-1]  # turns, so a busy spell hits both
            for name in order:
                figures[name].append(redraw(client, urls[name], args.text, layer, head, silencing))
            if r % 2 == 1:  # the peer: a text's first draw, on the app as `serve` makes it
                firsts.append(redraw(client, urls["one pass kept"], next(fresh), layer, head, nothing))
    kernels = sys.modules.get("studygroup.model.row_kernels")  # imported with generation's modules; built when used
    kernel = "used" if kernels is not None and kernels._library.cache_info().currsize else "not used"
    print(f"silence_redraw: {model.config.name}, T={T} members, {args.rounds} silencings per app; {cpu()} "
          f"(at the start {load_at_start:.1f}); studygroup's compiled kernel {kernel}")
    first_p50, first_p95 = percentiles([x["sum"] for x in firsts])
    print(f"  first draw     sum p50 {first_p50:.3f} s  p95 {first_p95:.3f} s   ({len(firsts)} texts not seen before, nothing silenced)")
    summary = {"first draw": {"p50": first_p50, "p95": first_p95}}
    for name, rows in figures.items():
        p50, p95 = percentiles(x["sum"] for x in rows)
        parts = {k: statistics.median(x[k] for x in rows) for k in ("conclusion", "model_view", "head")}
        by_kind = {"members": statistics.median(x["sum"] for x in rows[0::2]),
                   "heads": statistics.median(x["sum"] for x in rows[1::2]) if len(rows) > 1 else None}
        cpu_p50 = statistics.median(x["cpu"] for x in rows)
        summary[name] = {"p50": p50, "p95": p95, "slowest": max(x["sum"] for x in rows), "parts_p50": parts,
                         "sum_p50_by_kind": by_kind, "cpu_p50": cpu_p50, "to_target": p50 / TARGET_S,
                         "to_first_draw": p50 / first_p50}
        print(f"  {name:14s} sum {against(p50, p95, first_p50)}   (p50: conclusion "
              f"{parts['conclusion']:.3f}, model_view {parts['model_view']:.3f}, head {parts['head']:.3f}; "
              f"sum p50 silencing a member {by_kind['members']:.3f}, a head {by_kind['heads'] or float('nan'):.3f}; "
              f"CPU seconds p50 {cpu_p50:.3f}; slowest {summary[name]['slowest']:.3f} s)")
    ratio = summary["no pass kept"]["p50"] / summary["one pass kept"]["p50"]
    print(f"  one pass kept is {ratio:.2f}x as fast as no pass kept (p50 of the sum); target: p50 under {TARGET_S:.3f} s")
    out = {"cpu": cpu(), "load_at_start": load_at_start, "T": T, "rounds": args.rounds, "summary": summary,
           "ratio_p50": ratio, "compiled_kernel": kernel}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
