"""explain, compare, head and the lesson on the default model, against llama.cpp's reference."""
import json
import math

import numpy as np
import pytest
import torch

from studygroup.study import effects
from studygroup.study import compare as study_compare
from studygroup.study import head as study_head
from studygroup.study import lesson_sections as ls
from conftest import REFERENCE_DIR


PROMPTS = json.loads((REFERENCE_DIR / "public.json").read_text())
A, B = PROMPTS[0], PROMPTS[1]  # "I have a lot", "Cash or credit card? I have a lot"


@pytest.fixture(scope="module")
def comparison(model):
    return study_compare.compare(model, A["text"], B["text"])


def test_the_article_texts_are_what_the_reference_says(comparison):
    assert (A["text"], B["text"]) == ("I have a lot", "Cash or credit card? I have a lot")
    for e, ref in ((comparison.a, A), (comparison.b, B)):
        assert e.token_ids == ref["token_ids"]
        assert e.predicted.id == ref["top10"][0]["id"] == ref["hf_top1"]  # " of"
        assert e.predicted.token == "␣of"


def test_explain_numbers_hold_together(model, comparison):
    e = comparison.b
    assert abs(e.logit_parts.total - e.logit_parts.logit) < 1e-3
    # the article's sentence: every head measured by default, so no decisive head is left untested
    assert len(e.heads) == 270 and e.heads_measured == 270 and e.heads_silenced.startswith("all 270")
    assert [(h.layer, h.head) for h in e.heads[:5]] == [(24, 6), (24, 8), (24, 7), (1, 0), (1, 4)]
    assert [m.index for m in e.members] == list(range(10)) and e.members_silenced.startswith("all 10")
    top = e.heads[0]  # its silence effect is the one a plain run with that head silenced gives
    quiet = model.run(B["text"], record="none", silence_heads=[(top.layer, top.head)])
    lp = effects.log_probs(quiet.last_logits)[e.predicted.id]
    assert top.silence_effect == pytest.approx(float(lp) - float(torch.tensor(e.predicted.prob).log()), abs=1e-4)
    assert sum(x.weight for x in top.listened) == pytest.approx(1.0, abs=1e-4)


def test_last_position_copies_joining_at_their_layer_equal_copies_from_layer_0(model, comparison):
    """Every head's silence_effect_last_position on the article's sentence, as explain measures it
    (each copy of the last row joins at its head's layer), against every copy run from layer 0."""
    from studygroup.study import explain, last_question

    e = comparison.b
    run = model.run(B["text"], record=explain.recording(len(e.tokens)))
    heads = [(h.layer, h.head) for h in e.heads]
    from_layer_0 = last_question.silenced_heads_logits(model, run, heads, e.predicted.id)  # (270,) log p(t)
    lp_t = effects.log_probs(run.last_logits)[e.predicted.id]
    got = torch.tensor([h.silence_effect_last_position for h in e.heads], dtype=torch.float64)
    assert torch.allclose(got, from_layer_0 - lp_t, atol=1e-5)
    assert got.abs().max() > 0.01  # some head's last-position write matters


def test_compare_shift_has_the_reference_sign(comparison):
    ref = lambda prompt, i: next(t["prob"] for t in prompt["top10"] if t["id"] == i)  # noqa: E731
    of = next(s for s in comparison.shift if s.id == A["top10"][0]["id"])
    assert ref(A, of.id) < ref(B, of.id)  # llama.cpp: 0.929 -> 0.953
    assert of.prob_a < of.prob_b and of.change > 0
    assert of.prob_a == pytest.approx(ref(A, of.id), abs=0.02) and of.prob_b == pytest.approx(ref(B, of.id), abs=0.02)
    assert comparison.longer == "b" and comparison.word == "␣of"
    assert comparison.prefix is not None and comparison.prefix.tokens == ["C", "ash", "␣or", "␣credit", "␣card", "?"]
    assert any("“␣of”" in s and "raises" in s for s in comparison.story)


def test_head_in_both_notations(model):
    paper = study_head.head_view(model, A["text"], 0, 8, "paper")
    cols = study_head.head_view(model, A["text"], 0, 8, "columns")
    assert paper.check.agree and cols.check.agree
    assert torch.allclose(torch.tensor(cols.weights).T, torch.tensor(paper.weights), atol=1e-6)
    assert len(paper.q) == 4 and len(paper.q[0]) == 64 and len(cols.q) == 64


