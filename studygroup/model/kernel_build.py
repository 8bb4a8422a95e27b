"""A compiled library that only this user's build can put in the process: built with the system's C
compiler, kept in the cache folder with a digest of its bytes, checked before every load.

Loading a shared library runs its code (its constructors run at load, before any symbol is
called), so the library must be one this user built. The kept copy lives in `<cache>/kernels/`,
which must be a real folder (not a link) owned by this user and writable by nobody else; its files
likewise, each library beside `<name>.sha256`, the digest the build wrote. A library is read once
through descriptors opened without following links, its digest checked on those bytes, and the
same bytes are loaded from an anonymous in-memory file: what is loaded is what was checked, even if
the folder changes in between. A library whose digest differs, or that the caller's check refuses,
is built again (one line says so). A folder that is not private is refused (one line) and the
library is built in a fresh private temporary folder for this process instead.

Every build runs in a fresh private temporary folder, the compiler in a process group of its own
under a time limit (`COMPILE_SECONDS`, and `VERSION_SECONDS` for `--version`); past it the group
is killed and the caller does without. What a process killed mid-way leaves (its build folder, a
temporary file in the kept folder) is named with its process id and removed by the next build once
that process has ended.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from studygroup.model import disk_cache
from studygroup.progress import say

COMPILE_SECONDS = 120.0  # a build of one_row.c takes a few seconds; a hung compiler is given up
VERSION_SECONDS = 15.0
MAX_LIBRARY_BYTES = 64 << 20  # a kept library larger than this is not ours


class Unavailable(OSError):
    """The library cannot be had: no compiler, a build that failed or timed out, a kernel refused."""


class Refused(Exception):
    """Raised by a caller's check: the library loaded but is not right (missing symbols, wrong numbers)."""


def load(source: Path, flags: tuple[str, ...], check: Callable[[ctypes.CDLL], None]) -> ctypes.CDLL:
    """The library built from `source` with `flags`, loaded and passed by `check` (which raises
    Refused for a wrong one): the kept copy if its digest and `check` pass, else built again once.
    Unavailable where it cannot be built or still fails `check`."""
    compiler = _compiler()
    name = kept_name(source, flags, compiler)
    folder = _private_folder()
    if folder is None:
        return _load_built(_build(compiler, source, flags), check)
    try:
        kept = _read_kept(folder, name)
        if kept is not None:
            try:
                return _load_checked(kept, check)
            except (Refused, Unavailable) as e:
                say(f"studygroup: the kernel library {folder.path / name} failed its check ({e}); building it again")
        data = _build(compiler, source, flags)
        lib = _load_built(data, check)
        _keep(folder, name, data)  # only a library that passed its check is kept
        return lib
    finally:
        os.close(folder.fd)


def kept_name(source: Path, flags: tuple[str, ...], compiler: str | None = None) -> str:
    """The kept library's file name: one per source, compiler, CPU and flags (`<stem>-<16 hex>.so`)."""
    compiler = compiler or _compiler()
    key = hashlib.sha256(source.read_bytes() + _run([compiler, "--version"], VERSION_SECONDS)
                         + _cpu_flags() + " ".join(flags).encode()).hexdigest()[:16]
    return f"{source.stem}-{key}.so"


@dataclass(frozen=True)
class _Folder:
    """The kernels' folder and the descriptor it was checked through (every file is opened relative to it)."""
    path: Path
    fd: int


def _private_folder() -> _Folder | None:
    """`<cache>/kernels`, created private (0700) if absent, opened without following a link and checked:
    a folder, owned by this user, writable by no one else. None (with one line) where it is not."""
    path = disk_cache.cache_dir() / "kernels"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        say(f"studygroup: cannot use the kernel folder {path} ({e.strerror or e}); building in a private temporary folder")
        return None
    why = _not_private(os.fstat(fd))
    if why:
        os.close(fd)
        say(f"studygroup: refused the kernel folder {path}: {why}; building in a private temporary folder")
        return None
    return _Folder(path, fd)


def _not_private(st: os.stat_result) -> str:
    """Why a file or folder could hold something this user did not write ('' where it cannot)."""
    if st.st_uid != os.getuid():
        return f"it is owned by user {st.st_uid}, not by this user ({os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write to it (mode {stat.filemode(st.st_mode)})"
    return ""


def _read_kept(folder: _Folder, name: str) -> bytes | None:
    """The kept library's bytes if it is a private regular file whose digest matches the one its build
    wrote; None where there is none yet, and None with one line where it was damaged or planted
    (it is then removed, to be built again)."""
    try:
        data = _read_private(folder.fd, name)
        why = _digest_differs(folder, name, data)
    except FileNotFoundError:
        return None
    except (OSError, Refused) as e:
        why = _reason(e)
    if not why:
        return data
    say(f"studygroup: the kernel library {folder.path / name} is not usable ({why}); building it again")
    for n in (name, name + ".sha256"):
        try:
            os.unlink(n, dir_fd=folder.fd)
        except OSError:
            pass
    return None


