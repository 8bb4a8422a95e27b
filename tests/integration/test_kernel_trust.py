"""The generation kernels' library is loaded only as this user built it (studygroup.model.kernel_build):
a library planted in the cache's kernels folder (with or without a digest, in a folder another user
owns or may write, as a link to a library elsewhere, or through a linked folder) never runs; a damaged
or wrong library is built again; a compiler that hangs is given up; a killed build leaves nothing
for good. A planted library here writes a marker file from its constructor, which runs at load."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q

from conftest import write_tiny_gguf

import studygroup
from studygroup.model import disk_cache, kernel_build, kernel_self_check, row_kernels

#: A library with the kernels' symbols, wrong numbers, and a constructor that leaves a mark.
PLANTED = r"""
#include <stdio.h>
#include <stdint.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("%(marker)s", "w"); if (f) { fputs("ran", f); fclose(f); }
}
int sg_vectorized(void) { return 1; }
int sg_matvec(int t, const uint8_t *W, const float *x, float *y, int64_t r, int64_t c) { for (int64_t i = 0; i < r; i++) y[i] = 1; return 0; }
int sg_matvec_parts(int n, const int *t, const uint8_t *const *W, const int64_t *r, const int64_t *const *to, const float *x, float *y, int64_t c, int th) { return 0; }
int sg_dequantize(int t, const uint8_t *W, float *o, int64_t r, int64_t c) { for (int64_t i = 0; i < r * c; i++) o[i] = 1; return 0; }
int sg_dequantize_rows(int t, const uint8_t *W, int64_t s, const int64_t *r, int64_t n, float *o, int64_t c) { for (int64_t i = 0; i < n * c; i++) o[i] = 1; return 0; }
void sg_attend_row(void) {}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder of this test's; the kernels loaded afresh in it, and again after the test."""
    monkeypatch.setenv(disk_cache.ENV_VAR, str(tmp_path / "cache"))
    clear()
    yield tmp_path / "cache"
    clear()


def clear():
    row_kernels._library.cache_clear(), row_kernels._loaded.cache_clear()


def kept_path(cache: Path) -> Path:
    return cache / "kernels" / kernel_build.kept_name(row_kernels.SOURCE, row_kernels.FLAGS)


def compile_c(source: str, out: Path) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(out)], check=True, capture_output=True)
    return out


def plant(tmp_path: Path) -> tuple[bytes, Path]:
    """A planted library's bytes and the marker its constructor would write."""
    marker = tmp_path / "planted-ran"
    return compile_c(PLANTED % {"marker": marker}, tmp_path / "planted.so").read_bytes(), marker


def digest_of(data: bytes) -> bytes:
    return (hashlib.sha256(data).hexdigest() + "\n").encode()


def the_genuine_library_loaded() -> bool:
    lib = row_kernels._library()
    return kernel_self_check.first_wrong(lib) == "" and row_kernels.available()


def place_as_planted(cache: Path, tmp_path: Path, way: str) -> Path:
    """Put a planted library where the kernels are kept, in one of the ways a sweep tried; its marker."""
    data, marker = plant(tmp_path)
    target = kept_path(cache)
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    if way == "no digest":
        target.write_bytes(data)
    elif way == "world-writable folder":
        target.write_bytes(data), target.with_name(target.name + ".sha256").write_bytes(digest_of(data))
        folder.chmod(0o777)
    elif way == "another user's folder":
        target.write_bytes(data), target.with_name(target.name + ".sha256").write_bytes(digest_of(data))
        os.chown(folder, 65534, 65534)
    elif way == "link to a library elsewhere":
        elsewhere = tmp_path / "elsewhere.so"
        elsewhere.write_bytes(data)
        target.symlink_to(elsewhere)
        target.with_name(target.name + ".sha256").write_bytes(digest_of(data))
    elif way == "linked folder":
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        (theirs / target.name).write_bytes(data)
        (theirs / (target.name + ".sha256")).write_bytes(digest_of(data))
        folder.rmdir()
        folder.symlink_to(theirs, target_is_directory=True)
    return marker


