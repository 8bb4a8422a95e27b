"""The package's metadata builds without a warning (what `make` prints at set-up)."""
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_METADATA = ("import sys; from setuptools import build_meta; "
                  "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))")


def test_metadata_builds_without_a_deprecation_warning(tmp_path):
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path)
    shutil.copytree(ROOT / "studygroup", tmp_path / "studygroup", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run([sys.executable, "-c", BUILD_METADATA, str(out)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Deprecat" not in done.stderr and "license" not in done.stderr.lower(), done.stderr
    metadata = (out / done.stdout.split()[-1] / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata
