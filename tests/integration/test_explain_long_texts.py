"""explain's long-text path: bounded recording, interventions on the last member's questions."""
import json

import pytest
import torch

from studygroup.study import effects
from studygroup.study import last_question
from studygroup.study import explain as study


@pytest.fixture
def long_after_8(monkeypatch):
    monkeypatch.setattr(study, "LONG_T", 8)


def ids_of(model, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, model.config.vocab_size, (T,), generator=g).tolist()


def test_long_path_reports_last_question_effects(model, long_after_8, capsys):
    ids = ids_of(model, 20)
    a = study.analyse(model, ids, top=5, measure_heads=4, measure_members=6)
    e = a.explanation
    assert "last member's questions only" in e.members_silenced and "last position only" in e.heads_silenced
    assert e.scope == study.LAST_QUESTIONS and any(study.LAST_QUESTIONS in s for s in e.story)
    assert a.run.record.rows == "last" and "layers.0.q" in a.run and a.run["layers.0.weights"].shape[1] == 1
    assert ("explaining 20 members" in (err := capsys.readouterr().err) and "(a pass for the heads' sinks, one keeping every "
            "member's keys and values, then one row for each of 4 silenced heads and 6 silenced members)" in err), err
    silenced = [m for m in e.members if m.effect_last_question is not None]
    assert len(silenced) == 6 and len(e.heads) == 4 and e.members_measured == 6 and e.heads_measured == 4
    assert all(m.effect is None and m.prob_silenced is None for m in e.members)  # not measured past LONG_T
    assert all(h.silence_effect is None and h.prob_silenced is None for h in e.heads)
    token = e.predicted.id
    base = model.run(ids, record=last_question.base_record())
    lp = effects.log_probs(base.last_logits)[token]
    expected = effects.log_probs(last_question.silenced_members_logits(model, base, [[m.index] for m in silenced]))[:, token]
    assert torch.allclose(torch.tensor([m.effect_last_question for m in silenced], dtype=torch.float64), expected - lp, atol=1e-5)
    heads = [(h.layer, h.head) for h in e.heads]
    expected = effects.log_probs(last_question.silenced_heads_logits(model, base, heads))[:, token]
    assert torch.allclose(torch.tensor([h.silence_effect_last_position for h in e.heads], dtype=torch.float64), expected - lp, atol=1e-5)
    assert abs(e.logit_parts.total - e.logit_parts.logit) < 1e-3
    json.loads(e.to_json())


def test_short_texts_keep_the_every_question_path(model, long_after_8):
    e = study.explain(model, ids_of(model, 8), top=3)
    assert e.scope == "in every head" and "last" not in e.members_silenced
