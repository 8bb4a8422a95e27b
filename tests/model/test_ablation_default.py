"""Mean and resample ablation in generation and in `why` on the default model, against transformers
with hooks on the same file (tests/integration/test_generation_ablation.py and test_why_ablation.py
do the same on a tiny file of every family)."""
from __future__ import annotations

import pytest

from integration.test_generation_ablation import step_log_probs, their_words_log_probs
from integration.test_why_ablation import their_weights
from integration.test_ablation import their_steps
from studygroup.model.ablation import Ablation
from studygroup.model.interventions import Interventions
from studygroup.study.why import why

TEXT, SOURCE = "Cash or credit card? I have a lot", "Bread or butter cake? You have a few"
MEMBERS, HEADS = [2], [(3, 0), (20, 1), (24, 6)]


@pytest.mark.parametrize("kind", ["mean", "resample"])
def test_generation_equals_transformers_with_hooks_at_each_word(model, theirs, kind):
    c = model.config
    prompt, source = model.ids(TEXT), model.ids(SOURCE)
    ablation = Ablation(kind, source=SOURCE if kind == "resample" else None)
    g = model.generate(TEXT, 4, ignore_eos=True, candidates=c.vocab_size,
                       interventions=Interventions(tuple(MEMBERS), None, frozenset(HEADS), ablation=ablation))
    for k, word in enumerate(g.words):
        want = their_words_log_probs(theirs, "llama", c, prompt, g.ids[:k], MEMBERS, HEADS, kind, source)
        assert (step_log_probs(word, c.vocab_size) - want).abs().max() < 1e-4, (kind, k)
        assert word.id == int(want.argmax())


@pytest.mark.parametrize("kind", ["mean", "resample"])
def test_why_weight_equals_transformers_with_hooks_on_the_whole_text(model, theirs, kind):
    c = model.config
    ids, other = model.ids(TEXT), model.ids(SOURCE)
    own, theirs_other = their_steps(theirs, "llama", c, ids), their_steps(theirs, "llama", c, other)
    source = (lambda place, l: own[place, l].mean(0, keepdim=True).expand_as(own[place, l])) if kind == "mean" else \
        (lambda place, l: theirs_other[place, l])
    before = theirs.config._attn_implementation
    theirs.set_attn_implementation("eager")  # the weights themselves (sdpa returns none)
    try:
        want = their_weights(theirs, "llama", c, ids, MEMBERS, HEADS, source)
    finally:
        theirs.set_attn_implementation(before)
    i = Interventions(tuple(MEMBERS), None, frozenset(HEADS), ablation=Ablation(kind, source=SOURCE if kind == "resample" else None))
    for layer, head, query, key in ((20, 1, 9, 4), (24, 6, 9, 0), (25, 0, 6, 6)):
        w = why(model, TEXT, layer, head, query, key, i)
        assert abs(w.weight - float(want[layer][head, query, key])) < 1e-5, (kind, layer, head)
        assert abs(w.parts_total - w.score) <= 1e-5 * max(1.0, abs(w.score))
