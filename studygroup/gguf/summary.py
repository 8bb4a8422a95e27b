"""What a GGUF file is, from its header and tensor directory alone (no tensor is read): its
family, size in parameters, quantization, context length, and whether studygroup reads it.

Whether a family is read comes from `studygroup.gguf.architectures`; what studygroup cannot read
whatever the family is named here: a vision projector (mmproj), a LoRA adapter, a mixture of
experts, a model split into several files.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from studygroup.errors import ModelFileError
from studygroup.gguf.architectures import ARCHITECTURES
from studygroup.gguf.config import VISION_NOTE, VISION_PREFIXES, Config, config_from_gguf, display_name, quantization_of
from studygroup.gguf.container import read_gguf
from studygroup.gguf.metadata import lookup
from studygroup.gguf.weights import SUPPORTED_NAMES, SUPPORTED_TYPES, check_vocabulary


@dataclass(frozen=True)
class Summary:
    """One model file (or split model) as `studygroup models` lists it; None where unknown."""

    title: str  # "{general.basename} {general.size_label}", else general.name, else ""
    architecture: str | None  # general.architecture
    parameters: int | None  # values in every tensor (all parts of a split model)
    quantization: str | None  # general.file_type's name ("Q4_K_M"), else the commonest tensor type
    context_length: int | None  # {arch}.context_length
    size: int | None  # bytes on disk, all parts
    readable: bool  # whether studygroup reads it
    reason: str  # why not (readable: "" or a note)
    tensor_types: dict[str, int] = field(default_factory=dict)  # {type name: tensors of that type}, by name
    config: Config | None = field(default=None, compare=False, repr=False)  # where readable
    matrix_bytes: int | None = None  # bytes of its matrices as the file stores them (the text model's)


def summarize(paths: tuple[Path, ...]) -> Summary:
    """The Summary of a model file, or of a split model's parts (in order); a file that cannot be
    parsed gives a Summary saying why, never an exception."""
    try:
        size = sum(os.path.getsize(p) for p in paths)
        files = [read_gguf(p) for p in paths]
    except (ModelFileError, OSError) as e:
        return Summary("", None, None, None, None, None, False, " ".join(str(e).split()))
    fields = files[0].fields
    tensors = [t for f in files for t in f.tensors.values()]
    try:
        arch = lookup(fields, "general.architecture", str)
        title = display_name(fields)
        context = lookup(fields, f"{arch}.context_length", int) if arch else None
        readable, reason = _readable(fields, arch, tensors, len(paths))
    except ModelFileError as e:
        return Summary("", None, None, None, None, size, False, " ".join(str(e).split()))
    parameters = sum(int(np.prod(t.dims, dtype=np.int64)) for t in tensors)
    types = dict(sorted(Counter(t.qtype.name for t in tensors).items()))
    config = config_from_gguf(fields, tensors) if readable else None
    matrices = sum(t.n_bytes for t in tensors if len(t.dims) == 2 and not t.name.startswith(VISION_PREFIXES))
    return Summary(title, arch, parameters, quantization_of(fields, tensors), context, size, readable, reason, types,
                   config, matrices)


def _readable(fields, arch: str | None, tensors, n_files: int) -> tuple[bool, str]:
    """(whether studygroup reads the file, why not or a note)."""
    kind = lookup(fields, "general.type", str) or ""
    if kind == "mmproj" or arch == "clip":
        return False, "a vision projector (mmproj): it turns images into inputs for a language model, it is not one"
    if kind == "adapter":
        return False, "a LoRA adapter: it changes another model's weights and is not a model on its own"
    experts = lookup(fields, f"{arch}.expert_count", int) if arch else None
    if experts:
        return False, f"a mixture of experts ({experts} experts per layer): studygroup reads dense models"
    if arch not in ARCHITECTURES:
        return False, f"its architecture {arch!r} is not one studygroup reads ({', '.join(ARCHITECTURES)})"
    if n_files > 1:
        return False, split_advice(n_files, "FIRST-PART")
    try:  # what the metadata alone refuses (a RoPE scaling not implemented, Gemma 3 27B's query scale, …),
        config_from_gguf(fields)  # and a vocabulary that does not fit the embedding
        check_vocabulary(fields, tensors)
    except ModelFileError as e:
        return False, " ".join(str(e).split())
    unread = sorted({t.qtype.name for t in tensors if t.qtype not in SUPPORTED_TYPES and not t.name.startswith(VISION_PREFIXES)})
    if unread:
        return False, f"it holds tensors of type {', '.join(unread)}, which studygroup cannot dequantize (supported: {SUPPORTED_NAMES})"
    if any(t.name.startswith(VISION_PREFIXES) for t in tensors):
        return True, VISION_NOTE
    return True, ""


def split_advice(n_files: int, first: str | Path) -> str:
    """What to do with a model split into `n_files` files, whose first part is `first`."""
    return f"split into {n_files} files; studygroup reads one file: join them with `llama-gguf-split --merge {first} OUT.gguf`"
