"""The GGUF files other programs keep on this disk: Ollama, LM Studio, the Hugging Face hub cache
and llama.cpp's cache. Found by their folders' layouts alone; nothing here opens a model file or
writes anywhere.

  Ollama       $OLLAMA_MODELS, ~/.ollama/models, /usr/share/ollama/.ollama/models:
               manifests/<host>/<namespace>/<name>/<tag> is JSON whose layers name blobs/sha256-<hex>
  LM Studio    ~/.lmstudio/models, ~/.cache/lm-studio/models: <publisher>/<repo>/<file>.gguf
  Hugging Face $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub:
               models--<org>--<repo>/snapshots/<revision>/<file>.gguf (links into blobs/)
  llama.cpp    $LLAMA_CACHE, ~/.cache/llama.cpp: <file>.gguf

A model split into `<name>-00001-of-0000N.gguf` … is one model. What cannot be walked (an
unreadable folder, a link back to a folder already walked, a link to a folder outside the store's
folder) is skipped with the reason. Only regular files are opened (a pipe, device or socket is
listed with the reason, never opened), a manifest only up to MAX_MANIFEST_BYTES; a link to a file
outside the store is followed (LM Studio's `lms import --symbolic-link` makes them).
"""
from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from studygroup.errors import ModelFileError
from studygroup.gguf.model_path import open_regular

OLLAMA_SERVICE = Path("/usr/share/ollama/.ollama/models")  # the Linux service's store
OLLAMA_REGISTRY = "registry.ollama.ai"
OLLAMA_LIBRARY = "library"  # the namespace of Ollama's own models: "gemma3:4b", not "library/gemma3:4b"
# Layers of an Ollama manifest that are GGUF files, and what each is called beside the model's name.
OLLAMA_GGUF_LAYERS = {"application/vnd.ollama.image.model": "",
                      "application/vnd.ollama.image.projector": " (projector)",
                      "application/vnd.ollama.image.adapter": " (adapter)"}
