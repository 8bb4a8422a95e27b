"""GPT-2 files: a tiny random model written to GGUF here as llama.cpp's converter writes it (fused
qkv, a bias on every projection and norm, a learned position embedding, linear layers stored
(out, in)), loaded by transformers' own GGUF loader from the same file, against our forward pass;
and a byte-level BPE vocabulary trained here, written with pre-tokenizer `gpt2`, against
transformers' GPT2 tokenizer on the same vocabulary.
"""
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import studygroup
from conftest import _add_value, assert_logits_equal, assert_silenced_members_agree, random_ids, tiny_vocab
from studygroup.errors import ModelFileError
from studygroup.gguf.weights import read_weights
from studygroup.study.attribution import direct_contributions

D, H, D_MLP, N_CTX, LAYERS = 32, 4, 128, 1024, 2  # transformers' GPT2 takes d_mlp = 4·d_model, 1024 positions


def write_gpt2(path: Path, *, seed=0, drop=(), reshape=(), tokens=None, types=None, merges=None,
               pre="gpt2") -> Path:
    """A tiny random GPT-2 (2 layers, 4 heads of 8, tied output) with llama.cpp's tensor names. pre: the
    pre-tokenizer's name (llama.cpp's converter writes "gpt-2"; llama.cpp refuses "gpt2", studygroup reads both)."""
    rng = np.random.default_rng(seed)
    if tokens is None:
        tokens, types, merges = tiny_vocab()
    V = len(tokens)
    r = lambda *shape, s=0.2: (s * rng.standard_normal(shape)).astype(np.float32)
    tensors = {"token_embd.weight": r(V, D, s=0.5), "position_embd.weight": r(N_CTX, D, s=0.5),
               "output_norm.weight": 1 + r(D, s=0.1), "output_norm.bias": r(D, s=0.1)}
    for l in range(LAYERS):
        b = f"blk.{l}."
        tensors |= {b + "attn_norm.weight": 1 + r(D, s=0.1), b + "attn_norm.bias": r(D, s=0.1),
                    b + "attn_qkv.weight": r(3 * D, D), b + "attn_qkv.bias": r(3 * D),
                    b + "attn_output.weight": r(D, D), b + "attn_output.bias": r(D),
                    b + "ffn_norm.weight": 1 + r(D, s=0.1), b + "ffn_norm.bias": r(D, s=0.1),
                    b + "ffn_up.weight": r(D_MLP, D), b + "ffn_up.bias": r(D_MLP),
                    b + "ffn_down.weight": r(D, D_MLP), b + "ffn_down.bias": r(D)}
    keys = {"general.name": "tiny-random-gpt2", "gpt2.block_count": LAYERS, "gpt2.context_length": N_CTX,
            "gpt2.embedding_length": D, "gpt2.feed_forward_length": D_MLP, "gpt2.attention.head_count": H,
            "gpt2.attention.layer_norm_epsilon": 1e-5, "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.add_bos_token": False}
    writer = gguf.GGUFWriter(str(path), "gpt2")
    for key, value in keys.items():
        _add_value(writer, key, value)
    for name, t in tensors.items():
        if name not in drop:
            writer.add_tensor(name, t[:-1] if name in reshape else t)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(our model, transformers' GPT2LMHeadModel) from one tiny file."""
    path = write_gpt2(tmp_path_factory.mktemp("gpt2") / "tiny.gguf")
    theirs = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                  attn_implementation="eager").eval()
    assert type(theirs).__name__ == "GPT2LMHeadModel" and theirs.transformer.h[0].mlp.c_fc.weight.shape == (D, D_MLP)
    studygroup.load(path)  # the first load writes the weights cache; the model tested is mapped from it
    return studygroup.load(path), theirs


@pytest.mark.parametrize("T", [1, 5, 23])
def test_logits_equal_transformers(pair, T):
    assert_logits_equal(*pair, T)
    assert_logits_equal(studygroup.load(pair[0].path, cache=False), pair[1], T)  # read from the file


