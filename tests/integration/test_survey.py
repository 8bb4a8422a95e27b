"""survey: every head's role scores over a corpus, in Parquet shards, on a local pool or Ray.

The scores are recomputed here from the recorded weights (test_roles.numpy_roles) and must equal
the shards' rows; local and Ray runs must give the same summaries bit for bit; a two-node Ray
cluster (ray.cluster_utils.Cluster: two raylets on the loopback address, one CPU each) runs shards
on both nodes and redoes the shard whose actor was killed; a driver killed with SIGKILL resumes
without losing or doubling a shard; bad input is one line, exit 2, nothing written.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray's nodes on 127.0.0.1 (read when ray is imported)

import numpy as np  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402

import studygroup  # noqa: E402
from studygroup.cli import main  # noqa: E402
from studygroup.study.roles import ROLES, roles  # noqa: E402
from studygroup.study.survey.shards import SCORED  # noqa: E402
from studygroup.study.survey.summary import THRESHOLD  # noqa: E402
from studygroup.study.survey.survey import load_survey, survey  # noqa: E402
from integration.test_roles import numpy_roles  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBE = dict(corpus="probe", n=6, tokens=16, shard_size=2)


@pytest.fixture(scope="module")
def tiny_path(tiny_model) -> str:
    return str(tiny_model.path)


@pytest.fixture(scope="module")
def local(tiny_path, tmp_path_factory):
    """The tiny model's probe survey on the local pool (one process)."""
    out = tmp_path_factory.mktemp("local") / "s"
    return out, survey(out, model=tiny_path, workers=1, **PROBE)


@pytest.fixture(scope="module", autouse=True)
def no_ray_left():
    yield
    import ray

    ray.shutdown()


def rows(out) -> dict:
    t = pq.read_table(Path(out) / "shards")
    return {c: t[c].to_pylist() for c in t.column_names}


def test_rows_equal_a_plain_recomputation_of_roles(local, tiny_path):
    out, s = local
    model = studygroup.load(tiny_path)
    r = rows(out)
    L, H = model.config.n_layers, model.config.n_heads
    assert len(r["score"]) == 6 * L * H * len(SCORED)
    assert len(set(zip(r["seq"], r["layer"], r["head"], r["role"]))) == len(r["score"])  # nothing twice
    assert set(r["model_sha256"]) == {hashlib.sha256(Path(tiny_path).read_bytes()).hexdigest()}
    assert set(r["tokens"]) == {16} and set(r["shard"]) == {0, 1, 2}
    got = {(q, l, h, role): x for q, l, h, role, x in zip(r["seq"], r["layer"], r["head"], r["role"], r["score"])}
    ids_of = [_probe_sequence(model, q) for q in range(6)]
    assert set(r["corpus_sha256"]) == {hashlib.sha256(np.array(ids_of, "<i8").tobytes()).hexdigest()}
    for q, ids in enumerate(ids_of):
        run = model.run(ids, record="all")
        same = roles(model, ids)
        for l in range(L):
            W = run["weights", l].double().numpy()  # (H, T, T)
            for h in range(H):
                expected = {**numpy_roles(W[h], ids, len(ids)), "first": W[h, 1:, 0].mean()}
                for role in SCORED:
                    _close(got[q, l, h, role], expected[role])
                for role in ROLES:  # and `roles` on the same sequence
                    _close(got[q, l, h, role], getattr(same.heads[l * H + h].roles, role))


def _probe_sequence(model, q: int) -> list[int]:
    """Sequence q of the probe corpus, drawn here: 8 ordinary tokens by default_rng(q), twice."""
    ordinary = [t for t, kind in enumerate(model.tokenizer.token_types) if kind == 1]
    drawn = np.random.default_rng(q).choice(ordinary, size=8, replace=False).tolist()
    return ([model.tokenizer.bos_id] if model.tokenizer.add_bos else []) + (drawn + drawn)[:16]


def _close(got: float, expected: float) -> None:
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected, abs=1e-6)


