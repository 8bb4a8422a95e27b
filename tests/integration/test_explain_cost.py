"""explain's work model counts the layer-rows explain's passes compute: every row through every
layer's MLP, counted by a hook on the pass, equals `explain_cost`'s count for what was measured."""
from __future__ import annotations

import pytest

from studygroup.model.interventions import Interventions

from conftest import random_ids
from studygroup.model import estimate
from studygroup.model.model import Model
from studygroup.study import explain as study
from studygroup.study import explain_cost


@pytest.fixture
def counted(monkeypatch):
    """{"rows": layer-rows through the MLP so far}, every pass of explain's counted (the speed probe,
    timed before a long text's work, is not explain's work: a fixed speed stands for it)."""
    seen = {"rows": 0}
    monkeypatch.setattr(estimate, "speed", lambda model, T: estimate.Speed(T, 1e-3, 3e-3, 2e-3))
    mlp = Model._mlp

    def counting(self, l, x, buffers):
        seen["rows"] += x.shape[0] * x.shape[1]  # (B, R, d_model)
        return mlp(self, l, x, buffers)
    monkeypatch.setattr(Model, "_mlp", counting)
    return seen


def measured(e):
    """The layers of the heads silenced at every position, each in-head copy's (layer, member), the members
    silenced in every head, and the last sentence's rows: what the explanation says was done."""
    heads = [h.layer for h in e.heads if h.silence_effect is not None]
    in_head = [(h.layer, x.index) for h in e.heads for x in h.listened if x.effect_in_head is not None]
    members = [m.index for m in e.members if m.effect is not None]
    return heads, in_head, members, 0 if e.last_sentence is None else len(e.last_sentence.token_ids)


@pytest.mark.parametrize("T, options", [(6, {}), (30, {}), (30, {"measure_heads": 3, "measure_members": 5}),
                                        (30, {"measure_members": 0, "measure_heads": 0})])
def test_every_question_counts_the_rows_explain_passes(model, counted, T, options):
    e = study.explain(model, random_ids(model, T, 3), **options)
    heads, in_head, members, sentence = measured(e)
    assert heads or options  # something was measured at every position
    work = explain_cost.every_question(model.config, T, heads, in_head, members, sentence)
    assert counted["rows"] == work.rows


def test_the_last_sentence_and_a_silenced_run_are_counted(model, counted):
    ids = model.ids("the cat sat. the dog ran? a cat")
    e = study.explain(model, ids, interventions=Interventions(silenced_members=(1,)))
    heads, in_head, members, sentence = measured(e)
    assert sentence == 0 and not in_head  # on a silenced run: no last sentence, no in-head copies
    work = explain_cost.every_question(model.config, len(ids), heads, in_head, members, sentence, clean=False)
    assert counted["rows"] == work.rows
    counted["rows"] = 0
    e = study.explain(model, ids)
    heads, in_head, members, sentence = measured(e)
    assert sentence == study.sentence_rows(model, ids) > 0
    assert counted["rows"] == explain_cost.every_question(model.config, len(ids), heads, in_head, members, sentence).rows


def test_last_question_counts_the_rows_explain_passes(model, counted, monkeypatch):
    monkeypatch.setattr(study, "LONG_T", 8)
    for ids in (random_ids(model, 20, 4), model.ids("the cat sat on the mat. the dog ran? a cat sat on")):
        counted["rows"] = 0
        e = study.explain(model, ids, measure_heads=5)
        heads = [h.layer for h in e.heads if h.silence_effect_last_position is not None]
        members = sum(m.effect_last_question is not None for m in e.members)
        assert len(heads) == 5 and members == len(ids)
        sentence = 0 if e.last_sentence is None else len(e.last_sentence.token_ids)
        assert sentence == study.sentence_rows(model, ids)
        assert counted["rows"] == explain_cost.last_question(model.config, len(ids), heads, members, sentence).rows
    assert sentence > 0  # the second text's last sentence passed alone, and counted


@pytest.mark.parametrize("family", ["tiny_model", "tiny_gemma3"])
def test_the_speed_probe_times_every_kind_on_each_family(family, request):
    import studygroup
    model = studygroup.load(request.getfixturevalue(family).path)
    s = estimate.speed(model, 40)  # more keys than the Gemma 3's window of 4
    assert s.T == 40 and all(0 < x < 1 for x in (s.text, s.gradient, s.copy))
    assert s.text_at(model.config, 80) > s.text  # twice the keys: more attention a row
