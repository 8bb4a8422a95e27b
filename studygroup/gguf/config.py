"""The model's sizes, read once from a GGUF file's metadata into one frozen dataclass.

`config_from_gguf` is the one function that builds a `Config` from a file; it checks the numbers
fit together (heads a multiple of kv heads, d_model = n_heads * d_head, ...) so that nothing
downstream has to.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from studygroup.errors import ModelFileError
from studygroup.gguf.architectures import ARCHITECTURES, Architecture, supported
from studygroup.gguf.metadata import REQUIRED, lookup

VISION_PREFIXES = ("v.", "mm.")  # llama.cpp's names for vision tensors kept in a text model's file
VISION_NOTE = "the text model only (the file also holds a vision encoder)"
DEFAULT_ROPE_BASE = 10000.0  # llama.cpp's default when `{arch}.rope.freq_base` is absent
DEFAULT_RMS_EPS = 1e-5  # likewise for `{arch}.attention.layer_norm_rms_epsilon`


@dataclass(frozen=True)
class Config:
    """Sizes of a Llama-family model, named with the shape vocabulary used everywhere.

    >>> c = Config(n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, d_head=8, d_mlp=64,
    ...            context_length=64, rope_base=10000.0, rms_eps=1e-5, vocab_size=268)
    >>> c.group_size
    2
    """

    n_layers: int  # transformer blocks
    n_heads: int  # query heads per layer
    n_kv_heads: int  # key/value heads per layer (grouped-query attention when < n_heads)
    d_model: int  # width of the residual stream
    d_head: int  # width of one head's Q, K and V
    d_mlp: int  # hidden width of the gated MLP
    context_length: int  # longest input the model was trained for, in tokens
    rope_base: float  # RoPE base θ: dimension pair i turns by position * θ^(-2i/d_head)
    rms_eps: float  # ε inside RMSNorm's square root
    vocab_size: int  # rows of the embedding
    name: str = ""  # for display only: general.basename and size_label, else general.name
    architecture: str = "llama"  # general.architecture: the family (studygroup.gguf.architectures)
    sliding_window: int = 0  # members a local layer sees, the latest ones (0: no local layers)
    rope_scale: float = 1.0  # linear RoPE scaling of the global layers: positions turn as p / rope_scale
    quantization: str = ""  # for display only: general.file_type's name ("Q4_1"), else the commonest tensor type
    file_size: int = 0  # for display only: the file's bytes
    vision: bool = False  # the file also holds a vision encoder (v.*, mm.* tensors), which is not read
    tied: bool = True  # the unembedding is the embedding's rows (the file has no output.weight)

    @property
    def arch(self) -> Architecture:
        """The family's description (norms, gate, local layers)."""
        return ARCHITECTURES[self.architecture]

    def window_of(self, layer: int) -> int | None:
        """How many of the latest members `layer` sees (None: every earlier member).

        >>> c = Config(12, 4, 1, 64, 16, 128, 64, 1e6, 1e-6, 300, architecture="gemma3", sliding_window=8)
        >>> c.window_of(0), c.window_of(5)
        (8, None)
        """
        return self.sliding_window if self.sliding_window and self.arch.is_local(layer) else None

    def rope_base_of(self, layer: int) -> float:
        """RoPE base θ of `layer`: the local layers' own where the family has one, else rope_base."""
        local = self.arch.local_rope_base
        return local if local is not None and self.arch.is_local(layer) else self.rope_base

    def rope_of(self, layer: int) -> tuple[float, float]:
        """(θ, linear scale) of `layer`'s RoPE: local layers keep their own base unscaled (llama.cpp's
        rope_freq_scale_train_swa = 1, transformers' sliding_attention RoPE); the others take
        rope_base and rope_scale.

        >>> c = Config(12, 4, 1, 64, 16, 128, 64, 1e6, 1e-6, 300, architecture="gemma3", sliding_window=8, rope_scale=8.0)
        >>> c.rope_of(0), c.rope_of(5)
        ((10000.0, 1.0), (1000000.0, 8.0))
        """
        local = self.arch.local_rope_base is not None and self.arch.is_local(layer)
        return (self.rope_base_of(layer), 1.0 if local else self.rope_scale)

    @property
    def label(self) -> str:
        """How the model is named to a person: name, quantization and file size.

        >>> Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152, name="smollm2 135M", quantization="Q4_1",
        ...        file_size=98_362_432).label
        'smollm2 135M · Q4_1 · 98.4 MB'
        """
        size = size_text(self.file_size) if self.file_size else ""
        return " · ".join(filter(None, (self.name or "unnamed model", self.quantization, size)))

    @property
    def note(self) -> str:
        """What of the file is not read, for the load message and the page ("" when all of it is)."""
        return VISION_NOTE if self.vision else ""

    @property
    def group_size(self) -> int:
        """Query heads that share one key/value head: n_heads // n_kv_heads."""
        return self.n_heads // self.n_kv_heads

    def kv_head_of(self, head: int) -> int:
        """The key/value head that query head `head` reads (grouped-query attention)."""
        return head // self.group_size

    def query_heads_of(self, kv_head: int) -> list[int]:
        """The query heads that share key/value head `kv_head`."""
        return list(range(kv_head * self.group_size, (kv_head + 1) * self.group_size))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields; `Config.from_dict(c.to_dict()) == c`."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Config:
        """Inverse of `to_dict`; unknown keys are an error, not silently dropped.

        >>> Config.from_dict({"n_layers": 1, "n_heads": 1, "n_kv_heads": 1, "d_model": 4,
        ...     "d_head": 4, "d_mlp": 8, "context_length": 8, "rope_base": 1e4, "rms_eps": 1e-5,
        ...     "vocab_size": 10}).d_model
        4
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown Config fields {sorted(unknown)}; expected {sorted(names)}")
        return cls(**data)


#: The unembedding's tensor: in a file only where it is not the embedding's rows.
UNTIED_UNEMBED = "output.weight"

# Config field -> metadata key under `{arch}.`; the data behind `config_from_gguf`.
REQUIRED_KEYS = {
    "n_layers": "block_count",
    "n_heads": "attention.head_count",
    "d_model": "embedding_length",
    "d_mlp": "feed_forward_length",
    "context_length": "context_length",
}


def config_from_gguf(fields: Mapping[str, Any], tensors: Iterable = (), file_size: int = 0) -> Config:
    """Build and check the `Config` of a GGUF file from its metadata.

    `fields` maps metadata keys to values: either gguf's `ReaderField`s (`GGUFReader(p).fields`)
    or plain Python values (handy in tests). Missing optional keys take llama.cpp's defaults:
    n_kv_heads = n_heads, d_head = d_model / n_heads, rope_base = 10000, rms_eps = 1e-5.
    `tensors` (the file's TensorInfos) and `file_size` (bytes) serve the name shown (the quantization
    where general.file_type is absent, whether a vision encoder is left unread, the size) and say
    whether the unembedding is a matrix of its own (`tied`; without tensors, tied).

    >>> config_from_gguf({"general.architecture": "llama", "llama.block_count": 2,
    ...     "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
    ...     "llama.embedding_length": 32, "llama.feed_forward_length": 64,
    ...     "llama.context_length": 64, "llama.vocab_size": 268}).d_head
    8
    """
    arch = lookup(fields, "general.architecture", str, "?")
    if arch not in ARCHITECTURES:
        raise ModelFileError(f"the model's architecture is {arch!r}; studygroup reads {supported()}")
    _check_supported(fields, arch)
    tensors = list(tensors)
    sizes = {name: lookup(fields, f"{arch}.{key}", int, REQUIRED) for name, key in REQUIRED_KEYS.items()}
    sizes["n_kv_heads"] = lookup(fields, f"{arch}.attention.head_count_kv", int, sizes["n_heads"])
    sizes["vocab_size"] = _vocab_size(fields, arch)
    sizes["d_head"] = _d_head(fields, arch, sizes["d_model"], sizes["n_heads"])
    config = Config(
        **sizes,
        rope_base=lookup(fields, f"{arch}.rope.freq_base", float, DEFAULT_ROPE_BASE),
        rms_eps=lookup(fields, f"{arch}.{ARCHITECTURES[arch].eps_key}", float, DEFAULT_RMS_EPS),
        name=display_name(fields),
        architecture=arch,
        sliding_window=(lookup(fields, f"{arch}.attention.sliding_window", int, REQUIRED)
                        if ARCHITECTURES[arch].global_every else 0),
        rope_scale=_rope_scale(fields, arch),
        quantization=quantization_of(fields, tensors) or "",
        file_size=file_size,
        vision=any(t.name.startswith(VISION_PREFIXES) for t in tensors),
        tied=all(t.name != UNTIED_UNEMBED for t in tensors),
    )
    _check_config(config)
    _check_query_scale(config)
    return config


def quantization_of(fields: Mapping[str, Any], tensors: Iterable) -> str | None:
    """general.file_type's name ("Q4_K_M"), else the tensor type holding the most values.

    >>> quantization_of({"general.file_type": 3}, [])
    'Q4_1'
    """
    from gguf import LlamaFileType  # here: a load from the cache never imports gguf

    code = lookup(fields, "general.file_type", int)
    try:
        return LlamaFileType(code).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        pass
    counts = Counter()
    for t in tensors:
        counts[t.qtype.name] += math.prod(int(n) for n in t.dims)
    return counts.most_common(1)[0][0] if counts else None


def size_text(n: int | None) -> str:
    """A file size in MB or GB (10^6, 10^9 bytes), three figures.

    >>> size_text(253_113_024), size_text(98_362_432), size_text(3_338_801_504), size_text(None)
    ('253 MB', '98.4 MB', '3.34 GB', '?')
    """
    if n is None:
        return "?"
    return f"{n / 1e9:.3g} GB" if n >= 1e9 else f"{n / 1e6:.3g} MB"


def display_name(fields: Mapping[str, Any]) -> str:
    """How a model is named to a person: `general.basename` and `general.size_label` where the file
    has them (as llama.cpp's converter writes them), else `general.name`.

    >>> display_name({"general.name": "Smollm2 135M 8k Lc100K Mix1 Ep2", "general.basename": "smollm2",
    ...               "general.size_label": "135M"})
    'smollm2 135M'
    >>> display_name({"general.name": "tiny-random-llama"})
    'tiny-random-llama'
    """
    basename = lookup(fields, "general.basename", str)
    if not basename:
        return str(lookup(fields, "general.name", default=""))
    return " ".join(filter(None, (basename, lookup(fields, "general.size_label", str))))


def _check_config(c: Config) -> None:
    """Raise ModelFileError when the sizes cannot describe a working model."""
    for name in ("n_layers", "n_heads", "n_kv_heads", "d_model", "d_head", "d_mlp",
                 "context_length", "vocab_size"):
        if getattr(c, name) <= 0:
            raise ModelFileError(f"the model file gives {name} = {getattr(c, name)}; it must be positive")
    if c.n_heads % c.n_kv_heads:
        raise ModelFileError(f"the model file has {c.n_heads} query heads and {c.n_kv_heads} key/value "
                             "heads; query heads must be a multiple of key/value heads")
    if c.d_head % 2 and c.arch.position == "rope":
        raise ModelFileError(f"d_head = {c.d_head} is odd; RoPE turns dimensions in pairs")
    if c.sliding_window < 0 or (c.arch.global_every and c.sliding_window == 0):
        raise ModelFileError(f"the model file gives sliding_window = {c.sliding_window}; a {c.architecture} "
                             "model's local layers need a positive window")
    if not (c.rope_base > 0 and c.rms_eps > 0):
        raise ModelFileError(f"rope_base = {c.rope_base} and rms_eps = {c.rms_eps} must be positive")


def _check_supported(fields: Mapping[str, Any], arch: str) -> None:
    """Refuse Llama variants whose maths studygroup does not implement, rather than run them wrongly."""
    if lookup(fields, f"{arch}.expert_count", int, 0) > 0:
        raise ModelFileError("the model is a mixture of experts (e.g. Mixtral); studygroup implements "
                             "only dense Llama models")
    scaling = lookup(fields, f"{arch}.rope.scaling.type", default="none")
    if scaling not in ("none", "linear"):
        raise ModelFileError(f"the model uses {scaling!r} RoPE scaling, which studygroup does not implement "
                             "(it implements linear scaling); use a model without rope.scaling")


def _rope_scale(fields: Mapping[str, Any], arch: str) -> float:
    """The linear RoPE scaling factor, as llama.cpp reads it: rope.scaling.factor (else the older
    rope.scale_linear) under a scaling type that is linear or absent; 1 without one."""
    if lookup(fields, f"{arch}.rope.scaling.type", default="linear") != "linear":
        return 1.0
    factor = lookup(fields, f"{arch}.rope.scaling.factor", float)
    factor = lookup(fields, f"{arch}.rope.scale_linear", float, 0.0) if factor is None else factor
    if factor < 0 or not math.isfinite(factor):
        raise ModelFileError(f"the model file gives rope.scaling.factor = {factor}; it must be positive")
    return factor or 1.0


def _check_query_scale(c: Config) -> None:
    """Gemma 3 27B (62 layers, as llama.cpp tells it) scales queries by 1/√(d_model/n_heads), not by
    1/√d_head (llama.cpp's f_attention_scale; transformers' query_pre_attn_scalar = 168): every score
    studygroup shows and explains is q·k/√d_k with d_k = d_head, so such a file is refused."""
    if c.architecture == "gemma3" and c.n_layers == 62 and c.d_model // c.n_heads != c.d_head:
        raise ModelFileError(f"Gemma 3 27B scales its queries by 1/√(d_model/n_heads) = 1/√{c.d_model // c.n_heads}, "
                             f"not by 1/√d_head = 1/√{c.d_head}; studygroup computes and explains scores as "
                             "q·k/√d_head, so it does not read this model")


def _d_head(fields: Mapping[str, Any], arch: str, d_model: int, n_heads: int) -> int:
    """Width of one head: `attention.key_length`, else d_model / n_heads (as llama.cpp reads it).

    `rope.dimension_count` (the dimensions RoPE turns) must then equal it: we rotate whole heads.
    """
    key_length = lookup(fields, f"{arch}.attention.key_length", int)
    value_length = lookup(fields, f"{arch}.attention.value_length", int, key_length)
    if value_length != key_length:
        raise ModelFileError(f"key_length {key_length} != value_length {value_length}: "
                             "studygroup needs keys and values of the same width")
    if key_length is None and (n_heads <= 0 or d_model % n_heads):
        raise ModelFileError(f"d_model = {d_model} does not split into {n_heads} heads, and the file "
                             f"has no {arch}.attention.key_length to give the head width")
    d_head = key_length if key_length is not None else d_model // n_heads
    rope_dims = lookup(fields, f"{arch}.rope.dimension_count", int, d_head)
    if rope_dims != d_head:
        raise ModelFileError(f"RoPE turns {rope_dims} of {d_head} head dimensions; studygroup only "
                             "implements RoPE over the whole head (rope.dimension_count = d_head)")
    return d_head


def _vocab_size(fields: Mapping[str, Any], arch: str) -> int:
    """`{arch}.vocab_size`, else the length of the tokenizer's token list (older files)."""
    size = lookup(fields, f"{arch}.vocab_size", int)
    if size is None and "tokenizer.ggml.tokens" in fields:
        size = len(lookup(fields, "tokenizer.ggml.tokens", list))
    if size is None:
        raise ModelFileError(f"the model file has neither {arch}.vocab_size nor tokenizer.ggml.tokens; "
                             "it cannot say how many tokens the model knows")
    return size
