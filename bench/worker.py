"""A peer in its own process, answering the benchmark's requests one JSON line at a time.

    python bench/worker.py PROGRAM MODE[,MODE…] MODEL_PATH N_CTX

It imports the program, loads one peer per mode (a full run gives each process one mode, so that
its peak memory is that peer's alone; --quick groups them to start fewer processes), says
{"ready": true, "import_s": …, "modes": {mode: {"load_s": …} or {"error": …}}}, then answers each
request line on stdin:
  {"op": "prefill", "mode": m, "ids": [...]} -> {"seconds": one forward pass, "top1": id, "maxrss_mib": …}
  {"op": "tokenize", "text": "…"}           -> {"ids": [...]}          (ours only)
  {"op": "sizes"}                           -> {"sizes": {"n_layers": …}} (ours only)
  {"op": "quit"}                            -> exits
A request that fails answers {"error": "…"}; the worker goes on. The peak memory (ru_maxrss, a
high-water mark) is reported after every request: asking for T in increasing order, the caller
reads the peak of each T.

stdout carries only the protocol: whatever the libraries print goes to stderr.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

import peers


def maxrss_mib() -> float:
    """This process's peak resident memory so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mib() -> float:
    """This process's resident memory now, in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def answer(loaded: dict, request: dict) -> dict:
    """Carry out one request; "mode" picks the peer of this process that answers it."""
    peer = loaded[request.get("mode") or next(iter(loaded))]
    if request["op"] == "prefill":
        start = time.perf_counter()
        top1 = peer.prefill(request["ids"])
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "top1": top1, "maxrss_mib": maxrss_mib(), "rss_mib": rss_mib()}
    if request["op"] == "tokenize":
        return {"ids": peer.tokenize(request["text"])}
    if request["op"] == "sizes":
        return {"sizes": peer.sizes()}
    raise ValueError(f"unknown op {request['op']!r}")


def load(program: str, modes: list[str], path: Path, n_ctx: int) -> tuple[dict, dict]:
    """({mode: peer}, {mode: {"load_s"} or {"error"}}): a mode that fails to load leaves the others."""
    loaded, status = {}, {}
    for mode in modes:
        start = time.perf_counter()
        try:
            loaded[mode] = peers.make(program, mode, path, n_ctx)
            status[mode] = {"load_s": time.perf_counter() - start}
        except Exception as e:  # the caller reports it in the table and goes on
            traceback.print_exc()
            status[mode] = {"error": f"{type(e).__name__}: {e}"}
    return loaded, status


def serve(program: str, modes: list[str], path: Path, n_ctx: int, channel) -> None:
    """Load the peers, then answer requests from stdin until "quit" or end of input."""
    def send(message: dict) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    start = time.perf_counter()
    try:
        peers.import_program(program)
    except Exception as e:
        traceback.print_exc()
        send({"error": f"{type(e).__name__}: {e}"})
        return
    import_s = time.perf_counter() - start
    loaded, status = load(program, modes, path, n_ctx)
    send({"ready": True, "import_s": import_s, "modes": status, "maxrss_mib": maxrss_mib(), "rss_mib": rss_mib()})
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            return
        try:
            send(answer(loaded, request))
        except Exception as e:
            traceback.print_exc()
            send({"error": f"{type(e).__name__}: {e}", "maxrss_mib": maxrss_mib()})


def main() -> None:
    program, modes, path, n_ctx = sys.argv[1], sys.argv[2].split(","), Path(sys.argv[3]), int(sys.argv[4])
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w")  # the protocol's own copy of stdout
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # library prints (C code included) go to stderr
    serve(program, modes, path, n_ctx, channel)


if __name__ == "__main__":
    main()
