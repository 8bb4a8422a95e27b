"""Fixtures the whole suite shares: a tiny random Llama written to GGUF, and the reference outputs.

`write_tiny_gguf` writes the file the way llama.cpp's converter would (Q/K rows permuted for
interleaved RoPE, GGUF tensor names, byte-level BPE vocabulary) from weights kept in Hugging
Face's names and layouts, so a test can load the same numbers into `transformers.LlamaForCausalLM`.
Nothing here imports studygroup: the fixture is an independent account of the file format.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 as in SmolLM2
BOS_ID, EOS_ID = 1, 2
# A handful of merges over GPT-2's byte alphabet ('Ġ' is the space byte).
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"),
          ("Ġ", "s"), ("r", "e"), ("Ġa", "n"), ("in", "g"), ("Ġ", "Ġ"), ("1", "2")]
UNREACHABLE = ["Ġhi"]
# A SentencePiece vocabulary is learned (BPE, as SentencePiece trains it) from this text.
SPM_CORPUS = (
    "The members of a study group ask questions and give answers. I have a lot of questions, "
    "and the group has a lot of answers: the answer that fits the question best gets the most weight. "
    "Cash or credit card? I have a lot. Café au lait costs 3 euros 50; the bill was 12.50 in total. "
    "    Indented text, tabs\tand newlines\nare written as they are typed.")
SPM_MERGES = 80  # a token no merge builds: only Llama 3's ignore_merges takes it whole
# HF name (with {l} for the layer) -> GGUF name, as llama.cpp's converter maps a Llama.
HF_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{l}.input_layernorm.weight": "blk.{l}.attn_norm.weight",
    "model.layers.{l}.self_attn.q_proj.weight": "blk.{l}.attn_q.weight",
    "model.layers.{l}.self_attn.k_proj.weight": "blk.{l}.attn_k.weight",
    "model.layers.{l}.self_attn.v_proj.weight": "blk.{l}.attn_v.weight",
    "model.layers.{l}.self_attn.o_proj.weight": "blk.{l}.attn_output.weight",
    "model.layers.{l}.post_attention_layernorm.weight": "blk.{l}.ffn_norm.weight",
    "model.layers.{l}.mlp.gate_proj.weight": "blk.{l}.ffn_gate.weight",
    "model.layers.{l}.mlp.up_proj.weight": "blk.{l}.ffn_up.weight",
    "model.layers.{l}.mlp.down_proj.weight": "blk.{l}.ffn_down.weight",
}
# gguf cannot quantize K-quants; we write random blocks and set their float16 scales (byte offsets
# within a block) to small finite values so that every block dequantizes to finite numbers.
K_QUANT_SCALE_OFFSETS = {Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,),
                         Q.IQ4_NL: (0,), Q.IQ4_XS: (0,)}  # and IQ4's scale
#: Two texts the tiny vocabulary spells in a few tokens, B ending as A: the tiny model's studies.
TEXT_A, TEXT_B = "the tin", "an ear then the tin"
#: llama.cpp's and transformers' logits for the default model (README.md there says how they were made).
REFERENCE_DIR = Path(__file__).resolve().parent / "data" / "reference"
#: tests/data holds scripts that make reference data (they need llama.cpp): not tests.
collect_ignore = ["data"]
QUANTIZABLE = {Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0}  # gguf.quants.quantize does these


@dataclass
class TinyModel:
    """A tiny Llama GGUF file and the same weights in Hugging Face's names and layouts."""

    path: Path
    hf_config: dict  # kwargs for transformers.LlamaConfig
    hf_state_dict: dict[str, torch.Tensor]  # exactly what the file holds, dequantized (HF layout)
    float_state_dict: dict[str, torch.Tensor]  # the random floats before quantization
    tokens: list[str] = field(default_factory=list)
    merges: list[str] = field(default_factory=list)
    tensor_type: Q = Q.F32


def gpt2_byte_alphabet() -> list[str]:
    """Character standing for each byte 0..255 in byte-level BPE (GPT-2's bytes_to_unicode)."""
    kept = [*range(33, 127), *range(161, 173), *range(174, 256)]
    moved = iter(range(256, 256 + 256 - len(kept)))
    return [chr(b) if b in kept else chr(next(moved)) for b in range(256)]