def test_lesson_on_the_default_model(model, comparison):
    """`lesson` alone: the sections on B, its conclusion beside A, as llama.cpp's top words say."""
    layer, head = ls.default_head(model, B["text"], [(e.layer, e.head) for e in comparison.b.heads])
    l = ls.lesson_sections(model, B["text"], layer, head)
    conclusion = l.section(8)
    assert conclusion["shorter_text"] == A["text"]
    for words, ref in ((conclusion["top"], B), (conclusion["shorter_top"], A)):
        assert words[0]["id"] == ref["top10"][0]["id"] and words[0]["prob"] == pytest.approx(ref["top10"][0]["prob"], abs=0.02)
    h = model.run(B["text"], record="all").head(layer, head)
    q, k = h.q.double().numpy(), h.k.double().numpy()  # (T, d_head)
    s = np.where(np.tril(np.ones((len(q), len(q)), bool)), q @ k.T / math.sqrt(q.shape[1]), -np.inf)[-1]
    assert np.allclose(l.section(6)["weights"], np.exp(s - s.max()) / np.exp(s - s.max()).sum(), atol=1e-6)
    json.loads(l.to_json())


@pytest.mark.parametrize("record", ["default", "all"])
def test_what_a_long_run_keeps_is_known_before_it_starts(model, record):
    """Past 256 tokens the default keeps the last row, and "all" keeps q and k for maps on demand."""
    from studygroup.model import estimate
    from studygroup.model.record import resolve

    ids = model.tokenize("The members of a study group ask, answer and weigh. " * 30)[:300]
    run = model.run(ids, record=record)
    kept = sum(t.numel() * t.element_size() for t in run.steps.values())
    assert estimate.recording_bytes(model.config, 300, resolve(record, 300)) == kept


LETTER = ["The keeper of the lighthouse wrote a letter to his sister every week.",
          "He told her about the ships, the gulls and the storms that came in from the west.",
          "She answered with news of the village, the market and the school where she taught.",
          "One winter the post did not come for a month, and he worried that she was ill.",
          "When the boat finally arrived, the postman handed him three letters at once."]


def letter(model, T: int) -> str:
    """The letter's sentences in turn until the text has at least T tokens."""
    sentences = [LETTER[0]]
    while len(model.ids(" ".join(sentences))) < T:
        sentences.append(LETTER[len(sentences) % len(LETTER)])
    return " ".join(sentences)


@pytest.fixture(scope="module")
def long_letter(model):
    """The default explain of a 602-token text (past LONG_T: the last-question strategy)."""
    from studygroup.study import explain

    return explain.explain(model, letter(model, 600))


def test_a_long_text_names_its_most_decisive_heads_of_every_head(model, long_letter):
    """Every head is silenced at the last position: the two most decisive, which rank far down by
    direct contribution, are named first, each effect that of a run with that head's output row
    zeroed at the last member (a Replacement)."""
    from studygroup.model.interventions import Replacement
    from studygroup.study import explain

    e = long_letter
    T, t = len(e.token_ids), e.predicted.id
    assert T == 602 > explain.LONG_T and e.heads_measured == len(e.heads) == 270 and e.members_measured == T
    lp = float(effects.log_probs(model.run(e.token_ids, record="none").last_logits)[t])
    for h in e.heads[:2]:
        zero = Replacement(f"layers.{h.layer}.output", torch.zeros(1, 1, 64), members=(T - 1,), heads=(h.head,))
        alone = effects.log_probs(model.run(e.token_ids, record="none", replace=[zero]).last_logits)
        assert h.silence_effect_last_position == pytest.approx(float(alone[t]) - lp, abs=1e-4)
    assert min(h.rank_by_contribution for h in e.heads[:2]) > 32  # the 32 largest by direct contribution miss both


def test_the_lesson_on_a_head_resting_on_a_sink_measures_it_zeroed_and_mean_ablated(model):
    """Head 24.6's last question on B rests on member 0: the softmax section gives its effect on
    log p("␣of") with its write zeroed and with its output replaced by its mean over B's members,
    as runs with the head taken out each way say (Interventions), and says zero ablation overstates it."""
    from studygroup.model.ablation import Ablation
    from studygroup.model.interventions import Interventions
    soft = ls.lesson_sections(model, B["text"], 24, 6).section(6)
    assert soft["rests_on_sink"] and soft["sinks"] == [0]
    ids = B["token_ids"]
    lp = torch.log_softmax(model.run(ids).last_logits.double(), -1)
    t = int(lp.argmax())
    for kind, said in (("zero", "zeroed"), ("mean", "mean-ablated")):
        i = Interventions.make(model, len(ids), heads=[(24, 6)], ablation=Ablation(kind)).taken_out(model, ids)
        want = float(torch.log_softmax(model.run(ids, interventions=i).last_logits.double(), -1)[t] - lp[t])
        assert soft["ablation"][kind] == pytest.approx(want, abs=1e-4)
        assert f"{soft['ablation'][kind]:+.2g} {said}" in soft["says"][-1]
    assert soft["ablation"]["predicted"] == "␣of" and soft["ablation"]["zero"] < -0.03
    assert "zero ablation overstates" in soft["says"][-1] and "head 24.6" in soft["says"][-1]