def test_summary_is_the_mean_of_the_rows_with_an_interval(local):
    out, s = local
    r = rows(out)
    for h in [x for x in s.heads if x.role in ("induction", "previous")][:8]:
        scores = [x for q, l, hd, role, x in zip(r["seq"], r["layer"], r["head"], r["role"], r["score"])
                  if (l, hd, role) == (h.layer, h.head, h.role) and not math.isnan(x)]
        assert h.n == len(scores) and h.mean == pytest.approx(np.mean(scores), abs=1e-12)
        assert h.above == sum(x >= THRESHOLD for x in scores)
        assert min(scores) - 1e-12 <= h.low <= h.high <= max(scores) + 1e-12
    first = np.array([x for role, x in zip(r["role"], r["score"]) if role == "first"]).reshape(6, -1)
    assert s.sink_rate["mean"] == pytest.approx((first > 0.3).mean(1).mean())
    top = s.top("induction", 1)[0]
    numbers = f"({top.mean:.2f} [{top.low:.2f}, {top.high:.2f}])"
    warning, first_role = s.story()[:2]  # sequences of 16 tokens: roles' own warning on a text too short to tell
    assert warning.startswith("16 members are too few to name a role: 7 questions hear a member before its last 9")
    assert "Each of these probe sequences is 16 tokens, so the roles below do not say what the heads do" in warning
    assert first_role == (f"head {top.layer}.{top.head} is an induction head on {top.above} of {top.n} probe sequences {numbers}"
                            if 2 * top.above >= top.n else f"no head is an induction head on most probe sequences: the "
                            f"closest, head {top.layer}.{top.head}, is on {top.above} of {top.n} {numbers}")


def test_a_rerun_skips_finished_shards_and_other_arguments_are_refused(local, tiny_path):
    out, s = local
    before = {p.name: p.stat().st_mtime_ns for p in (out / "shards").iterdir()}
    again = survey(out, model=tiny_path, workers=1, **PROBE)
    assert {p.name: p.stat().st_mtime_ns for p in (out / "shards").iterdir()} == before
    assert again.to_dict() == s.to_dict()
    with pytest.raises(studygroup.InputError, match="holds a survey with other arguments .*tokens"):
        survey(out, model=tiny_path, workers=1, **{**PROBE, "tokens": 12})


def test_a_local_worker_killed_mid_shard_is_replaced(tiny_path, tmp_path, monkeypatch, local):
    marker = tmp_path / "died"
    monkeypatch.setenv("STUDYGROUP_SURVEY_FAULT", f"1:{marker}")
    survey(tmp_path / "s", model=tiny_path, workers=1, **PROBE)
    assert marker.exists()  # a worker died in shard 1, once
    _same_summaries(local[0], tmp_path / "s")


def _same_summaries(a, b) -> None:
    """summary.parquet equal bit for bit, and every row of every shard once."""
    assert pq.read_table(Path(a) / "summary.parquet").equals(pq.read_table(Path(b) / "summary.parquet"))
    assert pq.read_table(Path(a) / "shards", columns=["seq", "layer", "head", "role", "score"]).equals(
        pq.read_table(Path(b) / "shards", columns=["seq", "layer", "head", "role", "score"]))


def test_ray_started_here_gives_the_local_summaries(local, tiny_path, tmp_path):
    t = time.perf_counter()
    survey(tmp_path / "r", model=tiny_path, ray="local", workers=1, **PROBE)
    _same_summaries(local[0], tmp_path / "r")
    assert time.perf_counter() - t < 120


def test_two_ray_nodes_share_the_shards_and_redo_a_killed_one(local, tiny_path, tmp_path, monkeypatch):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        marker = tmp_path / "died"
        monkeypatch.setenv("STUDYGROUP_SURVEY_FAULT", f"1:{marker}")
        survey(tmp_path / "r", model=tiny_path, ray=cluster.address, **{**PROBE, "shard_size": 1})
        nodes = [pq.read_schema(p).metadata[b"studygroup.node"] for p in sorted((tmp_path / "r" / "shards").iterdir())]
        assert len(nodes) == 6 and len(set(nodes)) == 2  # both nodes scored shards
        assert marker.exists()  # the actor scoring shard 1 died in it; Ray started it again
        assert pq.read_table(tmp_path / "r" / "summary.parquet").equals(pq.read_table(local[0] / "summary.parquet"))
        one = pq.read_table(tmp_path / "r" / "shards")
        assert one.num_rows == pq.read_table(local[0] / "shards").num_rows  # nothing doubled
    finally:
        cluster.shutdown()


def _cli(*args, **kw) -> subprocess.Popen:
    code = "import sys; from studygroup.cli import main; sys.exit(main())"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code, "survey", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)


