"""How a Llama GGUF file names and lays out its tensors, and how ours differ.

Two layout facts live here, each in one small function with a test of its own:

1. **GGUF lists dimensions in reverse.** GGUF (like ggml) writes `ne[0]`, the length of a row,
   first. A matrix shown as `[576, 49152]` by GGUF tools is the numpy/torch array `(49152, 576)`:
   49152 rows of 576 numbers. See `numpy_shape`.
2. **llama.cpp permutes the rows of W_Q and W_K** of a Llama (not of a Gemma, whose RoPE llama.cpp
   applies rotate-half style: `Architecture.permuted_qk`). Hugging Face's Llama applies RoPE "rotate-half"
   style: within a head, dimension i turns together with dimension i + d_head/2. llama.cpp turns
   neighbours (2i, 2i+1) instead, so its converter reorders each head's output rows from
   [halves] to [interleaved pairs]. `unpermute_rope_rows` undoes this, so our Q and K equal
   Hugging Face's dimension for dimension and our model applies rotate-half RoPE.

Our weights use the paper's row-vector layout (in, out), so that `Q = E @ W_Q` with E (T, d_model).
Files store linear layers like `torch.nn.Linear.weight`, (out, in); `to_paper_layout` transposes.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from studygroup.gguf.architectures import LLAMA, LLAMA_LAYER, Architecture
from studygroup.gguf.config import UNTIED_UNEMBED, Config

# Our name -> GGUF name. Layer names take the layer index: "layers.{l}.W_Q" <-> "blk.{l}.attn_q.weight".
GLOBAL_NAMES = {
    "embed": "token_embd.weight",
    "final_norm": "output_norm.weight",
    "unembed": UNTIED_UNEMBED,  # absent when the embedding is tied (the model then uses embed.T)
    "rope_freqs": "rope_freqs.weight",  # Llama 3.1/3.2 only: RoPE frequency divisors, (d_head/2,)
}
LAYER_NAMES = LLAMA_LAYER  # a Llama layer; other families: `Architecture.layer_names`
# Stored (out, in) like torch.nn.Linear.weight; ours are (in, out).
TRANSPOSED = frozenset({"unembed", "W_Q", "W_K", "W_V", "W_O", "W_gate", "W_up", "W_down", "W_QKV", "W_gate_up"})
# Projections the model multiplies as one matrix (studygroup.model.model), and the cache stores joined.
FUSED = {"W_QKV": ("W_Q", "W_K", "W_V"), "W_gate_up": ("W_gate", "W_up")}
# Biases the model adds as one vector after the fused multiply, where the family has them (Qwen 2).
FUSED_BIASES = {"b_QKV": ("b_Q", "b_K", "b_V")}
# What a file may store fused (GPT-2's b_QKV too), split on reading.
SPLIT = FUSED | FUSED_BIASES
# Rows permuted by llama.cpp's converter for interleaved RoPE, and the Config field giving their head count.
ROPE_PERMUTED = {"W_Q": "n_heads", "W_K": "n_kv_heads"}


def name_map(n_layers: int, *, tied: bool, rope_freqs: bool = False, arch: Architecture = LLAMA) -> dict[str, str]:
    """GGUF tensor name -> our name, for every tensor a file of `n_layers` holds (a Llama by default).

    >>> name_map(1, tied=True)["blk.0.attn_q.weight"]
    'layers.0.W_Q'
    """
    present = {"unembed": not tied, "rope_freqs": rope_freqs}
    names = {gguf: ours for ours, gguf in (GLOBAL_NAMES | arch.global_names).items() if present.get(ours, True)}
    for l in range(n_layers):
        names.update({f"blk.{l}.{gguf}": f"layers.{l}.{ours}" for ours, gguf in arch.layer_names.items()})
    return names


def our_names(names: Mapping[str, str]) -> set[str]:
    """Our tensor names once fused ones a file stores (Phi-3's W_QKV) are split into their parts.

    >>> sorted(our_names({"blk.0.attn_qkv.weight": "layers.0.W_QKV"}))
    ['layers.0.W_K', 'layers.0.W_Q', 'layers.0.W_V']
    """
    out = set()
    for ours in names.values():
        prefix, _, kind = ours.rpartition(".")
        out |= {f"{prefix}.{part}" for part in SPLIT[kind]} if kind in SPLIT else {ours}
    return out


def split_fused(w: dict[str, torch.Tensor], c: Config) -> dict[str, torch.Tensor]:
    """Split the fused matrices a file stores (Phi-3's W_QKV, W_gate_up) into their parts, as views:
    (d_model, Σ out) -> each (d_model, out), in the order of `FUSED` (q, k, v; gate, up). A matrix
    kept as the file's blocks stays whole (the model multiplies the whole)."""
    for name in [n for n in w if n.rpartition(".")[2] in SPLIT and isinstance(w[n], torch.Tensor)]:
        prefix, _, kind = name.rpartition(".")
        parts = SPLIT[kind]
        whole = w.pop(name)
        sizes = [paper_shape(f"{prefix}.{p}", c)[-1] for p in parts]
        w.update(zip((f"{prefix}.{p}" for p in parts), whole.split(sizes, dim=-1)))
    return w


def paper_shape(name: str, c: Config) -> tuple[int, ...]:
    """Shape of our tensor `name` (paper layout, (in, out) for matrices).

    >>> from studygroup.gguf.config import Config
    >>> c = Config(2, 4, 2, 32, 8, 64, 64, 1e4, 1e-5, 268)
    >>> paper_shape("layers.1.W_K", c)
    (32, 16)
    """
    q, kv = c.n_heads * c.d_head, c.n_kv_heads * c.d_head
    shapes = {
        "embed": (c.vocab_size, c.d_model), "unembed": (c.d_model, c.vocab_size),
        "final_norm": (c.d_model,), "attn_norm": (c.d_model,), "mlp_norm": (c.d_model,),
        "post_attn_norm": (c.d_model,), "post_mlp_norm": (c.d_model,), "q_norm": (c.d_head,), "k_norm": (c.d_head,),
        "rope_freqs": (c.d_head // 2,), "b_Q": (q,), "b_K": (kv,), "b_V": (kv,),
        "W_Q": (c.d_model, q), "W_K": (c.d_model, kv), "W_V": (c.d_model, kv), "W_O": (q, c.d_model),
        "W_gate": (c.d_model, c.d_mlp), "W_up": (c.d_model, c.d_mlp), "W_down": (c.d_mlp, c.d_model),
        "W_QKV": (c.d_model, q + 2 * kv), "W_gate_up": (c.d_model, 2 * c.d_mlp),
        "pos_embed": (c.context_length, c.d_model), "final_norm_bias": (c.d_model,), "attn_norm_bias": (c.d_model,),
        "mlp_norm_bias": (c.d_model,), "b_QKV": (q + 2 * kv,), "b_O": (c.d_model,), "b_up": (c.d_mlp,), "b_down": (c.d_model,),
    }
    return shapes[name.rsplit(".", 1)[-1]]


def file_shape(name: str, c: Config) -> tuple[int, ...]:
    """Numpy shape the file stores our tensor `name` in: (out, in) for the transposed ones.

    >>> from studygroup.gguf.config import Config
    >>> file_shape("layers.0.W_K", Config(2, 4, 2, 32, 8, 64, 64, 1e4, 1e-5, 268))  # k_proj: (16, 32)
    (16, 32)
    """
    shape = paper_shape(name, c)
    return shape[::-1] if name.rsplit(".", 1)[-1] in TRANSPOSED else shape


def numpy_shape(gguf_dims) -> tuple[int, ...]:
    """Layout fact 1: GGUF lists dimensions innermost first; numpy and torch outermost first.

    >>> numpy_shape([576, 49152])  # token_embd.weight as GGUF shows it: 49152 rows of 576
    (49152, 576)
    """
    return tuple(int(d) for d in reversed(list(gguf_dims)))


def unpermute_rope_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Layout fact 2: undo llama.cpp's row permutation of W_Q or W_K, (n_heads*d_head, d_in) -> same.

    Within each head llama.cpp stores the rows as interleaved RoPE pairs
    [0, d/2, 1, d/2+1, ...] (rows 2i and 2i+1 turn together); Hugging Face keeps them as halves
    [0, 1, ..., d/2-1 | d/2, ..., d-1] (rows i and i+d/2 turn together). Pass n_kv_heads for W_K.

    >>> rows = torch.tensor([[0.], [2.], [1.], [3.]])  # one head, d_head 4, pairs (0, 2), (1, 3)
    >>> unpermute_rope_rows(rows, 1).flatten().tolist()
    [0.0, 1.0, 2.0, 3.0]
    """
    rows, d_in = w.shape
    assert rows % (2 * n_heads) == 0, f"{rows} rows do not split into {n_heads} heads of pairs"
    half = rows // n_heads // 2
    # (n_heads, half, 2, d_in): pair i of a head holds HF rows i and i + half -> (n_heads, 2, half, d_in)
    return w.reshape(n_heads, half, 2, d_in).transpose(1, 2).reshape(rows, d_in)


def to_paper_layout(name: str, stored: torch.Tensor, c: Config) -> torch.Tensor:
    """One tensor as the file stores it (numpy shape) -> ours: float32, in the paper's layout.

    A matrix the paper multiplies as (in, out) is the transpose of the file's (out, in) rows, kept
    as they lie in memory (the layout BLAS multiplies fastest, and the cache stores): no copy.

    >>> from studygroup.gguf.config import Config
    >>> c = Config(1, 1, 1, 4, 4, 8, 8, 1e4, 1e-5, 10)
    >>> to_paper_layout("layers.0.W_up", torch.zeros(8, 4), c).shape  # (d_mlp, d_model) -> (d_model, d_mlp)
    torch.Size([4, 8])
    """
    kind = name.rsplit(".", 1)[-1]
    assert tuple(stored.shape) == file_shape(name, c), f"{name}: {tuple(stored.shape)} != {file_shape(name, c)}"
    if kind in ROPE_PERMUTED and c.arch.permuted_qk:
        stored = unpermute_rope_rows(stored, getattr(c, ROPE_PERMUTED[kind]))
    stored = stored.to(torch.float32).contiguous()
    out = stored.T if kind in TRANSPOSED else stored  # (in, out) over (out, in) rows
    assert tuple(out.shape) == paper_shape(name, c)
    return out