def tiny_vocab(user_tokens=()) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges): specials, the 256 byte symbols, merge results, user tokens."""
    normal = [*gpt2_byte_alphabet(), *("".join(pair) for pair in MERGES), *UNREACHABLE]
    tokens = [*SPECIAL_TOKENS, *normal, *user_tokens]
    types = [3] * len(SPECIAL_TOKENS) + [1] * len(normal) + [4] * len(user_tokens)
    return tokens, types, [" ".join(pair) for pair in MERGES]


def spm_vocab(user_tokens=()) -> tuple[list[str], list[int], list[float]]:
    """(tokens, token types, scores) laid out as llama.cpp's converter writes a SentencePiece model:
    <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF>, the learned pieces (score -rank), then the
    single characters (lower scores still), then user-defined tokens."""
    words = {}
    for w in SPM_CORPUS.replace(" ", " \u2581").split(" "):
        if w:
            words[tuple(w)] = words.get(tuple(w), 0) + 1
    pieces = []
    for _ in range(SPM_MERGES):
        pairs = {}
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + n
        if not pairs:
            break
        best = max(pairs, key=lambda ab: (pairs[ab], ab))
        pieces.append("".join(best))
        words = {_merge_pair(w, best): n for w, n in words.items()}
    chars = sorted({c for c in SPM_CORPUS.replace(" ", "\u2581")} - {"\n", "\t"})
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *pieces, *chars, *user_tokens]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(pieces) + len(chars)) + [4] * len(user_tokens)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces) + len(chars))] + [0.0] * len(user_tokens)
    return tokens, types, scores


def vocabulary_digest(tokens: list[str], merges: list[str] = ()) -> str:
    """A short digest of a vocabulary (its tokens, and a BPE's merges): reference ids kept in tests/data
    name the vocabulary they fit."""
    return hashlib.sha256("\n".join([*tokens, "", *merges] if merges else tokens).encode()).hexdigest()[:16]


def _merge_pair(word: tuple, pair: tuple) -> tuple:
    out, i = [], 0
    while i < len(word):
        if word[i:i + 2] == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def llama_cpp_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorder each head's rows from HF's rotate-half halves to interleaved RoPE pairs, as llama.cpp's
    convert_hf_to_gguf.py does for q_proj (n_heads) and k_proj (n_kv_heads). Works on byte rows too."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def random_hf_weights(cfg: dict, untied: bool, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random float32 weights with HF names and shapes ((out, in) for linear layers)."""
    d, dh, H, KV, F, V = (cfg["hidden_size"], cfg["head_dim"], cfg["num_attention_heads"],
                          cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["vocab_size"])
    shapes = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,)}
    if untied:
        shapes["lm_head.weight"] = (V, d)
    layer = {"input_layernorm.weight": (d,), "self_attn.q_proj.weight": (H * dh, d),
             "self_attn.k_proj.weight": (KV * dh, d), "self_attn.v_proj.weight": (KV * dh, d),
             "self_attn.o_proj.weight": (d, H * dh), "post_attention_layernorm.weight": (d,),
             "mlp.gate_proj.weight": (F, d), "mlp.up_proj.weight": (F, d), "mlp.down_proj.weight": (d, F)}
    for l in range(cfg["num_hidden_layers"]):
        shapes.update({f"model.layers.{l}.{k}": s for k, s in layer.items()})

    def draw(name, shape):
        if len(shape) == 1:  # norm gains near 1
            return 1.0 + 0.1 * rng.standard_normal(shape)
        return rng.standard_normal(shape) * (1.0 if "embed" in name else 0.3)

    return {name: draw(name, shape).astype(np.float32) for name, shape in shapes.items()}


