"""What the larger Gemma 3 files (4B and up) add: linear RoPE scaling on the global layers
(rope.scaling.type "linear", rope.scaling.factor) and a vision encoder in the same file (v.*, mm.*
tensors); and the 27B's query scale, which studygroup refuses.

The reference is transformers' Gemma3ForCausalLM with rope_parameters' full_attention RoPE
{"rope_type": "linear", "factor": F} (transformers applies it to the global layers and keeps the
sliding layers' RoPE at base 10,000 unscaled, as llama.cpp does: rope_freq_scale_train_swa = 1).
"""
import numpy as np
import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

import studygroup
import studygroup.views.payloads
from conftest import write_tiny_gemma3_gguf
from studygroup.errors import ModelFileError
from studygroup.gguf.config import config_from_gguf
from studygroup.gguf.summary import summarize

VISION = {"v.patch_embd.weight": np.ones((8, 12)), "v.blk.0.attn_q.weight": np.ones((8, 8)),
          "mm.input_projection.weight": np.ones((64, 8))}  # a few fake vision tensors, llama.cpp's names


def transformers_gemma(tiny, **change):
    hf = Gemma3ForCausalLM(Gemma3TextConfig(**{**tiny.hf_config, **change}, attn_implementation="eager"))
    missing, unexpected = hf.load_state_dict(tiny.hf_state_dict, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    return hf.eval()


@pytest.fixture(scope="module", params=[(1e6, 8.0), (1e4, 4.0)], ids=["base1e6-x8", "base1e4-x4"])
def scaled(request, tmp_path_factory):
    """(tiny, ours, transformers') for a tiny Gemma 3 with linear RoPE scaling and vision tensors.
    With base 10,000 the global layers share the local layers' base: only the scale tells them apart."""
    base, factor = request.param
    tiny = write_tiny_gemma3_gguf(tmp_path_factory.mktemp("gemma3-scaled") / "g.gguf", rope_base=base,
                                  rope_scale=factor, extra_tensors=VISION, context=128)
    return tiny, studygroup.load(tiny.path, cache=False), transformers_gemma(tiny)


def test_the_scale_is_read_and_applies_to_the_global_layers_only(scaled):
    tiny, ours, _ = scaled
    c, factor = ours.config, tiny.hf_config["rope_parameters"]["full_attention"]["factor"]
    assert c.rope_scale == factor
    assert [c.rope_of(l) for l in range(6)] == [(1e4, 1.0)] * 5 + [(c.rope_base, factor)]


@pytest.mark.parametrize("T", [3, 9, 40, 100])
def test_logits_equal_transformers_past_the_window(scaled, T):
    _, ours, theirs = scaled
    ids = torch.randint(0, ours.config.vocab_size, (T,), generator=torch.Generator().manual_seed(T)).tolist()
    with torch.no_grad():
        expected = theirs(torch.tensor([ids])).logits[0]  # (T, vocab)
    for record in ("none", "all"):
        assert (ours.run(ids, record=record, logits="all").logits - expected).abs().max() < 1e-4, record


def test_the_scaling_changes_the_logits(scaled):
    """Unscaled, the same weights give other logits: the test above tells a scaled RoPE from none."""
    tiny, ours, _ = scaled
    plain = transformers_gemma(tiny, rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": ours.config.rope_base},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    ids = list(range(3, 43))
    with torch.no_grad():
        unscaled = plain(torch.tensor([ids])).logits[0, -1]
    assert (ours.run(ids, record="none").logits[-1] - unscaled).abs().max() > 1e-3


def test_generation_follows_the_scaled_rope(scaled):
    """The lean generation step turns q and k as the full pass does (its angles per layer too)."""
    _, ours, _ = scaled
    g = ours.generate([5, 9, 14, 3, 7, 11], 6, ignore_eos=True)
    ids = [5, 9, 14, 3, 7, 11] + [w.id for w in g.words]
    full = ours.run(ids, record="none", logits="all").logits
    assert [int(full[5 + i].argmax()) for i in range(len(g.words))] == [w.id for w in g.words]


def test_the_vision_tensors_are_left_unread_and_said_so(scaled, capsys):
    tiny, ours, _ = scaled
    note = "the text model only (the file also holds a vision encoder)"
    assert ours.config.vision and ours.config.note == note
    assert summarize((tiny.path,)).reason == note  # `studygroup models`' note
    studygroup.load(tiny.path, cache=False)
    assert note in capsys.readouterr().err  # the load message
    assert studygroup.views.payloads.info(ours)["model"]["note"] == note  # /api/info


def test_gemma3_27b_query_scale_is_refused_in_one_line():
    fields = {"general.architecture": "gemma3", "gemma3.block_count": 62, "gemma3.attention.head_count": 32,
              "gemma3.attention.head_count_kv": 16, "gemma3.embedding_length": 5376,
              "gemma3.feed_forward_length": 21504, "gemma3.context_length": 131072,
              "gemma3.attention.key_length": 128, "gemma3.attention.value_length": 128,
              "gemma3.attention.sliding_window": 1024, "gemma3.vocab_size": 262208}
    with pytest.raises(ModelFileError, match=r"^Gemma 3 27B scales its queries by 1/√\(d_model/n_heads\) = 1/√168") as e:
        config_from_gguf(fields)
    assert "\n" not in str(e.value)
    assert config_from_gguf({**fields, "gemma3.block_count": 34}).n_layers == 34  # the 4B's 34 layers are read


def test_why_turns_the_global_layer_with_the_scaled_rope(scaled):
    """why rebuilds q_i and k_j with the layer's own RoPE: on the scaled global layer its parts add up
    to the score, and its weight is transformers'."""
    _, ours, theirs = scaled
    ids = list(range(5, 35))
    with torch.no_grad():
        weights = theirs(torch.tensor([ids]), output_attentions=True).attentions[5][0]  # (H, T, T), layer 5 global
    w = studygroup.why(ours, ids, 5, 1, 29, 3)
    assert w.parts_total == pytest.approx(w.score, abs=1e-4) and w.weight == pytest.approx(float(weights[1, 29, 3]), abs=1e-5)