def test_recorded_steps_equal_transformers(pair):
    ours, theirs = pair
    ids, T = random_ids(ours, 11, 3), 11
    got = {}
    blocks = theirs.transformer.h
    hooks = [b.attn.c_attn.register_forward_hook(lambda m, i, o, l=l: got.__setitem__(("qkv", l), o[0]))
             for l, b in enumerate(blocks)]
    hooks += [b.ln_1.register_forward_hook(lambda m, i, o, l=l: got.__setitem__(("E", l), o[0])) for l, b in enumerate(blocks)]
    hooks += [b.attn.register_forward_hook(lambda m, i, o, l=l: got.__setitem__(("attn_out", l), o[0][0]))
              for l, b in enumerate(blocks)]
    hooks += [b.mlp.register_forward_hook(lambda m, i, o, l=l: got.__setitem__(("mlp_out", l), o[0])) for l, b in enumerate(blocks)]
    with torch.no_grad():
        out = theirs(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
        wte, wpe = theirs.transformer.wte.weight[ids], theirs.transformer.wpe.weight[:T]
    for h in hooks:
        h.remove()
    run = ours.run(ids, record="all")
    assert (run["embed"] - wte).abs().max() < 1e-6  # the token embedding alone, as for every family
    assert (run["pos_embed"] - wpe).abs().max() < 1e-6  # E = token + position embedding at layer 0
    assert (run["layers.0.resid_pre"] - out.hidden_states[0][0]).abs().max() < 1e-5
    for l in range(LAYERS):
        q, k, v = got[("qkv", l)].split(D, -1)  # (T, D) each, with the bias
        for step, theirs_step in (("q", q), ("k", k), ("v", v)):  # no RoPE: q and k as projected
            assert (run[f"layers.{l}.{step}"] - theirs_step.view(T, H, 8).transpose(0, 1)).abs().max() < 1e-4, (step, l)
        assert (run[f"layers.{l}.q_pre_rope"] - run[f"layers.{l}.q"]).abs().max() == 0
        assert (run[f"layers.{l}.E"] - got[("E", l)]).abs().max() < 1e-4, l
        assert (run[f"layers.{l}.weights"] - out.attentions[l][0]).abs().max() < 1e-5, l
        assert (run[f"layers.{l}.attn_out"] - got[("attn_out", l)]).abs().max() < 1e-4, l
        assert (run[f"layers.{l}.mlp_out"] - got[("mlp_out", l)]).abs().max() < 1e-4, l
        if l + 1 < LAYERS:
            assert (run[f"layers.{l}.resid_post"] - out.hidden_states[l + 1][0]).abs().max() < 1e-4, l
    assert (run["final"][-1] - out.hidden_states[-1][0, -1]).abs().max() < 1e-4  # after the final LayerNorm


def test_silenced_members_agree_with_a_masked_run(pair):
    assert_silenced_members_agree(pair[0])


@pytest.mark.parametrize("drop,reshape,says", [
    (("position_embd.weight",), (), "lacks 1 tensor"),
    (("blk.1.attn_qkv.bias",), (), "lacks 1 tensor"),
    (("output_norm.bias",), (), "lacks 1 tensor"),
    ((), ("blk.0.ffn_up.bias",), "blk.0.ffn_up.bias has shape"),
    ((), ("blk.1.attn_qkv.weight",), "blk.1.attn_qkv.weight has shape"),
])
def test_bad_files_are_one_line_errors(tmp_path, drop, reshape, says):
    path = write_gpt2(tmp_path / "bad.gguf", drop=drop, reshape=reshape)
    with pytest.raises(ModelFileError, match=says) as e:
        read_weights(path)
    assert "\n" not in str(e.value)


def test_direct_contributions_add_up_to_the_logit(pair):
    """With the final LayerNorm's scale held, the token and position embeddings, heads, MLPs and
    biases add up to the logit; and each head's share is its write read through the centred norm."""
    ours, _ = pair
    run = ours.run(random_ids(ours, 9, 4))
    token = int(run.logits[-1].argmax())
    parts = direct_contributions(run, token)
    assert abs(parts.total - parts.logit) < 1e-4 * max(1.0, abs(parts.logit))
    assert parts.position != 0 and parts.biases != 0
    x = run["resid_final"][-1].double()  # the head's write, normed as LayerNorm norms x, with x's σ
    write = run["layers.1.write"][2, -1].double()
    sigma = torch.sqrt(x.var(unbiased=False) + ours.config.rms_eps)
    g, u = ours.w["final_norm"].double(), ours.w["unembed"][:, token].double()
    assert abs(float((write - write.mean()) / sigma * g @ u) - float(parts.heads[1, 2])) < 1e-5


def test_explain_runs_and_why_answers_on_the_command_line(pair):
    import subprocess, sys, os
    ours, _ = pair
    e = studygroup.explain(ours, "Cash or credit card? I have a lot")
    p = e.logit_parts
    assert abs(p.embed + p.position + p.heads + p.mlps + p.biases - p.logit) < 1e-3 * max(1.0, abs(p.logit))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cli = [sys.executable, "-m", "studygroup.cli"]
    r = subprocess.run([*cli, "explain", "I have a lot", "--model", str(ours.path)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0 and "position embedding" in r.stdout, r.stderr
    r = subprocess.run([*cli, "why", "I have a lot", "--model", str(ours.path), "--layer", "1", "--head", "0",
                        "--query", "3", "--key", "1"], capture_output=True, text=True, env=env, timeout=300)
    words = " ".join(r.stdout.split())
    assert r.returncode == 0 and "no RoPE" in words and "LayerNorm also centres" in words, r.stderr
    assert "the largest of 100 (query part, key part) pairs" in words
    r = subprocess.run([*cli, "why", "I have a lot", "--model", str(ours.path), "--layer", "1", "--head", "0",
                        "--query", "1", "--key", "3"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "comes after member 1" in r.stderr


@pytest.mark.parametrize("layer, head, query, key", [(0, 1, 5, 2), (1, 2, 8, 3), (1, 0, 4, 4), (1, 3, 8, 0)])
def test_why_splits_the_score_through_layer_norm_and_the_biases(pair, layer, head, query, key):
    """No RoPE: content is the score and position 0. The pairs (embedding, position embedding, heads,
    attention output biases, MLPs, the LayerNorm's bias, q's and k's biases) add up to the score, and
    the score equals q·k/√d_k from transformers' own c_attn output (its biases included)."""
    from studygroup.study.why import why
    ours, theirs = pair
    ids = random_ids(ours, 9, 4)
    w = why(ours, ids, layer, head, query, key)
    assert w.position == 0 and w.content == w.score and not w.rope
    said = " ".join(w.notes)  # layer 0's stream: the two embeddings, no head's write yet
    assert ("earlier heads" in said) == (layer > 0) and ("no head's write yet" in said) == (layer == 0)
    assert "the 0 earlier" not in said
    assert w.n_parts == 1 + 1 + layer * (H + 2) + 2 and len(w.pairs) == w.n_parts ** 2
    names = {p.query_part for p in w.pairs}
    assert {"embedding", "position embedding", "LayerNorm bias", "q/k bias"} <= names
    assert ("attention bias 0" in names) == (layer == 1)
    assert abs(sum(p.value for p in w.pairs) - w.score) <= 1e-5 * max(1.0, abs(w.score))
    assert abs(w.parts_total - w.score) <= 1e-5 * max(1.0, abs(w.score))
    got = {}
    hook = theirs.transformer.h[layer].attn.c_attn.register_forward_hook(lambda m, i, o: got.__setitem__("qkv", o[0]))
    with torch.no_grad():
        out = theirs(torch.tensor([ids]), output_attentions=True)
    hook.remove()
    q, k, _ = got["qkv"].double().split(D, -1)  # (T, D) each, biases added
    d = D // H
    q_i, k_j = q[query, head * d:(head + 1) * d], k[key, head * d:(head + 1) * d]  # (d_head,)
    assert w.score == pytest.approx(float(q_i @ k_j) / d ** 0.5, abs=1e-4)
    assert w.weight == pytest.approx(float(out.attentions[layer][0, head, query, key]), abs=1e-5)


def test_explain_head_measures_equal_runs_with_the_head_silenced(pair):
    """On GPT-2 (LayerNorm with bias before the unembedding) both head measures equal a direct run."""
    from studygroup.model.interventions import PassPlan
    from studygroup.study import effects

    ours, _ = pair
    text = "Cash or credit card? I have a lot"
    e = studygroup.explain(ours, text, measure_heads="all", measure_members=0)
    ids, t = torch.tensor(e.token_ids), e.predicted.id
    lp = effects.log_probs(ours.run(text, record="none").last_logits)[t]
    for h in e.heads:
        every = effects.log_probs(ours.run(text, record="none", silence_heads=[(h.layer, h.head)]).last_logits)[t]
        gate = torch.ones(1, ours.config.n_heads, len(ids))
        gate[0, h.head, -1] = 0  # the last position only
        last = effects.log_probs(ours.forward(ids, PassPlan(gates={h.layer: gate}))[0][0, -1])[t]
        assert h.silence_effect == pytest.approx(float(every - lp), abs=1e-5), (h.layer, h.head)
        assert h.silence_effect_last_position == pytest.approx(float(last - lp), abs=1e-5), (h.layer, h.head)
    assert max(abs(h.silence_effect) for h in e.heads) > 1e-3


def test_gpt2_tokenizer_ids_equal_transformers(tmp_path):
    """Reference: transformers' GPT2Tokenizer (GPT-2's own pre-tokenizer regex, as llama.cpp's `gpt2`)
    on a byte-level BPE vocabulary trained here, written to the file with pre-tokenizer `gpt2`."""
    from transformers import GPT2Tokenizer
    from tests.integration.test_qwen_mistral import TEXTS, trained_vocab
    tokens, types, merges = trained_vocab()
    path = write_gpt2(tmp_path / "tok.gguf", tokens=tokens, types=types, merges=merges)
    ours = studygroup.load(path, cache=False).tokenizer
    theirs = GPT2Tokenizer(vocab={t: i for i, t in enumerate(tokens)}, merges=[tuple(m.split(" ")) for m in merges])
    for text in TEXTS:
        assert ours.encode(text) == theirs(text, add_special_tokens=False)["input_ids"], text
        assert ours.decode(ours.encode(text)) == text
    assert len(ours.encode("2024")) < 4  # GPT-2 keeps digits together (Qwen splits them one by one)


def test_compare_splits_the_logit_change_into_parts_that_add_up(pair):
    ours, _ = pair
    c = studygroup.compare(ours, "I have a lot", "Cash or credit card? I have a lot")
    s = c.logit
    assert s.position != 0 and s.biases != 0
    assert abs(s.embed + s.position + s.heads + s.mlps + s.biases - (s.logit_b - s.logit_a)) < 1e-3 * max(1.0, abs(s.logit_b))


def test_the_lesson_says_E_is_token_plus_position_embedding(pair):
    import subprocess, sys, os
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    r = subprocess.run([sys.executable, "-m", "studygroup.cli", "lesson", "I have a lot", "--model", str(pair[0].path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    words = " ".join(r.stdout.split())
    assert "E = token embedding + position embedding" in words and "(LayerNorm)" in words
    assert "RoPE" not in words and "RMSNorm" not in words


def test_the_page_answers_on_gpt2(pair):
    from fastapi.testclient import TestClient
    from studygroup.web.app import create_app
    ours, _ = pair
    with TestClient(create_app(ours)) as client:
        for url, body in (("/api/explain", {"text": "I have a lot", "top": 3}), ("/api/model_view", {"text": "I have a lot"}),
                          ("/api/head", {"text": "I have a lot", "layer": 1, "head": 2}),
                          ("/api/lesson", {"text": "I have a lot"})):
            r = client.post(url, json=body)
            assert r.status_code == 200, (url, r.text)
        r = client.post("/api/why", json={"text": "I have a lot", "layer": 1, "head": 0, "query": 3, "key": 1})
        assert r.status_code == 200, r.text
        w = r.json()
        assert w["rope"] is False and w["position"] == 0 and len(w["pairs"]) == w["n_parts"] ** 2
        assert abs(sum(p["value"] for p in w["pairs"]) - w["score"]) <= 1e-5 * max(1.0, abs(w["score"]))
        r = client.post("/api/why", json={"text": "I have a lot", "layer": 2, "head": 0, "query": 3, "key": 1})
        assert r.status_code == 400 and "layer 2 does not exist" in r.json()["error"], r.text


def test_greedy_generation_equals_the_argmax_of_full_passes(pair):
    """GPT-2 (LayerNorm, learned positions, a plain MLP) generates through the general pass over its
    key/value cache: each greedy word is the argmax of a full pass over the ids so far."""
    ours = pair[0]
    ids = random_ids(ours, 5, 3)
    g = ours.generate(ids, 6, ignore_eos=True)
    so_far = list(ids)
    for word in g.ids:
        assert word == int(ours.run(so_far, record="none").logits[-1].argmax())
        so_far.append(word)
