"""One answer per file and text: with an empty cache (the weights dequantized now) and with a warm
one (mapped from the cache), `studygroup explain --json` prints the same bytes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def explain_json(cache: Path) -> str:
    env = dict(os.environ, STUDYGROUP_CACHE_DIR=str(cache))
    p = subprocess.run([sys.executable, "-m", "studygroup.cli", "explain", "--json"], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_the_first_run_and_a_later_run_print_the_same_json(tmp_path):
    cold = explain_json(tmp_path / "cache")
    assert any((tmp_path / "cache").glob("*.weights.safetensors"))  # the first run wrote the entry
    assert explain_json(tmp_path / "cache") == cold