def test_resume_after_the_driver_is_killed(tmp_path):
    """The default model, one sequence per shard: SIGKILL after two shards, then the same command."""
    out, args = tmp_path / "s", ["--corpus", "probe", "--n", "6", "--tokens", "16", "--shard-size", "1", "--workers", "1"]
    p = _cli(*args, "--out", out)
    deadline = time.time() + 240
    while len(list((out / "shards").glob("shard-*.parquet"))) < 2 and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)  # the driver and its workers
    p.communicate()
    done = {f.name: (f.stat().st_ino, f.stat().st_mtime_ns) for f in (out / "shards").glob("shard-*.parquet")}
    assert 2 <= len(done) < 6 and not (out / "summary.parquet").exists()
    q = _cli(*args, "--out", out)
    stdout, stderr = q.communicate(timeout=300)
    assert q.returncode == 0, stderr
    assert {f: (x.stat().st_ino, x.stat().st_mtime_ns) for f in done for x in [out / "shards" / f]} == done  # kept
    t = pq.read_table(out / "shards")
    keys = pc.binary_join_element_wise(*(pc.cast(t[c], "string") for c in ("seq", "layer", "head", "role")), "/")
    assert t.num_rows == 6 * 30 * 9 * len(SCORED) == len(pc.unique(keys))  # nothing lost, nothing twice
    assert "is an induction head on" in stdout and not list((out / "shards").glob(".*"))
    assert load_survey(out).sequences == 6


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("bad")
    (d / "empty.txt").write_text("")
    (d / "binary.bin").write_bytes(bytes(range(256)))
    (d / "none").mkdir()
    (d / "text.txt").write_text("the tin " * 40)
    (d / "short.txt").write_text("the tin an ear")
    return {"empty": [d / "empty.txt"], "binary": [d / "binary.bin"], "no files": [d / "none"],
            "tokens 0": [d / "text.txt", "--tokens", "0"],
            "nothing listens": ["--corpus", "probe", "--ray", f"127.0.0.1:{_free_port()}"],
            "both": [d / "text.txt", "--corpus", "probe"], "short": [d / "short.txt", "--tokens", "60"]}


@pytest.mark.parametrize("case, says", [
    ("empty", "is empty"), ("binary", "not a text file"), ("no files", "holds no files"),
    ("tokens 0", "tokens=0: give a sequence length of 2 to 64"), ("nothing listens", "nothing listens there"),
    ("both", "give text files or --corpus"), ("short", "give no sequence of 60 tokens"),
])
def test_bad_input_is_one_line_and_writes_nothing(bad_inputs, tiny_path, tmp_path, capsys, case, says):
    out = tmp_path / "s"
    t = time.perf_counter()
    code = main(["survey", *map(str, bad_inputs[case]), "--out", str(out), "--model", tiny_path])
    err = capsys.readouterr().err
    assert code == 2 and time.perf_counter() - t < 30
    assert err.count("\n") == 1 and err.startswith("studygroup: error: ") and says in err, err
    assert not out.exists()


def test_the_report_shows_two_surveys_side_by_side(local, tiny_path, tmp_path, capsys, bad_inputs):
    files = tmp_path / "f"
    survey(files, bad_inputs["both"][:1], model=tiny_path, tokens=8, n=4, workers=1)
    assert main(["survey", "--report", str(local[0]), str(files)]) == 0
    out = capsys.readouterr().out
    page = (local[0] / "report" / "report.html").read_text()
    s = local[1]
    top = s.top("induction", 1)[0]
    assert s.story()[0] in out and "sequences of the files" in out
    assert (f"title='head {top.layer}.{top.head} over 6 probe sequences: induction {top.mean:.4g} [{top.low:.4g}, "
            f"{top.high:.4g}] (mean, 95% interval); an induction head (score ≥ 0.5) on {top.above} of 6'") in page
    assert page.count("<table class=grid>") == 2 * 7
    assert all((local[0] / "report" / f"{role}.png").stat().st_size > 1000 for role in SCORED)


def test_sequences_long_enough_to_tell_carry_no_warning(local):
    s = load_survey(local[0])
    s.tokens = 64  # its summary read as of 64-token sequences: roles can be told there
    assert not any("too few to name a role" in line for line in s.story())


def test_the_report_with_json_prints_each_surveys_json_and_where_the_report_went(local, capsys):
    assert main(["survey", "--report", str(local[0]), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["report"] == str(local[0] / "report" / "report.html")
    assert printed["surveys"] == [json.loads(load_survey(local[0]).to_json())]
