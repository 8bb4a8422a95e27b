"""A model's weights and tokenizer through the disk cache: mapped from it when the file is
unchanged (a fraction of a second, no gguf import), else read and dequantized by
`weights.read_weights` (built by `Tokenizer.from_gguf`) and stored for next time."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import torch

from studygroup.model import cache_entry, disk_cache, estimate
from studygroup.gguf import layout as gguf_layout
from studygroup.gguf.config import Config
from studygroup.gguf.model_path import resolve_model_path
from studygroup.gguf.tokenizer import Tokenizer
from studygroup.progress import note


#: Cache writes that first loads held back (load_weights(..., defer_write=True)): see write_deferred.
_deferred: list = []


def load_weights(path: str | Path | None = None, cache: bool = True,
                 defer_write: bool = False) -> tuple[Config, dict[str, torch.Tensor]]:
    """`read_weights` through the disk cache (see studygroup.model.disk_cache); path None = the default model.

    A model that `estimate.keeps_blocks` answers True for keeps its matrices as the file's blocks
    (`FileMatrix`, mapped; `studygroup.model.packed` turns a layer at a time into float32): nothing
    is dequantized and nothing cached. The others are dequantized into float32 once and cached:

    Every load hands out views into the bytes of a cache entry: mapped from the file when it is
    cached, else laid out in memory as the entry holds them (and written, unless cache=False), so
    that the first run and every later one compute on the same layout and give the same numbers.

    defer_write: on a first load, keep the cache write (~1.5 s for the default model's 0.5 GB) for
      `write_deferred()`, so that a command prints its answer first.

    >>> config, w = load_weights()
    >>> config.n_layers, w["embed"].shape
    (30, torch.Size([49152, 576]))
    """
    path = resolve_model_path(path)
    if cache:
        entry = disk_cache.entry_path(disk_cache.file_key(path), "weights")
        hit = _from_cache(entry)
        if hit is not None and estimate.keeps_blocks(hit[0]):  # an entry of a model that keeps its blocks: not used
            disk_cache.discard(entry)
            hit = None
        if hit is not None:
            estimate.check_weights_fit(hit[0])  # mapped, not yet read: nothing is used up before it
            return hit
    from studygroup.gguf.weights import read_weights  # here: a load from the cache never imports gguf

    def before_reading(config: Config, kept_bytes: int) -> None:
        estimate.check_weights_fit(config, kept_bytes)  # refused before dequantizing
        if cache and not kept_bytes:
            note(f"first use of {path.name}: dequantizing its weights into {entry.parent} "
                 "(once per model file; a few seconds)")

    config, weights = read_weights(path, before_reading=before_reading, keep_blocks=estimate.keeps_blocks)
    if any(not isinstance(t, torch.Tensor) for t in weights.values()):  # kept as the file's blocks
        return config, weights
    metadata = {"config": json.dumps(config.to_dict()), "layout": CACHE_LAYOUT}
    buffer, stored = cache_entry.pack(_for_cache(weights, config.n_layers), metadata)
    del weights
    if cache:
        def write() -> None:
            disk_cache.write_tensors(entry, buffer)

        _deferred.append(write) if defer_write else write()
    return config, _from_stored(stored, config)


def write_deferred() -> None:
    """Write the cache entries that first loads held back (the CLI calls it once its output is out)."""
    while _deferred:
        _deferred.pop()()


#: How cache entries store matrices: (out, in) rows, the layout the model multiplies with, and
#: W_Q/W_K/W_V and W_gate/W_up one after the other as the model fuses them, so that a load maps
#: them without a copy (an (in, out) entry would be copied on every load, ~0.5 s; separate
#: matrices would be copied by the model's fusing, keeping 0.28 GB of the file's pages resident).
CACHE_LAYOUT = "matrices-out-in-joined"
EMBEDDINGS = ("embed", "pos_embed")  # tables read by row, stored as they are


def _for_cache(weights: Mapping[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor | list[torch.Tensor]]:
    """Our weights as a cache entry holds them, for `cache_entry.pack`: matrices (out, in) (views:
    pack copies each once), the joined ones as the list of their parts' rows."""
    parts = {f"layers.{l}.{p}" for l in range(n_layers) for group in gguf_layout.FUSED.values() for p in group}
    stored = {n: _as_rows(n, t) for n, t in weights.items() if n not in parts}
    for l in range(n_layers):
        for joined, group in gguf_layout.FUSED.items():
            if f"layers.{l}.{group[0]}" not in weights:  # no gate (GPT-2): W_up stored alone
                stored[f"layers.{l}.{group[-1]}"] = _as_rows(group[-1], weights[f"layers.{l}.{group[-1]}"])
                continue
            stored[f"layers.{l}.{joined}"] = [weights[f"layers.{l}.{p}"].T for p in group]
    return stored


def _from_stored(stored: Mapping[str, torch.Tensor], config: Config) -> dict[str, torch.Tensor]:
    """Inverse of _for_cache, as views: (in, out) shapes over the entry's (out, in) rows."""
    weights = {}
    for n, t in stored.items():
        prefix, _, kind = n.rpartition(".")
        if kind in gguf_layout.FUSED:
            names = [f"{prefix}.{p}" for p in gguf_layout.FUSED[kind]]
            widths = [gguf_layout.paper_shape(m, config)[1] for m in names]
            weights |= dict(zip(names, t.T.split(widths, dim=1)))
        else:
            weights[n] = _as_paper(n, t)
    return weights


def _as_rows(name: str, t: torch.Tensor) -> torch.Tensor:
    """A paper-layout (in, out) matrix as (out, in) rows (a view); the embedding and vectors as they are."""
    return t.T if t.dim() == 2 and name not in EMBEDDINGS else t


def _as_paper(name: str, t: torch.Tensor) -> torch.Tensor:
    """Inverse of _as_rows, as a view: (in, out) shape over (out, in) memory."""
    return t.T if t.dim() == 2 and name not in EMBEDDINGS else t


def _from_cache(entry: Path) -> tuple[Config, dict[str, torch.Tensor]] | None:
    """Config and weights of a cache entry, or None if absent or inconsistent (then it is discarded)."""
    found = disk_cache.read_tensors(entry)
    if found is None:
        return None
    stored, metadata = found
    try:
        config = Config.from_dict(json.loads(metadata["config"])) if metadata.get("layout") == CACHE_LAYOUT else None
        weights = _from_stored(stored, config) if config is not None else {}
    except (KeyError, ValueError, TypeError, RuntimeError):
        config = None
    if config is None or not _fits(config, weights):
        disk_cache.discard(entry)
        return None
    return dataclasses.replace(config, tied="unembed" not in weights), weights  # an entry may predate `tied`


def _fits(config: Config, weights: Mapping[str, torch.Tensor]) -> bool:
    """Whether `weights` are exactly the float32 tensors, of the right shapes, that `config` needs."""
    names = gguf_layout.our_names(gguf_layout.name_map(config.n_layers, tied="unembed" not in weights,
                                                       rope_freqs="rope_freqs" in weights, arch=config.arch))
    return set(weights) == names and all(
        t.dtype == torch.float32 and tuple(t.shape) == gguf_layout.paper_shape(n, config) for n, t in weights.items())


def load_tokenizer(path: str | Path | None = None, cache: bool = True) -> Tokenizer:
    """The tokenizer of a GGUF file (None = the default model), through the disk cache.

    >>> load_tokenizer().encode("Paris is the capital of")
    [38634, 314, 260, 3575, 282]
    """
    path = resolve_model_path(path)
    if not cache:
        return Tokenizer.from_gguf(path)
    entry = disk_cache.entry_path(disk_cache.file_key(path), "tokenizer")
    data = disk_cache.read_json(entry)
    if data is not None:
        try:
            return Tokenizer.from_json(data)
        except Exception:  # a damaged entry, whatever it breaks (tokenizers raises plain Exception): rebuild
            disk_cache.discard(entry)
    tokenizer = Tokenizer.from_gguf(path)
    disk_cache.write_json(entry, tokenizer.to_json())
    return tokenizer
