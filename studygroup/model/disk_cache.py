"""A disk cache of what is slow to rebuild from a model file (dequantized weights, tokenizer).

Where: `$STUDYGROUP_CACHE_DIR` if set, else platformdirs' user cache dir for "studygroup"
(e.g. ~/.cache/studygroup on Linux).

Which entry belongs to which file: an entry is named by the file's stem and a digest of its
whole content (xxh3-128), so a copy or a re-download of the same file finds it. Hashing the file
is paid once per file state: a small "source" entry maps the file's device, inode, size, mtime and
ctime to its digest (any write changes ctime, which `touch` cannot set back). A changed file gets
a new key, so it never meets old weights; an unchanged one touched, copied or renamed is hashed
again and adopts its entry instead of rebuilding it.

Proof: every entry carries a digest of its own bytes (`studygroup.model.cache_entry`), checked on
every load; an entry that fails it is never used: it is deleted, and rebuilt by the caller.

Crash safety: every entry is written to a temporary file in the cache dir (named with the
writer's process id), then moved into place with `os.replace`, which is atomic. Readers only open
final names, so a half-written file is never served. A temporary file whose writer is no longer
running, or older than an hour, is removed; a live writer's file is counted against the size
bound, never removed. Weights are memory-mapped, so a warm start reads pages only as they are used
(the digest reads them once); this is safe because an entry is never changed in place, only
replaced (the old mapping keeps the old file alive).

Size: a changed model file leaves its old entries behind (~0.5 GB of weights for the default
model). After each write the cache is pruned to `$STUDYGROUP_CACHE_MAX_GB` (default 4) by
removing whole keys, least recently used first (a hit refreshes its entry's mtime); the key just
written is always kept. Removing an entry another process has mapped is safe: its mapping stays.
"""
from __future__ import annotations

import os
import re
import time
import warnings
from pathlib import Path
from typing import Any

import platformdirs
import torch

from studygroup.errors import ModelFileError
from studygroup.model import cache_entry
from studygroup.progress import say

ENV_VAR = "STUDYGROUP_CACHE_DIR"
MAX_GB_ENV_VAR = "STUDYGROUP_CACHE_MAX_GB"
DEFAULT_MAX_GB = 4.0
FORMAT_VERSION = 5  # bump when what an entry holds changes: old entries then miss instead of misleading
STALE_TEMP_SECONDS = 3600  # temporary files older than this are leftovers of a crash
READ_CHUNK = 16 << 20  # bytes read at a time while hashing a model file


def cache_dir() -> Path:
    """The folder that holds cache entries (created on first write, not here).

    >>> cache_dir() == Path(os.environ.get(ENV_VAR) or platformdirs.user_cache_dir("studygroup"))
    True
    """
    return Path(os.environ.get(ENV_VAR) or platformdirs.user_cache_dir("studygroup"))


def file_key(path: str | Path) -> str:
    """Cache key of a model file: its stem plus 16 hex digits of its content digest.

    The digest is looked up by the file's state (device, inode, size, mtime, ctime); only a state
    seen for the first time hashes the whole file. ModelFileError if the file cannot be read.

    >>> from studygroup.gguf.model_path import default_model_path
    >>> file_key(default_model_path())
    'SmolLM2-135M-Instruct.Q4_1-...'
    """
    path = Path(path)
    try:
        stat = path.stat()
        state = f"v{FORMAT_VERSION}|{stat.st_dev}|{stat.st_ino}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ctime_ns}"
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem)[:80]
        source = entry_path(f"{stem}-{cache_entry.digest(state.encode())[:16]}", "source")
        known = read_json(source)
        if isinstance(known, dict) and known.get("state") == state and isinstance(known.get("digest"), str):
            content = known["digest"]
        else:
            content = source_digest(path)
            write_json(source, {"state": state, "digest": content}, also_keep=_entry_key(stem, content))
    except OSError as e:  # refused, or a file that cannot be read (/proc/self/mem): before any other check
        raise ModelFileError(f"cannot read the model file {path}: {e.strerror or e}") from None
    return _entry_key(stem, content)


