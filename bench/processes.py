"""Child processes of a benchmark: long-lived peers (`worker.py`) and timed whole starts.

Each peer runs in a process of its own so that its peak memory (ru_maxrss) is its own, and so
that a peer killed for memory takes nothing else with it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
#: Where bench/build_llama.sh installs llama-cpp-python (git-ignored); STUDYGROUP_BENCH_LLAMA overrides it.
LLAMA_DIR = Path(os.environ.get("STUDYGROUP_BENCH_LLAMA", REPO / ".bench" / "llama"))


def llama_available() -> bool:
    """Whether llama-cpp-python can be imported, from LLAMA_DIR or from this environment."""
    import importlib.util

    return (LLAMA_DIR / "llama_cpp" / "__init__.py").is_file() or importlib.util.find_spec("llama_cpp") is not None


def child_env(program: str, cache_dir: Path | None = None) -> dict[str, str]:
    """Environment of a child: offline, our cache dir, and llama-cpp-python's folder for llama.cpp only."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1"}
    # As on a user's machine, Python caches compiled modules: with PYTHONDONTWRITEBYTECODE (set in
    # some sandboxes) every start compiles studygroup's modules again (~0.08 s).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if cache_dir is not None:
        env["STUDYGROUP_CACHE_DIR"] = str(cache_dir)
    if program == "llama.cpp" and LLAMA_DIR.is_dir():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(LLAMA_DIR), env.get("PYTHONPATH")]))
    return env


def mem_available_gib() -> float:
    """MemAvailable from /proc/meminfo, in GiB."""
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) / 2**20


class Worker:
    """Peers of one program loaded in a process of their own (bench/worker.py), one request at a time."""

    def __init__(self, program: str, modes: list[str], model: Path, n_ctx: int, cache_dir: Path, log_dir: Path):
        self.program, self.modes, self.error = program, modes, None
        self.log = log_dir / f"{program}-{'-'.join(modes)}.log"
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "worker.py"), program, ",".join(modes), str(model), str(n_ctx)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log, "w"), text=True,
            env=child_env(program, cache_dir), cwd=REPO)
        self.ready: dict | None = None

    def wait_ready(self) -> dict:
        """The worker's first message: {"ready", "import_s", "modes": {mode: {"load_s"} or {"error"}}} or {"error"}."""
        if self.ready is None:
            self.ready = self._read()
            self.error = self.error or self.ready.get("error")
        return self.ready

    def mode_error(self, mode: str) -> str | None:
        """Why this mode cannot run (the process failed, or this mode's load did), or None."""
        if self.error:
            return self.error
        return self.wait_ready().get("modes", {}).get(mode, {}).get("error")

    @property
    def alive(self) -> bool:
        return self.error is None and self.process.poll() is None

    def ask(self, op: str, **fields) -> dict:
        """Send one request, wait for its answer; a dead worker answers {"error": …} from now on."""
        if not self.alive:
            return {"error": self.error or f"exited with status {self.process.returncode}"}
        try:
            self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass
        return self._read()

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if line:
            return json.loads(line)
        status = self.process.wait()
        killed = " (killed: out of memory?)" if status == -9 else ""
        self.error = f"exited with status {status}{killed}: {self.log_tail()}"
        return {"error": self.error}

    def log_tail(self, lines: int = 3) -> str:
        return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-lines:])

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass
class Timed:
    """One whole process, timed from just before it starts to its exit."""

    wall_s: float
    maxrss_mib: float  # the child's own peak resident memory (wait4's rusage, not mixed with others)
    status: int
    stdout: str
    stderr: str


def timed_run(argv: list[str], env: dict[str, str], timeout_s: float = 600) -> Timed:
    """Run argv to completion; wall time from spawn to exit, and this child's own ru_maxrss."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=REPO, text=True)
        watchdog = threading.Timer(timeout_s, process.kill)
        watchdog.start()
        _, status, usage = os.wait4(process.pid, 0)  # wait4, not Popen.wait: the rusage of this one child
        watchdog.cancel()
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        return Timed(wall, usage.ru_maxrss / 1024, process.returncode, out.read(), err.read())
