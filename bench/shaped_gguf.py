"""GGUF files of the exact shapes and Q4_K_M tensor types of the models people run, random weights.

A `Shape` holds a model's hyper-parameters as its published config gives them (Hugging Face's
config.json, and the GGUF's vocabulary size where llama.cpp's converter cuts it); `write` puts a
file of that shape on disk, tensor by tensor, as llama.cpp's converter names and orders them and as
its quantizer types them for Q4_K_M (`q4_k_m_types`). The weights are random blocks, never
quantized floats: uniformly random codes with float16 scales chosen so that every matrix's
dequantized weights have mean ~0 and standard deviation `WEIGHT_STD`, which keeps the activations
of a pass in the range of a trained model's. Norm gains are 1, biases small.

The tokenizer is the default model's (SmolLM2's byte-level BPE, 49,152 tokens), padded with control
tokens `<|pad_N|>` to the model's vocabulary size, so that the embedding and output matrices have
the model's own number of rows: the text is encoded as SmolLM2 encodes it and every id past
49,151 is a row no text reaches (a sampled word may still land there).

Gemma 3 4B is written as Ollama's gemma3 file holds it: the text model and, in the same file, the
SigLIP vision tower (v.*) and the projector (mm.*), float16 matrices and float32 vectors, never
quantized (Ollama's quantizer leaves v.* and mm.* as they are); llama.cpp's converter writes the
vision part to a separate mmproj file instead. studygroup reads the text model and leaves v.* and
mm.* unread.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

from studygroup.gguf.blocks import HALF_OFFSETS
from studygroup.gguf.container import read_gguf
from studygroup.gguf.model_path import default_model_path

WEIGHT_STD = 0.02  # every random matrix's dequantized weights: mean ~0, this standard deviation
FILE_TYPE_Q4_K_M = 15  # llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M, general.file_type
PAD_TOKEN = "<|pad_{i}|>"
TOKEN_CONTROL = 3
# Where a K-quant's zero lies: Q4_K and Q5_K weights are d·scale·q − dmin·min with q ≥ 0; dmin =
# d·(the codes' mean) centres them. The other types' codes are centred already.
DMIN_OVER_D = {Q.Q4_K: 7.5, Q.Q5_K: 15.5}


@dataclass(frozen=True)
class Shape:
    """One model's hyper-parameters, under the names of studygroup's Config (GGUF's in comments)."""

    name: str  # the Ollama tag it stands for
    arch: str  # general.architecture
    n_layers: int  # block_count
    d_model: int  # embedding_length
    n_heads: int  # attention.head_count
    n_kv_heads: int  # attention.head_count_kv
    d_head: int  # attention.key_length (= value_length)
    d_mlp: int  # feed_forward_length
    vocab_size: int  # rows of token_embd
    context_length: int
    rope_base: float  # rope.freq_base
    rms_eps: float  # attention.layer_norm_rms_epsilon
    tied: bool  # no output.weight: the embedding is the unembedding
    llama3_rope: dict | None = None  # Llama 3.1's RoPE scaling, written as rope_freqs.weight
    sliding_window: int = 0  # Gemma 3's local layers
    rope_scale: float | None = None  # linear RoPE scaling (Gemma 3 4B: 8 on the global layers)
    vision: dict | None = None  # Gemma 3's SigLIP tower: layers, d, d_mlp, heads, image, patch


LLAMA3_ROPE = dict(low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)
SIGLIP = dict(layers=27, d=1152, d_mlp=4304, heads=16, image=896, patch=14)
SHAPES = {s.name: s for s in (
    Shape("llama3.2:3b", "llama", 28, 3072, 24, 8, 128, 8192, 128256, 131072, 500000.0, 1e-5, tied=True,
          llama3_rope=dict(factor=32.0, **LLAMA3_ROPE)),
    Shape("llama3.1:8b", "llama", 32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0, 1e-5, tied=False,
          llama3_rope=dict(factor=8.0, **LLAMA3_ROPE)),
    Shape("gemma3:4b", "gemma3", 34, 2560, 8, 4, 256, 10240, 262144, 131072, 1e6, 1e-6, tied=True,
          sliding_window=1024, rope_scale=8.0, vision=SIGLIP),
    Shape("qwen3:8b", "qwen3", 36, 4096, 32, 8, 128, 12288, 151936, 40960, 1e6, 1e-6, tied=False),
    Shape("deepseek-r1:7b", "qwen2", 28, 3584, 28, 4, 128, 18944, 152064, 131072, 10000.0, 1e-6, tied=False),
)}


# ---- llama.cpp's Q4_K_M rule (src/llama-quant.cpp: llama_tensor_get_type) ------------------------
def use_more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp's choice of the layers whose attn_v and ffn_down get Q6_K under Q4_K_M: the first
    and last eighth, and every third layer between.

    >>> [l for l in range(8) if use_more_bits(l, 8)]
    [0, 3, 6, 7]
    """
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def fallback(qtype: Q, n_in: int) -> Q:
    """llama.cpp's type for a row of `n_in` weights that is not a whole number of `qtype`'s blocks:
    Q4_K → Q5_0, Q6_K → Q8_0 (blocks of 32), F16 where not even those fit.

    >>> fallback(Q.Q4_K, 896).name, fallback(Q.Q6_K, 896).name, fallback(Q.Q4_K, 4304).name
    ('Q5_0', 'Q8_0', 'F16')
    """
    if n_in % gguf.GGML_QUANT_SIZES[qtype][0] == 0:
        return qtype
    small = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}[qtype]
    return small if n_in % gguf.GGML_QUANT_SIZES[small][0] == 0 else Q.F16


def q4_k_m_types(tensors, n_layers: int) -> dict[str, Q]:
    """The type llama.cpp's quantizer gives each of the text model's `tensors` ((GGUF name, numpy
    shape (out, in)) in the file's order) under Q4_K_M: vectors and norms stay F32; the output
    matrix (the embedding, when there is no output.weight) Q6_K; the k-th attn_v and the k-th
    ffn_down in the file's order Q6_K where `use_more_bits(k, n_layers)`; every other matrix Q4_K;
    then the fallback for rows that are not whole blocks. llama.cpp counts in the file's order, not
    by layer number: files whose layers are listed 0, 1, 10, 11, … (the packaged Qwen files) have
    their Q6_K on other layers than files listed 0, 1, 2, … (these).

    >>> m = [(f"blk.{l}.attn_v.weight", (1024, 4096)) for l in (0, 1, 10, 2)]
    >>> [t.name for t in q4_k_m_types(m, 16).values()]  # use_more_bits(k, 16) for k = 0, 1, 2, 3
    ['Q6_K', 'Q6_K', 'Q4_K', 'Q4_K']
    """
    tensors = list(tensors)
    tied = "output.weight" not in {n for n, _ in tensors}
    seen = {"attn_v.weight": 0, "ffn_down.weight": 0}
    types = {}
    for name, shape in tensors:
        kind = name.split(".", 2)[2] if name.startswith("blk.") else name  # "attn_v.weight", "attn_v.bias", …
        more = kind in seen and use_more_bits(seen[kind], n_layers)
        if kind in seen:
            seen[kind] += 1
        if len(shape) < 2 or name.endswith("_norm.weight"):
            types[name] = Q.F32
        elif name == "output.weight" or (tied and name == "token_embd.weight"):
            types[name] = Q.Q8_0 if shape[-1] % 256 else Q.Q6_K
        else:
            types[name] = fallback(Q.Q6_K if more else Q.Q4_K, shape[-1])
    return types


# ---- the tensors of a shape, in the converter's order --------------------------------------------
def text_tensors(s: Shape) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(GGUF name, numpy shape) of the text model's every tensor: matrices (out, in)."""
    q, kv = s.n_heads * s.d_head, s.n_kv_heads * s.d_head
    if s.llama3_rope:
        yield "rope_freqs.weight", (s.d_head // 2,)
    yield "token_embd.weight", (s.vocab_size, s.d_model)
    for l in range(s.n_layers):
        b = f"blk.{l}."
        yield b + "attn_norm.weight", (s.d_model,)
        yield from ((b + f"attn_{x}.weight", (n, s.d_model)) for x, n in (("q", q), ("k", kv), ("v", kv)))
        if s.arch == "qwen2":
            yield from ((b + f"attn_{x}.bias", (n,)) for x, n in (("q", q), ("k", kv), ("v", kv)))
        if s.arch in ("qwen3", "gemma3"):
            yield from ((b + f"attn_{x}_norm.weight", (s.d_head,)) for x in "qk")
        yield b + "attn_output.weight", (s.d_model, q)
        if s.arch == "gemma3":
            yield b + "post_attention_norm.weight", (s.d_model,)
        yield b + "ffn_norm.weight", (s.d_model,)
        yield b + "ffn_gate.weight", (s.d_mlp, s.d_model)
        yield b + "ffn_up.weight", (s.d_mlp, s.d_model)
        yield b + "ffn_down.weight", (s.d_model, s.d_mlp)
        if s.arch == "gemma3":
            yield b + "post_ffw_norm.weight", (s.d_model,)
    yield "output_norm.weight", (s.d_model,)
    if not s.tied:
        yield "output.weight", (s.vocab_size, s.d_model)


def vision_tensors(s: Shape) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(GGUF name, numpy shape) of Gemma 3's vision tower and projector, as Ollama's file names them."""
    v = s.vision
    if not v:
        return
    d, patches = v["d"], (v["image"] // v["patch"]) ** 2
    yield "v.patch_embedding.weight", (d, 3, v["patch"], v["patch"])
    yield "v.patch_embedding.bias", (d,)
    yield "v.position_embedding.weight", (patches, d)
    for l in range(v["layers"]):
        b = f"v.blk.{l}."
        for x in ("attn_q", "attn_k", "attn_v", "attn_output"):
            yield b + f"{x}.weight", (d, d)
            yield b + f"{x}.bias", (d,)
        for x in ("layer_norm1", "layer_norm2"):
            yield b + f"{x}.weight", (d,)
            yield b + f"{x}.bias", (d,)
        yield b + "mlp.fc1.weight", (v["d_mlp"], d)
        yield b + "mlp.fc1.bias", (v["d_mlp"],)
        yield b + "mlp.fc2.weight", (d, v["d_mlp"])
        yield b + "mlp.fc2.bias", (d,)
    yield "v.post_layernorm.weight", (d,)
    yield "v.post_layernorm.bias", (d,)
    yield "mm.mm_input_projection.weight", (s.d_model, d)
    yield "mm.mm_soft_emb_norm.weight", (d,)


def tensor_types(s: Shape) -> dict[str, tuple[tuple[int, ...], Q]]:
    """Every tensor of the file: GGUF name -> (numpy shape, type)."""
    text = list(text_tensors(s))
    types = {n: (shape, q) for (n, shape), q in zip(text, q4_k_m_types(text, s.n_layers).values())}
    types |= {n: (shape, Q.F16 if len(shape) > 1 else Q.F32) for n, shape in vision_tensors(s)}
    return types


def file_bytes(s: Shape) -> int:
    """The bytes of the file's tensors (the header adds a few MB: the vocabulary).

    >>> round(file_bytes(SHAPES["llama3.1:8b"]) / 1e9, 2)
    4.91
    """
    return sum(int(np.prod(gguf.quants.quant_shape_to_byte_shape(shape, q))) for shape, q in tensor_types(s).values())


# ---- the values ------------------------------------------------------------------------------------
def random_matrix(qtype: Q, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random blocks of `qtype` for a matrix of `shape` (out, in): (out, bytes a row) uint8, or float16."""
    if qtype == Q.F16:
        return (rng.standard_normal(shape, np.float32) * WEIGHT_STD).astype(np.float16)
    n, size = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    blocks = np.frombuffer(rng.bytes(rows * cols // n * size), np.uint8).reshape(rows * cols // n, size).copy()
    d = WEIGHT_STD / unit_std(qtype)
    halves = np.array([d, d * DMIN_OVER_D.get(qtype, 0.0)][:len(HALF_OFFSETS[qtype])], np.float16).view(np.uint8)
    for f, offset in enumerate(HALF_OFFSETS[qtype]):
        blocks[:, offset:offset + 2] = halves[2 * f:2 * f + 2]
    return blocks.reshape(rows, -1)


_UNIT_STD: dict[Q, float] = {}


def unit_std(qtype: Q) -> float:
    """The standard deviation of random codes of `qtype` dequantized with d = 1 (dmin as above):
    measured once on 64 rows of 4,096 weights with gguf's dequantizer."""
    if qtype not in _UNIT_STD:
        n, size = gguf.GGML_QUANT_SIZES[qtype]
        rng = np.random.default_rng(0)
        blocks = rng.integers(0, 256, (64 * 4096 // n, size), dtype=np.uint8)
        halves = np.array([1.0, DMIN_OVER_D.get(qtype, 0.0)], np.float16).view(np.uint8)
        for f, offset in enumerate(HALF_OFFSETS[qtype]):
            blocks[:, offset:offset + 2] = halves[2 * f:2 * f + 2]
        _UNIT_STD[qtype] = float(gguf.quants.dequantize(blocks.reshape(64, -1), qtype).std())
    return _UNIT_STD[qtype]


def vector(name: str, shape: tuple[int, ...], s: Shape, rng: np.random.Generator) -> np.ndarray:
    """A float32 vector: norm gains 1 (Gemma's file stores 1 + w: 1 is w = 0), biases ~N(0, 0.02²),
    Llama 3.1's RoPE divisors as its converter computes them."""
    if name == "rope_freqs.weight":
        return llama3_rope_divisors(s.d_head, s.rope_base, **s.llama3_rope)
    if name.endswith(".bias"):
        return (rng.standard_normal(shape) * WEIGHT_STD).astype(np.float32)
    return np.ones(shape, np.float32)


def llama3_rope_divisors(d_head, base, factor, low_freq_factor, high_freq_factor,
                         original_max_position_embeddings) -> np.ndarray:
    """rope_freqs.weight as llama.cpp's converter writes it for Llama 3.1's RoPE: per pair, its
    frequency's divisor (1 for fast pairs, `factor` for slow ones, a blend between), (d_head / 2,)."""
    inv_freq = base ** (-np.arange(0, d_head, 2, dtype=np.float64) / d_head)
    wavelen = 2 * np.pi / inv_freq
    smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = 1 / ((1 - smooth) / factor + smooth)
    short, long = original_max_position_embeddings / high_freq_factor, original_max_position_embeddings / low_freq_factor
    return np.where(wavelen < short, 1.0, np.where(wavelen > long, factor, blended)).astype(np.float32)


# ---- the file ---------------------------------------------------------------------------------------
def default_tokenizer() -> dict:
    """The default model's (SmolLM2's) tokenizer.* metadata."""
    return {k: v for k, v in read_gguf(default_model_path()).fields.items() if k.startswith("tokenizer.")}


def tokenizer_fields(vocab_size: int, fields: dict | None = None) -> dict:
    """tokenizer.* metadata (`fields`, the default model's if None), its tokens padded with control
    tokens to `vocab_size`.

    >>> f = tokenizer_fields(49160)
    >>> len(f["tokenizer.ggml.tokens"]), f["tokenizer.ggml.tokens"][-1], f["tokenizer.ggml.token_type"][-1]
    (49160, '<|pad_49159|>', 3)
    """
    fields = dict(default_tokenizer() if fields is None else fields)
    tokens, types = list(fields["tokenizer.ggml.tokens"]), list(fields["tokenizer.ggml.token_type"])
    if vocab_size < len(tokens):
        raise ValueError(f"a vocabulary of {vocab_size} is smaller than the tokenizer's {len(tokens)} tokens")
    pad = vocab_size - len(tokens)
    fields["tokenizer.ggml.tokens"] = tokens + [PAD_TOKEN.format(i=len(tokens) + i) for i in range(pad)]
    fields["tokenizer.ggml.token_type"] = types + [TOKEN_CONTROL] * pad
    return fields


def metadata(s: Shape) -> dict:
    """The file's metadata, {key: value}, beyond the tokenizer's."""
    a = s.arch
    keys = {"general.name": f"random {s.name} shape", "general.file_type": FILE_TYPE_Q4_K_M,
            "general.quantization_version": 2,
            f"{a}.block_count": s.n_layers, f"{a}.context_length": s.context_length,
            f"{a}.embedding_length": s.d_model, f"{a}.feed_forward_length": s.d_mlp,
            f"{a}.attention.head_count": s.n_heads, f"{a}.attention.head_count_kv": s.n_kv_heads,
            f"{a}.attention.key_length": s.d_head, f"{a}.attention.value_length": s.d_head,
            f"{a}.rope.freq_base": s.rope_base, f"{a}.attention.layer_norm_rms_epsilon": s.rms_eps,
            f"{a}.rope.dimension_count": s.d_head, f"{a}.vocab_size": s.vocab_size}
    if s.sliding_window:
        keys[f"{a}.attention.sliding_window"] = s.sliding_window
    if s.rope_scale:
        keys |= {f"{a}.rope.scaling.type": "linear", f"{a}.rope.scaling.factor": s.rope_scale}
    if s.vision:
        v = s.vision
        keys |= {f"{a}.vision.block_count": v["layers"], f"{a}.vision.embedding_length": v["d"],
                 f"{a}.vision.feed_forward_length": v["d_mlp"], f"{a}.vision.attention.head_count": v["heads"],
                 f"{a}.vision.image_size": v["image"], f"{a}.vision.patch_size": v["patch"],
                 f"{a}.vision.num_channels": 3, f"{a}.vision.attention.layer_norm_epsilon": 1e-6,
                 f"{a}.mm.tokens_per_image": 256}
    return keys


def write(s: Shape, path: str | Path, seed: int = 0, tokenizer: dict | None = None) -> Path:
    """Write a GGUF of shape `s` with random weights to `path`, one tensor in memory at a time;
    `tokenizer`: tokenizer.* metadata to pad to the shape's vocabulary (None: the default model's).

    >>> import tempfile
    >>> from dataclasses import replace
    >>> tiny = replace(SHAPES["llama3.1:8b"], n_layers=2, d_model=256, n_heads=4, n_kv_heads=2, d_head=64,
    ...                d_mlp=512, vocab_size=49152)
    >>> p = write(tiny, Path(tempfile.mkdtemp()) / "tiny.gguf")
    >>> types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(p).tensors}
    >>> types["blk.0.attn_v.weight"], types["blk.1.attn_v.weight"], types["output.weight"], types["blk.0.attn_norm.weight"]
    ('Q4_K', 'Q6_K', 'Q6_K', 'F32')
    """
    path, rng = Path(path), np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), s.arch)
    for key, value in (metadata(s) | tokenizer_fields(s.vocab_size, tokenizer)).items():
        _add(writer, key, value)
    types = tensor_types(s)
    for name, (shape, qtype) in types.items():
        nbytes = gguf.quants.quant_shape_to_byte_shape(shape, qtype)
        writer.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(nbytes)),
                               raw_dtype=None if qtype == Q.F32 else qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, (shape, qtype) in types.items():
        writer.write_tensor_data(vector(name, shape, s, rng) if qtype == Q.F32 else random_matrix(qtype, shape, rng))
    writer.close()
    return path


def _add(writer: gguf.GGUFWriter, key: str, value) -> None:
    """One metadata value, with the type llama.cpp's files use for it."""
    V = gguf.GGUFValueType
    if isinstance(value, list):
        first = value[0] if value else ""
        sub = V.STRING if isinstance(first, str) else V.FLOAT32 if isinstance(first, float) else V.INT32
        writer.add_key_value(key, value, V.ARRAY, sub_type=sub)
    else:
        vtype = {bool: V.BOOL, int: V.UINT32, float: V.FLOAT32, str: V.STRING}[type(value)]
        writer.add_key_value(key, value, vtype)


__all__ = ["SHAPES", "Shape", "file_bytes", "q4_k_m_types", "tensor_types", "use_more_bits", "write"]
