"""A disk cache of what is slow to rebuild from a model file (dequantized weights, tokenizer).

Where: `$STUDYGROUP_CACHE_DIR` if set, else platformdirs' user cache dir for "studygroup"
(e.g. ~/.cache/studygroup on Linux).

Which entry belongs to which file: the key is built from the file's size, its mtime_ns and a
sha256 of its first 1 MiB, read as raw bytes (a hit never parses the GGUF). A changed file gets
a new key, so it never meets old weights.

Crash safety: every entry is written to a temporary file in the cache dir, then moved into place
with `os.replace`, which is atomic. Readers only open final names, so a half-written file is never
served; an entry that fails to read (corrupt, truncated) is deleted and rebuilt by the caller.
Weights are memory-mapped, so a warm start reads pages only as they are used; this is safe because
an entry is never changed in place, only replaced (the old mapping keeps the old file alive).

Size: a changed model file leaves its old entries behind (~0.5 GB of weights for the default
model). After each write the cache is pruned to `$STUDYGROUP_CACHE_MAX_GB` (default 4) by
removing whole keys, least recently used first (a hit refreshes its entry's mtime); the key just
written is always kept. Removing an entry another process has mapped is safe: its mapping stays.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import platformdirs
import torch
from safetensors import SafetensorError
from safetensors.torch import safe_open, save_file

ENV_VAR = "STUDYGROUP_CACHE_DIR"
MAX_GB_ENV_VAR = "STUDYGROUP_CACHE_MAX_GB"
DEFAULT_MAX_GB = 4.0
FORMAT_VERSION = 1  # bump when what an entry holds changes: old entries then miss instead of misleading
HEADER_BYTES = 1 << 20  # the first 1 MiB of a GGUF holds its metadata; hashing it catches rewrites
STALE_TEMP_SECONDS = 3600  # temporary files older than this are leftovers of a crash


def cache_dir() -> Path:
    """The folder that holds cache entries (created on first write, not here).

    >>> cache_dir() == Path(os.environ.get(ENV_VAR) or platformdirs.user_cache_dir("studygroup"))
    True
    """
    return Path(os.environ.get(ENV_VAR) or platformdirs.user_cache_dir("studygroup"))


def file_key(path: str | Path) -> str:
    """Cache key of a model file: its stem plus a digest of (size, mtime_ns, sha256 of the first 1 MiB).

    >>> from studygroup.gguf.model_path import default_model_path
    >>> file_key(default_model_path())
    'SmolLM2-135M-Instruct.Q4_1-...'
    """
    path = Path(path)
    stat = path.stat()
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(HEADER_BYTES)).hexdigest()
    ident = f"v{FORMAT_VERSION}|{stat.st_size}|{stat.st_mtime_ns}|{head}"
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem)[:80]
    return f"{stem}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def entry_path(key: str, kind: str) -> Path:
    """File of one entry: kind "weights" -> <dir>/<key>.weights.safetensors, else <dir>/<key>.<kind>.json.

    >>> entry_path("model-0123456789abcdef", "tokenizer").name
    'model-0123456789abcdef.tokenizer.json'
    """
    suffix = "safetensors" if kind == "weights" else "json"
    return cache_dir() / f"{key}.{kind}.{suffix}"


def read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]] | None:
    """Tensors and string metadata of a safetensors entry; None when absent or unreadable.

    >>> read_tensors(Path("/nonexistent.safetensors")) is None
    True
    """
    if not path.is_file():
        return None
    try:
        with safe_open(path, framework="pt") as f:  # memory-maps the file
            found = {name: f.get_tensor(name) for name in f.keys()}, dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError, RuntimeError):
        discard(path)
        return None
    _used(path)
    return found


def write_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Store tensors (contiguous, unshared) and string metadata atomically at `path`.

    >>> write_tensors(cache_dir() / "x.weights.safetensors", {"a": torch.zeros(2, 3)}, {"note": "hi"})
    >>> read_tensors(cache_dir() / "x.weights.safetensors")[0]["a"].shape
    torch.Size([2, 3])
    """
    _write_atomically(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))


