"""Generation against transformers' greedy generate on the same weights, and its recorded rows
against full passes over the sequence so far."""
import subprocess
import sys

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

import studygroup
from conftest import write_tiny_gemma3_gguf, write_tiny_gguf
from studygroup.errors import InputError



def hf_model(tiny, family, config):
    hf = family(config(**tiny.hf_config, attn_implementation="eager"))
    hf.load_state_dict(tiny.hf_state_dict, strict=False)
    return hf.eval()


@pytest.fixture(scope="module", params=["llama", "gemma3", "llama Q4_1", "gemma3 Q8_0"])
def pair(request, tiny_model, tiny_gemma3, tmp_path_factory):
    """The model and transformers on the same weights; the quantized files' steps multiply their blocks."""
    folder = tmp_path_factory.mktemp("quantized")
    if request.param == "llama Q4_1":
        tiny = write_tiny_gguf(folder / "q4_1.gguf", tensor_type=Q.Q4_1)
    elif request.param == "gemma3 Q8_0":
        tiny = write_tiny_gemma3_gguf(folder / "q8_0.gguf", tensor_type=Q.Q8_0)
    else:
        tiny = tiny_model if request.param == "llama" else tiny_gemma3
    llama = request.param.startswith("llama")
    family, config = (LlamaForCausalLM, LlamaConfig) if llama else (Gemma3ForCausalLM, Gemma3TextConfig)
    return studygroup.load(tiny.path, cache=llama), hf_model(tiny, family, config)


def random_ids(model, T, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (T,), generator=g).tolist()


@pytest.mark.parametrize("T,seed", [(1, 0), (3, 1), (9, 2)])
def test_greedy_ids_equal_transformers_generate(pair, T, seed):
    ours, theirs = pair
    ids, n = random_ids(ours, T, seed), 12
    with torch.no_grad():
        out = theirs.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              pad_token_id=0, eos_token_id=None)
    assert ours.generate(ids, n, ignore_eos=True).ids == out[0, T:].tolist()


def test_each_words_rows_equal_a_full_pass(pair):
    ours, _ = pair
    ids = random_ids(ours, 6, 7)
    g = ours.generate(ids, 8, ignore_eos=True)
    seq = list(ids)
    for k, word in enumerate(g.words, start=1):
        run = ours.run(seq, record=["q", "weights"])
        q = g.questions(k)  # (L, H, d), recomputed from the cache
        for l in range(ours.config.n_layers):
            full = run["weights", l][:, -1]  # (H, P)
            assert (q[l] - run["q", l][:, -1]).abs().max() < 1e-5
            assert (word.sink[l] - full[:, 0]).abs().max() < 1e-5
            top = full.topk(min(16, full.shape[-1]), -1)
            assert (word.weights[l] - top.values).abs().max() < 1e-5
            assert (full.gather(-1, word.members[l].long()) - word.weights[l]).abs().max() < 1e-5
            for h in range(ours.config.n_heads):
                assert (g.row(k, l, h, q) - full[h]).abs().max() < 1e-5
        assert int(run.logits[-1].argmax()) == word.id
        seq.append(word.id)


def test_silenced_generation_equals_silenced_full_passes(pair):
    ours, _ = pair
    ids = random_ids(ours, 7, 8)
    g = ours.generate(ids, 6, ignore_eos=True, silence_members=[2], silence_heads=[(0, 1)])
    seq = list(ids)
    for k, word in enumerate(g.words, start=1):
        run = ours.run(seq, record=["q", "weights"], silence_members=[2], silence_heads=[(0, 1)])
        assert int(run.logits[-1].argmax()) == word.id
        q = g.questions(k)  # (L, H, d), recomputed with the silencing
        for l in range(ours.config.n_layers):
            assert (q[l] - run["q", l][:, -1]).abs().max() < 1e-5
            for h in range(ours.config.n_heads):
                assert (g.row(k, l, h, q) - run["weights", l][h, -1]).abs().max() < 1e-5
        seq.append(word.id)


def test_a_words_record_is_its_top_weights_members_and_sink(model):
    """What each word keeps: L × H × (16 weights as float32, 16 members as int16, a sink), no
    question vectors (27 KB a word for the default model's 30 × 9 heads)."""
    g = model.generate(random_ids(model, 20, 3), 2, ignore_eos=True)
    L, H = model.config.n_layers, model.config.n_heads
    kept = sum(t.numel() * t.element_size() for w in g.words for t in (w.members, w.weights, w.sink))
    assert kept == len(g.words) * L * H * (16 * 4 + 16 * 2 + 4)
    assert not hasattr(g.words[0], "questions")


