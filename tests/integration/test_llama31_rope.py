"""Llama 3.1/3.2's RoPE frequency scaling (rope_freqs.weight in GGUF) against transformers' "llama3" RoPE."""
import pytest
import torch
from conftest import write_tiny_gguf
from transformers import LlamaConfig, LlamaForCausalLM

import studygroup
from studygroup.gguf import layout as gguf_layout

# With d_head 8 and base 10,000 the four pairs' wavelengths are 6.3, 63, 628 and 6,283 positions:
# one is left as is (< 64/4), one blended, two slowed 8x (> 64/1).
LLAMA3_ROPE = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("l31") / "l31.gguf", context=128, llama3_rope=LLAMA3_ROPE)


def hf_logits(tiny, ids):
    hf = LlamaForCausalLM(LlamaConfig(**tiny.hf_config, attn_implementation="eager"))
    missing, unexpected = hf.load_state_dict(tiny.hf_state_dict, strict=False)
    assert not unexpected
    with torch.no_grad():
        return hf.eval()(torch.tensor([ids])).logits[0]


def test_divisors_are_read_and_kept_float32(scaled):
    model = studygroup.load(scaled.path)
    divisors = model.w["rope_freqs"]
    assert divisors.dtype == torch.float32 and divisors.shape == (model.config.d_head // 2,)
    assert divisors[0] == 1.0 and 1.0 < divisors[1] < 8.0 and divisors[2] == divisors[3] == 8.0


@pytest.mark.parametrize("T", [7, 100])
def test_logits_equal_transformers_llama3_rope(scaled, T):
    model = studygroup.load(scaled.path)
    ids = torch.randint(0, model.config.vocab_size, (T,), generator=torch.Generator().manual_seed(T)).tolist()
    expected = hf_logits(scaled, ids)
    got = model.run(ids, logits="all").logits
    assert (got - expected).abs().max() < 1e-4
    # and the scaling matters: without its divisors the same weights give other logits
    plain = dict(scaled.hf_config)
    plain.pop("rope_parameters")
    hf_plain = LlamaForCausalLM(LlamaConfig(**plain, attn_implementation="eager"))
    hf_plain.load_state_dict(scaled.hf_state_dict, strict=False)
    with torch.no_grad():
        unscaled = hf_plain.eval()(torch.tensor([ids])).logits[0]
    assert (unscaled - expected)[1:].abs().max() > 1e-3


def test_cached_load_keeps_the_divisors(scaled):
    first = studygroup.load(scaled.path)
    second = studygroup.load(scaled.path)  # from the cache
    assert torch.equal(first.w["rope_freqs"], second.w["rope_freqs"])
    ids = list(range(3, 40))
    assert torch.equal(first.run(ids).logits, second.run(ids).logits)


def test_name_map_has_rope_freqs_only_when_the_file_does():
    assert "rope_freqs.weight" not in gguf_layout.name_map(1, tied=True)
    assert gguf_layout.name_map(1, tied=True, rope_freqs=True)["rope_freqs.weight"] == "rope_freqs"


def test_linear_rope_scaling_equals_transformers_linear_rope(tmp_path):
    """rope.scaling.type "linear" with rope.scaling.factor F (as llama.cpp's converter writes a linear
    rope_scaling): every layer's positions turn F times slower, as transformers' "linear" RoPE."""
    tiny = write_tiny_gguf(tmp_path / "linear.gguf", context=128,
                           metadata={"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0})
    model = studygroup.load(tiny.path, cache=False)
    assert model.config.rope_scale == 4.0 and model.config.rope_of(1) == (10000.0, 4.0)
    ids = torch.randint(0, model.config.vocab_size, (60,), generator=torch.Generator().manual_seed(3)).tolist()
    linear = {**tiny.hf_config, "rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}}
    expected = hf_logits(type(tiny)(**{**tiny.__dict__, "hf_config": linear}), ids)
    assert (model.run(ids, logits="all").logits - expected).abs().max() < 1e-4
    assert (hf_logits(tiny, ids) - expected)[1:].abs().max() > 1e-3  # unscaled differs
