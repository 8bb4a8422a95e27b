"""The model families studygroup reads, each described once as data.

One `Architecture` says everything in which a family's forward pass differs from Llama's: which
tensors a layer holds (a norm whose tensor a family lacks is simply not applied), how the file
lays out W_Q and W_K, the MLP's gate nonlinearity, whether embeddings are scaled, and which
layers see only a window of the latest members. What the file does not say (Gemma 3's layer
pattern and its local layers' RoPE base) is fixed by the architecture in llama.cpp and
transformers alike, and written here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

# Our name -> GGUF name within `blk.{l}.`: what every Llama-family layer holds.
LLAMA_LAYER = {
    "attn_norm": "attn_norm.weight",
    "W_Q": "attn_q.weight",
    "W_K": "attn_k.weight",
    "W_V": "attn_v.weight",
    "W_O": "attn_output.weight",
    "mlp_norm": "ffn_norm.weight",
    "W_gate": "ffn_gate.weight",
    "W_up": "ffn_up.weight",
    "W_down": "ffn_down.weight",
}
# Gemma 3 adds a norm after attention and after the MLP (on their writes, before the residual
# sum) and an RMSNorm over each head's q and k (llama.cpp's names).
GEMMA3_EXTRA = {
    "post_attn_norm": "post_attention_norm.weight",
    "post_mlp_norm": "post_ffw_norm.weight",
    "q_norm": "attn_q_norm.weight",
    "k_norm": "attn_k_norm.weight",
}
# Qwen 2 / 2.5 add a bias to q, k and v (llama.cpp's names); Qwen 3 drops them for Gemma's per-head
# q/k RMSNorm (plain gains there: the file stores w, not 1 + w).
QKV_BIAS = {"b_Q": "attn_q.bias", "b_K": "attn_k.bias", "b_V": "attn_v.bias"}
QK_NORM = {"q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight"}
# Phi-3 stores W_Q, W_K, W_V as one matrix and W_gate, W_up as one (gate rows first), as
# transformers' Phi3 does; read as such and split (`layout.FUSED`).
# GPT-2 (llama.cpp's LLM_ARCH_GPT2): LayerNorm with a bias, fused qkv with a bias, a bias on every
# projection, a plain GELU MLP (no gate), and a learned position embedding added at the first layer.
GPT2_LAYER = {"attn_norm": "attn_norm.weight", "attn_norm_bias": "attn_norm.bias",
              "W_QKV": "attn_qkv.weight", "b_QKV": "attn_qkv.bias", "W_O": "attn_output.weight", "b_O": "attn_output.bias",
              "mlp_norm": "ffn_norm.weight", "mlp_norm_bias": "ffn_norm.bias", "W_up": "ffn_up.weight",
              "b_up": "ffn_up.bias", "W_down": "ffn_down.weight", "b_down": "ffn_down.bias"}
GPT2_GLOBAL = {"pos_embed": "position_embd.weight", "final_norm_bias": "output_norm.bias"}
PHI3_LAYER = {"attn_norm": "attn_norm.weight", "W_QKV": "attn_qkv.weight", "W_O": "attn_output.weight",
              "mlp_norm": "ffn_norm.weight", "W_gate_up": "ffn_up.weight", "W_down": "ffn_down.weight"}


@dataclass(frozen=True)
class Architecture:
    """How one family's forward pass differs from Llama's, as data.

    >>> ARCHITECTURES["gemma3"].is_local(5), ARCHITECTURES["gemma3"].is_local(4)
    (False, True)
    """

    name: str  # general.architecture, and the prefix of the family's metadata keys
    examples: str  # models of this family, for messages
    layer_names: Mapping[str, str]  # our tensor name -> GGUF name within blk.{l}.
    permuted_qk: bool  # llama.cpp's converter permuted W_Q/W_K rows for interleaved RoPE (see layout)
    gate: str  # the MLP gate's nonlinearity: "silu" (SwiGLU) or "gelu_tanh" (GeGLU, tanh GELU)
    embed_scale: bool = False  # embeddings multiplied by √d_model before the first layer
    global_every: int = 0  # 0: every layer sees every member; k: layer l sees every member only when
    #                        l % k == k - 1, the others only the last `sliding_window` (local layers)
    local_rope_base: float | None = None  # RoPE base θ of the local layers (None: rope_base everywhere)
    norm_note: str = ""  # how the file stores norm weights, where it matters
    norm: str = "rms"  # "rms" (RMSNorm) or "layer" (LayerNorm: centred, with a bias)
    eps_key: str = "attention.layer_norm_rms_epsilon"  # the metadata key of the norm's ε, under `{name}.`
    position: str = "rope"  # "rope" (q and k turned) or "learned" (a position embedding added to the first E)
    gated: bool = True  # MLP: gate(x·W_gate) ⊙ x·W_up; False: gate(x·W_up + b_up), no W_gate
    global_names: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # our name -> GGUF name, beyond Llama's globals

    @property
    def norm_name(self) -> str:
        """The norm's name, for sentences: "RMSNorm" or "LayerNorm"."""
        return {"rms": "RMSNorm", "layer": "LayerNorm"}[self.norm]

    def is_local(self, layer: int) -> bool:
        """Whether `layer` sees only a window of the latest members."""
        return self.global_every > 0 and layer % self.global_every != self.global_every - 1


