"""Read a Llama-family GGUF file: check it and dequantize its tensors.

`read_weights` parses and dequantizes (seconds); `weights_cache.load_weights` answers from the
cache when the file is unchanged (a fraction of a second) and calls it otherwise. Names and
layouts are translated by `gguf_layout`; everything that can be wrong with a file is raised here as one ModelFileError naming the file.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from studygroup.gguf import layout as gguf_layout
from studygroup.gguf.architectures import ARCHITECTURES, supported
from studygroup.gguf.blocks import FileMatrix, file_matrix
from studygroup.gguf.config import VISION_PREFIXES, Config, config_from_gguf
from studygroup.errors import ModelFileError
from studygroup.gguf.container import GGUFFile, TensorInfo, read_gguf
from studygroup.gguf.metadata import lookup
from studygroup.gguf.model_path import resolve_model_path

# Tensor types we dequantize, all with gguf's own `gguf.quants.dequantize`.
SUPPORTED_TYPES = frozenset({Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0,
                             Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS})
SUPPORTED_NAMES = ", ".join(sorted(t.name for t in SUPPORTED_TYPES))  # for messages


def read_weights(path: str | Path, before_reading=None, keep_blocks=None) -> tuple[Config, dict[str, torch.Tensor | FileMatrix]]:
    """Parse and dequantize a Llama GGUF file (no cache) into our names and the paper's layout.

    before_reading: called with the Config and the bytes of the matrices kept as the file's blocks
      (0: none) before any tensor is read (a check that may raise).
    keep_blocks: called with the Config; where it answers True, every matrix (`MATRICES`: the layers'
      projections, the embedding and unembedding) is a `FileMatrix`, the file's mapped bytes, checked
      but not dequantized (`studygroup.model.packed` turns them into float32 a layer at a time).
    Returns the Config and float32 tensors (a matrix (in, out) is stored as (out, in) rows in
    memory, its transpose contiguous): embed (vocab, d_model), final_norm
    (d_model,), unembed (d_model, vocab) only when the file is untied, and per layer l
    `layers.{l}.` attn_norm, W_Q (d_model, n_heads*d_head), W_K and W_V (d_model, n_kv_heads*d_head),
    W_O (n_heads*d_head, d_model), mlp_norm, W_gate and W_up (d_model, d_mlp), W_down (d_mlp, d_model).

    >>> from studygroup.gguf.model_path import default_model_path
    >>> config, w = read_weights(default_model_path())
    >>> w["layers.0.W_Q"].shape
    torch.Size([576, 576])
    """
    file = read_gguf(resolve_model_path(path))
    with _about(file.path):
        _check_architecture(file.fields)
        config = config_from_gguf(file.fields, file.tensors.values(), file.path.stat().st_size)
        text_tensors = {n for n in file.tensors if not n.startswith(VISION_PREFIXES)}  # a vision encoder is not read
        _check_layers_fit(config, len(text_tensors))
        names = gguf_layout.name_map(config.n_layers, tied=config.tied,
                                     rope_freqs="rope_freqs.weight" in file.tensors, arch=config.arch)
        _check_no_longrope(file.tensors)
        _check_tensor_names(text_tensors, names, config.architecture)
        check_vocabulary(file.fields, file.tensors.values())
        kept = {name for name, ours in names.items() if ours.rpartition(".")[2] in MATRICES} \
            if keep_blocks is not None and keep_blocks(config) else set()
        if before_reading is not None:
            before_reading(config, sum(file.tensors[name].n_bytes for name in kept))
        weights = {ours: (_kept_matrix if name in kept else _load_tensor)(file, file.tensors[name], ours, config)
                   for name, ours in names.items()}
    return config, gguf_layout.split_fused(weights, config)


#: The matrices kept as the file's blocks when asked (by the last part of our name).
MATRICES = gguf_layout.TRANSPOSED | {"embed"}


def _kept_matrix(file: GGUFFile, tensor: TensorInfo, name: str, config: Config) -> FileMatrix:
    """One matrix of the file, its shape and type checked, kept as the file's mapped bytes."""
    _check_shape(tensor, name, config)
    _check_type(tensor.name, tensor.qtype)
    return file_matrix(file.raw(tensor), tensor.name, tensor.qtype, name, config)


def _check_shape(tensor: TensorInfo, name: str, config: Config) -> None:
    expected = gguf_layout.file_shape(name, config)
    if tensor.shape != expected:
        raise ModelFileError(f"tensor {tensor.name} has shape {tensor.shape} (GGUF lists it as "
                             f"{list(tensor.dims)}); the config asks for {expected}")


def _check_type(name: str, qtype: Q) -> None:
    if qtype not in SUPPORTED_TYPES:
        raise ModelFileError(f"tensor {name} has type {Q(qtype).name}, which studygroup cannot dequantize; "
                             f"supported: {SUPPORTED_NAMES}")


def _check_no_longrope(tensors: Mapping[str, Any]) -> None:
    """LongRoPE (Phi-3 128k: per-frequency factors in rope_factors_long/short) is not implemented."""
    if "rope_factors_long.weight" in tensors or "rope_factors_short.weight" in tensors:
        raise ModelFileError("the model uses LongRoPE scaling (rope_factors_long/short, as Phi-3 128k), "
                             "which studygroup does not implement; use a 4k-context model")