def _entry_key(stem: str, content: str) -> str:
    """An entry's key: the file's stem and 16 hex digits standing for its content and FORMAT_VERSION
    (entries of another format then miss, rather than fail their digest).

    >>> _entry_key("m", "0" * 32) == _entry_key("m", "0" * 32) != _entry_key("m", "1" * 32)
    True
    """
    return f"{stem}-{cache_entry.digest(f'v{FORMAT_VERSION}|{content}'.encode())[:16]}"


def source_digest(path: Path) -> str:
    """xxh3-128 of a file's whole content, read in chunks (memory stays flat for a file of GBs)."""
    h = cache_entry.xxhash.xxh3_128()
    buffer = bytearray(READ_CHUNK)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            h.update(memoryview(buffer)[:n])
    return h.hexdigest()


def entry_path(key: str, kind: str) -> Path:
    """File of one entry: kind "weights" -> <dir>/<key>.weights.safetensors, else <dir>/<key>.<kind>.json.

    >>> entry_path("model-0123456789abcdef", "tokenizer").name
    'model-0123456789abcdef.tokenizer.json'
    """
    suffix = "safetensors" if kind == "weights" else "json"
    return cache_dir() / f"{key}.{kind}.{suffix}"


def adopt(path: Path) -> None:
    """Where `path` is missing, take over an entry of the same kind and content made under another
    name (a copy or a renamed model file): it is renamed to `path`."""
    m = ENTRY_NAME.fullmatch(path.name)
    if m is None or path.exists():
        return
    digest16, rest = m["key"][-16:], path.name[len(m["key"]) + 1:]  # rest: <kind>.<suffix>
    for other in sorted(path.parent.glob(f"*-{digest16}.{rest}")):
        if other != path and ENTRY_NAME.fullmatch(other.name):
            try:
                os.replace(other, path)
            except OSError:
                continue
            return


def read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]] | None:
    """Tensors (mapped from the file) and string metadata of a weights entry; None when absent,
    unreadable or not what was written (its digest fails: then it is deleted, with a notice).

    >>> read_tensors(Path("/nonexistent.safetensors")) is None
    True
    """
    return _read(path, lambda p: cache_entry.unpack(
        torch.from_file(str(p), shared=False, size=p.stat().st_size, dtype=torch.uint8)))  # mapped: (N,)


def write_tensors(path: Path, buffer: torch.Tensor) -> None:
    """Store the bytes of a weights entry (`cache_entry.pack`) atomically at `path`.

    >>> buffer, _ = cache_entry.pack({"a": torch.zeros(2, 3)}, {"note": "hi"})
    >>> write_tensors(cache_dir() / "x-0123456789abcdef.weights.safetensors", buffer)
    >>> read_tensors(cache_dir() / "x-0123456789abcdef.weights.safetensors")[0]["a"].shape
    torch.Size([2, 3])
    """
    _write_atomically(path, lambda f: f.write(memoryview(buffer.numpy())))


def read_json(path: Path) -> Any | None:
    """The JSON value stored at `path`; None when absent, unreadable or not what was written
    (then it is deleted, with a notice).

    >>> read_json(Path("/nonexistent.json")) is None
    True
    """
    return _read(path, lambda p: cache_entry.load_json(p.read_text(encoding="utf-8")))


def _read(path: Path, parse) -> Any | None:
    """parse(path) for an entry (adopted if made under another name): None when absent; when it
    cannot be read or parse gives None, the entry is damaged: deleted, with a notice."""
    adopt(path)
    if not path.is_file():
        return None
    try:
        found = parse(path)
    except (OSError, ValueError, RuntimeError):
        found = None
    if found is None:
        _damaged(path)
        return None
    _used(path)
    return found


def write_json(path: Path, value: Any, also_keep: str | None = None) -> None:
    """Store a JSON value, with its digest, atomically at `path` (the size bound then spares its
    key and `also_keep`).

    >>> write_json(cache_dir() / "x-0123456789abcdef.tokenizer.json", {"tokens": ["a"]})
    >>> read_json(cache_dir() / "x-0123456789abcdef.tokenizer.json")
    {'tokens': ['a']}
    """
    data = cache_entry.dump_json(value).encode("utf-8")
    _write_atomically(path, lambda f: f.write(data), also_keep)


