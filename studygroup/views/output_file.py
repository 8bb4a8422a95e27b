"""Files the commands write (figures, reports, the lesson): checked before the work, written whole.

A bad path fails at once, in one line, rather than after a computation of seconds or minutes.
A file is written to a temporary file beside it (beside a symbolic link's target), then renamed
over it: a failure (a full disk, say) leaves the old file as it was, never a truncated one.
"""
from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from studygroup.errors import InputError


def check_writable(path, example: str) -> Path:
    """`path` as a Path, or InputError now if it cannot be written: empty, a folder, in a folder
    that does not exist, or refused when opened for writing (the test opens it for appending, so
    an existing file is left as it is, and removes what it created).

    example: a file name to suggest, such as "report.html".

    >>> check_writable("", "report.html")
    Traceback (most recent call last):
    studygroup.errors.InputError: the file name is empty: give one such as report.html
    """
    if str(path).strip() == "":
        raise InputError(f"the file name is empty: give one such as {example}")
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise InputError(f"cannot write {path}: it is a folder; give a file name such as {example}")
    if not folder.is_dir():
        raise InputError(f"cannot write {path}: the folder {folder} does not exist")
    existed = p.exists() or p.is_symlink()  # a dangling link: the write will go through it
    try:  # O_NONBLOCK: a named pipe with no reader is refused instead of waiting for one
        os.close(os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o666))
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        if not existed and p.is_file():
            p.unlink()
    return p


def write_text(path, content: str) -> Path:
    """Write `content` to `path` as UTF-8, whole or not at all; InputError (one line) if the system refuses."""
    data = content.encode("utf-8")
    return write_whole(path, lambda f: f.write(data))


def write_whole(path, write: Callable) -> Path:
    """Call write(f) on a temporary file beside `path` (beside its target, if `path` is a link),
    then rename it over `path`, keeping an existing file's permissions. On any failure the old
    file is left as it was and InputError says why in one line.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> write_whole(folder / "a.txt", lambda f: f.write(b"new")).read_bytes()
    b'new'
    """
    target = Path(os.path.realpath(path))  # a link stays a link: its target is replaced
    if target.exists() and not target.is_file():  # /dev/stdout, a pipe: written to, never replaced
        return _write_into(path, target, write)
    name = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        mode = target.stat().st_mode & 0o7777 if target.exists() else None
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # a new file: the umask applies
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes reach the disk before the name does
        if mode is not None:
            os.chmod(name, mode)
        os.replace(name, target)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        if os.path.exists(name):
            os.unlink(name)
    return Path(path)


def _write_into(path, target: Path, write: Callable) -> Path:
    """Write straight into something that is not a regular file (a device, a pipe)."""
    try:
        with open(target, "wb") as f:
            write(f)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from None
    return Path(path)
