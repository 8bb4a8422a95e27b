"""Files the commands write (figures, reports, the lesson): checked before the work, written whole.

A bad path fails at once, in one line, rather than after a computation of seconds or minutes.
"""
from __future__ import annotations

import os
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
    """Write `content` to `path` as UTF-8; InputError (one line) if the system refuses."""
    try:
        Path(path).write_text(content, encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from None
    return Path(path)