def read_json(path: Path) -> Any | None:
    """The JSON value stored at `path`; None when absent or unreadable.

    >>> read_json(Path("/nonexistent.json")) is None
    True
    """
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        discard(path)
        return None
    _used(path)
    return found


def write_json(path: Path, value: Any) -> None:
    """Store a JSON value atomically at `path`.

    >>> write_json(cache_dir() / "x.tokenizer.json", {"tokens": ["a"]})
    """
    text = json.dumps(value, ensure_ascii=False)
    _write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def discard(path: Path) -> None:
    """Delete a broken entry so the next write replaces it; a failure to delete is harmless.

    >>> discard(Path("/nonexistent.json"))  # nothing to delete: no error
    """
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same folder, then `os.replace` it into place.

    A cache that cannot be written (read-only disk, disk full) only costs speed: warn, go on.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(path.parent)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as e:
        warnings.warn(f"studygroup could not write its cache in {path.parent} ({e}); "
                      f"set {ENV_VAR} to a writable folder to start faster next time", stacklevel=3)
        return
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())  # the bytes reach the disk before the name does
        os.replace(tmp, path)
    except OSError as e:
        warnings.warn(f"studygroup could not write {path} ({e}); it will rebuild it next time", stacklevel=3)
    finally:
        tmp.unlink(missing_ok=True)
    prune(keep=_key_of(path))


def _used(path: Path) -> None:
    """Mark an entry as just used (its mtime), for pruning; a read-only cache only loses that."""
    try:
        os.utime(path)
    except OSError:
        pass


#: The file name of an entry: <stem>-<16 hex digits>.<kind>.<suffix> (see file_key, entry_path).
ENTRY_NAME = re.compile(r"(?P<key>[A-Za-z0-9._-]*-[0-9a-f]{16})\.(weights\.safetensors|[a-z]+\.json)")


def _key_of(path: Path) -> str | None:
    """The key of an entry's file (<key>.<kind>.<suffix> -> <key>); None for any other file.

    >>> _key_of(Path("m.Q4_1-0123456789abcdef.weights.safetensors")), _key_of(Path("notes.json"))
    ('m.Q4_1-0123456789abcdef', None)
    """
    m = ENTRY_NAME.fullmatch(path.name)
    return m["key"] if m else None


def max_bytes() -> int:
    """The cache's size bound, from $STUDYGROUP_CACHE_MAX_GB (default 4)."""
    raw = os.environ.get(MAX_GB_ENV_VAR, "")
    try:
        gb = float(raw) if raw else DEFAULT_MAX_GB
    except ValueError:
        warnings.warn(f"{MAX_GB_ENV_VAR}={raw!r} is not a number of GB; using {DEFAULT_MAX_GB}", stacklevel=2)
        gb = DEFAULT_MAX_GB
    return int(max(gb, 0.0) * 2**30)


def prune(keep: str, limit: int | None = None) -> list[str]:
    """Remove whole keys, least recently used first, until the cache holds at most `limit` bytes
    (default `max_bytes()`); never the key `keep`. Returns the keys removed.

    >>> prune(keep="model-0123456789abcdef")
    []
    """
    limit = max_bytes() if limit is None else limit
    keys: dict[str, list[tuple[Path, os.stat_result]]] = {}
    try:
        for p in cache_dir().iterdir():
            if (key := _key_of(p)) is not None:  # only our entries: the folder may hold other files
                keys.setdefault(key, []).append((p, p.stat()))
    except OSError:
        return []
    total = sum(st.st_size for files in keys.values() for _, st in files)
    removed = []
    for key in sorted(keys, key=lambda k: max(st.st_mtime for _, st in keys[k])):  # least recently used first
        if total <= limit:
            break
        if key == keep:
            continue
        for p, st in keys[key]:
            discard(p)
            total -= st.st_size
        removed.append(key)
    return removed


def _remove_stale_temps(folder: Path) -> None:
    """Delete temporary files that a crashed writer left behind long ago."""
    now = time.time()
    for tmp in folder.glob(".*.tmp"):
        try:
            if now - tmp.stat().st_mtime > STALE_TEMP_SECONDS:
                tmp.unlink()
        except OSError:
            pass