WAYS = ["no digest", "world-writable folder", "another user's folder", "link to a library elsewhere", "linked folder"]


@pytest.mark.parametrize("way", WAYS)
def test_a_planted_library_never_runs(way, cache, tmp_path, capsys):
    if way == "another user's folder" and os.getuid() != 0:
        pytest.fail("this test gives a folder to another user: run it as root (as CI does)")
    marker = place_as_planted(cache, tmp_path, way)
    assert the_genuine_library_loaded()
    assert not marker.exists(), f"the planted library ran ({way})"
    err = capsys.readouterr().err
    assert any(words in err for words in ("is not usable", "refused the kernel folder", "cannot use the kernel folder"))


@pytest.mark.parametrize("way", ["world-writable folder", "another user's folder", "linked folder"])
def test_a_folder_that_is_not_private_is_refused_in_one_line_and_the_build_is_private(way, cache, tmp_path, capsys):
    if way == "another user's folder" and os.getuid() != 0:
        pytest.fail("this test gives a folder to another user: run it as root (as CI does)")
    marker = place_as_planted(cache, tmp_path, way)
    before = kept_path(cache).read_bytes()
    assert the_genuine_library_loaded() and not marker.exists()
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(err) == 1 and ("refused the kernel folder" in err[0] or "cannot use the kernel folder" in err[0]), err
    assert kept_path(cache).read_bytes() == before  # nothing written into a folder that is not private


def test_a_planted_library_never_runs_when_a_model_generates(cache, tmp_path, monkeypatch):
    marker = place_as_planted(cache, tmp_path, "no digest")
    tiny = write_tiny_gguf(tmp_path / "q8.gguf", tensor_type=Q.Q8_0, untied=True)
    model = studygroup.load(tiny.path, cache=False)
    words = model.generate([5, 6, 7], 4, ignore_eos=True).ids
    assert row_kernels.usable(model) and not marker.exists()
    monkeypatch.setenv(row_kernels.SWITCH, "off")
    assert model.generate([5, 6, 7], 4, ignore_eos=True).ids == words


def test_the_kept_library_is_private_and_carries_its_digest(cache):
    assert the_genuine_library_loaded()
    target = kept_path(cache)
    assert (target.parent.stat().st_mode & 0o777) == 0o700 and (target.stat().st_mode & 0o777) == 0o600
    assert target.with_name(target.name + ".sha256").read_bytes() == digest_of(target.read_bytes())


