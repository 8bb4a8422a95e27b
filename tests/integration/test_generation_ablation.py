"""Generation with mean and resample ablation (studygroup.model.generation_ablation) against
transformers with hooks, every family: at each word, transformers runs the prompt and the words so
far with each silenced member's key and value projections (k_proj/v_proj outputs, every layer) and
each silenced head's output (its slice of o_proj's input) replaced: by their mean over the prompt's
members (mean), or by the source's followed by the same words (resample). Every step's logits
(all of the vocabulary, kept as candidates) within 1e-4, and the words the same."""
from __future__ import annotations

import json

import pytest
import torch

import studygroup
from integration.test_ablation import their_ablated_log_probs, their_steps
from integration.test_every_family import FAMILIES, _pair, ids_of
from studygroup.cli import main
from studygroup.errors import InputError
from studygroup.model.ablation import Ablation
from studygroup.model.interventions import Interventions
from studygroup.study.continuations import continuations


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request, tmp_path_factory):
    path, theirs = _pair(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, studygroup.load(path, cache=False), theirs


def their_words_log_probs(theirs, family, c, prompt, words, members, heads, kind, source):
    """transformers' last log-probabilities after prompt + words, the silenced taken out by the
    generation's rule: the mean over the prompt's members, or the source followed by the words."""
    seq = prompt + words
    if kind == "mean":
        own = their_steps(theirs, family, c, prompt)
        value = lambda place, l: own[place, l].mean(0, keepdim=True).expand(len(seq), -1)  # noqa: E731
    else:
        other = their_steps(theirs, family, c, source + words)
        value = lambda place, l: other[place, l]  # noqa: E731
    return their_ablated_log_probs(theirs, family, c, seq, members, heads, value)


def step_log_probs(word, vocab: int) -> torch.Tensor:
    """(vocab,) a word's step as log-probabilities, from its candidates (every word of the vocabulary)."""
    logits = torch.full((vocab,), float("nan"), dtype=torch.float64)
    for i, _, z in word.top:
        logits[i] = z
    assert not logits.isnan().any()
    return torch.log_softmax(logits, -1)


@pytest.mark.parametrize("kind", ["mean", "resample"])
def test_each_words_logits_equal_a_hooked_transformers_run_over_the_words_so_far(pair, kind):
    family, model, theirs = pair
    c = model.config
    prompt, source = ids_of(model, 6, seed=21), ids_of(model, 6, seed=22)
    members, heads = [1, 4], [(0, 1), (c.n_layers - 1, c.n_heads - 1)]
    ablation = Ablation(kind, source=tuple(source) if kind == "resample" else None)
    g = model.generate(prompt, 5, ignore_eos=True, candidates=c.vocab_size,
                       interventions=Interventions(tuple(members), None, frozenset(heads), ablation=ablation))
    clean = model.generate(prompt, 5, ignore_eos=True, candidates=c.vocab_size)
    changed = 0.0
    for k, word in enumerate(g.words):
        want = their_words_log_probs(theirs, family, c, prompt, g.ids[:k], members, heads, kind, source)
        ours = step_log_probs(word, c.vocab_size)
        assert (ours - want).abs().max() < 1e-4, (family, kind, k)
        assert word.id == int(want.argmax()) or want.topk(2).values.diff().abs().item() < 1e-4  # greedy, up to a tie
        if g.ids[:k] == clean.ids[:k]:
            changed = max(changed, float((ours - step_log_probs(clean.words[k], c.vocab_size)).abs().max()))
    assert changed > 1e-3  # the ablation changes the logits


@pytest.mark.parametrize("kind, heads", [("mean", {(0, 1), (1, 3)}), ("resample", {(0, 1), (1, 3)}), ("resample", set())])
def test_questions_and_rows_equal_one_run_of_the_words_so_far(tiny_model, kind, heads):
    """Each word's recomputed questions and attention rows are those of one run of the prompt and
    the words before it under `Ablation.over_generated` (a mean over the prompt, the source followed
    by the same words): the cache's values and a whole run's agree (a member alone resampled too)."""
    model = studygroup.load(tiny_model.path, cache=False)
    prompt, source = ids_of(model, 7, seed=23), ids_of(model, 7, seed=24)
    ablation = Ablation(kind, source=tuple(source) if kind == "resample" else None)
    i = Interventions((2,), None, frozenset(heads), ablation=ablation)
    g = model.generate(prompt, 6, ignore_eos=True, interventions=i)
    for k, word in enumerate(g.words, start=1):
        words = g.ids[:k - 1]
        one = Interventions((2,), None, frozenset(heads), ablation=ablation.over_generated(model, prompt, words))
        run = model.run(prompt + words, record=["q", "weights"], interventions=one)
        assert int(run.logits[-1].argmax()) == word.id and abs(float(run.logits[-1, word.id]) - word.logit) < 1e-4
        q = g.questions(k)
        for l in range(model.config.n_layers):
            assert (q[l] - run["q", l][:, -1]).abs().max() < 1e-5
            for h in range(model.config.n_heads):
                assert (g.row(k, l, h, q) - run["weights", l][h, -1]).abs().max() < 1e-5


@pytest.mark.parametrize("kind", ["mean", "resample"])
def test_more_goes_on_as_one_generation(tiny_model, kind):
    """3 words, then 2 and 4 more (both caches grown), are the 9 words of one call."""
    model = studygroup.load(tiny_model.path, cache=False)
    prompt, source = ids_of(model, 5, seed=25), ids_of(model, 5, seed=26)
    i = Interventions((1,), None, frozenset({(1, 2)}), ablation=Ablation(kind, source=tuple(source) if kind == "resample" else None))
    once = model.generate(prompt, 9, ignore_eos=True, interventions=i)
    parts = model.generate(prompt, 3, ignore_eos=True, interventions=i).more(2).more(4)
    assert parts.ids == once.ids and all(a.top == b.top for a, b in zip(parts.words, once.words))
    assert once.to_json()["ablation"] == {"kind": kind, "reference": 0, "from": list(source) if kind == "resample" else None}


def test_a_resample_text_of_another_length_is_refused_in_one_line(tiny_model, capsys):
    model = studygroup.load(tiny_model.path, cache=False)
    with pytest.raises(InputError, match="same number of tokens"):
        model.generate(ids_of(model, 5), 2, interventions=Interventions((1,), ablation=Ablation("resample", source=tuple(ids_of(model, 4)))))
    with pytest.raises(InputError, match="silences members in every head"):
        model.generate(ids_of(model, 5), 2, interventions=Interventions((1,), frozenset({(0, 1)})))
    path = str(tiny_model.path)
    for argv, words in ((["--ablation", "resample", "--from", "the tin"], "same number of tokens"),
                        (["--ablation", "mean", "--from", "the tin"], "goes with the resample ablation")):
        assert main(["generate", "the tin can", "-n", "2", "--model", path, "--silence-head", "0.1", *argv]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1


def test_the_command_names_the_ablation_and_parts_where_the_generation_does(tiny_model, capsys):
    """generate --ablation mean: the JSON's silenced continuation is Model.generate's with the same
    interventions, named; the text says how they were taken out, and the silenced group's
    probabilities where the two continuations part are the generation's own at that word."""
    model = studygroup.load(tiny_model.path, cache=False)
    path, text = str(tiny_model.path), "the tin can"
    argv = ["generate", text, "-n", "6", "--model", path, "--silence-head", "1.0", "--silence-head", "0.2",
            "--silence-member", "1", "--ablation", "mean", "--ignore-eos"]
    assert main([*argv, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    i = Interventions((1,), None, frozenset({(1, 0), (0, 2)}), ablation=Ablation("mean"))
    want = model.generate(text, 6, ignore_eos=True, interventions=i)
    assert got["silenced"]["ablation"] == {"kind": "mean", "reference": 0, "from": None} and "ablation" not in got
    assert [w["id"] for w in got["silenced"]["words"]] == want.ids
    assert main(argv) == 0
    assert "taken out by mean ablation (each head's output and each member's key and value replaced by their " \
           "means over the prompt's members)" in " ".join(capsys.readouterr().out.split())
    whole = model.generate(text, 6, ignore_eos=True)
    c = continuations(model, model.ids(text), whole, dict(n=6, ignore_eos=True), i)
    k = c.parting.word - 1
    assert c.silenced_ids == want.ids and whole.ids[:k] == want.ids[:k] != want.ids[:k + 1]
    assert abs(c.parting.prob_silenced_in_silenced - want.words[k].prob) < 1e-5  # the generation's own, from one run
    assert abs(c.parting.prob_whole_in_whole - whole.words[k].prob) < 1e-5