SPLIT = re.compile(r"^(?P<base>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
MAX_DEPTH = 8  # deeper than any store's layout: a deeper folder is not one of its models
MAX_MANIFEST_BYTES = 1 << 20  # an Ollama manifest is a few hundred bytes of JSON


@dataclass(frozen=True)
class Found:
    """One model in a store: its name, its file (split models: every part, in order), or the
    reason it has no usable file (a broken manifest, a missing blob or part)."""

    store: str  # "ollama", "lm studio", "hugging face", "llama.cpp"
    name: str  # what `--model` matches: Ollama's "gemma3:4b", else the file name without .gguf
    paths: tuple[Path, ...]  # the file, or a split model's parts in order; () when `problem`
    problem: str = ""  # why there is no file to read


def roots(home: Path | None = None, env=None) -> list[tuple[str, Path]]:
    """(store, folder) of every store folder that exists, each real folder once.

    >>> roots(Path("/nonexistent"), {})
    []
    """
    env = os.environ if env is None else env
    if home is None:
        try:
            home = Path.home()
        except RuntimeError:  # no $HOME and no entry in the password database
            home = Path("/nonexistent")
    candidates = [("ollama", env.get("OLLAMA_MODELS")), ("ollama", home / ".ollama/models"),
                  ("ollama", OLLAMA_SERVICE),
                  ("lm studio", home / ".lmstudio/models"), ("lm studio", home / ".cache/lm-studio/models"),
                  ("hugging face", env.get("HF_HUB_CACHE")),
                  ("hugging face", env.get("HF_HOME") and Path(env["HF_HOME"]) / "hub"),
                  ("hugging face", home / ".cache/huggingface/hub"),
                  ("llama.cpp", env.get("LLAMA_CACHE")), ("llama.cpp", home / ".cache/llama.cpp")]
    out, seen = [], set()
    for store, folder in candidates:
        if not folder:
            continue
        try:
            real = Path(folder).expanduser().resolve()
            if not real.is_dir() or real in seen:
                continue
        except (OSError, RuntimeError):  # a loop of links, or no permission to look
            continue
        seen.add(real)
        out.append((store, Path(folder).expanduser()))
    return out


def find(home: Path | None = None, env=None) -> tuple[list[Found], list[str]]:
    """Every model in every store, and one line per thing skipped ("<folder>: permission denied")."""
    found, skipped, seen_files = [], [], set()
    for store, root in roots(home, env):
        if store == "ollama":
            items = _ollama(root, skipped)
        else:
            items = _grouped(store, _gguf_files(root, skipped))
        for item in items:
            key = (store, item.name, tuple(_real(p) for p in item.paths), item.problem)
            if key not in seen_files:  # one file under one name once (HF revisions link to one blob)
                seen_files.add(key)
                found.append(item)
    return found, skipped


def _real(path: Path) -> str:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return str(path)


def _walk(root: Path, skipped: list[str], store: Path | None = None):
    """Every file under `root` (following links to folders inside `store`, default `root`, each real
    folder once), as (path, problem) where problem is why the file cannot be read ("" if it can)."""
    seen, inside = set(), os.path.realpath(store or root)

    def visit(folder: Path, depth: int):
        try:
            st = folder.stat()
        except OSError as e:
            skipped.append(f"{folder}: {e.strerror or e}")
            return
        if os.path.commonpath([inside, os.path.realpath(folder)]) != inside:
            skipped.append(f"{folder}: a link to a folder outside {store or root} (not followed)")
            return
        if (st.st_dev, st.st_ino) in seen:
            skipped.append(f"{folder}: a link to a folder already walked (a loop or a second name)")
            return
        seen.add((st.st_dev, st.st_ino))
        if depth > MAX_DEPTH:
            skipped.append(f"{folder}: deeper than {MAX_DEPTH} folders")
            return
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            skipped.append(f"{folder}: {e.strerror or e}")
            return
        for entry in entries:
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir()  # follows links
            except OSError:
                is_dir = False
            if is_dir:
                yield from visit(path, depth + 1)
                continue
            try:
                regular = stat.S_ISREG(os.stat(path).st_mode)
            except OSError as e:  # a dangling link, or a loop of links
                yield path, f"a link that leads nowhere ({e.strerror or e})"
                continue
            yield path, "" if regular else "not a regular file (a device, pipe or socket)"

    yield from visit(root, 0)


def _gguf_files(root: Path, skipped: list[str]):
    return [(p, problem) for p, problem in _walk(root, skipped) if p.name.lower().endswith(".gguf")]


def _grouped(store: str, files: list[tuple[Path, str]]) -> list[Found]:
    """One Found per model: a split model's parts gathered into one (a missing part named)."""
    out, splits = [], {}
    for path, problem in files:
        m = SPLIT.match(path.name)
        if m is None:
            out.append(Found(store, path.name[:-5], () if problem else (path,), problem))
        else:
            key = (path.parent, m["base"], int(m["total"]))
            splits.setdefault(key, {})[int(m["part"])] = (path, problem)
    for (parent, base, total), parts in splits.items():
        missing = [i for i in range(1, total + 1) if i not in parts or parts[i][1]]
        if missing:
            problem = f"split into {total} files and part {', '.join(map(str, missing))} is missing or unreadable"
            out.append(Found(store, base, (), problem))
        else:
            out.append(Found(store, base, tuple(parts[i][0] for i in range(1, total + 1))))
    return sorted(out, key=lambda f: f.name.lower())


def _ollama(root: Path, skipped: list[str]) -> list[Found]:
    """One Found per GGUF layer (model, projector, adapter) of each manifest under `root`."""
    manifests = root / "manifests"
    out = []
    for path, problem in _walk(manifests, skipped, root) if manifests.is_dir() else ():
        name = ollama_name(path.relative_to(manifests).parts)
        if problem:
            out.append(Found("ollama", name, (), f"manifest: {problem}"))
            continue
        out.extend(_ollama_layers(root, path, name))
    return sorted(out, key=lambda f: f.name.lower())


def ollama_name(parts: tuple[str, ...]) -> str:
    """A manifest's path under manifests/ as `ollama list` names it.

    >>> ollama_name(("registry.ollama.ai", "library", "gemma3", "270m"))
    'gemma3:270m'
    >>> ollama_name(("hf.co", "unsloth", "Qwen3-0.6B-GGUF", "Q4_K_M"))
    'hf.co/unsloth/Qwen3-0.6B-GGUF:Q4_K_M'
    """
    *model, tag = parts
    if model[:1] == [OLLAMA_REGISTRY]:
        model = model[1:]
        if model[:1] == [OLLAMA_LIBRARY]:
            model = model[1:]
    return "/".join(model) + ":" + tag


def _ollama_layers(root: Path, manifest: Path, name: str) -> list[Found]:
    try:
        layers = json.loads(_read_manifest(manifest))["layers"]
        wanted = [(OLLAMA_GGUF_LAYERS[l["mediaType"]], l["digest"]) for l in layers
                  if l.get("mediaType") in OLLAMA_GGUF_LAYERS]
    except OSError as e:
        return [Found("ollama", name, (), f"cannot read its manifest {manifest}: {e.strerror or e}")]
    except ModelFileError as e:
        return [Found("ollama", name, (), f"its manifest {e}")]
    except (ValueError, KeyError, TypeError, AttributeError):
        return [Found("ollama", name, (), f"its manifest {manifest} is not the JSON Ollama writes (a layers "
                                         "list with mediaType and digest)")]
    if not wanted:
        return [Found("ollama", name, (), f"its manifest {manifest} names no model layer")]
    out = []
    for suffix, digest in wanted:
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            out.append(Found("ollama", name + suffix, (), f"its manifest {manifest} names a blob {digest!r}, "
                                                          "not sha256:<64 hex digits>"))
            continue
        blob = root / "blobs" / digest.replace(":", "-")
        if os.path.isfile(blob):
            out.append(Found("ollama", name + suffix, (blob,)))
        else:
            out.append(Found("ollama", name + suffix, (), f"its blob {blob.name} is missing (run `ollama pull {name}`)"))
    return out


def _read_manifest(manifest: Path) -> bytes:
    """A manifest's bytes: a regular file of at most MAX_MANIFEST_BYTES (ModelFileError otherwise)."""
    with open_regular(manifest) as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ModelFileError(f"{manifest} is larger than {MAX_MANIFEST_BYTES >> 20} MiB, not the JSON Ollama writes")
    return data