LLAMA = Architecture(
    name="llama", examples="SmolLM2, Llama 2/3, TinyLlama, Mistral",
    layer_names=MappingProxyType(LLAMA_LAYER), permuted_qk=True, gate="silu")

# Gemma 3 (llama.cpp's LLM_ARCH_GEMMA3, transformers' Gemma3ForCausalLM): every sixth layer global
# (llama.cpp: set_swa_pattern(6); transformers: sliding_window_pattern 6), local layers' RoPE base
# 10,000 (llama.cpp: rope_freq_base_train_swa; transformers: rope_local_base_freq). Rotate-half
# RoPE (llama.cpp's NEOX type): the converter leaves W_Q/W_K rows as they are. Queries are scaled
# by 1/√d_head (llama.cpp's f_attention_scale for every size but the 27B, which `config` refuses;
# transformers: query_pre_attn_scalar = 256 = d_head), no logit softcapping in Gemma 3. The 4B and
# larger files carry linear RoPE scaling, which applies to the global layers only (llama.cpp:
# rope_freq_scale_train_swa = 1; transformers: rope_scaling updates full_attention's RoPE), and a
# vision encoder (v.*, mm.*), which is not read.
GEMMA3 = Architecture(
    name="gemma3", examples="Gemma 3 270M, 1B (text)",
    layer_names=MappingProxyType(LLAMA_LAYER | GEMMA3_EXTRA), permuted_qk=False, gate="gelu_tanh",
    embed_scale=True, global_every=6, local_rope_base=10000.0,
    norm_note="Gemma's RMSNorm multiplies by (1 + w); llama.cpp's converter stores 1 + w, so the "
              "file's weights are the gains as they are (transformers subtracts the 1 on loading)")

# Qwen 2/2.5 and Qwen 3 (llama.cpp's LLM_ARCH_QWEN2, LLM_ARCH_QWEN3): a Llama with rotate-half RoPE
# (NEOX type: the converter leaves W_Q/W_K rows as they are) and, for Qwen 2, biases on q, k and v;
# for Qwen 3, a per-head RMSNorm of q and k before RoPE.
QWEN2 = Architecture(
    name="qwen2", examples="Qwen 2, Qwen 2.5",
    layer_names=MappingProxyType(LLAMA_LAYER | QKV_BIAS), permuted_qk=False, gate="silu")
QWEN3 = Architecture(
    name="qwen3", examples="Qwen 3 (dense)",
    layer_names=MappingProxyType(LLAMA_LAYER | QK_NORM), permuted_qk=False, gate="silu")
# Phi-3 (llama.cpp's LLM_ARCH_PHI3): a Llama with fused tensors and rotate-half RoPE (NEOX type).
# Its `phi3.attention.sliding_window` is read by llama.cpp and then set aside ("Phi SWA is currently
# disabled": swa_type NONE, n_swa 0 in src/models/phi3.cpp, PR 13676; every layer sees every
# member), and transformers' GGUF loader ignores it too: so do we (tests/integration/test_phi3_window.py). LongRoPE files (rope_factors_long/short) are refused (`weights`).
PHI3 = Architecture(
    name="phi3", examples="Phi-3 mini/medium 4k, Phi-3.5 (4k context)",
    layer_names=MappingProxyType(PHI3_LAYER), permuted_qk=False, gate="silu")
GPT2 = Architecture(
    name="gpt2", examples="GPT-2", layer_names=MappingProxyType(GPT2_LAYER), permuted_qk=False,
    gate="gelu_tanh", norm="layer", eps_key="attention.layer_norm_epsilon", position="learned", gated=False,
    global_names=MappingProxyType(GPT2_GLOBAL))
# Mistral 7B is written by llama.cpp's converter as "llama" (gguf names no "mistral" architecture;
# transformers' GGUF loader reads such a file as Mistral by its general.name): read as LLAMA.

ARCHITECTURES: Mapping[str, Architecture] = MappingProxyType(
    {a.name: a for a in (LLAMA, GEMMA3, QWEN2, QWEN3, PHI3, GPT2)})


def architecture(name: str) -> Architecture:
    """The Architecture named `name` (general.architecture), or KeyError.

    >>> architecture("gemma3").gate
    'gelu_tanh'
    """
    return ARCHITECTURES[name]


def supported() -> str:
    """The families studygroup reads, for messages: "'llama' (SmolLM2, …), 'gemma3' (…)"."""
    return ", ".join(f"{a.name!r} ({a.examples})" for a in ARCHITECTURES.values())
