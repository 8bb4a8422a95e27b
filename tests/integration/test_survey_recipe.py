"""The README's two-machine recipe ("More than one machine"), run as written with both machines on
this one: its `ray start` commands as subprocesses on the loopback address (free ports, a
temporary folder per node and one CPU each added), then its `studygroup survey … --ray ADDRESS` on
the tiny model and its `--report`. Both nodes must have scored shards. The cluster is stopped by
ending the processes whose command line names its temporary folder (`ray stop` would end every
Ray process of the machine, other people's too).
"""
from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pyarrow.parquet as pq

from studygroup.study.survey.ray_runner import LOOPBACK_ONLY

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
CLI = [sys.executable, "-c", "import sys; from studygroup.cli import main; sys.exit(main())"]


def recipe() -> list[str]:
    """The README's recipe: its shell block's lines in "More than one machine", prompts kept."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## More than one machine"):]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1).splitlines()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_ports() -> list[str]:
    """Ports of one node of this machine's cluster, free ones instead of Ray's defaults (shared with others)."""
    names = ("node-manager", "object-manager", "dashboard-agent-listen", "dashboard-agent-grpc", "runtime-env-agent", "metrics-export")
    return [f"--{name}-port={_free_port()}" for name in names]


def _command(line: str, port: int, tiny: str, folder: Path, node: str) -> list[str]:
    """A line of the recipe as this machine runs it: both addresses 127.0.0.1, the port free; the
    ray start lines with their node's own temporary folder, ports and one CPU; a small corpus."""
    words = shlex.split(line.split("$ ", 1)[1].replace("A_ADDRESS", "127.0.0.1").replace("B_ADDRESS", "127.0.0.1")
                        .replace("6379", str(port)))
    if words[:2] == ["ray", "start"]:
        head = ["--include-dashboard=false"] if "--head" in words else []
        return [RAY, *words[1:], f"--temp-dir={folder / node}", "--num-cpus=1", *head, "--disable-usage-stats", *_node_ports()]
    assert words[0] == "studygroup"
    if "--n" in words:  # 4 sequences of 16 tokens, a shard each, on the tiny model
        at = words.index("--n")
        words[at:at + 2] = ["--n", "4", "--tokens", "16", "--shard-size", "1", "--model", tiny]
    return [*CLI, *words[1:]]


def _stop(folder: Path) -> None:
    """End this cluster's processes: those whose command line names its temporary folder."""
    mine = [p for p in psutil.process_iter(["cmdline"]) if str(folder) in " ".join(p.info["cmdline"] or [])]
    for p in mine:
        p.terminate()
    for p in psutil.wait_procs(mine, timeout=15)[1]:
        p.kill()


def test_the_readmes_two_machine_recipe_runs_shards_on_both_nodes(tiny_model, tmp_path):
    lines = recipe()
    assert lines[0].startswith("A$ export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=$(")
    assert lines[2].startswith("B$ export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=")
    assert lines[-1].split("#")[0].split() == ["A$", "ray", "stop;", "B$", "ray", "stop"]
    runs = [x for x in lines if x.startswith(("A$ ray start", "B$ ray start", "A$ studygroup"))]
    assert len(runs) == 4 and "--ray A_ADDRESS:6379" in runs[2] and runs[3].endswith("--report s")
    folder, port = Path(f"/tmp/sg-recipe-{os.getpid()}-{secrets.token_hex(4)}"), _free_port()  # short: Ray's sockets live in it
    env = {k: v for k, v in os.environ.items() if k != LOOPBACK_ONLY}  # "0" refuses a second node (a local Ray's)
    env.update(PYTHONPATH=str(ROOT), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    try:
        for line, node in zip(runs[:2], ("a", "b")):
            done = subprocess.run(_command(line, port, str(tiny_model.path), folder, node), cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=180)
            assert done.returncode == 0, done.stderr[-2000:]
        for line in runs[2:]:
            done = subprocess.run(_command(line, port, str(tiny_model.path), folder, ""), cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
    finally:
        _stop(folder)
        shutil.rmtree(folder, ignore_errors=True)
    shards = sorted((tmp_path / "s" / "shards").glob("shard-*.parquet"))
    nodes = {pq.read_schema(f).metadata[b"studygroup.node"] for f in shards}
    assert len(shards) == 4 and len(nodes) == 2, nodes
    assert (tmp_path / "s" / "report" / "report.html").is_file() and "probe sequences" in done.stdout
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(folder) in " ".join(p.info["cmdline"] or [])]
