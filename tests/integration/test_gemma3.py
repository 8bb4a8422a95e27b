"""The forward pass on a tiny random Gemma 3 (written to GGUF by a fixture) against transformers.

The fixture writes the file as llama.cpp's converter does (norm weights stored as 1 + w, no Q/K
row permutation); transformers' Gemma3ForCausalLM gets the same weights in its own convention.
Layers 0-4 are local (a window of 4 members), layer 5 global: texts past 4 members test the window.
"""
import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

import studygroup
from studygroup.formulas import attention
from studygroup.gguf import layout as gguf_layout
from studygroup.gguf.architectures import GEMMA3
from studygroup.gguf.weights import read_weights
from studygroup.study.attribution import direct_contributions


@pytest.fixture(scope="module")
def gemma(tiny_gemma3):
    return studygroup.load(tiny_gemma3.path, cache=False)


@pytest.fixture(scope="module")
def theirs(tiny_gemma3):
    hf = Gemma3ForCausalLM(Gemma3TextConfig(**tiny_gemma3.hf_config, attn_implementation="eager"))
    missing, unexpected = hf.load_state_dict(tiny_gemma3.hf_state_dict, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    return hf.eval()


def random_ids(model, T, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (T,), generator=g).tolist()


def hf_steps(theirs, ids):
    """transformers' hidden states, attention weights and each layer's q/k norm outputs."""
    normed = {}
    hooks = [layer.self_attn.q_norm.register_forward_hook(lambda m, i, o, l=l: normed.__setitem__(("q", l), o))
             for l, layer in enumerate(theirs.model.layers)]
    hooks += [layer.self_attn.k_norm.register_forward_hook(lambda m, i, o, l=l: normed.__setitem__(("k", l), o))
              for l, layer in enumerate(theirs.model.layers)]
    with torch.no_grad():
        out = theirs(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    for h in hooks:
        h.remove()
    return out, normed


def test_config_reads_the_family_and_its_window(gemma):
    c = gemma.config
    assert (c.architecture, c.sliding_window, c.d_model, c.n_heads, c.d_head) == ("gemma3", 4, 64, 4, 32)
    assert [c.window_of(l) for l in range(6)] == [4, 4, 4, 4, 4, None]
    assert [c.rope_base_of(l) for l in range(6)] == [1e4] * 5 + [1e6]


def test_norm_weights_are_read_as_stored_one_plus_w(tiny_gemma3):
    _, w = read_weights(tiny_gemma3.path)
    hf = tiny_gemma3.hf_state_dict
    assert torch.allclose(w["layers.2.post_attn_norm"], 1 + hf["model.layers.2.post_attention_layernorm.weight"])
    assert torch.allclose(w["layers.0.q_norm"], 1 + hf["model.layers.0.self_attn.q_norm.weight"])
    assert torch.equal(w["layers.1.W_Q"], hf["model.layers.1.self_attn.q_proj.weight"].T)  # rows not permuted


def test_name_map_holds_the_four_norms_and_the_qk_norms():
    names = gguf_layout.name_map(1, tied=True, arch=GEMMA3)
    for gguf_name in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm", "attn_q_norm", "attn_k_norm"):
        assert f"blk.0.{gguf_name}.weight" in names


@pytest.mark.parametrize("T,seed", [(1, 0), (4, 1), (5, 2), (17, 3), (40, 4)])
def test_logits_equal_transformers(gemma, theirs, T, seed):
    ids = random_ids(gemma, T, seed)
    with torch.no_grad():
        expected = theirs(torch.tensor([ids])).logits[0]  # (T, vocab)
    for record in ("none", "default", "all"):
        got = gemma.run(ids, record=record, logits="all").logits
        assert (got - expected).abs().max() < 1e-4, record


def test_recorded_steps_equal_transformers(gemma, theirs):
    ids = random_ids(gemma, 13, 5)
    out, normed = hf_steps(theirs, ids)
    run = gemma.run(ids, record="all")
    assert (run["embed"] - out.hidden_states[0][0]).abs().max() < 1e-4  # scaled by √d_model
    for l in range(gemma.config.n_layers):
        assert (run[f"layers.{l}.weights"] - out.attentions[l][0]).abs().max() < 1e-5, l
        assert (run[f"layers.{l}.q_normed"] - normed[("q", l)][0]).abs().max() < 1e-4, l
        assert (run[f"layers.{l}.k_normed"] - normed[("k", l)][0]).abs().max() < 1e-4, l
        if l + 1 < gemma.config.n_layers:  # HF's last hidden state is after the final norm
            assert (run[f"layers.{l}.resid_post"] - out.hidden_states[l + 1][0]).abs().max() < 1e-4, l
    assert (run["final"][-1] - out.hidden_states[-1][0, -1]).abs().max() < 1e-4  # the predicting row


def test_local_layers_mask_members_outside_the_window(gemma):
    ids = random_ids(gemma, 9, 6)
    run = gemma.run(ids, record="all")
    local, global_ = run["layers.0.weights"], run["layers.5.weights"]  # (H, T, T)
    assert (local[:, 8, :5] == 0).all() and (local[:, 8, 5:] > 0).all()  # member 8 sees 5 … 8
    assert (global_[:, 8] > 0).all()
    head = run.head(0, 1)
    assert not head.mask[8, 4] and head.mask[8, 5]
    recomputed = gemma.run(ids, record="none").head(0, 1)
    assert torch.allclose(recomputed.weights, head.weights, atol=1e-6)
    assert torch.allclose(recomputed.write, head.write, atol=1e-5)


def test_writes_pass_the_norm_after_attention_and_sum_to_its_output(gemma):
    ids = random_ids(gemma, 11, 7)
    run = gemma.run(ids, record="all")
    for l in range(gemma.config.n_layers):
        writes = run[f"layers.{l}.write"]  # (H, T, d_model), through the norm with its scale held
        assert torch.allclose(writes.sum(0), run[f"layers.{l}.attn_out"], atol=1e-5)
        assert torch.allclose(run[f"layers.{l}.resid_pre"] + run[f"layers.{l}.attn_out"],
                              run[f"layers.{l}.resid_mid"], atol=1e-5)
        pre = run[f"layers.{l}.attn_pre_norm"]
        out = run[f"layers.{l}.output"]  # (H, T, d_head)
        raw = torch.einsum("htd,hdm->htm", out, gemma.W_O_heads(l))
        assert torch.allclose(raw.sum(0), pre, atol=1e-5)


def test_direct_contributions_add_up_to_the_logit(gemma):
    ids = random_ids(gemma, 10, 8)
    run = gemma.run(ids)
    token = int(run.logits[-1].argmax())
    parts = direct_contributions(run, token)
    assert abs(parts.total - parts.logit) < 1e-3 * max(1.0, abs(parts.logit))


def test_silenced_members_past_the_window_agree_with_a_masked_run(gemma):
    ids = random_ids(gemma, 12, 9)
    kv_run = gemma.run(ids, record=["k", "v"])
    kv = {l: (kv_run[f"layers.{l}.k"], kv_run[f"layers.{l}.v"]) for l in range(gemma.config.n_layers)}
    members = [2, 6, 9]
    for packed in (False, True):
        batched = gemma.silenced_logits(ids, members, kv=kv if packed else None, packed=packed)
        for b, j in enumerate(members):
            alone = gemma.run(ids, record="none", silence_members=[j]).logits[-1]
            assert (batched[b] - alone).abs().max() < 1e-4, (packed, j)


def test_attention_output_agrees_with_the_paper_function_and_the_window(gemma):
    ids = random_ids(gemma, 8, 10)
    run = gemma.run(ids, record="all")
    q, k, v = run["layers.1.q"], run["layers.1.k"], run["layers.1.v"]
    mask = attention.causal_mask(8, 8) & gemma.window_mask(1, 8)
    out, _ = attention.paper(q, k.repeat_interleave(2, 0), v.repeat_interleave(2, 0), mask=mask)
    assert torch.allclose(out, run["layers.1.output"], atol=1e-5)


def test_views_name_members_outside_the_window(gemma):
    from studygroup.study.head import head_view
    from studygroup.study.mask_reasons import OUTSIDE_WINDOW, VISIBLE
    from studygroup.study.model_view import model_view

    ids = random_ids(gemma, 9, 11)
    view = head_view(gemma, ids, 0, 1)
    assert view.mask_reasons[8][4] == OUTSIDE_WINDOW and view.mask_reasons[8][5] == VISIBLE
    assert OUTSIDE_WINDOW not in {r for row in head_view(gemma, ids, 5, 1).mask_reasons for r in row}
    mv = model_view(gemma.run(ids))
    local = mv.mask_reasons if mv.heads[0][0].mask_reasons is None else mv.heads[0][0].mask_reasons
    glob = mv.mask_reasons if mv.heads[5][0].mask_reasons is None else mv.heads[5][0].mask_reasons
    assert local[8][4] == OUTSIDE_WINDOW and glob[8][4] == VISIBLE


@pytest.mark.parametrize("layer, head, query, key", [(2, 1, 7, 3), (5, 3, 9, 0), (4, 0, 6, 6)])
def test_why_adds_up_through_the_per_head_norms_and_the_norm_after_attention(gemma, theirs, layer, head, query, key):
    """q and k normed per head (their scale held), earlier writes through the norm after attention:
    the pairs add up to the score, and the cell's weight is transformers'."""
    from studygroup.study.why import why
    ids = random_ids(gemma, 10, 5)
    w = why(gemma, ids, layer, head, query, key)
    assert abs(sum(p.value for p in w.pairs) - w.score) <= 1e-5 * max(1.0, abs(w.score)) and w.rope
    with torch.no_grad():
        attentions = theirs(torch.tensor([ids]), output_attentions=True).attentions
    assert w.weight == pytest.approx(float(attentions[layer][0, head, query, key]), abs=1e-5)


@pytest.mark.parametrize("drop,reshape,says", [
    (("blk.2.post_attention_norm.weight",), (), "lacks 1 tensor"),
    (("blk.0.attn_k_norm.weight",), (), "lacks 1 tensor"),
    (("blk.5.post_ffw_norm.weight",), (), "lacks 1 tensor"),
    ((), ("blk.1.attn_q_norm.weight",), "blk.1.attn_q_norm.weight has shape"),
    ((), ("blk.3.ffn_norm.weight",), "blk.3.ffn_norm.weight has shape"),
])
def test_bad_files_are_one_line_errors(tmp_path, capsys, drop, reshape, says):
    """A Gemma 3 file without one of its own tensors (the norms after attention and the MLP, the
    per-head q/k norms), or with one misshapen, is refused in one line naming it; the CLI exits 2."""
    from conftest import write_tiny_gemma3_gguf
    from studygroup.cli import main
    from studygroup.errors import ModelFileError

    path = write_tiny_gemma3_gguf(tmp_path / "bad.gguf", drop=drop, reshape=reshape).path
    with pytest.raises(ModelFileError, match=says) as e:
        read_weights(path)
    assert "\n" not in str(e.value) and (drop or reshape)[0] in str(e.value)
    assert main(["explain", "the tin", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err