def discard(path: Path) -> None:
    """Delete a broken entry so the next write replaces it; a failure to delete is harmless.

    >>> discard(Path("/nonexistent.json"))  # nothing to delete: no error
    """
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _damaged(path: Path) -> None:
    """An entry that is not what was written: never used; deleted, and said in one line."""
    if path.exists():
        say(f"studygroup: the cache entry {path.name} is damaged (it does not match its digest): "
            "rebuilding it from the model file")
    discard(path)


def _write_atomically(path: Path, write, also_keep: str | None = None) -> None:
    """Write through a temporary file in the same folder, then `os.replace` it into place.

    A cache that cannot be written (read-only disk, disk full) only costs speed: warn, go on.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(path.parent)
        tmp = path.parent / temp_name(path.name)
        f = open(tmp, "xb")
    except OSError as e:
        warnings.warn(f"studygroup could not write its cache in {path.parent} ({e}); "
                      f"set {ENV_VAR} to a writable folder to start faster next time", stacklevel=3)
        return
    try:
        with f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes reach the disk before the name does
        os.replace(tmp, path)
    except OSError as e:
        warnings.warn(f"studygroup could not write {path} ({e}); it will rebuild it next time", stacklevel=3)
    finally:
        tmp.unlink(missing_ok=True)
    prune(keep=_key_of(path), also_keep=also_keep)


def _used(path: Path) -> None:
    """Mark an entry as just used (its mtime), for pruning; a read-only cache only loses that."""
    try:
        os.utime(path)
    except OSError:
        pass


#: The file name of an entry: <stem>-<16 hex digits>.<kind>.<suffix> (see file_key, entry_path).
ENTRY_NAME = re.compile(r"(?P<key>[A-Za-z0-9._-]*-[0-9a-f]{16})\.(weights\.safetensors|[a-z]+\.json)")
#: The file name of a temporary file: .<entry name>.<writer's pid>.<8 hex digits>.tmp
TEMP_NAME = re.compile(r"\..+\.(?P<pid>[0-9]+)\.[0-9a-f]{8}\.tmp")


def temp_name(name: str) -> str:
    """The name of a temporary file that becomes `name`, with this writer's process id (`TEMP_NAME`).

    >>> bool(TEMP_NAME.fullmatch(temp_name("x.json")))
    True
    """
    return f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"


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


def prune(keep: str, limit: int | None = None, also_keep: str | None = None) -> list[str]:
    """Remove whole keys, least recently used first, until the cache holds at most `limit` bytes
    (default `max_bytes()`); never the keys `keep` and `also_keep`, never a live writer's temporary file (which
    counts against the bound). Returns the keys removed.

    >>> prune(keep="model-0123456789abcdef")
    []
    """
    limit = max_bytes() if limit is None else limit
    keys: dict[str, list[tuple[Path, os.stat_result]]] = {}
    writing = 0
    try:
        for p in cache_dir().iterdir():
            if (key := _key_of(p)) is not None:  # only our entries: the folder may hold other files
                keys.setdefault(key, []).append((p, p.stat()))
            elif TEMP_NAME.fullmatch(p.name):
                writing += p.stat().st_size
    except OSError:
        return []
    total = writing + sum(st.st_size for files in keys.values() for _, st in files)
    removed = []
    for key in sorted(keys, key=lambda k: max(st.st_mtime for _, st in keys[k])):  # least recently used first
        if total <= limit:
            break
        if key in (keep, also_keep):
            continue
        for p, st in keys[key]:
            discard(p)
            total -= st.st_size
        removed.append(key)
    return removed


def remove_stale_temps(folder: Path) -> None:
    """Delete temporary files whose writer is no longer running, or that are older than an hour."""
    now = time.time()
    for tmp in folder.glob(".*.tmp"):
        m = TEMP_NAME.fullmatch(tmp.name)
        try:
            if (m is not None and not running(int(m["pid"]))) or now - tmp.stat().st_mtime > STALE_TEMP_SECONDS:
                tmp.unlink()
        except OSError:
            pass


def running(pid: int) -> bool:
    """Whether a process with this id is running (or exists and is not ours to signal).

    >>> running(os.getpid())
    True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True