def _check_architecture(fields: Mapping[str, Any]) -> None:
    """Only the families of `studygroup.gguf.architectures` are read."""
    arch = lookup(fields, "general.architecture")
    if arch is None:
        raise ModelFileError("the file has no general.architecture key; re-convert it with llama.cpp")
    if arch not in ARCHITECTURES:
        raise ModelFileError(f"the model's architecture is {arch!r}; studygroup reads {supported()}")


def _check_layers_fit(config: Config, n_tensors: int) -> None:
    """block_count must fit the tensors the file holds (a layer has len(arch.layer_names)): a damaged
    count would otherwise make billions of names before any tensor is looked at."""
    per_layer = len(config.arch.layer_names)
    if config.n_layers * per_layer > n_tensors:
        raise ModelFileError(f"block_count = {config.n_layers} layers would need at least "
                             f"{config.n_layers * per_layer} tensors; the file holds {n_tensors}")


#: The tensors with one row per token id: the tokenizer's token count must equal their rows.
VOCABULARY_TENSORS = ("token_embd.weight", "output.weight")


def check_vocabulary(fields: Mapping[str, Any], tensors) -> None:
    """The tokenizer's token count (tokenizer.ggml.tokens) must equal the rows of the embedding and
    the output matrix (TensorInfos among `tensors`), as llama.cpp requires: more rows would give ids
    that decode to nothing, fewer would leave tokens without a row.

    >>> from studygroup.gguf.container import TensorInfo
    >>> from gguf import GGMLQuantizationType as Q
    >>> check_vocabulary({"tokenizer.ggml.tokens": ["a", "b"]}, [TensorInfo("token_embd.weight", (4, 3), Q.F32, 0, 48)])
    Traceback (most recent call last):
    studygroup.errors.ModelFileError: the tokenizer has 2 tokens (tokenizer.ggml.tokens) but tensor token_embd.weight has 3 rows, one per token id: they must be equal (llama.cpp refuses such a file too); the file is damaged or was converted wrongly
    """
    tokens = lookup(fields, "tokenizer.ggml.tokens", list)
    if tokens is None:  # no vocabulary: the tokenizer says so
        return
    for t in tensors:
        if t.name in VOCABULARY_TENSORS and t.shape[0] != len(tokens):
            raise ModelFileError(f"the tokenizer has {len(tokens)} tokens (tokenizer.ggml.tokens) but tensor {t.name} "
                                 f"has {t.shape[0]} rows, one per token id: they must be equal (llama.cpp refuses "
                                 "such a file too); the file is damaged or was converted wrongly")


def _check_tensor_names(found: set[str], expected: Mapping[str, str], arch: str = "llama") -> None:
    """The file must hold exactly the tensors a model of its family and config has."""
    family = "a Llama" if arch == "llama" else f"an {arch!r}" if arch[0] in "aeiou" else f"a {arch!r}"
    missing = sorted(set(expected) - found)
    if missing:
        raise ModelFileError(f"the file lacks {len(missing)} tensor(s) {family} model needs, "
                             f"e.g. {', '.join(missing[:3])}; it is incomplete or not {family} model")
    extra = sorted(found - set(expected))
    if extra:
        raise ModelFileError(f"the file holds {len(extra)} tensor(s) {family} model does not have, "
                             f"e.g. {', '.join(extra[:3])}; studygroup cannot use this variant")


def _load_tensor(file: GGUFFile, tensor: TensorInfo, name: str, config: Config) -> torch.Tensor:
    """One tensor of the file -> our tensor `name`, float32 in the paper's layout."""
    _check_shape(tensor, name, config)
    stored = torch.from_numpy(dequantize(tensor.name, file.raw(tensor), tensor.qtype))
    assert tuple(stored.shape) == tensor.shape, (tensor.name, tuple(stored.shape), tensor.shape)
    if not bool(torch.isfinite(stored).all()):  # else some paths would answer, others give NaN
        bad = int((~torch.isfinite(stored)).sum())
        raise ModelFileError(f"tensor {tensor.name} holds {bad} value{'' if bad == 1 else 's'} not finite (NaN or infinite): "
                             "the file is damaged or was converted wrongly")
    return gguf_layout.to_paper_layout(name, stored, config)


def dequantize(name: str, data: np.ndarray, qtype: Q) -> np.ndarray:
    """Raw tensor data (`GGUFFile.raw`) -> a writable float32 array (numpy shape).

    >>> dequantize("x", np.ones((2, 3), np.float32), Q.F32).shape
    (2, 3)
    """
    _check_type(name, qtype)
    with np.errstate(all="ignore"):  # damaged scales overflow: the finiteness check says so in one line
        values = gguf.quants.dequantize(data, qtype)
    # F32 comes back as a read-only view of the memory-mapped file: copy it, and only it
    return np.array(values, dtype=np.float32, order="C", copy=True if not values.flags.writeable else None)


@contextlib.contextmanager
def _about(path: Path) -> Iterator[None]:
    """Prefix ModelFileErrors raised inside with the file they are about."""
    try:
        yield
    except ModelFileError as e:
        raise ModelFileError(f"{path}: {e}") from e
