"""Qwen 2, Qwen 3 and Mistral files: a tiny random model of each, written to GGUF here as llama.cpp's
converter would (Qwen: no Q/K row permutation; Mistral: a "llama" file named so), loaded by transformers' own GGUF loader from the same
file, against our forward pass; and a byte-level BPE vocabulary trained here with `tokenizers`,
written with pre-tokenizer `qwen2`, against transformers' tokenizer loaded from the same file.
"""
import re
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import studygroup
from conftest import (write_tiny_gguf, _add_value, _gguf_name, assert_logits_equal, assert_silenced_members_agree,
                      random_hf_weights, random_ids, tiny_metadata, tiny_vocab)
from studygroup.errors import ModelFileError
from studygroup.gguf.weights import read_weights
from studygroup.study.attribution import direct_contributions

EXTRA_HF_TO_GGUF = {  # Qwen 2's biases and Qwen 3's q/k norms, as llama.cpp's converter names them
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight",  # Phi-3
}
ARCHS = ("qwen2", "qwen3", "mistral", "phi3")
CORPUS = ["Cash or credit card? I have a lot of questions, and the group has 1234 answers.",
          "The members of a study group ask questions; they're    indented\n\nand don't stop. Café 3.50€",
          "<|im_start|>user\nHello, world!<|im_end|> 42 apples, 7 pears",
          "In 2024 and 2025 we paid 1234 or 12345 for 100 200 300; HE'S THEY'RE done!!\n\n  ok"]


def gguf_name(hf_name: str) -> str:
    parts = hf_name.split(".")
    rest = ".".join(parts[3:])
    if rest in EXTRA_HF_TO_GGUF:
        return f"blk.{parts[2]}.{EXTRA_HF_TO_GGUF[rest]}"
    return _gguf_name(hf_name)


def phi3_fused(w: dict) -> dict:
    """Separate q/k/v and gate/up (HF Llama names) -> Phi-3's fused matrices, named for the file."""
    out = {}
    for name, t in w.items():
        p = name.rpartition("self_attn.")[0] or name.rpartition("mlp.")[0]
        if name.endswith("q_proj.weight"):
            out[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                [w[p + f"self_attn.{x}_proj.weight"] for x in "qkv"])
        elif name.endswith("gate_proj.weight"):
            out[p + "mlp.gate_up_proj.weight"] = np.concatenate([t, w[p + "mlp.up_proj.weight"]])
        elif not name.endswith(("k_proj.weight", "v_proj.weight", "up_proj.weight")):
            out[name] = t
    return out


def write_tiny(path: Path, arch: str, *, seed=0, drop=(), reshape=(), tokens=None, merges=None, types=None,
               pre="qwen2", extra=None, metadata=None) -> Path:
    """A tiny random `arch` model (2 layers, 4 heads, 2 kv heads, d_head 8), rows as they are;
    `metadata` overrides metadata keys ({key: value})."""
    rng = np.random.default_rng(seed)
    if tokens is None:
        tokens, types, merges = tiny_vocab()
    cfg = dict(vocab_size=len(tokens), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
               rope_theta=1e6, rms_norm_eps=1e-6)
    w = random_hf_weights(cfg, True, rng)
    for l in range(2):
        p = f"model.layers.{l}.self_attn."
        if arch == "qwen2":
            w |= {p + "q_proj.bias": rng.standard_normal(32), p + "k_proj.bias": rng.standard_normal(16),
                  p + "v_proj.bias": rng.standard_normal(16)}
        if arch == "qwen3":
            w |= {p + "q_norm.weight": 1 + 0.1 * rng.standard_normal(8), p + "k_norm.weight": 1 + 0.1 * rng.standard_normal(8)}
    if arch == "phi3":  # llama.cpp's converter keeps Phi-3's fused qkv_proj and gate_up_proj (gate rows first)
        w = phi3_fused(w)
    writer = gguf.GGUFWriter(str(path), arch)
    keys = tiny_metadata(arch, cfg, pre, False, tokens, types, merges)
    if arch == "phi3":  # a window smaller than the texts: llama.cpp (and transformers' loader) set it aside
        keys["phi3.attention.sliding_window"] = 4
    keys |= {"general.name": f"tiny-random-{arch}", f"{arch}.attention.key_length": 8,
             f"{arch}.attention.value_length": 8}
    keys |= metadata or {}
    for key, value in keys.items():
        _add_value(writer, key, value)
    for hf_name, t in w.items():
        name = gguf_name(hf_name)
        if name in drop:
            continue
        t = np.asarray(t, np.float32)
        writer.add_tensor(name, t[:-1] if name in reshape else t)
    for name, t in (extra or {}).items():
        writer.add_tensor(name, t)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module", params=ARCHS)
