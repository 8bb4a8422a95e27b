"""`studygroup serve` while a local process holds many connections that never finish their headers.

    python bench/idle_connections.py [--idle 1100] [--nofile 1024] [--model FILE.gguf]

Starts the server in a process of its own under a file limit of --nofile, opens --idle
connections that send half a request line and then nothing, keeps them open, and times
/api/info five times meanwhile (target: each within a second). Prints one JSON object: the
answers' times, how many idle connections the server still held at the end, the size of what
the server wrote to its log, and the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path


def cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    return "unknown"


def start(model: str | None, nofile: int, log) -> tuple[subprocess.Popen, tuple[str, int]]:
    cmd = [sys.executable, "-m", "studygroup.web.serve", "--port", "0", "--no-warm"] + (["--model", model] if model else [])
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))  # noqa: E731
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, preexec_fn=limit)
    line = server.stdout.readline()
    m = re.search(r"http://([\d.]+):(\d+)", line)
    if m is None:
        server.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return server, (m[1], int(m[2]))


def info(address) -> float:
    start = time.perf_counter()
    with socket.create_connection(address, timeout=30) as s:
        s.sendall(b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    if not data.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"/api/info answered {data[:80]!r}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=1100)
    parser.add_argument("--nofile", type=int, default=1024)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this side holds every idle connection
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"sg-idle-{os.getpid()}.log"
    with open(log_path, "w") as log:
        server, address = start(args.model, args.nofile, log)
        try:
            idle = []
            for _ in range(args.idle):
                s = socket.create_connection(address)
                s.sendall(b"GET /api/in")
                idle.append(s)
            time.sleep(1)
            times = [info(address) for _ in range(5)]
            still_open = sum(1 for s in idle if _open(s))
        finally:
            server.terminate()
            server.wait(10)
            for s in idle:
                s.close()
    print(json.dumps({"cpu": cpu(), "idle": args.idle, "nofile": args.nofile, "info_s": times,
                      "idle_still_open": still_open, "log_bytes": log_path.stat().st_size}, indent=1))
    print(log_path.read_text()[:2000], end="")  # what the server logged, at most its start
    log_path.unlink()


def _open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


if __name__ == "__main__":
    main()