def flip_bytes(data: bytes, n: int = 40) -> bytes:
    b = bytearray(data)
    for i in range(n):
        b[len(b) // 3 + 97 * i] ^= 0xFF
    return bytes(b)


def test_a_damaged_library_is_built_again_not_loaded(cache, capsys):
    assert the_genuine_library_loaded()
    target = kept_path(cache)
    good = target.read_bytes()
    target.write_bytes(flip_bytes(good))  # 40 flipped bytes: loading it would crash the process
    clear()
    assert the_genuine_library_loaded()
    assert "is not usable (its digest differs" in capsys.readouterr().err
    assert target.read_bytes() == good


ALTERED = {
    "altered arithmetic": lambda src: src.replace("y[r] = row_dot(", "y[r] = 1.5f * row_dot("),
    "no symbols": lambda src: "int unrelated(void) { return 0; }\n",
}


@pytest.mark.parametrize("change", list(ALTERED))
def test_a_wrong_library_with_a_valid_digest_is_refused_by_the_self_check_and_built_again(change, cache, tmp_path, capsys):
    """A library that the digest cannot catch (built here, from altered code) is caught by its numbers."""
    wrong = compile_c(ALTERED[change](row_kernels.SOURCE.read_text()), tmp_path / "wrong.so").read_bytes()
    target = kept_path(cache)
    target.parent.mkdir(mode=0o700, parents=True)
    target.write_bytes(wrong), target.with_name(target.name + ".sha256").write_bytes(digest_of(wrong))
    assert the_genuine_library_loaded()
    assert "failed its check" in capsys.readouterr().err
    assert target.read_bytes() != wrong


def test_a_kernel_that_stays_wrong_is_not_used_and_the_words_are_the_float32_ones(cache, tmp_path, monkeypatch, capsys):
    source = tmp_path / "one_row.c"
    source.write_text(ALTERED["altered arithmetic"](row_kernels.SOURCE.read_text()))
    tiny = write_tiny_gguf(tmp_path / "q4.gguf", tensor_type=Q.Q4_0, untied=True)
    model = studygroup.load(tiny.path, cache=False)
    monkeypatch.setenv(row_kernels.SWITCH, "off")
    want = model.generate([5, 6, 7], 6, ignore_eos=True).ids
    monkeypatch.delenv(row_kernels.SWITCH)
    monkeypatch.setattr(row_kernels, "SOURCE", source)
    assert not row_kernels.usable(model)
    assert model.generate([5, 6, 7], 6, ignore_eos=True).ids == want
    err = capsys.readouterr().err
    assert "generation kernels are not used" in err and "differs from a float64 product" in err


def hanging_compiler(tmp_path: Path, on: str) -> tuple[Path, Path]:
    """A CC that hangs (a child of its shell sleeps) on `--version` or on a compile; the file the
    sleeping child's pid is written to."""
    pid_file = tmp_path / "sleeper.pid"
    cc = tmp_path / "cc"
    hang = f'sleep 600 & echo $! > {pid_file}; wait'
    test = '[ "$1" = --version ]' if on == "version" else '[ "$1" != --version ]'
    cc.write_text(f"#!/bin/sh\nif {test}; then {hang}; fi\necho 'fake cc 1.0'\n")
    cc.chmod(0o755)
    return cc, pid_file


@pytest.mark.parametrize("on", ["version", "compile"])
def test_a_compiler_that_hangs_is_given_up_in_time_and_killed(on, cache, tmp_path, monkeypatch, capsys, tiny_model):
    cc, pid_file = hanging_compiler(tmp_path, on)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setattr(kernel_build, "VERSION_SECONDS", 1.0)
    monkeypatch.setattr(kernel_build, "COMPILE_SECONDS", 1.0)
    start = time.monotonic()
    assert not row_kernels.available()
    assert time.monotonic() - start < 10
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(err) == 1 and "did not finish within 1 s" in err[0] and "float32" in err[0], err
    pid = int(pid_file.read_text())
    time.sleep(0.2)
    assert not disk_cache.running(pid) or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    model = studygroup.load(tiny_model.path, cache=False)
    assert len(model.generate([5, 6, 7], 3, ignore_eos=True).ids) == 3


def a_pid_that_has_ended() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_what_a_killed_build_left_is_removed_by_the_next(cache, tmp_path):
    dead, alive = a_pid_that_has_ended(), os.getpid()
    folder = cache / "kernels"
    folder.mkdir(mode=0o700, parents=True)
    name = kernel_build.kept_name(row_kernels.SOURCE, row_kernels.FLAGS)
    left = folder / f".{name}.{dead}.0123abcd.tmp"
    live = folder / f".{name}.{alive}.89abcdef.tmp"
    left.write_bytes(b"half"), live.write_bytes(b"half")
    build = Path(kernel_build.tempfile.gettempdir()) / f"studygroup-kernels-{dead}-zz"
    build.mkdir(mode=0o700)
    (build / "library.so").write_bytes(b"half")
    try:
        assert the_genuine_library_loaded()
        assert not left.exists() and not build.exists() and live.exists()
    finally:
        shutil.rmtree(build, ignore_errors=True)
