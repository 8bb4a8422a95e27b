"""Models by name: what `--model` accepts, and the list `studygroup models` prints.

`--model` is read, in this order, as
  1. the path of an existing file;
  2. `ollama:NAME[:TAG]`, a model in Ollama's store (TAG: latest by default);
  3. a packaged model's name (`gemma-3-270m`, `studygroup.model.packaged`; `smollm2-135m`, the
     default);
  4. a name `studygroup models` shows, matched without regard to case: the whole name, else a
     part of it, when exactly one model matches.
A path that does not exist (it holds a "/" or ends in .gguf) is an error naming it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from studygroup.errors import ModelFileError
from studygroup.gguf import stores
from studygroup.gguf.model_path import default_model_path
from studygroup.model import packaged

if TYPE_CHECKING:
    from studygroup.gguf.summary import Summary

OLLAMA_PREFIX = "ollama:"
DEFAULT_NAME = "smollm2-135m"  # the default model (no --model), listed and taken by this name too


@dataclass(frozen=True)
class Listed:
    """One line of `studygroup models`: where the model is and what it is."""

    name: str  # what --model takes
    store: str  # "packaged", "ollama", "lm studio", "hugging face", "llama.cpp"
    path: str  # the file (a split model's first part); "" when there is none
    summary: Summary
    known_memory: int | None = None  # a packaged model's `memory` before its file is joined

    def to_dict(self) -> dict:
        s = self.summary
        return {"name": self.name, "store": self.store, "path": self.path, "title": s.title,
                "architecture": s.architecture, "parameters": s.parameters, "quantization": s.quantization,
                "context_length": s.context_length, "size": s.size, "readable": s.readable, "reason": s.reason,
                "tensor_types": s.tensor_types, "memory": self.memory}

    @property
    def memory(self) -> int | None:
        """Bytes its weights take once loaded (`estimate.weights_memory`); None where unknown."""
        from studygroup.model import estimate

        s = self.summary
        if s.config is not None and s.matrix_bytes is not None:
            return estimate.weights_memory(s.config, s.matrix_bytes)
        if self.known_memory is not None:
            return self.known_memory
        if s.readable and s.parameters and 4 * s.parameters <= estimate.FLOAT32_MAX_BYTES:  # not joined yet: float32
            return 4 * s.parameters
        return None


def listing() -> tuple[list[Listed], list[str]]:
    """The packaged models and every model in the stores (`studygroup.gguf.stores`), each with its
    Summary read from its header; and the folders skipped, with the reason."""
    found, skipped = stores.find()
    return [*_packaged()] + [_listed(f) for f in found], skipped


def _packaged():
    from studygroup.gguf.summary import Summary, summarize  # here: a load by path never reads a summary (nor imports gguf)

    try:
        yield Listed(DEFAULT_NAME, "packaged", str(default_model_path()), summarize((default_model_path(),)))
    except ModelFileError as e:
        yield Listed(DEFAULT_NAME, "packaged", "", Summary("", None, None, None, None, None, False, str(e)))
    for name, spec in packaged.PACKAGED.items():
        path = packaged.assembled_path(name)
        if path.is_file() and path.stat().st_size == spec.size:
            yield Listed(name, "packaged", str(path), summarize((path,)))
        else:
            yield Listed(name, "packaged", "", Summary(
                spec.title, spec.architecture, spec.parameters, spec.quantization, spec.context_length, spec.size,
                True, "joined from its packages on first use", dict(spec.tensor_types)), spec.memory)


def _listed(f: stores.Found) -> Listed:
    from studygroup.gguf.summary import Summary, summarize

    if f.problem:
        return Listed(f.name, f.store, "", Summary("", None, None, None, None, None, False, f.problem))
    return Listed(f.name, f.store, str(f.paths[0]), summarize(f.paths))


def model_file(model: str | Path | None) -> str | Path | None:
    """The file `--model` names (see the module's docstring); None stays None (the default model).

    >>> model_file(None) is None
    True
    >>> model_file("no/such/model.gguf")
    'no/such/model.gguf'
    """
    if model is None or isinstance(model, Path) or model == "" or _exists(model):
        return model
    if model.lower().startswith(OLLAMA_PREFIX):
        return _ollama(model[len(OLLAMA_PREFIX):])
    if "/" in model or "\\" in model or model.lower().endswith(".gguf"):
        return model  # a path, not a name: resolve_model_path says it does not exist
    if model.lower() == DEFAULT_NAME:
        return None
    if model.lower() in packaged.PACKAGED:
        return packaged.model_file(model)
    return _by_name(model)


def _exists(model: str) -> bool:
    """Whether `model` is the path of something that exists (resolve_model_path says what is wrong
    with a path that cannot be looked at)."""
    try:
        return Path(model).expanduser().exists()
    except (OSError, RuntimeError, ValueError):
        return True


def _ollama(name: str) -> Path:
    """The model file of Ollama's `name[:tag]` (tag latest by default)."""
    wanted = (name if ":" in name else name + ":latest").lower()
    found, _ = stores.find()
    ollama = [f for f in found if f.store == "ollama"]
    match = [f for f in ollama if f.name.lower() == wanted]
    if not match:
        there = ", ".join(f.name for f in ollama[:8]) or "none"
        raise ModelFileError(f"Ollama has no model {wanted!r} on this disk (it has: {there}): "
                             f"run `ollama pull {wanted}`, or see `studygroup models`")
    return _file_of(match[0])


def _by_name(name: str) -> Path:
    """The one model `studygroup models` shows whose name is `name`, else contains it (any case)."""
    found, _ = stores.find()
    found = [stores.Found("packaged", n, ()) for n in (DEFAULT_NAME, *packaged.PACKAGED)] + found
    key = name.lower()
    match = [f for f in found if f.name.lower() == key] or [f for f in found if key in f.name.lower()]
    if not match:
        raise ModelFileError(f"no model file or known model is named {name!r}: pass the path of a .gguf file, "
                             f"ollama:NAME[:TAG], {', '.join(packaged.PACKAGED)}, or a name `studygroup models` shows")
    if len(match) > 1:
        names = ", ".join(f"{f.name} ({f.store})" for f in match[:10])
        raise ModelFileError(f"{len(match)} models match {name!r}: {names}; give more of the name or the path")
    if match[0].store == "packaged":
        return model_file(match[0].name)
    return _file_of(match[0])


def _file_of(f: stores.Found) -> Path:
    from studygroup.gguf.summary import split_advice

    if f.problem:
        raise ModelFileError(f"{f.name} ({f.store}) cannot be read: {f.problem}")
    if len(f.paths) > 1:
        raise ModelFileError(f"{f.name} ({f.store}) is {split_advice(len(f.paths), f.paths[0])}")
    return f.paths[0]
