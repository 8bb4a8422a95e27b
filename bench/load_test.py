"""Load test of `studygroup serve`: many concurrent clients, mixed requests, bounded in time and count.

Starts the server in a second process on a free loopback port (or uses --url, loopback only),
then runs --clients concurrent clients for --duration seconds. Each client loops: it picks an
explain, a head or a silencing request (texts from a small pool, so some answers are cached and
some are computed), sends it, waits for the answer, and after a 503 ("busy") waits 0.2 s before
its next request. The server's memory (RSS, via psutil on its pid) is sampled twice a second.

It reports requests served, latency percentiles, answers by status code, the server's peak
memory and its growth between the first and the last window (20 s, or a third of the run if
shorter). Targets: no 5xx other than the deliberate 503s, no growth of memory.

    .venv/bin/python bench/load_test.py                          # 50 clients, 60 s, default model
    .venv/bin/python bench/load_test.py --duration 10 --clients 10 --model tiny.gguf --json out.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil

TEXTS = [
    "Cash or credit card? I have a lot",
    "I have a lot",
    "The cat sat on the",
    "Paris is the capital of",
    "One, two, three,",
]
KINDS = ("explain", "head", "silence")
MAX_REQUESTS = 200_000  # a bound on the count, whatever the duration
REQUEST_TIMEOUT = 300.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    p.add_argument("--model", default=None, metavar="PATH", help="GGUF file for the server (default: the default model)")
    p.add_argument("--url", default=None, help="use a running server instead (loopback only); give --pid for memory")
    p.add_argument("--pid", type=int, default=None, help="the running server's process id (with --url)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, metavar="FILE", help="also write the figures as JSON")
    return p.parse_args(argv)


# ---- the server --------------------------------------------------------------------------------
def start_server(model: str | None) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "studygroup.web.serve", "--port", "0", "--no-warm"]
    if model:
        cmd += ["--model", model]
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"the server exited: {proc.wait()}")
        m = re.search(r" at (http://127\.0\.0\.1:\d+/)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise SystemExit("the server printed no URL within 180 s")


def check_loopback(url: str) -> None:
    host = urlsplit(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"refusing to load {host}: this test runs against a loopback server only")


# ---- the clients ----------------------------------------------------------------------------------
def request_for(kind: str, rng: random.Random, info: dict) -> tuple[str, dict]:
    text = rng.choice(TEXTS)
    m = info["model"]
    if kind == "explain":
        return "/api/explain", {"text": text}
    if kind == "head":
        return "/api/head", {"text": text, "layer": rng.randrange(m["n_layers"]), "head": rng.randrange(m["n_heads"]),
                             "notation": rng.choice(["paper", "columns"])}
    n_members = len(text.split())  # at least this many tokens
    body = {"text": text, "silence_members": rng.sample(range(n_members), rng.randint(0, 2))}
    if rng.random() < 0.5:
        body["silence_heads"] = [[rng.randrange(m["n_layers"]), rng.randrange(m["n_heads"])]]
    return "/api/conclusion", body


async def client(i: int, http: httpx.AsyncClient, info: dict, stop: float, log: list, seed: int) -> None:
    rng = random.Random(seed * 1000 + i)
    while time.monotonic() < stop and len(log) < MAX_REQUESTS:
        kind = rng.choice(KINDS)
        path, body = request_for(kind, rng, info)
        t0 = time.monotonic()
        try:
            r = await http.post(path, json=body)
            status = r.status_code
            if status >= 400:
                json.loads(r.content)["error"]  # every refusal carries a JSON message
        except (httpx.HTTPError, ValueError, KeyError) as e:
            status = f"failed ({type(e).__name__})"
        log.append((t0, kind, status, time.monotonic() - t0))
        if status == 503:
            await asyncio.sleep(0.2)


async def sample_memory(pid: int | None, stop: float, samples: list) -> None:
    if pid is None:
        return
    proc = psutil.Process(pid)
    while time.monotonic() < stop:
        try:
            samples.append((time.monotonic(), proc.memory_info().rss))
        except psutil.Error:
            return
        await asyncio.sleep(0.5)


async def run_load(url: str, pid: int | None, clients: int, duration: float, seed: int):
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url.rstrip("/"), timeout=REQUEST_TIMEOUT, limits=limits, trust_env=False) as http:
        info = (await http.get("/api/info")).json()
        start = time.monotonic()
        stop = start + duration
        log, memory = [], []
        sampler = asyncio.create_task(sample_memory(pid, stop + REQUEST_TIMEOUT, memory))
        tasks = [asyncio.create_task(client(i, http, info, stop, log, seed)) for i in range(clients)]
        await asyncio.wait(tasks, timeout=duration + REQUEST_TIMEOUT)
        for t in tasks:
            t.cancel()
        end = time.monotonic()
        sampler.cancel()
    return start, end, log, memory


# ---- the figures ----------------------------------------------------------------------------------
def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def summary(start: float, end: float, duration: float, log: list, memory: list, clients: int) -> dict:
    by_code = Counter(str(s) for _, _, s, _ in log)
    ok = [d for _, _, s, d in log if s == 200]
    per_kind = defaultdict(list)
    for _, kind, s, d in log:
        if s == 200:
            per_kind[kind].append(d)
    lat = lambda xs: {f"p{q}": percentile(xs, q) for q in (50, 90, 99)} | {"max": max(xs, default=None), "n": len(xs)}  # noqa: E731
    window = min(20.0, duration / 3)
    first = [m for t, m in memory if t - start <= window]
    last = [m for t, m in memory if start + duration - window <= t <= start + duration]
    mib = lambda b: None if b is None else round(b / 2**20, 1)  # noqa: E731
    bad = {c: n for c, n in by_code.items() if not c.isdigit() or (int(c) >= 500 and c != "503")}
    return {
        "clients": clients, "duration_s": duration, "wall_s": round(end - start, 1),
        "requests": len(log), "served_200": len(ok), "requests_per_s": round(len(log) / max(1e-9, end - start), 1),
        "by_code": dict(sorted(by_code.items())),
        "latency_200_s": lat(ok), "latency_200_s_by_kind": {k: lat(v) for k, v in sorted(per_kind.items())},
        "memory_mib": {"peak": mib(max((m for _, m in memory), default=None)), "first_window_max": mib(max(first, default=None)),
                       "last_window_max": mib(max(last, default=None)), "window_s": window, "samples": len(memory)},
        "unexpected_errors": bad,
    }


def verdict(s: dict) -> list[str]:
    problems = []
    if s["unexpected_errors"]:
        problems.append(f"answers other than 2xx/4xx/503: {s['unexpected_errors']}")
    m = s["memory_mib"]
    if m["first_window_max"] is not None and m["last_window_max"] > m["first_window_max"] * 1.10 + 50:
        problems.append(f"memory grew from {m['first_window_max']} MiB to {m['last_window_max']} MiB")
    return problems


def main(argv=None) -> int:
    args = parse_args(argv)
    proc = None
    if args.url:
        check_loopback(args.url)
        url, pid = args.url, args.pid
    else:
        proc, url = start_server(args.model)
        pid = proc.pid
    try:
        print(f"load: {args.clients} clients for {args.duration:.0f} s against {url} (server pid {pid})", flush=True)
        start, end, log, memory = asyncio.run(run_load(url, pid, args.clients, args.duration, args.seed))
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
    s = summary(start, end, args.duration, log, memory, args.clients)
    problems = verdict(s)
    s["verdict"] = problems or ["ok"]
    print(json.dumps(s, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(s, indent=2) + "\n", encoding="utf-8")
    return 1 if problems else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