def pair(request, tmp_path_factory):
    """(our model, transformers' model) from one tiny file of the family."""
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "mistral":  # llama.cpp writes Mistral as "llama"; transformers reads it by its name
        path = write_tiny_gguf(folder / "tiny.gguf", rope_base=1e6, metadata={"general.name": "tiny-random-mistral"}).path
    else:
        path = write_tiny(folder / "tiny.gguf", request.param)
    theirs = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                  attn_implementation="eager",
                                                  **{"qwen3": {"head_dim": 8}, "phi3": {"pad_token_id": 0}}.get(request.param, {})).eval()
    # (transformers' GGUF mapping for Qwen 3 skips attention.key_length: its head_dim is set here;
    # Phi3Config's default pad id, 32000, lies outside the tiny vocabulary)
    assert theirs.model.layers[0].self_attn.o_proj.weight.shape == (32, 32)
    return studygroup.load(path, cache=False), theirs


@pytest.mark.parametrize("T", [1, 5, 23])
def test_logits_equal_transformers(pair, T):
    assert_logits_equal(*pair, T)


def test_recorded_steps_equal_transformers(pair):
    ours, theirs = pair
    ids = random_ids(ours, 11, 3)
    got = {}
    attn = [layer.self_attn for layer in theirs.model.layers]
    if hasattr(attn[0], "qkv_proj"):  # Phi-3: q, k, v from one projection
        hooks = [a.qkv_proj.register_forward_hook(lambda m, i, o, l=l: got.update({("q", l): o[..., :32], ("k", l): o[..., 32:48], ("v", l): o[..., 48:]}))
                 for l, a in enumerate(attn)]
    else:
        hooks = [a.q_proj.register_forward_hook(lambda m, i, o, l=l: got.__setitem__(("q", l), o)) for l, a in enumerate(attn)]
        hooks += [a.k_proj.register_forward_hook(lambda m, i, o, l=l: got.__setitem__(("k", l), o)) for l, a in enumerate(attn)]
        hooks += [a.v_proj.register_forward_hook(lambda m, i, o, l=l: got.__setitem__(("v", l), o)) for l, a in enumerate(attn)]
    hooks += [a.q_norm.register_forward_hook(lambda m, i, o, l=l: got.__setitem__(("q_normed", l), o))
              for l, a in enumerate(attn) if hasattr(a, "q_norm")]
    hooks += [a.k_norm.register_forward_hook(lambda m, i, o, l=l: got.__setitem__(("k_normed", l), o))
              for l, a in enumerate(attn) if hasattr(a, "k_norm")]
    with torch.no_grad():
        out = theirs(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    for h in hooks:
        h.remove()
    run = ours.run(ids, record="all")
    assert (run["embed"] - out.hidden_states[0][0]).abs().max() < 1e-4
    for l in range(ours.config.n_layers):
        q = got[("q", l)][0].view(11, 4, 8).transpose(0, 1)  # (H, T, d): with the bias where the family has one
        assert (run[f"layers.{l}.q_pre_rope"] - q).abs().max() < 1e-4, l
        for step in ("k", "v"):  # k before RoPE
            ours_step = run[f"layers.{l}.{'k_pre_rope' if step == 'k' else 'v'}"]
            assert (ours_step - got[(step, l)][0].view(11, 2, 8).transpose(0, 1)).abs().max() < 1e-4, (step, l)
        if ("q_normed", l) in got:
            assert (run[f"layers.{l}.q_normed"] - got[("q_normed", l)][0].transpose(0, 1)).abs().max() < 1e-4, l
            assert (run[f"layers.{l}.k_normed"] - got[("k_normed", l)][0].transpose(0, 1)).abs().max() < 1e-4, l
        assert (run[f"layers.{l}.weights"] - out.attentions[l][0]).abs().max() < 1e-5, l
        if l + 1 < ours.config.n_layers:
            assert (run[f"layers.{l}.resid_post"] - out.hidden_states[l + 1][0]).abs().max() < 1e-4, l
    assert (("q_normed", 0) in got) == ("layers.0.q_normed" in run.steps)
    assert (run["final"][-1] - out.hidden_states[-1][0, -1]).abs().max() < 1e-4  # after the final norm


def test_direct_contributions_add_up_to_the_logit(pair):
    ours, _ = pair
    run = ours.run(random_ids(ours, 9, 4))
    parts = direct_contributions(run, int(run.logits[-1].argmax()))
    assert abs(parts.total - parts.logit) < 1e-3 * max(1.0, abs(parts.logit))


def test_why_adds_up_to_the_score_and_its_weight_is_transformers(pair):
    """The pairs (Qwen 2's q/k biases a part of their own, Qwen 3's per-head norms held) add up to the
    score, which is q·k/√d_k from the run; the cell's weight equals transformers' attention weight."""
    from studygroup.study.why import why
    ours, theirs = pair
    ids = random_ids(ours, 9, 4)
    with torch.no_grad():
        attentions = theirs(torch.tensor([ids]), output_attentions=True).attentions
    run = ours.run(ids, record="all")
    for layer, head, query, key in [(1, 3, 8, 2), (1, 0, 5, 5), (0, 2, 6, 0)]:
        w = why(ours, ids, layer, head, query, key)
        assert abs(sum(p.value for p in w.pairs) - w.score) <= 1e-5 * max(1.0, abs(w.score))
        assert w.content + w.position == pytest.approx(w.score, abs=1e-12) and w.rope
        q, k = run[f"layers.{layer}.q"][head, query].double(), run[f"layers.{layer}.k"][head // 2, key].double()
        assert w.score == pytest.approx(float(q @ k) / 8 ** 0.5, abs=1e-5)
        assert w.weight == pytest.approx(float(attentions[layer][0, head, query, key]), abs=1e-5)
        assert ("q/k bias" in {p.query_part for p in w.pairs}) == ("layers.0.b_Q" in ours.w)


def test_silenced_members_agree_with_a_masked_run(pair):
    assert_silenced_members_agree(pair[0])


@pytest.mark.parametrize("arch,drop,reshape,says", [
    ("qwen2", ("blk.1.attn_k.bias",), (), "lacks 1 tensor"),
    ("qwen3", ("blk.0.attn_q_norm.weight",), (), "lacks 1 tensor"),
    ("qwen2", (), ("blk.0.attn_v.bias",), "blk.0.attn_v.bias has shape"),
    ("qwen3", (), ("blk.1.attn_k_norm.weight",), "blk.1.attn_k_norm.weight has shape"),
    ("phi3", ("blk.0.attn_qkv.weight",), (), "lacks 1 tensor"),
    ("phi3", (), ("blk.1.ffn_up.weight",), "blk.1.ffn_up.weight has shape"),
])
def test_bad_files_are_one_line_errors(tmp_path, arch, drop, reshape, says):
    path = write_tiny(tmp_path / "bad.gguf", arch, drop=drop, reshape=reshape)
    with pytest.raises(ModelFileError, match=says) as e:
        read_weights(path)
    assert "\n" not in str(e.value)


def test_longrope_is_refused_in_one_line(tmp_path):
    path = write_tiny(tmp_path / "long.gguf", "phi3", extra={"rope_factors_long.weight": np.ones(4, np.float32),
                                                             "rope_factors_short.weight": np.ones(4, np.float32)})
    with pytest.raises(ModelFileError, match="LongRoPE scaling .* not implement") as e:
        read_weights(path)
    assert "\n" not in str(e.value)


def test_a_bad_file_exits_2_with_one_line(tmp_path):
    import subprocess, sys, os
    path = write_tiny(tmp_path / "bad.gguf", "qwen2", drop=("blk.0.attn_q.bias",))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    r = subprocess.run([sys.executable, "-m", "studygroup.cli", "explain", "the tin", "--model", str(path)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "attn_q.bias" in r.stderr, r.stderr


def trained_vocab():
    """A byte-level BPE vocabulary trained here on CORPUS, with Qwen's special tokens, as
    llama.cpp's converter writes it: (tokens, token types, merges)."""
    from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers, trainers
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(CORPUS * 5, trainers.BpeTrainer(vocab_size=520, special_tokens=specials,
                                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    vocab = tok.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    import json
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    types = [3 if t in specials else 1 for t in tokens]
    return tokens, types, merges


TEXTS = ["Cash or credit card? I have a lot", "paid 2024 12345 for 100;  HE'S done!!\n\n  ok", "1234 answers,  they're   indented\n\n\tand DON'T stop.",
         "<|im_start|>user typed <|im_end|> as text", "Café 3.50€ — naïve façade", " leading space  ", "x"]


def test_qwen2_tokenizer_ids_equal_transformers(tmp_path):
    """Reference: transformers' Qwen2Tokenizer (Qwen's own pre-tokenizer regex, one digit a piece, as
    llama.cpp's `qwen2`) on the same vocabulary. (transformers' tokenizer built from the GGUF file is
    not one: it splits digits in threes, as Llama 3 does.)"""
    from transformers import Qwen2Tokenizer
    tokens, types, merges = trained_vocab()
    path = write_tiny(tmp_path / "tok.gguf", "qwen2", tokens=tokens, types=types, merges=merges)
    ours = studygroup.load(path, cache=False).tokenizer
    theirs = Qwen2Tokenizer(vocab={t: i for i, t in enumerate(tokens)}, merges=[tuple(m.split(" ")) for m in merges])
    for text in TEXTS:
        assert ours.encode(text) == theirs(text, add_special_tokens=False)["input_ids"], text
        assert ours.decode(ours.encode(text)) == text
    assert [ours.readable(i) for i in ours.encode("2024")] == ["2", "0", "2", "4"]
    typed = ours.encode("<|im_start|>")  # a special token typed as text stays text
    assert tokens.index("<|im_start|>") not in typed and len(typed) > 1


def test_a_model_whose_weights_do_not_fit_is_refused_at_once(tmp_path, monkeypatch):
    from studygroup.errors import InputError
    from studygroup.model import estimate
    path = write_tiny(tmp_path / "big.gguf", "qwen2")
    theirs = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32)
    params = sum(t.numel() for t in theirs.parameters())  # the unembedding a matrix of its own, as in the file
    monkeypatch.setattr(estimate, "available_bytes", lambda device: 2**16)  # 64 KiB available, say
    for cache in (False, True):  # read from the file, or mapped from the cache
        with pytest.raises(InputError, match=r"needs ([\d.]+) MiB .*float32 \(([\d.]+) MiB in bfloat16\).* 0.0625 MiB") as e:
            studygroup.load(path, cache=cache)

        f32, bf16 = map(float, re.search(r"needs ([\d.]+) MiB .*\(([\d.]+) MiB", str(e.value)).groups())
        assert abs(f32 - 4 * params / 2**20) < 0.02 * f32 and abs(bf16 - f32 / 2) < 0.01 * f32
        assert "\n" not in str(e.value)
        if not cache:  # fill the cache, then refuse the cached model just as fast
            monkeypatch.setattr(estimate, "available_bytes", lambda device: None)
            studygroup.load(path, cache=True)
            monkeypatch.setattr(estimate, "available_bytes", lambda device: 2**16)


def test_generation_equals_transformers_and_full_passes(pair):
    """The lean generation step (biases, q/k norms, fused Phi-3 matrices, windows as data): greedy
    ids equal transformers' generate; each word's questions and weights equal a full pass."""
    ours, theirs = pair
    ids, n = random_ids(ours, 6, 5), 8
    with torch.no_grad():
        out = theirs.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              pad_token_id=0, eos_token_id=None)
    g = ours.generate(ids, n, ignore_eos=True)
    assert g.ids == out[0, len(ids):].tolist()
    seq = list(ids)
    for k, word in enumerate(g.words, start=1):
        run = ours.run(seq, record=["q", "weights"])
        q = g.questions(k)  # (L, H, d), recomputed from the cache
        for l in range(ours.config.n_layers):
            full = run["weights", l][:, -1]  # (H, P)
            assert (q[l] - run["q", l][:, -1]).abs().max() < 1e-5
            assert (word.sink[l] - full[:, 0]).abs().max() < 1e-5
            assert (word.weights[l] - full.topk(min(16, full.shape[-1]), -1).values).abs().max() < 1e-5
        seq.append(word.id)