def test_stops_at_the_end_token_unless_told(model, monkeypatch):
    ids = random_ids(model, 5, 9)
    free = model.generate(ids, 6, ignore_eos=True)
    monkeypatch.setattr(model.tokenizer, "eos_id", free.ids[2])  # the third greedy word ends the text
    ended = model.generate(ids, 6)
    assert ended.ids == free.ids[:3] and ended.stop == "eos" and ended.to_json()["words"][-1]["stop"] == "eos"
    assert model.generate(ids, 6, ignore_eos=True).ids == free.ids


SAMPLE = ("import studygroup, sys; m = studygroup.load(sys.argv[1]); "
          "print(m.generate([1, 2, 3], 10, temperature=1.5, top_k=20, top_p=0.9, seed=4, ignore_eos=True).ids)")


def test_seeded_sampling_is_the_same_across_processes(model, tiny_model):
    runs = [subprocess.run([sys.executable, "-c", SAMPLE, str(tiny_model.path)], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)]
    here = str(model.generate([1, 2, 3], 10, temperature=1.5, top_k=20, top_p=0.9, seed=4, ignore_eos=True).ids)
    torch.manual_seed(123)  # the global generator plays no part
    assert runs[0] == runs[1] == here
    other = model.generate([1, 2, 3], 10, temperature=1.5, top_k=20, top_p=0.9, seed=5, ignore_eos=True).ids
    assert str(other) != here


@pytest.mark.parametrize("kwargs", [dict(n=0), dict(n=-1), dict(n="x"), dict(n=10**6), dict(n=3, temperature=-0.1),
                                    dict(n=3, top_p=0), dict(n=3, top_p=1.5), dict(n=3, top_k=0),
                                    dict(n=3, temperature=5e-324), dict(n=3, temperature=1e-320), dict(n=3, seed=2**64),
                                    dict(n=3, seed=10**30), dict(n=3, seed=-1), dict(n=3, seed=1.5)])
def test_bad_input_is_an_input_error(model, kwargs):
    with pytest.raises(InputError):
        model.generate([1, 2, 3], **kwargs)


def test_json_holds_prompt_and_words(model):
    g = model.generate([1, 2, 3], 3, candidates=4, ignore_eos=True)
    j = g.to_json()
    assert j["prompt"]["token_ids"] == [1, 2, 3] and len(j["prompt"]["tokens"]) == 3
    assert [w["id"] for w in j["words"]] == g.ids
    for w in j["words"]:
        assert len(w["top"]) == 4 and w["top"][0]["prob"] >= w["prob"] - 1e-12


def test_explain_explains_the_chosen_word_not_the_most_likely(model):
    from studygroup.study.explain import explain

    ids = random_ids(model, 5, 10)
    run = model.run(ids)
    second = int(run.last_logits.topk(2).indices[1])
    e = explain(model, ids, top=3, word=second)
    lp = torch.log_softmax(run.last_logits.double(), -1)
    # explain's own pass and this one: two float32 passes, ~1e-5 apart in relative terms at most
    assert e.predicted.id == second and e.predicted.prob == pytest.approx(float(lp[second].exp()), rel=1e-5)
    assert abs(e.logit_parts.logit - float(run.last_logits[second])) < 1e-4


def test_cli_explains_generated_word_k_on_the_ids(capsys, model, tiny_model):
    import json as json_

    from studygroup.cli import main

    g = model.generate("the tin", 4)
    assert main(["explain", "the tin", "--model", str(tiny_model.path), "--generate", "4", "--word", "3", "--json",
                 "--top", "2", "--measure-heads", "1", "--measure-members", "1"]) == 0
    data = json_.loads(capsys.readouterr().out)
    assert data["token_ids"] == g.prompt_ids + g.ids[:2] and data["predicted"]["id"] == g.ids[2]
    for bad in (["--generate", "2", "--word", "3"], ["--word", "1"]):
        assert main(["explain", "the tin", "--model", str(tiny_model.path), *bad]) == 2
        assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("kwargs", [{}, {"temperature": 0.8, "seed": 3}, {"silence_members": [1], "silence_heads": [(1, 0)]}])
def test_more_goes_on_as_one_generation(pair, kwargs):
    """3 words, then 2 and 4 more (the cache grown twice), are the 9 words of one call, records included."""
    ours, _ = pair
    ids = random_ids(ours, 6, 4)
    once = ours.generate(ids, 9, ignore_eos=True, **kwargs)
    parts = ours.generate(ids, 3, ignore_eos=True, **kwargs).more(2).more(4)
    assert parts.ids == once.ids
    assert all(torch.equal(a.weights, b.weights) and a.top == b.top for a, b in zip(parts.words, once.words))
    assert torch.allclose(parts.row(9, 1, 2), once.row(9, 1, 2), atol=1e-6)


def test_more_past_the_context_is_refused(model):
    g = model.generate(random_ids(model, 5, 2), 2, ignore_eos=True)
    with pytest.raises(InputError, match="and the 2 words so far"):
        g.more(model.config.context_length)
