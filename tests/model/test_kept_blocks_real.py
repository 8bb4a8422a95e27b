"""The default model and Gemma 3 270M loaded with their matrices kept as the file's blocks
(STUDYGROUP_WEIGHTS=blocks) give `explain --json` as the float32 path does: the dequantized weights
are the same numbers in the same layout, multiplied the same way, so every forward number is
equal bit for bit. Gemma's unembedding (671 MB in float32) is multiplied a slice of rows at a time:
the gradient through it is summed slice by slice, so the first-order silencing estimates (the only
numbers from a gradient) may differ in float32's last places: within 1e-3 of the largest estimate.
In the pass with a gradient (explain's base run) MKL may also sum the one row's product by the
whole matrix in another order than by a slice (seen on an Intel Xeon with AVX-512: 14 of the
262,144 logits one float32 unit in the last place apart), so every probability and effect measured
against those logits may differ in its last places too: within 1e-6 of each other, the words and
the predicted word the same. The default model's unembedding is one slice: all equal."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ESTIMATE_TOLERANCE = 1e-3  # of the largest |estimate|
RELATIVE = 1e-6  # Gemma: any other number, of its size (at least 1)


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
    assert plain["predicted"]["id"] == blocks["predicted"]["id"]
    differ = differences(blocks, plain)
    if not sliced:
        assert differ == []
    largest = max(estimates(plain))
    far = [(path, x, y) for path, x, y in differ if "estimate" in path and abs(x - y) > ESTIMATE_TOLERANCE * largest
           or "estimate" not in path and not (isinstance(x, float) and abs(x - y) <= RELATIVE * max(1.0, abs(y)))]
    assert far == [], far[:3]
