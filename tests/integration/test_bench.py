"""The benchmark's --quick mode on the tiny model: the results have their structure, and the peers agree.

Correctness only: nothing here judges speed (quick runs never judge targets). llama.cpp is not
needed; when it is installed it runs too, but no assertion counts on it.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
OURS_MODES = ("none", "default", "last_row", "all", "maps16", "maps_on_demand")
TRANSFORMERS_MODES = ("sdpa", "eager", "eager_attn")


@pytest.fixture(scope="module")
def quick(tiny_model, tmp_path_factory) -> tuple[dict, str]:
    """(results, printed tables) of `bench/run.py --quick` on the tiny model."""
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    done = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--model", str(tiny_model.path),
                           "--out", str(out)], capture_output=True, text=True, timeout=240, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


def rows(results: dict, program: str) -> dict[str, dict]:
    return {r["mode"]: r for r in results["prefill"] if r["program"] == program}


def test_every_peer_ran_once_at_T_32(quick):
    results, _ = quick
    assert results["meta"]["quick"] and results["meta"]["lengths"] == [32]
    for program, modes in (("ours", OURS_MODES), ("transformers", TRANSFORMERS_MODES)):
        by_mode = rows(results, program)
        for mode in modes:
            r = by_mode[mode]
            assert r["error"] is None and r["skipped"] is None, r
            assert r["T"] == 32 and r["reps"] == len(r["seconds"]) == 1 and r["median_s"] > 0
            assert r["maxrss_mib"] > 0 and isinstance(r["top1"], int)


def test_ours_and_transformers_agree_on_the_top1_token(quick):
    results, _ = quick
    tops = {(r["program"], r["mode"]): r["top1"] for r in results["prefill"]
            if r["program"] in ("ours", "transformers") and r["mode"] != "bf16"}
    assert len(set(tops.values())) == 1, tops


def test_bfloat16_row_is_there_whether_or_not_it_runs(quick):
    results, _ = quick
    r = rows(results, "ours")["bf16"]
    assert (r["error"] is not None) or r["reps"] == 1


def test_startup_entries_ran(quick):
    results, _ = quick
    starts = {s["name"]: s for s in results["startup"]}
    for name in ("explain_cold", "explain_warm", "ours_cold", "ours_warm", "transformers"):
        s = starts[name]
        assert s["error"] is None, s["error"]
        assert len(s["wall_s"]) == 1 and s["median_s"] > 0 and s["maxrss_mib"] > 0
    assert starts["ours_warm"]["top1"] == starts["transformers"]["top1"]
    assert starts["explain_warm"]["output"].strip()


def test_ratios_are_formed_but_never_judged_in_quick_mode(quick):
    results, printed = quick
    names = {r["name"] for r in results["ratios"]}
    assert {"ours none / transformers sdpa", "ours last row / ours none",
            "peak: ours all / transformers eager+attentions", "explain warm, seconds"} <= names
    assert all(r["meets"] is None for r in results["ratios"])
    assert "### Prefill time" in printed and "### Ratios" in printed and "### Targets" not in printed


def test_record_all_is_not_run_past_its_bound(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import run

    sizes = {"n_layers": 30, "n_heads": 9}
    slot = run.Slot(worker=SimpleNamespace(program="ours"), mode="all", label="studygroup, record=\"all\"")
    assert "record=\"all\" measured up to T=2048" in run.why_skip(slot, run.ALL_MAX_T + 1, sizes)
    monkeypatch.setattr(run, "mem_available_gib", lambda: 1000.0)  # plenty: only the bound can skip it
    assert run.why_skip(slot, run.ALL_MAX_T, sizes) is None