def _digest_differs(folder: _Folder, name: str, data: bytes) -> str:
    """Why the digest kept beside a library does not vouch for `data` ('' where it does)."""
    try:
        kept = _read_private(folder.fd, name + ".sha256")
    except FileNotFoundError:
        return "no digest beside it"
    except (OSError, Refused) as e:
        return f"its digest file: {_reason(e)}"
    return "" if kept.strip() == hashlib.sha256(data).hexdigest().encode() else "its digest differs from the one its build wrote"


def _reason(e: Exception) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else str(e)


def _read_private(dir_fd: int, name: str) -> bytes:
    """The bytes of a regular file in the folder, opened without following a link; Refused where it is
    not a regular file of this user's that only this user may write, or too large."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        why = "not a regular file" if not stat.S_ISREG(st.st_mode) else _not_private(st)
        if not why and st.st_size > MAX_LIBRARY_BYTES:
            why = f"{st.st_size:,} bytes"
        if why:
            raise Refused(why)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(MAX_LIBRARY_BYTES + 1)
    finally:
        os.close(fd)


def _keep(folder: _Folder, name: str, data: bytes) -> None:
    """Keep the library and then its digest, each written whole to a temporary name and renamed into
    place relative to the checked folder. A folder that cannot be written only costs a build next time."""
    disk_cache.remove_stale_temps(folder.path)
    digest = (hashlib.sha256(data).hexdigest() + "\n").encode()
    try:
        for final, content in ((name, data), (name + ".sha256", digest)):
            tmp = disk_cache.temp_name(final)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder.fd)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            os.replace(tmp, final, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
    except OSError as e:
        say(f"studygroup: could not keep the kernel library in {folder.path} ({e.strerror or e})")


#: A build's private temporary folder: studygroup-kernels-<builder's pid>-<random>
BUILD_FOLDER = re.compile(r"studygroup-kernels-(?P<pid>[0-9]+)-.+")


def _build(compiler: str, source: Path, flags: tuple[str, ...]) -> bytes:
    """Compile in a fresh private temporary folder (mode 0700, removed once the bytes are read) and
    return the library's bytes. Folders left by builds whose process has ended are removed first."""
    _remove_stale_builds()
    folder = Path(tempfile.mkdtemp(prefix=f"studygroup-kernels-{os.getpid()}-"))
    try:
        return _compile(compiler, source, flags, folder / "library.so")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _remove_stale_builds() -> None:
    for folder in Path(tempfile.gettempdir()).glob("studygroup-kernels-*"):
        m = BUILD_FOLDER.fullmatch(folder.name)
        try:
            if m and folder.lstat().st_uid == os.getuid() and not disk_cache.running(int(m["pid"])):
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass


def _compile(compiler: str, source: Path, flags: tuple[str, ...], out: Path) -> bytes:
    """Build `out` (with OpenMP where the compiler has it, else without) and return its bytes."""
    for openmp in (("-fopenmp",), ()):
        try:
            _run([compiler, *flags, *openmp, str(source), "-o", str(out), "-lm"], COMPILE_SECONDS)
            return out.read_bytes()
        except _Failed as e:
            failure = e
    raise Unavailable(f"{compiler} could not build {source.name}: {failure}")


def _load_checked(data: bytes, check: Callable[[ctypes.CDLL], None]) -> ctypes.CDLL:
    """Load these bytes (from an anonymous in-memory file where the system has one) and run `check`."""
    lib = _load_bytes(data)
    check(lib)
    return lib


def _load_built(data: bytes, check: Callable[[ctypes.CDLL], None]) -> ctypes.CDLL:
    """`_load_checked` for a library just built: one that fails its check is Unavailable."""
    try:
        return _load_checked(data, check)
    except Refused as e:
        raise Unavailable(f"the library just built failed its check: {e}") from None


def _load_bytes(data: bytes) -> ctypes.CDLL:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("studygroup-kernels", 0)
        os.write(fd, data)
        lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
        lib._studygroup_fd = fd  # kept open while the library lives: no later file gets its name
        return lib
    folder = tempfile.mkdtemp(prefix="studygroup-kernels-")
    try:
        path = Path(folder) / "library.so"
        path.write_bytes(data)
        return ctypes.CDLL(str(path))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _Failed(Unavailable):
    """A command that exited non-zero (its message: the start of what it printed)."""


def _run(args: list[str], seconds: float) -> bytes:
    """A command's standard output; Unavailable if it runs past `seconds` (its whole process group is
    killed), _Failed if it exits non-zero."""
    try:
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    except OSError as e:
        raise Unavailable(f"cannot run {args[0]}: {e.strerror or e}") from None
    try:
        out, err = p.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise Unavailable(f"{args[0]} did not finish within {seconds:g} s") from None
    if p.returncode != 0:
        raise _Failed(err.decode(errors="replace")[:200])
    return out


class NoCompiler(Unavailable):
    """This machine has no C compiler: the ordinary case where the kernels are not used."""


def _compiler() -> str:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise NoCompiler("no C compiler")
    return compiler


def _cpu_flags() -> bytes:
    """The CPU's instruction set where Linux tells it (-march=native code runs on this CPU only)."""
    try:
        return next(line for line in Path("/proc/cpuinfo").read_bytes().splitlines() if line.startswith(b"flags"))
    except (OSError, StopIteration):
        return os.uname().machine.encode()
