"""bench/shaped_gguf.py: GGUF files of a named model's shapes with llama.cpp's Q4_K_M type mix and
random weights, on scaled-down shapes (8 layers, d_model 256) of each of the five families.

Read back with the `gguf` package's reader: the tensor names and shapes studygroup's layout expects,
and the types llama.cpp's rule gives an 8-layer model (worked out here from its formula: attn_v and
ffn_down Q6_K in layers 0, 3, 6 and 7), and the fallbacks where a row is not a whole number of 256-weight
blocks (the pattern of the real Qwen2.5-Coder-0.5B file). Then studygroup's logits on each file
against transformers' eager float32 model given the same weights, dequantized by `gguf`.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

import studygroup
from conftest import BOS_ID, EOS_ID, tiny_vocab
from studygroup.gguf import layout as gguf_layout
from studygroup.gguf.architectures import architecture
from studygroup.gguf.container import read_gguf

BENCH = Path(__file__).resolve().parents[2] / "bench" / "shaped_gguf.py"
_spec = importlib.util.spec_from_file_location("shaped_gguf", BENCH)
shaped = sys.modules.setdefault("shaped_gguf", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(shaped)

TOKENS, TYPES, MERGES = tiny_vocab()  # a tiny byte-level BPE (gguf's reader takes ~30 s over SmolLM2's)
TOKENIZER = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": TOKENS,
             "tokenizer.ggml.token_type": TYPES, "tokenizer.ggml.merges": MERGES,
             "tokenizer.ggml.bos_token_id": BOS_ID, "tokenizer.ggml.eos_token_id": EOS_ID}
VOCAB = len(TOKENS) + 64  # padded to the shape's vocabulary
TINY = dict(n_layers=8, d_model=256, n_heads=4, n_kv_heads=2, d_head=64, d_mlp=512, vocab_size=VOCAB)
TINY_VISION = dict(layers=2, d=64, d_mlp=96, heads=2, image=28, patch=14)
MORE_BITS = (0, 3, 6, 7)  # llama.cpp's use_more_bits for 8 layers: l < 1, l >= 7, (l - 1) % 3 == 2
FAMILIES = list(shaped.SHAPES)  # llama3.2:3b (tied), llama3.1:8b, gemma3:4b, qwen3:8b, deepseek-r1:7b (qwen2)


def tiny_shape(name: str, **changes):
    s = shaped.SHAPES[name]
    extra = {"vision": TINY_VISION} if s.vision else {}
    if s.sliding_window:
        extra["sliding_window"] = 4
    if s.llama3_rope:  # an original context short enough that the tiny texts cross the blended pairs
        extra["llama3_rope"] = dict(s.llama3_rope, original_max_position_embeddings=16)
    return dataclasses.replace(s, **(TINY | extra | changes))


@pytest.fixture(scope="module", params=FAMILIES)
def written(request, tmp_path_factory):
    """(shape, path, the file's tensors as gguf's reader reads them)."""
    s = tiny_shape(request.param)
    path = shaped.write(s, tmp_path_factory.mktemp("shaped") / "tiny.gguf", tokenizer=TOKENIZER)
    return s, path, read_back(path)


def read_back(path) -> dict[str, gguf.ReaderTensor]:
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def test_the_default_vocabulary_is_padded_with_tokens_no_text_reaches(tmp_path, default_model):
    """Without a tokenizer given, the default model's, padded: the same ids for a text, and the
    rows past its vocabulary are control tokens."""
    s = tiny_shape("llama3.1:8b", n_layers=1, vocab_size=49152 + 40)
    ours = studygroup.load(shaped.write(s, tmp_path / "smollm2.gguf"), cache=False)
    text = "Cash or credit card? I have a lot of questions, café 3.50€"
    assert ours.tokenizer.encode(text) == default_model.tokenizer.encode(text)
    fields = read_gguf(ours.path).fields
    assert fields["tokenizer.ggml.tokens"][49152:] == [f"<|pad_{i}|>" for i in range(49152, 49192)]
    assert set(fields["tokenizer.ggml.token_type"][49152:]) == {3}
    assert ours.config.vocab_size == 49192


def test_names_and_shapes_are_the_ones_studygroup_reads(written):
    s, _, tensors = written
    arch = architecture(s.arch)
    want = set(gguf_layout.name_map(s.n_layers, tied=s.tied, rope_freqs=bool(s.llama3_rope), arch=arch))
    text = {n for n in tensors if not n.startswith(("v.", "mm."))}
    assert text == want
    q, kv = s.n_heads * s.d_head, s.n_kv_heads * s.d_head
    shapes = {"attn_q.weight": (256, q), "attn_k.weight": (256, kv), "attn_v.weight": (256, kv),
              "attn_output.weight": (q, 256), "ffn_gate.weight": (256, 512), "ffn_up.weight": (256, 512),
              "ffn_down.weight": (512, 256)}  # GGUF's dims: (in, out)
    for l in range(s.n_layers):
        for name, dims in shapes.items():
            assert tuple(tensors[f"blk.{l}.{name}"].shape) == dims
    assert tuple(tensors["token_embd.weight"].shape) == (256, VOCAB)
    vision = {n for n in tensors if n.startswith(("v.", "mm."))}
    assert len(vision) == (16 * 2 + 7 if s.vision else 0)  # 16 a layer; patch, position, post-norm, projector
    if s.vision:
        assert tuple(tensors["mm.mm_input_projection.weight"].shape) == (64, 256)
        assert tuple(tensors["v.patch_embedding.weight"].shape) == (14, 14, 3, 64)


def test_types_follow_llama_cpp_q4_k_m(written):
    s, _, tensors = written
    for name, t in tensors.items():
        layer = int(name.split(".")[1]) if name.startswith("blk.") else None
        if name.startswith(("v.", "mm.")):
            want = Q.F16 if len(t.shape) > 1 else Q.F32
        elif len(t.shape) == 1:
            want = Q.F32
        elif name == "output.weight" or (s.tied and name == "token_embd.weight"):
            want = Q.Q6_K
        elif name.endswith(("attn_v.weight", "ffn_down.weight")) and layer in MORE_BITS:
            want = Q.Q6_K
        else:
            want = Q.Q4_K
        assert t.tensor_type == want, name


def test_rows_not_whole_super_blocks_fall_back_as_llama_cpp_does(tmp_path):
    """d_model 96 (as Qwen2.5-0.5B's 896, not a multiple of 256): matrices that read d_model weights
    a row become Q5_0, or Q8_0 where Q6_K was chosen; ffn_down's rows of 512 stay K-quants."""
    s = tiny_shape("deepseek-r1:7b", d_model=96, n_heads=3, n_kv_heads=1, d_head=32)
    tensors = read_back(shaped.write(s, tmp_path / "odd.gguf", tokenizer=TOKENIZER))
    types = {n: t.tensor_type for n, t in tensors.items() if len(t.shape) == 2}
    assert types["token_embd.weight"] == Q.Q5_0 and types["output.weight"] == Q.Q8_0
    for l in range(8):
        more = l in MORE_BITS
        assert types[f"blk.{l}.attn_v.weight"] == (Q.Q8_0 if more else Q.Q5_0)
        assert types[f"blk.{l}.ffn_down.weight"] == (Q.Q6_K if more else Q.Q4_K)
        assert {types[f"blk.{l}.{x}.weight"] for x in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up")} == {Q.Q5_0}


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q6_K, Q.Q5_0, Q.Q8_0], ids=lambda q: q.name)
def test_random_blocks_have_the_stated_spread(qtype):
    blocks = shaped.random_matrix(qtype, (256, 4096), np.random.default_rng(1))
    w = gguf.quants.dequantize(blocks, qtype)  # (256, 4096)
    assert w.shape == (256, 4096) and np.isfinite(w).all()
    # Q5_0's codes q - 16 average -0.5: its mean is 0.054 of its spread below 0
    assert abs(w.std() / shaped.WEIGHT_STD - 1) < 0.05 and abs(w.mean()) < 0.07 * shaped.WEIGHT_STD