def encode(w: np.ndarray, qtype: Q, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """(what the file stores, float32 values it dequantizes to or None when gguf cannot) for a matrix."""
    if qtype == Q.F32:
        return w, w
    if qtype in QUANTIZABLE:
        stored = gguf.quants.quantize(w, qtype)
    else:  # random blocks: K-quants (scales fixed below) or a type nobody can dequantize
        stored = rng.integers(0, 256, gguf.quants.quant_shape_to_byte_shape(w.shape, qtype), dtype=np.uint8)
        for offset in K_QUANT_SCALE_OFFSETS.get(qtype, ()):
            size = gguf.GGML_QUANT_SIZES[qtype][1]
            blocks = stored.reshape(-1, size)
            scales = rng.uniform(1e-3, 1e-2, len(blocks)).astype(np.float16)
            blocks[:, offset:offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    try:
        return stored, gguf.quants.dequantize(stored, qtype).astype(np.float32)
    except NotImplementedError:
        return stored, None


def write_tiny_gguf(path, *, arch: str = "llama", tensor_type: Q = Q.F32, untied: bool = False, seed: int = 0,
                    pre: str = "smollm", add_bos: bool = False, n_layers: int = 2, n_heads: int = 4,
                    n_kv_heads: int = 2, d_head: int = 8, d_mlp: int = 64, context: int = 64,
                    rope_base: float = 10000.0, rms_eps: float = 1e-5, type_overrides=None, drop=(),
                    metadata=None, user_tokens=(), tokenizer: str = "gpt2", llama3_rope: dict | None = None) -> TinyModel:
    """Write a tiny random Llama to `path` as llama.cpp's converter would, and return it.

    Matrices (embedding included) are stored as `tensor_type`; 1-D norms stay F32, as llama.cpp
    keeps them. `type_overrides` maps GGUF tensor names to other types; `drop` leaves GGUF tensors
    out; `metadata` overrides metadata keys ({key: value}, a value of None removes the key).
    `tokenizer`: "gpt2" (byte-level BPE, as SmolLM2) or "llama" (SentencePiece, as Llama 2).
    `llama3_rope`: Llama 3.1's RoPE scaling ({factor, low_freq_factor, high_freq_factor,
    original_max_position_embeddings}), written as llama.cpp's converter does (rope_freqs.weight).
    """
    path, rng = Path(path), np.random.default_rng(seed)
    if tokenizer == "llama":
        tokens, types, scores = spm_vocab(user_tokens)
        merges = []
    else:
        tokens, types, merges = tiny_vocab(user_tokens)
    hf_config = dict(vocab_size=len(tokens), hidden_size=n_heads * d_head, intermediate_size=d_mlp,
                     num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=n_kv_heads,
                     head_dim=d_head, max_position_embeddings=context, rope_theta=rope_base,
                     rms_norm_eps=rms_eps, tie_word_embeddings=not untied, bos_token_id=BOS_ID,
                     eos_token_id=EOS_ID, hidden_act="silu", attention_bias=False, mlp_bias=False)
    if llama3_rope:
        hf_config["rope_parameters"] = {"rope_type": "llama3", "rope_theta": rope_base, **llama3_rope}
    floats = random_hf_weights(hf_config, untied, rng)
    writer = gguf.GGUFWriter(str(path), arch)
    keys = tiny_metadata(arch, hf_config, pre, add_bos, tokens, types, merges)
    if tokenizer == "llama":  # what llama.cpp's converter writes for a SentencePiece vocabulary
        keys = {k: v for k, v in keys.items() if k not in ("tokenizer.ggml.merges", "tokenizer.ggml.pre")}
        keys |= {"tokenizer.ggml.model": "llama", "tokenizer.ggml.scores": scores,
                 "tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.add_bos_token": True}
    keys |= metadata or {}
    for key, value in keys.items():
        if value is not None and key != "general.architecture":  # the writer adds the architecture itself
            _add_value(writer, key, value)
    stored_values = {}
    for hf_name, w in floats.items():
        gguf_name = _gguf_name(hf_name)
        qtype = (type_overrides or {}).get(gguf_name, tensor_type if w.ndim == 2 else Q.F32)
        stored, values = encode(w, qtype, rng)
        stored_values[hf_name] = w if values is None else values
        heads = {"attn_q": n_heads, "attn_k": n_kv_heads}.get(gguf_name.split(".")[-2])
        if heads:  # row permutation for interleaved RoPE; a row's bytes move as one, so quantized rows too
            stored = llama_cpp_permute(stored, heads)
        if gguf_name not in drop:
            writer.add_tensor(gguf_name, stored, raw_dtype=None if qtype in (Q.F32, Q.F16) else qtype)
    if llama3_rope:
        writer.add_tensor("rope_freqs.weight", llama3_rope_divisors(d_head, rope_base, **llama3_rope))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    as_torch = lambda arrays: {k: torch.from_numpy(np.ascontiguousarray(v, np.float32)) for k, v in arrays.items()}
    return TinyModel(path, hf_config, as_torch(stored_values), as_torch(floats), tokens, merges, tensor_type)


# Gemma 3's HF names -> GGUF names, as llama.cpp's converter (Gemma3Model) maps them: four norms per
# layer (before and after attention and the MLP) and a per-head norm of q and k.
GEMMA3_HF_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "model.layers.{l}.input_layernorm.weight": "blk.{l}.attn_norm.weight",
    "model.layers.{l}.self_attn.q_proj.weight": "blk.{l}.attn_q.weight",
    "model.layers.{l}.self_attn.k_proj.weight": "blk.{l}.attn_k.weight",
    "model.layers.{l}.self_attn.v_proj.weight": "blk.{l}.attn_v.weight",
    "model.layers.{l}.self_attn.o_proj.weight": "blk.{l}.attn_output.weight",
    "model.layers.{l}.self_attn.q_norm.weight": "blk.{l}.attn_q_norm.weight",
    "model.layers.{l}.self_attn.k_norm.weight": "blk.{l}.attn_k_norm.weight",
    "model.layers.{l}.post_attention_layernorm.weight": "blk.{l}.post_attention_norm.weight",
    "model.layers.{l}.pre_feedforward_layernorm.weight": "blk.{l}.ffn_norm.weight",
    "model.layers.{l}.post_feedforward_layernorm.weight": "blk.{l}.post_ffw_norm.weight",
    "model.layers.{l}.mlp.gate_proj.weight": "blk.{l}.ffn_gate.weight",
    "model.layers.{l}.mlp.up_proj.weight": "blk.{l}.ffn_up.weight",
    "model.layers.{l}.mlp.down_proj.weight": "blk.{l}.ffn_down.weight",
}


def write_tiny_gemma3_gguf(path, *, seed: int = 0, n_layers: int = 6, n_heads: int = 4, n_kv_heads: int = 2,
                           d_model: int = 64, d_head: int = 32, d_mlp: int = 96, context: int = 64,
                           sliding_window: int = 4, rope_base: float = 1e6, rms_eps: float = 1e-6,
                           tensor_type: Q = Q.F32, rope_scale: float | None = None,
                           extra_tensors: dict | None = None, drop=(), reshape=(), metadata=None) -> TinyModel:
    """Write a tiny random Gemma 3 to `path` as llama.cpp's converter (Gemma3Model) would, and return it.

    Unlike a Llama: no Q/K row permutation (llama.cpp applies Gemma's RoPE rotate-half style); every
    norm weight is stored as 1 + w (Gemma's RMSNorm multiplies by 1 + w; the converter adds the 1,
    transformers' GGUF loader subtracts it); d_model need not be n_heads · d_head. Layer 5 is global,
    the others local with `sliding_window`. `hf_config` holds Gemma3TextConfig's arguments, with
    query_pre_attn_scalar = d_head (llama.cpp scales queries by 1/√d_head for every Gemma 3 but the 27B).
    `rope_scale`: linear RoPE scaling as the 4B and larger files carry it (rope.scaling.type "linear"
    and rope.scaling.factor), in hf_config on the global layers' RoPE only, as transformers applies it.
    `extra_tensors`: {GGUF name: float32 array} written besides the model's (a vision encoder's v.*, mm.*).
    `drop`: GGUF names left out of the file; `reshape`: GGUF names written one row short (bad files);
    `metadata`: metadata keys overridden ({key: value}).
    """
    path, rng = Path(path), np.random.default_rng(seed)
    tokens, types, scores = spm_vocab()
    hf_config = dict(vocab_size=len(tokens), hidden_size=d_model, intermediate_size=d_mlp,
                     num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=n_kv_heads,
                     head_dim=d_head, max_position_embeddings=context, rms_norm_eps=rms_eps,
                     sliding_window=sliding_window, query_pre_attn_scalar=d_head, tie_word_embeddings=True,
                     hidden_activation="gelu_pytorch_tanh", bos_token_id=1, eos_token_id=2, pad_token_id=0,
                     rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": rope_base},
                                      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    if rope_scale is not None:
        hf_config["rope_parameters"]["full_attention"] = {"rope_type": "linear", "factor": rope_scale, "rope_theta": rope_base}
    shapes = {"model.embed_tokens.weight": (len(tokens), d_model), "model.norm.weight": (d_model,)}
    layer = {"input_layernorm.weight": (d_model,), "self_attn.q_proj.weight": (n_heads * d_head, d_model),
             "self_attn.k_proj.weight": (n_kv_heads * d_head, d_model),
             "self_attn.v_proj.weight": (n_kv_heads * d_head, d_model),
             "self_attn.o_proj.weight": (d_model, n_heads * d_head), "self_attn.q_norm.weight": (d_head,),
             "self_attn.k_norm.weight": (d_head,), "post_attention_layernorm.weight": (d_model,),
             "pre_feedforward_layernorm.weight": (d_model,), "post_feedforward_layernorm.weight": (d_model,),
             "mlp.gate_proj.weight": (d_mlp, d_model), "mlp.up_proj.weight": (d_mlp, d_model),
             "mlp.down_proj.weight": (d_model, d_mlp)}
    for l in range(n_layers):
        shapes.update({f"model.layers.{l}.{k}": v for k, v in layer.items()})
    # HF's Gemma norm weights are w in (1 + w): near 0
    floats = {n: (0.1 * rng.standard_normal(s) if len(s) == 1 else rng.standard_normal(s) * (1.0 if "embed" in n else 0.3))
              .astype(np.float32) for n, s in shapes.items()}
    writer = gguf.GGUFWriter(str(path), "gemma3")
    keys = {k: v for k, v in tiny_metadata("gemma3", {**hf_config, "rope_theta": rope_base}, "default", True,
                                             tokens, types, []).items()
            if k not in ("tokenizer.ggml.merges", f"gemma3.rope.dimension_count")}
    keys |= {"general.name": "tiny-random-gemma3", "gemma3.attention.key_length": d_head,
             "gemma3.attention.value_length": d_head, "gemma3.attention.sliding_window": sliding_window,
             "tokenizer.ggml.model": "llama", "tokenizer.ggml.scores": scores, "tokenizer.ggml.unknown_token_id": 0,
             "tokenizer.ggml.add_space_prefix": False}
    if rope_scale is not None:
        keys |= {"gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": float(rope_scale)}
    keys |= metadata or {}
    for key, value in keys.items():
        _add_value(writer, key, value)
    for name, t in (extra_tensors or {}).items():
        writer.add_tensor(name, np.asarray(t, np.float32))
    stored_values = {}
    for hf_name, w in floats.items():
        parts = hf_name.split(".")
        key = ".".join(parts[:2] + ["{l}"] + parts[3:]) if parts[:2] == ["model", "layers"] else hf_name
        gguf_name = GEMMA3_HF_TO_GGUF[key].format(l=parts[2] if "{l}" in key else "")
        stored, values = encode(w + 1 if w.ndim == 1 else w, tensor_type if w.ndim == 2 else Q.F32, rng)
        stored_values[hf_name] = values - 1 if w.ndim == 1 else values  # what transformers' loader gives
        if gguf_name in drop:
            continue
        writer.add_tensor(gguf_name, stored[:-1] if gguf_name in reshape else stored,
                          raw_dtype=None if tensor_type in (Q.F32, Q.F16) or w.ndim == 1 else tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    as_torch = lambda arrays: {k: torch.from_numpy(np.ascontiguousarray(v, np.float32)) for k, v in arrays.items()}
    return TinyModel(path, hf_config, as_torch(stored_values), as_torch(floats), tokens, [], tensor_type)


def tiny_metadata(arch, hf, pre, add_bos, tokens, types, merges) -> dict:
    """The metadata llama.cpp's converter writes for a Llama, as {key: value}."""
    return {
        "general.name": "tiny-random-llama",
        f"{arch}.block_count": hf["num_hidden_layers"],
        f"{arch}.context_length": hf["max_position_embeddings"],
        f"{arch}.embedding_length": hf["hidden_size"],
        f"{arch}.feed_forward_length": hf["intermediate_size"],
        f"{arch}.attention.head_count": hf["num_attention_heads"],
        f"{arch}.attention.head_count_kv": hf["num_key_value_heads"],
        f"{arch}.rope.freq_base": float(hf["rope_theta"]),
        f"{arch}.attention.layer_norm_rms_epsilon": float(hf["rms_norm_eps"]),
        f"{arch}.rope.dimension_count": hf["head_dim"],
        f"{arch}.vocab_size": hf["vocab_size"],
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": BOS_ID,
        "tokenizer.ggml.eos_token_id": EOS_ID,
        "tokenizer.ggml.add_bos_token": add_bos,
    }


def llama3_rope_divisors(d_head, base, factor, low_freq_factor, high_freq_factor,
                         original_max_position_embeddings) -> np.ndarray:
    """What llama.cpp's converter stores as rope_freqs.weight for Llama 3.1's RoPE scaling: per pair,
    the divisor of its frequency (1 for fast pairs, `factor` for slow ones, a blend between)."""
    inv_freq = base ** (-np.arange(0, d_head, 2, dtype=np.float64) / d_head)
    wavelen = 2 * np.pi / inv_freq
    low_wavelen = original_max_position_embeddings / low_freq_factor
    high_wavelen = original_max_position_embeddings / high_freq_factor
    smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = 1 / ((1 - smooth) / factor + smooth)
    divisors = np.where(wavelen < high_wavelen, 1.0, np.where(wavelen > low_wavelen, factor, blended))
    return divisors.astype(np.float32)


def _add_value(writer, key: str, value) -> None:
    """Write one metadata value with the type llama.cpp's converter uses for it."""
    V = gguf.GGUFValueType
    if isinstance(value, list):
        first = value[0] if value else None
        sub = V.STRING if isinstance(first, str) else V.FLOAT32 if isinstance(first, float) else V.INT32
        writer.add_key_value(key, value, V.ARRAY, sub_type=sub)
    else:
        vtype = {bool: V.BOOL, int: V.UINT32, float: V.FLOAT32, str: V.STRING}[type(value)]
        writer.add_key_value(key, value, vtype)


def _gguf_name(hf_name: str) -> str:
    parts = hf_name.split(".")
    if parts[:2] == ["model", "layers"]:
        return HF_TO_GGUF[".".join(parts[:2] + ["{l}"] + parts[3:])].format(l=parts[2])
    return HF_TO_GGUF[hf_name]


def _rms_norm64(x, g, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def rope64(x, base):
    """Hugging Face's rotate-half RoPE on (…, T, d), float64."""
    T, d = x.shape[-2:]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    theta = torch.outer(torch.arange(T, dtype=torch.float64), inv).repeat(1, 2)  # (T, d)
    x1, x2 = x.chunk(2, -1)
    return x * theta.cos() + torch.cat([-x2, x1], -1) * theta.sin()


def reference_llama(tiny: "TinyModel", ids, silenced_members=(), silenced_heads=(), layer=None, gates=None):
    """A plain float64 Llama pass on the file's HF weights, written from the paper, not from studygroup:
    the last position's log-probabilities (vocab,), or with `layer` that layer's scores (H, T, T).

    silenced_members: keys no question hears, in every head (a question left with no key hears
    itself); silenced_heads: (layer, head) pairs whose output is zeroed before o_proj; gates:
    {(layer, head): g}, heads whose output is multiplied by g there."""
    c, w = tiny.hf_config, {k: v.double() for k, v in tiny.hf_state_dict.items()}
    H, H_kv, d, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    T = len(ids)
    x = w["model.embed_tokens.weight"][ids]  # (T, d_model)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    mask[:, list(silenced_members)] = False
    mask |= ~mask.any(-1, keepdim=True) & torch.eye(T, dtype=torch.bool)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        E = _rms_norm64(x, w[p + "input_layernorm.weight"], eps)
        q = rope64((E @ w[p + "self_attn.q_proj.weight"].T).view(T, H, d).transpose(0, 1), c["rope_theta"])
        k = rope64((E @ w[p + "self_attn.k_proj.weight"].T).view(T, H_kv, d).transpose(0, 1), c["rope_theta"])
        v = (E @ w[p + "self_attn.v_proj.weight"].T).view(T, H_kv, d).transpose(0, 1)
        k, v = k.repeat_interleave(H // H_kv, 0), v.repeat_interleave(H // H_kv, 0)  # (H, T, d)
        S = q @ k.mT / math.sqrt(d)  # (H, T, T)
        if l == layer:
            return S
        z = torch.softmax(S.masked_fill(~mask, -math.inf), -1) @ v  # (H, T, d)
        z[[h for m, h in silenced_heads if m == l]] = 0
        for (m, h), g in (gates or {}).items():
            z[h] *= g if m == l else 1
        x = x + z.transpose(0, 1).reshape(T, H * d) @ w[p + "self_attn.o_proj.weight"].T
        M = _rms_norm64(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = M @ w[p + "mlp.gate_proj.weight"].T, M @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    final = _rms_norm64(x[-1], w["model.norm.weight"], eps)  # (d_model,)
    return torch.log_softmax(final @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T, -1)  # (vocab,)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> TinyModel:
    """The shared tiny model: 2 layers, 4 heads, 2 kv heads, d_head 8, d_model 32, d_mlp 64, F32, tied."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_gemma3(tmp_path_factory) -> TinyModel:
    """A tiny Gemma 3: 6 layers (5 local with a window of 4, layer 5 global), 4 heads, 2 kv heads,
    d_model 64, d_head 32, d_mlp 96, F32, SentencePiece vocabulary without a space prefix."""
    return write_tiny_gemma3_gguf(tmp_path_factory.mktemp("tiny_gemma3") / "tiny-gemma3.gguf")


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """llama.cpp's and transformers' outputs for the default model (tests/data/reference, made by
    tests/data/make_reference.py)."""
    return REFERENCE_DIR


def random_ids(model, T, seed):
    """T token ids drawn from the model's vocabulary, the same for the same seed."""
    import torch
    return torch.randint(0, model.config.vocab_size, (T,), generator=torch.Generator().manual_seed(seed)).tolist()


def assert_logits_equal(ours, theirs, T):
    """Our logits at every position equal transformers' (1e-4), recording nothing or everything."""
    import torch
    ids = random_ids(ours, T, T)
    with torch.no_grad():
        expected = theirs(torch.tensor([ids])).logits[0]  # (T, vocab)
    for record in ("none", "all"):
        got = ours.run(ids, record=record, logits="all").logits
        assert (got - expected).abs().max() < 1e-4, record


def assert_silenced_members_agree(ours):
    """Members silenced in one batched pass give the logits of a run that masks each alone."""
    ids = random_ids(ours, 8, 5)
    batched = ours.silenced_logits(ids, [1, 5])
    for b, j in enumerate([1, 5]):
        assert (batched[b] - ours.run(ids, record="none", silence_members=[j]).logits[-1]).abs().max() < 1e-4


def allocation_peak(f, first=lambda: None):
    """(f(), the most bytes torch's CPU allocator held during f over what it held as f began), as
    torch's profiler records every allocation and free. first() runs before f under the profiler
    too: blocks it makes and f frees count (the profiler sees no free of a block made before it)."""
    from torch.profiler import ProfilerActivity, profile

    mark = 12345  # bytes of a marker allocation between first() and f()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        first()
        torch.empty(mark, dtype=torch.uint8)
        out = f()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    held, began, peak = 0, None, 0
    for _, n in events:
        held += n
        if began is None and n == mark:
            began = peak = held
        elif began is not None:
            peak = max(peak, held)
    return out, peak - began
