"""The package's metadata and its editable install build without a warning (what `make` prints at set-up)."""
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_METADATA = ("import sys; from setuptools import build_meta; "
                  "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))")
BUILD_EDITABLE = ("import sys; from setuptools import build_meta; "
                  "print(build_meta.build_editable(sys.argv[1]))")


def project_copy(tmp_path):
    """What pip builds the package from: pyproject.toml, the README and the package."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path)
    shutil.copytree(ROOT / "studygroup", tmp_path / "studygroup", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "out"
    out.mkdir()
    return out


def makefile_variable(name):
    """The value of one of the Makefile's variables, as make expands it."""
    shown = subprocess.run(["make", "-s", "--no-print-directory", "-f", "Makefile", "-f", "-", "show"], cwd=ROOT,
                           input=f"show:\n\t@echo \"$({name})\"\n", capture_output=True, text=True, check=True)
    return shown.stdout.strip()


def test_metadata_builds_without_a_deprecation_warning(tmp_path):
    out = project_copy(tmp_path)
    done = subprocess.run([sys.executable, "-c", BUILD_METADATA, str(out)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Deprecat" not in done.stderr and "license" not in done.stderr.lower(), done.stderr
    metadata = (out / done.stdout.split()[-1] / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata


def test_the_editable_install_builds_without_setuptools_block_of_information(tmp_path):
    """setuptools' editable build warns, framed in asterisks, that same-named folders may shadow the
    package; the Makefile's editable installs run with the environment that hides it."""
    out = project_copy(tmp_path)
    env = dict(os.environ)
    env.update(part.split("=", 1) for part in shlex.split(makefile_variable("EDITABLE_ENV")))
    done = subprocess.run([sys.executable, "-c", BUILD_EDITABLE, str(out)], cwd=tmp_path, capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "Editable installation" not in done.stderr and "Warning" not in done.stderr, done.stderr
    assert (out / done.stdout.split()[-1]).is_file()