# ---- the reference: transformers on the file's weights, dequantized by gguf -----------------------
HF_NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
            "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
            "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
            "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
GEMMA_NORMS = {"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
               "post_ffw_norm": "post_feedforward_layernorm"}


def hf_state_dict(s, tensors) -> dict[str, torch.Tensor]:
    """The file's text weights under transformers' names: Llama's W_Q/W_K rows un-permuted (llama.cpp's
    converter interleaves them), Gemma's norm gains less the 1 its converter adds."""
    out = {}
    for name, t in tensors.items():
        if name.startswith(("v.", "mm.", "rope_freqs")):
            continue
        w = torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type), np.float32))
        parts = name.split(".")
        if parts[0] == "blk":
            kind = parts[2]
            hf = (GEMMA_NORMS.get(kind) if s.arch == "gemma3" else None) or HF_NAMES[kind]
            if s.arch == "llama" and kind in ("attn_q", "attn_k"):
                heads = s.n_heads if kind == "attn_q" else s.n_kv_heads
                w = w.reshape(heads, w.shape[0] // heads // 2, 2, -1).transpose(1, 2).reshape(w.shape)
            key = f"model.layers.{parts[1]}.{hf}.{parts[-1]}"
        else:
            key = {"token_embd": "model.embed_tokens.weight", "output_norm": "model.norm.weight",
                   "output": "lm_head.weight"}[parts[0]]
        out[key] = w - 1 if s.arch == "gemma3" and w.dim() == 1 and "norm" in key else w
    return out


def hf_model(s):
    common = dict(vocab_size=s.vocab_size, hidden_size=s.d_model, intermediate_size=s.d_mlp,
                  num_hidden_layers=s.n_layers, num_attention_heads=s.n_heads, num_key_value_heads=s.n_kv_heads,
                  head_dim=s.d_head, max_position_embeddings=s.context_length, rms_norm_eps=s.rms_eps,
                  tie_word_embeddings=s.tied, attn_implementation="eager")
    if s.arch == "gemma3":
        full = {"rope_type": "linear", "factor": s.rope_scale, "rope_theta": s.rope_base}
        return Gemma3ForCausalLM(Gemma3TextConfig(
            **common, sliding_window=s.sliding_window, query_pre_attn_scalar=s.d_head,
            hidden_activation="gelu_pytorch_tanh", pad_token_id=0,
            rope_parameters={"full_attention": full, "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}))
    rope = {"rope_type": "default", "rope_theta": s.rope_base}
    if s.llama3_rope:
        rope = {"rope_type": "llama3", "rope_theta": s.rope_base, **s.llama3_rope}
    cls, config = {"llama": (LlamaForCausalLM, LlamaConfig), "qwen2": (Qwen2ForCausalLM, Qwen2Config),
                   "qwen3": (Qwen3ForCausalLM, Qwen3Config)}[s.arch]
    return cls(config(**common, rope_parameters=rope))


def test_logits_equal_transformers_on_the_same_weights(written):
    s, path, tensors = written
    ours = studygroup.load(path, cache=False)
    theirs = hf_model(s)
    missing, unexpected = theirs.load_state_dict(hf_state_dict(s, tensors), strict=False)
    assert not unexpected and all(m == "lm_head.weight" for m in missing), (missing, unexpected)
    ids = torch.randint(0, s.vocab_size, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    ids[:8] = ours.tokenizer.encode("Cash or credit card? I have a lot")[:8]
    with torch.no_grad():
        want = theirs.eval()(torch.tensor([ids])).logits[0]  # (T, vocab)
    got = ours.run(ids, logits="all").logits
    assert got.shape == want.shape == (40, s.vocab_size)
    assert (got - want).abs().max() < 1e-4 * want.abs().max()


def test_the_bench_measures_a_file_in_a_child_of_its_own(tmp_path):
    """bench/big_models.py on a tiny shaped file: the child's figures come back (ids cut to T, the
    words generated, the explain's prediction, its own peak memory)."""
    s = tiny_shape("qwen3:8b", n_layers=2)
    path = shaped.write(s, tmp_path / "tiny.gguf", tokenizer=TOKENIZER)
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, str(BENCH.with_name("big_models.py")), "--file", str(path), "--T", "20",
                           "--words", "3", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads(out.read_text(encoding="utf-8"))
    figures = run["results"][str(path)]
    assert figures["T"] == 20 and figures["words"] == 3 and figures["heads"] == 8
    assert 0.1 < figures["peak_gib"] < 5 and figures["explain_s"] > 0 and "random qwen3:8b shape" in figures["model"]
    assert f"| {path} |" in done.stdout and run["cpu"]
