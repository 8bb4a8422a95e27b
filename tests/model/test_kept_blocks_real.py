"""The default model and Gemma 3 270M loaded with their matrices kept as the file's blocks
(STUDYGROUP_WEIGHTS=blocks) give `explain --json` as the float32 path does: the dequantized weights
are the same numbers in the same layout, multiplied the same way, so every forward number is
equal bit for bit. Gemma's unembedding (671 MB in float32) is multiplied a slice of rows at a time:
its forward products are still equal, but the gradient through it is summed slice by slice, so the
first-order silencing estimates (the only numbers from a gradient) may differ in float32's last
places: within 1e-3 of the largest estimate. The default model's unembedding is one slice: all equal."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ESTIMATE_TOLERANCE = 1e-3  # of the largest |estimate|


def explain_json(model: str | None, how: str) -> dict:
    env = dict(os.environ, STUDYGROUP_WEIGHTS=how)
    args = [sys.executable, "-m", "studygroup.cli", "explain", "The capital of France is", "--json"]
    p = subprocess.run(args + ([] if model is None else ["--model", model]), capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def differences(a, b, path="") -> list[tuple[str, float, float]]:
    """Every leaf where a and b differ: (its path, a's value, b's value); structure must match."""
    assert type(a) is type(b), path
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        return [d for k in a for d in differences(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list):
        assert len(a) == len(b), path
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [(path, a, b)]


def estimates(e, path="") -> list[float]:
    if isinstance(e, dict):
        return [x for k, v in e.items() for x in estimates(v, f"{path}.{k}")]
    if isinstance(e, list):
        return [x for v in e for x in estimates(v, path)]
    return [abs(e)] if "estimate" in path and isinstance(e, float) else []


@pytest.mark.parametrize("model, sliced", [(None, False), ("gemma-3-270m", True)], ids=["default", "gemma-3-270m"])
def test_explain_json_kept_as_blocks_is_the_float32_paths(model, sliced):
    blocks, plain = explain_json(model, "blocks"), explain_json(model, "float32")
    assert plain["predicted"] == blocks["predicted"]
    differ = differences(blocks, plain)
    if not sliced:
        assert differ == []
    largest = max(estimates(plain))
    assert all("estimate" in path and abs(x - y) <= ESTIMATE_TOLERANCE * largest for path, x, y in differ), differ[:3]
