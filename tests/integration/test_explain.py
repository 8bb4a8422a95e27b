"""The study layer (explain, compare, head, model view, lesson) on tiny random models written by fixtures."""
import json
import math
import re
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import studygroup
from studygroup.study import attribution
from studygroup.study import effects
from studygroup.study import last_question
from studygroup.views import text as render_text
from studygroup.study import explain as study
from studygroup.study import compare as study_compare
from studygroup.study import head as study_head
from studygroup.errors import InputError, NotationError
from studygroup.study.lesson_sections import lesson_sections
from studygroup.model.interventions import Interventions, PassPlan
from studygroup.model.record import Record
from studygroup.study import story as story_of
from studygroup.study.ablation import head_effects
from studygroup.study.lens import lens
from studygroup.study.model_view import model_view
from studygroup.study.patching import patch
from conftest import TEXT_A, TEXT_B, write_tiny_gguf

DOCS = Path(__file__).resolve().parents[2] / "docs" / "json.md"


def random_ids(model, T, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (T,), generator=g).tolist()


# ---- direct contributions ---------------------------------------------------------------------
@pytest.mark.parametrize("T,seed", [(1, 0), (9, 1), (30, 2)])
def test_direct_contributions_add_up_to_the_logit(model, T, seed):
    run = model.run(random_ids(model, T, seed))
    for token in (int(run.last_logits.argmax()), 7, model.config.vocab_size - 1):
        parts = attribution.direct_contributions(run, token)
        assert parts.heads.shape == (model.config.n_layers, model.config.n_heads)
        assert abs(parts.total - parts.logit) < 1e-4 * max(1.0, abs(parts.logit))


def test_explanation_logit_parts_add_up(analysis):
    e = analysis.explanation
    p = e.logit_parts
    assert p.logit == pytest.approx(e.predicted.logit)
    assert p.embed + p.heads + p.mlps == pytest.approx(p.logit, abs=1e-4)
    assert sum(map(sum, e.contributions)) == pytest.approx(p.heads, abs=1e-4)


def test_member_shares_split_the_head_contributions(analysis):
    run, e = analysis.run, analysis.explanation
    shares = attribution.member_shares(run, e.predicted.id)
    assert float(shares.sum()) == pytest.approx(e.logit_parts.heads, abs=1e-4)
    for h in e.heads:  # each head's listened shares add up to its own contribution
        assert sum(x.logit_share for x in h.listened) == pytest.approx(h.logit_contribution, abs=1e-4)
        for x in h.listened:
            assert x.contribution == pytest.approx(x.weight * x.answer_size, rel=1e-5)


# ---- member effects ---------------------------------------------------------------------------
def test_batched_member_silencing_equals_one_at_a_time(model, monkeypatch):
    ids = random_ids(model, 7, 3)
    token = int(model.run(ids, record="none").last_logits.argmax())
    monkeypatch.setattr(effects, "ROWS_PER_PASS", 7 * 3)  # three copies a pass: three passes
    batched = effects.member_log_probs(model, ids, token, list(range(7)))
    for j in range(7):
        alone = effects.log_probs(model.run(ids, record="none", silence_members=[j]).last_logits)[token]
        assert float(batched[j]) == pytest.approx(float(alone), abs=1e-4)


@pytest.mark.parametrize("pass_rows,rows_per_pass", [(0, 4096), (1000, 4096), (0, 12)])
def test_member_silencing_reusing_the_earlier_rows_equals_recomputing_them(model, monkeypatch, pass_rows,
                                                                           rows_per_pass):
    ids = random_ids(model, 9, 5)
    run = model.run(ids, record=["k", "v"])
    kv = effects.keys_and_values(run)
    token = int(run.last_logits.argmax())
    monkeypatch.setattr(effects, "PASS_ROWS", pass_rows)  # 0: a pass per start; 1000: one pass
    monkeypatch.setattr(effects, "ROWS_PER_PASS", rows_per_pass)
    members = [7, 0, 3, 8, 3, 5]  # unsorted, one repeated: the answer keeps the asked order
    reused = effects.member_log_probs(model, ids, token, members, kv)
    for b, j in enumerate(members):
        alone = effects.log_probs(model.run(ids, record="none", silence_members=[j]).last_logits)[token]
        assert float(reused[b]) == pytest.approx(float(alone), abs=1e-5), j


def test_reused_rows_follow_the_heads_a_member_is_silenced_in(model):
    ids = random_ids(model, 8, 6)
    kv = effects.keys_and_values(model.run(ids, record=["k", "v"]))
    heads = [(1, 0), (0, 3)]
    assert torch.allclose(model.silenced_logits(ids, [4, 6], heads=heads, kv=kv),
                          model.silenced_logits(ids, [4, 6], heads=heads), atol=1e-5)


def test_keys_and_values_come_only_from_a_clean_run_that_kept_them(model):
    ids = random_ids(model, 6, 7)
    assert effects.keys_and_values(model.run(ids, record=["k"])) is None  # no v
    assert effects.keys_and_values(model.run(ids, record=["k", "v"], silence_members=[2])) is None
    kv = effects.keys_and_values(model.run(ids, record=["k", "v"]))
    with pytest.raises(ValueError, match="every layer"):
        model.silenced_logits(ids, [3], kv={0: kv[0]})
    with pytest.raises(ValueError, match="for these 5 members"):  # another text's
        model.silenced_logits(ids[:5], [3], kv=kv)


def _compositions(n):
    """Every split of 0..n-1 into consecutive groups."""
    if n == 0:
        yield []
        return
    for first in range(1, n + 1):
        for rest in _compositions(n - first):
            yield [range(0, first)] + [range(g.start + first, g.stop + first) for g in rest]


@given(st.lists(st.integers(0, 30), min_size=1, max_size=7), st.integers(0, 40), st.integers(1, 120),
       st.booleans())
def test_passes_are_the_cheapest_split_within_the_row_bound(starts, pass_rows, rows_per_pass, packable):
    starts, T = sorted(starts), 31
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(effects, "ROWS_PER_PASS", rows_per_pass)
        groups = effects.passes(starts, T, pass_rows=pass_rows, packable=packable)

        def cost(g, packed):
            return effects.pass_cost(starts[g.start:g.stop], T, packed, pass_rows)

        def cheapest(g):  # None: no way to run this group in one pass
            costs = [c for c in (cost(g, False), cost(g, True) if packable and len(g) > 1 else None) if c is not None]
            return min(costs, default=None)

        best = min(sum(cheapest(g) for g in c) for c in _compositions(len(starts))
                   if all(cheapest(g) is not None for g in c))
        chosen = [cost(g, packed) for g, packed in groups]
    assert [i for g, _ in groups for i in g] == list(range(len(starts)))  # every copy once, in order
    assert all(c is not None for c in chosen)  # within the bounds
    assert all(not packed or (packable and len(g) > 1) for g, packed in groups)
    assert sum(chosen) == pytest.approx(best)
    if packable:  # packed rows are each copy's own: never more than side by side
        assert sum(len(g) for g, packed in groups if packed) <= len(starts)


def test_pass_costs_count_the_rows_each_layout_computes():
    # side by side, both copies compute rows 2..9; packed, one computes 2..9 and the other 7..9
    assert effects.pass_cost([2, 7], 10, packed=False, pass_rows=0) == 16 + 16 * 10 / effects.KEYS_PER_ROW
    assert effects.pass_cost([2, 7], 10, packed=True, pass_rows=0) == 11 + 11 * (7 + 11) / effects.KEYS_PER_ROW
    assert effects.pass_cost([0, 0], 10, packed=False, pass_rows=5) == 20 + 200 / effects.KEYS_PER_ROW + 5
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(effects, "ROWS_PER_PASS", 15)
        assert effects.pass_cost([2, 7], 10, packed=False) is None  # 16 rows: too many
        assert effects.pass_cost([2, 7], 10, packed=True) is not None  # 11 rows
        assert effects.pass_cost([2], 100, packed=False) is not None  # one copy always runs


@pytest.mark.parametrize("heads", [None, [(1, 0), (0, 3)]])
def test_packed_copies_equal_copies_side_by_side(model, heads):
    ids = random_ids(model, 9, 11)
    kv = effects.keys_and_values(model.run(ids, record=["k", "v"]))
    members = [5, 0, 8, 3, 3]  # unsorted, one repeated, the first and the last member among them
    packed = model.silenced_logits(ids, members, heads=heads, kv=kv, packed=True)
    assert packed.shape == (5, model.config.vocab_size)
    assert torch.allclose(packed, model.silenced_logits(ids, members, heads=heads, kv=kv), atol=1e-5)
    assert torch.allclose(packed, model.silenced_logits(ids, members, heads=heads), atol=1e-5)
    with pytest.raises(ValueError, match="give kv"):
        model.silenced_logits(ids, members, packed=True)


def test_a_pass_predicts_from_any_rows_it_is_asked(model):
    from studygroup.model.interventions import PassPlan

    ids = random_ids(model, 8, 12)
    every = model.run(ids, record="none", logits="all").logits  # (T, vocab)
    asked = torch.tensor([1, 4, 7])
    logits, _ = model.forward(torch.tensor(ids), PassPlan(asked=asked))  # the last layer asks three questions
    assert logits.shape == (1, 3, model.config.vocab_size)
    assert torch.allclose(logits[0], every[asked], atol=1e-4)


def test_a_longer_text_says_what_it_will_need_and_shows_its_progress(model, monkeypatch, capsys):
    import io

    from studygroup.progress import Progress

    ids = random_ids(model, 12, 8)
    short = study.explain(model, ids, measure_heads=3, measure_members=5)
    assert capsys.readouterr().err == ""  # short texts: nothing on stderr
    monkeypatch.setattr(study, "ANNOUNCE_PAST_T", 8)  # past it: the announcement and the bars
    bars = []

    def shown(*args, **kwargs):  # every bar drawn into a buffer, as on a terminal
        bar = Progress(*args, **{**kwargs, "stream": io.StringIO(), "force": kwargs.get("show", True)})
        bars.append(bar)
        return bar

    monkeypatch.setattr(study, "Progress", shown)
    e = study.explain(model, ids, measure_heads=3, measure_members=5)
    err = capsys.readouterr().err
    assert re.match(r"explaining 12 members: about \d+\.\d GiB and [\d.]+ (s|min) \(a pass for the heads' sinks, "
                    r"a pass with a gradient, every head and member silenced at the last position only \(one row each\), then 3 "
                    r"heads and 5 members silenced exactly", err), err
    assert [b.label for b in bars] == ["finding every head's attention sinks, layer by layer",
                                       "a pass with a gradient, forward then backward",
                                       "silencing every head at the last position, layer by layer",
                                       "silencing 3 heads, layer by layer",
                                       "silencing members in the most decisive heads only, layer by layer",
                                       "silencing each of the 12 members for the last question",
                                       "silencing 5 members, layer by layer"]
    assert all(b.enabled and b.done == b.total > 0 for b in bars)  # every bar reaches its end
    study.explain(model, ids)  # the default: the heads' count is known only for the first batch
    err = capsys.readouterr().err
    assert re.match(r"explaining 12 members: about \d+\.\d GiB and [\d.]+ (s|min) with the first 8 heads, [\d.]+ (s|min) more "
                    r"for each further 16 \(a pass "
                    r"for the heads' sinks, a pass with a gradient, every head and member silenced at the last position only "
                    r"\(one row each\), then heads silenced exactly in candidate order until 16 "
                    r"in a row are small", err), err
    assert bars[1].total == 2 * model.config.n_layers  # the backward pass advances it too
    for a, b in zip(short.members, e.members):  # the same effects, whatever was recorded
        assert (a.effect is None) == (b.effect is None)
        assert a.effect is None or a.effect == pytest.approx(b.effect, abs=1e-5)
    assert [(h.layer, h.head) for h in short.heads] == [(h.layer, h.head) for h in e.heads]
    from studygroup import progress

    monkeypatch.setattr(progress, "_shown", False)  # as `studygroup serve` sets it: its console is a log
    bars.clear()
    study.explain(model, ids, measure_heads=3, measure_members=5)
    assert capsys.readouterr().err == "" and bars and not any(b.enabled for b in bars)


def test_a_member_no_head_hears_has_no_effect(model):
    ids = random_ids(model, 6, 4)
    clean = model.run(ids, record="none").last_logits
    # silenced in no head at all, nothing can change
    assert torch.allclose(model.silenced_logits(ids, [2, 5], heads=[]), clean.expand(2, -1), atol=1e-5)
    # a one-member group: silenced, the only member still hears itself (the mask rule), so nothing changes
    e = study.explain(model, ids[:1])
    assert e.members[0].effect == pytest.approx(0.0, abs=1e-6)


def test_when_no_head_writes_anything_no_member_or_head_matters(tiny_model):
    mute = studygroup.load(tiny_model.path)
    for l in range(mute.config.n_layers):
        mute.w[f"layers.{l}.W_O"] = torch.zeros_like(mute.w[f"layers.{l}.W_O"])
    e = study.explain(mute, TEXT_B)
    # nothing but float32 rounding (the silenced copies are multiplied in other batch shapes than
    # the clean pass, whose last layer asks one question): |effect| ~1e-6 at most
    assert all(m.effect == pytest.approx(0.0, abs=1e-5) for m in e.members)
    assert all(h.silence_effect == pytest.approx(0.0, abs=1e-5) for h in e.heads)
    assert all(abs(x) < 1e-6 for row in e.contributions for x in row)


def test_explain_members_match_one_at_a_time_runs(model, analysis):
    e = analysis.explanation
    lp = effects.log_probs(model.run(TEXT_B, record="none").last_logits)[e.predicted.id]
    for m in e.members[::3]:
        alone = effects.log_probs(model.run(TEXT_B, record="none", silence_members=[m.index]).last_logits)
        assert m.effect == pytest.approx(float(alone[e.predicted.id] - lp), abs=1e-4)
    ranked = sorted((m for m in e.members if m.rank), key=lambda m: m.rank)
    assert [abs(m.effect) for m in ranked] == sorted((abs(m.effect) for m in ranked), reverse=True)


# ---- head effects -----------------------------------------------------------------------------
def test_head_silence_effects_match_one_at_a_time_runs(model, analysis):
    e = analysis.explanation
    c = model.config
    assert e.heads_silenced.startswith(f"all {c.n_layers * c.n_heads}") and len(e.heads) == c.n_layers * c.n_heads
    assert e.heads_measured == c.n_layers * c.n_heads
    lp = effects.log_probs(model.run(TEXT_B, record="none").last_logits)[e.predicted.id]
    for h in e.heads:
        alone = effects.log_probs(model.run(TEXT_B, record="none", silence_heads=[(h.layer, h.head)]).last_logits)
        assert h.silence_effect == pytest.approx(float(alone[e.predicted.id] - lp), abs=1e-4)
        assert h.prob_silenced == pytest.approx(math.exp(float(alone[e.predicted.id])), abs=1e-5)
    assert [abs(h.silence_effect) for h in e.heads] == sorted((abs(h.silence_effect) for h in e.heads), reverse=True)


def test_long_texts_record_the_last_row_and_still_explain(tmp_path):
    long_model = studygroup.load(write_tiny_gguf(tmp_path / "long.gguf", context=128, seed=3).path)
    ids = random_ids(long_model, 80, 8)
    a = study.analyse(long_model, ids, measure_heads=3, measure_members=5)
    e = a.explanation
    assert a.run["layers.0.weights"].shape[-2] == 1  # the last question only
    assert abs(e.logit_parts.total - e.logit_parts.logit) < 1e-4 * max(1.0, abs(e.logit_parts.logit))
    assert sum(m.effect is not None for m in e.members) == 5 and e.members_silenced.startswith("top 5 of 80")
    lp = effects.log_probs(long_model.run(ids, record="none").last_logits)[e.predicted.id]
    h = e.heads[0]
    alone = effects.log_probs(long_model.run(ids, record="none", silence_heads=[(h.layer, h.head)]).last_logits)
    assert h.silence_effect == pytest.approx(float(alone[e.predicted.id] - lp), abs=1e-4)
    assert len(h.listened) == study.LISTEN_TOP


def test_fewer_heads_silenced_says_so(model):
    e = study.explain(model, TEXT_B, measure_heads=3)
    every = [h for h in e.heads if h.silence_effect is not None]
    assert len(every) == 3 and e.heads[:3] == every and e.heads_silenced.startswith("3 of 8 heads measured exactly")
    assert "all 8 silenced at the last position only" in e.heads_silenced and e.heads_measured == 3
    assert len(e.heads) == 8 and all(h.silence_effect_last_position is not None for h in e.heads)
    assert e.estimate_missed_by == max(abs(h.silence_estimate - h.silence_effect) for h in every)
    last = {(h.layer, h.head): abs(h.silence_effect_last_position) for h in e.heads}
    assert max(last, key=last.get) in {(h.layer, h.head) for h in every}  # the first candidate: the top at the last position


def test_first_order_estimate_is_the_gradient_of_the_gate(model):
    ids = random_ids(model, 8, 5)
    run, estimate = effects.gradient_run(model, ids, Record(steps=()))
    token, (l, h), eps = int(run.last_logits.argmax()), (1, 2), 1e-2

    def log_p(g: float) -> float:
        gates = torch.ones(1, model.config.n_heads)
        gates[0, h] = g
        logits, _ = model.forward(torch.tensor(ids), PassPlan(gates={l: gates}))
        return float(effects.log_probs(logits[0, -1])[token])

    slope = (log_p(1 + eps) - log_p(1 - eps)) / (2 * eps)
    assert float(estimate[l, h]) == pytest.approx(-slope, rel=0.05, abs=1e-4)
    assert torch.allclose(run.last_logits, model.run(ids, record="none").last_logits, atol=1e-5)


def test_candidates_alternate_between_the_two_rankings():
    direct = torch.tensor([[5.0, 4.0, 0.0], [0.0, 0.0, 0.0]])
    estimate = torch.tensor([[0.0, 0.0, 0.0], [0.0, -3.0, 2.0]])
    assert study.candidates(direct, estimate, 3) == [(0, 0), (1, 1), (0, 1)]
    assert len(study.candidates(direct, estimate, 6)) == 6


# ---- inputs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_empty_and_whitespace_text_are_refused(model, text):
    for call in (lambda: study.explain(model, text), lambda: study_compare.compare(model, "the", text),
                 lambda: study_head.head_view(model, text, 0, 0)):
        with pytest.raises(InputError):
            call()


def test_bad_arguments_are_refused(model):
    with pytest.raises(InputError, match="context"):
        study.explain(model, "the tin " * 40)
    with pytest.raises(InputError, match="layer 2 does not exist"):
        study_head.head_view(model, TEXT_A, 2, 0)
    with pytest.raises(InputError, match="head 4 does not exist"):
        study_head.head_view(model, TEXT_A, 0, 4)
    with pytest.raises(NotationError, match="unknown notation"):
        study_head.head_view(model, TEXT_A, 0, 0, notation="rows")
    with pytest.raises(InputError, match="top"):
        study.explain(model, TEXT_A, top=0)
    with pytest.raises(InputError, match="measure_heads"):
        study.explain(model, TEXT_A, measure_heads=-1)


# ---- head view --------------------------------------------------------------------------------
def transpose(grid):
    return [list(col) for col in zip(*grid)]


def test_column_notation_is_the_paper_notation_transposed(model):
    paper = study_head.head_view(model, TEXT_B, 1, 3, "paper")
    cols = study_head.head_view(model, TEXT_B, 1, 3, "columns")
    assert cols.check.agree and paper.check.agree
    for name in ("weights", "output", "q", "k", "v", "q_pre_rope", "k_pre_rope", "mask"):
        assert torch.allclose(torch.tensor(transpose(getattr(cols, name)), dtype=torch.float64),
                              torch.tensor(getattr(paper, name), dtype=torch.float64), atol=1e-6), name
    assert transpose(cols.scores) == [[None if x is None else pytest.approx(x, abs=1e-6) for x in row]
                                      for row in paper.scores]
    T = len(paper.tokens)
    assert all(sum(row) == pytest.approx(1.0, abs=1e-5) for row in paper.weights)
    assert all(sum(col) == pytest.approx(1.0, abs=1e-5) for col in transpose(cols.weights))
    assert all(paper.scores[i][j] is None for i in range(T) for j in range(i + 1, T))  # the future is masked


def test_head_view_matches_the_run(model):
    v = study_head.head_view(model, TEXT_A, 0, 1)
    h = model.run(TEXT_A, record="all").head(0, 1)
    assert torch.allclose(torch.tensor(v.weights), h.weights, atol=1e-6)
    assert v.kv_head == 0 and v.shares_keys_with == [0, 1]
    assert v.members[-1].question.norm == pytest.approx(float(h.q[-1].norm()), rel=1e-6)
    assert v.members[-1].listens_most_to == int(h.weights[-1].argmax())


# ---- compare ----------------------------------------------------------------------------------
def test_compare_shift_and_heads(model, comparison):
    c = comparison
    assert c.longer == "b" and c.word_id == c.b.predicted.id
    lp_a = effects.log_probs(model.run(TEXT_A, record="none").last_logits)
    lp_b = effects.log_probs(model.run(TEXT_B, record="none").last_logits)
    for s in c.shift:
        assert s.prob_a == pytest.approx(math.exp(float(lp_a[s.id])), rel=1e-4, abs=1e-7)
        assert s.prob_b == pytest.approx(math.exp(float(lp_b[s.id])), rel=1e-4, abs=1e-7)
        assert s.change == pytest.approx(s.prob_b - s.prob_a)
    assert {w.id for w in c.a.top} | {w.id for w in c.b.top} == {s.id for s in c.shift}
    change = sum(h.change for h in c.heads)  # the 10 largest of 8 heads: all of them
    assert change == pytest.approx(c.logit.heads, abs=1e-4)
    assert c.logit.logit_b - c.logit.logit_a == pytest.approx(c.logit.embed + c.logit.heads + c.logit.mlps, abs=1e-3)
    # the gap to the rival: the other top word whose probability changed most
    rival = max((s for s in c.shift if s.id != c.word_id), key=lambda s: abs(s.change))
    assert (c.rival, c.rival_id) == (rival.token, rival.id)
    g = c.gap
    assert g.logit_a == pytest.approx(float(model.run(TEXT_A).last_logits[[c.word_id, rival.id]] @ torch.tensor([1.0, -1.0])), abs=1e-3)
    assert g.logit_b - g.logit_a == pytest.approx(g.embed + g.heads + g.mlps, abs=1e-3)
    assert sum(h.change for h in c.heads_by_gap) == pytest.approx(g.heads, abs=1e-4)


def test_compare_silences_the_prefix(model, comparison):
    p = comparison.prefix
    assert p is not None and p.longer == "b" and p.text == "an ear then "
    assert [comparison.b.tokens[j] for j in p.members] == p.tokens and p.members == list(range(len(p.members)))
    assert p.text.startswith(model.tokenizer.decode(comparison.b.token_ids[: len(p.members)]))
    silenced = model.run(TEXT_B, record="none", silence_members=p.members)
    assert p.prob_word == pytest.approx(float(torch.softmax(silenced.last_logits.double(), -1)[comparison.word_id]))
    assert p.toward_shorter == (p.distance_silenced < p.distance_before)


def test_prefix_members_are_the_tokens_wholly_inside_the_prefix(model):
    ids = model.ids("an ear then")
    tokens = [model.tokenizer.token_bytes(i) for i in ids]
    n = len(b"an ear ")
    members = study_compare.prefix_members(model, ids, n)
    assert sum(len(tokens[j]) for j in members) <= n
    assert len(members) == len(ids) or sum(len(t) for t in tokens[: len(members) + 1]) > n


def test_texts_that_do_not_end_with_each_other_have_no_prefix(model):
    c = study_compare.compare(model, "the tin", "an ear", measure_heads=2)
    assert c.prefix is None and all(s.prob_prefix_silenced is None for s in c.shift)


# ---- model view -------------------------------------------------------------------------------
def test_model_view_has_every_head_full_maps_for_short_texts(model, analysis):
    run = model.run(TEXT_B)
    v = model_view(run, analysis.explanation)
    c = model.config
    assert v.rows == "all" and len(v.heads) == c.n_layers and all(len(r) == c.n_heads for r in v.heads)
    assert torch.allclose(torch.tensor(v.heads[1][2].weights), run["layers.1.weights"][2], atol=1e-6)
    assert [g.heads for g in v.kv_groups] == [[0, 1], [2, 3]]
    ranks = {(e.layer, e.head): r + 1 for r, e in enumerate(analysis.explanation.heads)}
    assert all(hm.rank == ranks[(hm.layer, hm.head)] for row in v.heads for hm in row)
    plain = model_view(model.run(TEXT_B, record="none"))  # recomputes what it needs
    assert sorted(hm.rank for row in plain.heads for hm in row if hm.rank) == list(range(1, 9))


def test_model_view_keeps_the_last_row_for_long_texts(tmp_path):
    long_model = studygroup.load(write_tiny_gguf(tmp_path / "long.gguf", context=128).path)
    ids = random_ids(long_model, 80, 6)
    v = model_view(long_model.run(ids))
    assert v.rows == "last" and len(v.heads[0][0].weights) == 1 and len(v.heads[0][0].weights[0]) == 80
    assert sum(v.heads[1][3].weights[0]) == pytest.approx(1.0, abs=1e-5)


# ---- story ------------------------------------------------------------------------------------
def test_story_uses_the_real_names_and_numbers(analysis, comparison):
    e = analysis.explanation
    text = " ".join(e.story)
    assert f"“{e.predicted.token}” ({render_text.percent(e.predicted.prob)})" in text
    top = e.heads[0]
    assert f"head {top.head} of layer {top.layer}" in text and f"{top.silence_effect:+.3f}" in text
    assert f"{e.logit_gap.logit:+.2f}" in text
    assert any(f"“{c.b.predicted.token}”" in s for s in comparison.story for c in [comparison])


TWO_SENTENCES = "an ear? then the tin"


def resolve(data, path: str):
    """The value at a story field path such as `heads[0].listened[1].weight` in explain's JSON."""
    for name, index in re.findall(r"(\w+)(?:\[(\d+)\])?", path):
        data = data[name] if index == "" else data[name][int(index)]
    return data


def test_the_conclusion_without_earlier_sentences_is_a_run_on_the_last_sentence(model):
    e = study.explain(model, TWO_SENTENCES, measure_heads=2, measure_members=2)
    s = e.last_sentence
    assert e.tokens[s.start - 1].endswith("?") and s.text == "then the tin"
    # the last sentence read as a text of its own: not the full text's ids from it on, whose first word has a leading space
    assert s.token_ids == model.ids(s.text) != e.token_ids[s.start:] == model.ids(" " + s.text)
    lp = torch.log_softmax(model.run(s.token_ids, record="none").last_logits.double(), -1)  # (vocab,)
    assert s.predicted.id == int(lp.argmax()) and s.predicted.prob == pytest.approx(float(lp.max().exp()), rel=1e-6)
    alone = study.explain(model, s.text, measure_heads=1, measure_members=1)  # what explain says of that sentence
    assert (alone.predicted.id, alone.predicted.prob) == (s.predicted.id, pytest.approx(s.predicted.prob, rel=1e-6))
    assert s.prob_of_predicted == pytest.approx(float(lp[e.predicted.id].exp()), rel=1e-6)
    data = json.loads(e.to_json())
    said = [p for line in e.story_parts for p in line if "last_sentence" in p.get("field", "")]
    assert said and all(resolve(data, p["field"]) == p["value"] for p in said)
    assert any("Without its earlier sentences" in line and f"“{s.predicted.token}”" in line for line in e.story)


REPEATED = "the tin the tin an ear the tin"


def test_story_parts_resolve_every_value_and_name_the_right_member_of_a_repeated_word(model):
    """Every {value, field} equals the JSON at its field; every {member: i} chip is member i, and where
    a sentence gives a member's number, the chip just before it is that very member (not an earlier
    copy of the same word)."""
    e = study.explain(model, REPEATED)
    d = json.loads(e.to_json())
    tokens = d["tokens"]
    assert len(set(tokens)) < len(tokens)  # a word comes more than once
    assert ["".join(p["text"] for p in s) for s in d["story_parts"]] == d["story"]
    owned = 0
    for sentence in d["story_parts"]:
        last_member = None
        for p in sentence:
            if "member" in p:
                assert p["text"] == "“" + tokens[p["member"]] + "”"
                last_member = p["member"]
            if "field" not in p:
                continue
            assert resolve(d, p["field"]) == p["value"], p
            m = re.match(r"(members\[\d+\]|heads\[\d+\]\.listened\[\d+\])\.", p["field"])
            if m:  # a member's own number: the chip before it names that member
                assert last_member == resolve(d, m.group(1))["index"], (sentence, p)
                owned += 1
    named = {p["member"] for s in d["story_parts"] for p in s if "member" in p}
    assert named == set(range(len(tokens)))  # every member named, each copy of a word by its own index
    about = [s for s in d["story_parts"] if s[0].get("about") == "conclusion"]  # the sentence the page retells when silenced
    assert len(about) == 1 and "".join(p["text"] for p in about[0]).startswith("The group concludes that the next word is")
    assert owned >= 3


def test_a_member_whose_token_occurs_more_than_once_is_named_with_its_position(model, capsys):
    """Wherever a sentence names a member whose token occurs more than once, its position follows
    (“␣tin” (member 3)): in the pieces, the JSON's sentences and the CLI's story."""
    e = study.explain(model, REPEATED)
    d = json.loads(e.to_json())
    repeated = {i for i, t in enumerate(e.tokens) if e.tokens.count(t) > 1}
    said = []
    for sentence, line in zip(d["story_parts"], d["story"]):
        for n, p in enumerate(sentence):
            if p.get("member") in repeated:
                assert sentence[n + 1]["text"] == f" (member {p['member']})", sentence
                said.append(f"“{e.tokens[p['member']]}” (member {p['member']})")
                assert said[-1] in line
            elif "member" in p:  # a token the text holds once: its name alone
                assert not sentence[n + 1]["text"].startswith(" (member"), sentence
    assert len(said) >= 3 and any(s in " ".join(e.story) for s in said)
    text = " ".join(render_text.explanation(e).split())  # the terminal wraps its lines
    assert all(s in text for s in said)


def test_the_last_sentence_alone_keeps_the_bos_the_model_adds(tiny_gemma3):
    gemma = studygroup.load(tiny_gemma3.path, cache=False)
    e = study.explain(gemma, "an ear! then the tin", measure_heads=1, measure_members=1)
    s = e.last_sentence
    bos = gemma.tokenizer.bos_id
    assert e.token_ids[0] == bos and s.token_ids == gemma.ids(s.text) and s.token_ids[0] == bos and s.start > 1
    lp = torch.log_softmax(gemma.run(s.token_ids, record="none").last_logits.double(), -1)  # (vocab,)
    assert s.prob_of_predicted == pytest.approx(float(lp[e.predicted.id].exp()), rel=1e-6)


def test_one_sentence_has_no_last_sentence(analysis, model):
    assert analysis.explanation.last_sentence is None  # TEXT_B: one sentence
    assert study.explain(model, "an ear.", measure_heads=1, measure_members=1).last_sentence is None  # ends the text
    assert not any("earlier sentences" in line for line in analysis.explanation.story)


def test_spaces_after_the_last_sentence_are_no_sentence_of_their_own(model):
    """A text ending with '. ' has its last sentence before the spaces (the spaces alone, run as a
    text, would be empty)."""
    text = "an ear. A cat sat. "
    assert model.tokenizer.readable(model.ids(text)[-1]).strip("␣ ") == ""  # the trailing space is a member of its own
    s = study.explain(model, text, measure_heads=1, measure_members=1).last_sentence
    assert s.text == "A cat sat." and s.token_ids == model.ids("A cat sat.")


# ---- JSON -------------------------------------------------------------------------------------
def documented_keys() -> dict[str, list[str]]:
    """{class name: [keys]} from the tables of docs/json.md."""
    out, name = {}, None
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            name = line.split()[1]
            out[name] = []
        elif name and (m := re.match(r"\| `(\w+)` \|", line)):
            out[name].append(m.group(1))
    return out


def check_documented(obj, docs, seen):
    if is_dataclass(obj):
        name = type(obj).__name__
        assert name in docs, f"{name} is not documented in docs/json.md"
        assert [f.name for f in fields(obj)] == docs[name], name
        seen.add(name)
        for f in fields(obj):
            check_documented(getattr(obj, f.name), docs, seen)
    elif isinstance(obj, (list, tuple, dict)):
        for x in obj.values() if isinstance(obj, dict) else obj:
            check_documented(x, docs, seen)


def round_trip(result) -> dict:
    text = result.to_json()
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert json.dumps(data, ensure_ascii=False) == text and data == result.to_dict()
    return data


def test_json_round_trips_with_exactly_the_documented_keys(model, analysis, comparison):
    from studygroup.study.sink_write import sink_write

    docs, seen = documented_keys(), set()
    results = [analysis.explanation, comparison, study_head.head_view(model, TEXT_B, 0, 1, "columns"),
               model_view(model.run(TEXT_B), analysis.explanation), lesson_sections(model, TEXT_B, 1, 2),
               studygroup.why(model, TEXT_B, 1, 2, 4, 1), studygroup.roles(model, TEXT_B),
               study.explain(model, TWO_SENTENCES, measure_heads=2, measure_members=2), lens(model, TEXT_B),
               patch(model, TEXT_B, TEXT_B), head_effects(model, TEXT_B, [(0, 1)], resample_from=TEXT_B),
               sink_write(model, model.before_pass(TEXT_B), 0, 1)]  # a sink head's (none here)
    for result in results:
        round_trip(result)
        check_documented(result, docs, seen)
    assert seen == set(docs), f"documented but never produced: {set(docs) - seen}"


def test_json_has_the_keys_outside_checks_rely_on(model, analysis, comparison):
    e = json.loads(analysis.explanation.to_json())
    assert {"tokens", "token_ids", "top", "heads", "members", "story"} <= set(e)
    assert set(e["top"][0]) >= {"token", "id", "prob"} and len(e["top"]) == 5
    assert [w["prob"] for w in e["top"]] == sorted((w["prob"] for w in e["top"]), reverse=True)
    assert set(e["heads"][0]) >= {"layer", "head", "logit_contribution", "silence_effect"}
    assert set(e["members"][0]) >= {"index", "token", "effect"}
    h = json.loads(study_head.head_view(model, TEXT_A, 0, 0, "paper").to_json())
    assert {"tokens", "notation", "scores", "weights", "q", "k", "v", "output"} <= set(h)
    assert h["scores"][0][1] is None and h["weights"][0][1] == 0.0
    c = json.loads(comparison.to_json())
    assert set(c["a"]) == set(e) and set(c["shift"][0]) >= {"token", "id", "prob_a", "prob_b"}


def test_explain_works_inside_inference_mode(model, analysis):
    with torch.inference_mode():
        e = study.explain(model, TEXT_B, top=5)
    assert torch.allclose(torch.tensor(e.silence_estimates), torch.tensor(analysis.explanation.silence_estimates), atol=1e-5)


def test_compare_of_a_text_with_itself_says_nothing_moved(model):
    """The story never says a probability "lowers from 92% to 92%": the same text twice is one run,
    and nothing in it is told as a change (two texts whose probabilities print alike: _moves's doctest)."""
    c = studygroup.compare(model, TEXT_A, TEXT_A)
    said = " ".join(c.story)
    assert c.story[0].startswith(f"Text a and text b are the same {len(c.a.tokens)} tokens, so the two runs are one")
    assert all(s.change == 0 for s in c.shift)
    assert "lowers" not in said and "raises" not in said and "→" not in said


# ---- the five measures, each against a direct recomputation ------------------------------------
def test_member_silenced_in_one_head_equals_a_run_with_that_mask(model):
    ids = random_ids(model, 9, 11)
    token = int(model.run(ids, record="none").last_logits.argmax())
    silenced = [(1, 2, 0), (0, 3, 4), (1, 0, 8), (0, 0, 8), (1, 2, 5)]
    got = effects.member_in_head_log_probs(model, ids, token, silenced)
    for (l, h, j), lp in zip(silenced, got):
        alone = model.run(ids, record="none", silence_members=[j], member_heads={(l, h)}).last_logits
        assert float(lp) == pytest.approx(float(effects.log_probs(alone)[token]), abs=1e-5)


@pytest.mark.parametrize("tiny", ["tiny_model", "tiny_gemma3"])  # Gemma 3: local layers with a window of 4
def test_member_silenced_in_one_head_computes_only_the_rows_from_the_member_on(tiny, request, monkeypatch):
    from studygroup.model.model import Model

    model = studygroup.load(request.getfixturevalue(tiny).path)
    ids, c = random_ids(model, 12, 13), model.config
    run = model.run(ids, record=study.recording(len(ids)))
    token = int(run.last_logits.argmax())
    resid_pre = {l: run["resid_pre", l] for l in range(c.n_layers)}
    silenced = [(l % c.n_layers, h, j) for l, h, j in ((1, 2, 0), (0, 3, 4), (5, 0, 11), (3, 0, 11), (4, 2, 5), (0, 1, 7), (2, 1, 9))]
    rows, mlp = [0], Model._mlp
    monkeypatch.setattr(Model, "_mlp", lambda self, l, x, buffers: (rows.__setitem__(0, rows[0] + x.shape[0] * x.shape[1]),
                                                                    mlp(self, l, x, buffers))[1])
    got = effects.member_in_head_log_probs(model, ids, token, silenced, resid_pre, kv=effects.keys_and_values(run))
    last = c.n_layers - 1  # the last layer's MLP takes the last row alone
    assert rows[0] == sum((len(ids) - j) * (last - l) + 1 for l, _, j in silenced)
    for (l, h, j), lp in zip(silenced, got):
        alone = model.run(ids, record="none", silence_members=[j], member_heads={(l, h)}).last_logits
        assert float(lp) == pytest.approx(float(effects.log_probs(alone)[token]), abs=1e-5), (l, h, j)


def test_last_question_measures_equal_the_last_row_recomputed(model, analysis):
    e, run = analysis.explanation, analysis.run
    token = e.predicted.id
    lp = effects.log_probs(run.last_logits)[token]
    base = model.run(TEXT_B, record=last_question.base_record())
    members = effects.log_probs(last_question.silenced_members_logits(model, base, [[m.index] for m in e.members]))
    assert [m.effect_last_question for m in e.members] == pytest.approx((members[:, token] - lp).tolist(), abs=1e-5)
    heads = effects.log_probs(last_question.silenced_heads_logits(model, base, [(h.layer, h.head) for h in e.heads]))
    assert [h.silence_effect_last_position for h in e.heads] == pytest.approx((heads[:, token] - lp).tolist(), abs=1e-5)


def test_effect_in_head_equals_a_run_with_the_member_silenced_in_that_head(model, analysis):
    e = analysis.explanation
    lp = effects.log_probs(model.run(TEXT_B, record="none").last_logits)[e.predicted.id]
    measured = [(h, x) for h in e.heads for x in h.listened if x.effect_in_head is not None]
    for h in e.heads[:study.HEADS_WITH_MEMBERS]:  # the first five by contribution, and member 0 (the commonest sink)
        by_contribution = sorted(h.listened, key=lambda x: -x.contribution)[:study.LISTENED_MEASURED]
        expected = {x.index for x in by_contribution} | {0}
        assert {x.index for x in h.listened if x.effect_in_head is not None} == expected
    assert {(h.layer, h.head) for h, _ in measured} == {(h.layer, h.head) for h in e.heads[:study.HEADS_WITH_MEMBERS]}
    for h, x in measured:
        alone = model.run(TEXT_B, record="none", silence_members=[x.index], member_heads={(h.layer, h.head)})
        assert x.effect_in_head == pytest.approx(float(effects.log_probs(alone.last_logits)[e.predicted.id] - lp), abs=1e-5)


def test_the_default_is_complete_and_equals_measuring_everything(model):
    ids = model.ids(TEXT_B)[-study.HEADS_ALL_MAX_T:]  # as long as the default measures every head
    e, c = study.explain(model, ids, top=5), model.config
    assert e.heads_measured == c.n_layers * c.n_heads and e.heads_silenced.startswith("all 8")
    assert e.members_measured == len(ids) and any("All 8 heads were measured exactly" in s for s in e.story)
    full = study.explain(model, ids, top=5, measure_heads="all", measure_members="all")
    assert json.loads(full.to_json()) == json.loads(e.to_json())


def test_past_the_budget_heads_are_tested_until_sixteen_in_a_row_are_small(model, monkeypatch):
    monkeypatch.setattr(study, "HEADS_ALL_MAX_T", 4)
    monkeypatch.setattr(study, "STOP_AFTER", 2)  # the tiny model has 8 heads
    e = study.explain(model, TEXT_B, top=3)
    order = study.candidates(torch.tensor(e.contributions), torch.tensor(e.silence_estimates), 8)
    measured = {(h.layer, h.head): h.silence_effect for h in e.heads}
    assert e.heads_measured == len(measured) and list(measured) != [] and set(measured) == set(order[:len(measured)])
    tested = torch.tensor([measured[x] for x in order[:len(measured)]])
    assert len(measured) == 8 or study.quiet_run(tested) >= 2
    if len(measured) < 8:  # it stopped at the first batch that ended the quiet run
        assert study.quiet_run(tested[:-2]) < 2 and "until 2 in a row" in e.heads_silenced


def first_stop(effects_in_order, after: int) -> int:
    """The first n at which `after` of the first n effects in a row are small (the stopping rule)."""
    return next((n for n in range(1, len(effects_in_order) + 1)
                 if study.quiet_run(effects_in_order[:n]) >= after), len(effects_in_order))


def test_the_stopping_rule_stops_at_the_first_head_where_it_holds():
    lp_t = -1.0
    planted = torch.tensor([1.0] * 5 + [0.1] * 14 + [-1.0] + [0.1] * 60, dtype=torch.float64)  # a large one at 19
    rng = torch.Generator().manual_seed(5)
    drawn = [torch.randn(120, generator=rng, dtype=torch.float64) * torch.rand(120, generator=rng, dtype=torch.float64) ** 4
             for _ in range(40)]
    for effects_in_order in [planted, *drawn]:
        batches = []

        def measure(heads):
            batches.append(len(heads))
            return effects_in_order[heads] + lp_t  # log p(t) with each silenced
        order = list(range(len(effects_in_order)))
        chosen, lps = study.measured_heads(order, None, 99, lp_t, measure)
        assert len(chosen) == first_stop(effects_in_order, study.STOP_AFTER)  # never a head past it
        assert chosen == order[:len(chosen)] and torch.allclose(lps - lp_t, effects_in_order[:len(chosen)])
        assert sum(batches) == len(chosen) and all(b <= study.STOP_AFTER for b in batches)
    assert len(study.measured_heads(list(range(80)), None, 99, lp_t, lambda h: planted[h] + lp_t)[0]) == 36


def test_reuse_measures_only_the_heads_not_measured_before(model, monkeypatch):
    quick = study.explain(model, TEXT_B, top=3, measure_heads=3)
    before = {(h.layer, h.head): h.silence_effect for h in quick.heads if h.silence_effect is not None}
    assert 0 < len(before) < len(quick.heads)
    asked, measure = [], effects.head_log_probs
    def counting(model, ids, token, heads, *a, **k):  # at every position (the last position's copies are one row each)
        asked.extend(heads if len(ids) > 1 else [])
        return measure(model, ids, token, heads, *a, **k)
    monkeypatch.setattr(effects, "head_log_probs", counting)
    complete = study.explain(model, TEXT_B, top=3, measure_heads="all", reuse=quick)
    assert sorted(asked) == sorted(set((h.layer, h.head) for h in complete.heads) - set(before))  # each of the rest once
    monkeypatch.setattr(effects, "head_log_probs", measure)
    fresh = study.explain(model, TEXT_B, top=3, measure_heads="all")
    got = {(h.layer, h.head): h.silence_effect for h in complete.heads}
    assert all(got[p] == before[p] for p in before)
    # fresh measures them in other batches: float32's last bits differ, a few 1e-6 on a log p
    assert got == pytest.approx({(h.layer, h.head): h.silence_effect for h in fresh.heads}, abs=1e-5)
    with pytest.raises(ValueError, match="reuse"):
        study.explain(model, TEXT_A, top=3, measure_heads="all", reuse=quick)
    with pytest.raises(ValueError, match="reuse"):
        study.explain(model, TEXT_B, top=3, measure_heads="all", reuse=quick, interventions=Interventions(silenced_members=(1,)))


def test_quiet_run_counts_the_small_effects_at_the_end():
    assert study.quiet_run(torch.tensor([0.5, 0.4])) == 0  # fewer than five: no fifth-largest
    assert study.quiet_run(torch.tensor([1.0, -1.0, 1.0, 1.0, 1.0, 0.1, -0.1, 0.6])) == 0
    assert study.quiet_run(torch.tensor([1.0, -1.0, 1.0, 1.0, 1.0, 0.6, -0.1, 0.4])) == 2


# ---- every head and member at the last position, at every length --------------------------------
def zeroed_at_the_last_member(model, ids, layer, head):
    """log-probabilities with one head's output row zeroed at the last member alone (a Replacement)."""
    from studygroup.model.interventions import Replacement

    T = len(ids)
    zero = Replacement(f"layers.{layer}.output", torch.zeros(1, 1, model.config.d_head), members=(T - 1,), heads=(head,))
    return effects.log_probs(model.run(ids, record="none", replace=[zero]).last_logits)  # (vocab,)


def removed_from_the_last_row(model, ids, j):
    """log-probabilities with member j's key removed from the last member's questions in every head
    of every layer: a whole pass with that mask."""
    T = len(ids)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    mask[-1, j] = False
    plan = PassPlan(masks={l: mask[None, None] for l in range(model.config.n_layers)})
    return effects.log_probs(model.forward(torch.tensor(ids), plan)[0][0, -1])  # (vocab,)


def assert_every_last_position_effect(model, ids, e):
    """Every head's silence_effect_last_position and every member's effect_last_question, each
    against a run of its own."""
    c, t = model.config, e.predicted.id
    lp = float(effects.log_probs(model.run(ids, record="none").last_logits)[t])
    assert sorted((h.layer, h.head) for h in e.heads) == [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
    for h in e.heads:
        alone = float(zeroed_at_the_last_member(model, ids, h.layer, h.head)[t]) - lp
        assert h.silence_effect_last_position == pytest.approx(alone, abs=1e-4), (h.layer, h.head)
    for m in e.members:
        alone = float(removed_from_the_last_row(model, ids, m.index)[t]) - lp
        assert m.effect_last_question == pytest.approx(alone, abs=1e-4), m.index


def test_past_the_budget_every_head_and_member_is_measured_at_the_last_position_and_ranks_the_rest(model, monkeypatch):
    monkeypatch.setattr(study, "HEADS_ALL_MAX_T", 2)
    monkeypatch.setattr(study, "STOP_AFTER", 1)
    monkeypatch.setattr(study, "MEMBERS_ALL_MAX_T", 2)
    monkeypatch.setattr(study, "MEMBERS_TOP", 2)
    ids = model.ids(TEXT_B)
    e = study.explain(model, ids, top=3)
    assert_every_last_position_effect(model, ids, e)
    every = [h for h in e.heads if h.silence_effect is not None]
    assert e.heads[:len(every)] == every and e.heads_measured == len(every) < len(e.heads)
    last = torch.tensor([[next(h.silence_effect_last_position for h in e.heads if (h.layer, h.head) == (l, k))
                          for k in range(model.config.n_heads)] for l in range(model.config.n_layers)])
    order = study.candidates(last, torch.tensor(e.silence_estimates), len(e.heads))
    assert {(h.layer, h.head) for h in every} == set(order[:len(every)])  # candidates by the last-position effect
    by_last = sorted(e.members, key=lambda m: -abs(m.effect_last_question))
    assert {m.index for m in e.members if m.effect is not None} == {m.index for m in by_last[:2]}
    assert e.members_measured == 2 and "top 2 of" in e.members_silenced and "|effect_last_question|" in e.members_silenced


def test_past_long_t_every_head_and_member_is_measured_at_the_last_position(model, monkeypatch):
    monkeypatch.setattr(study, "LONG_T", 4)  # TEXT_B takes the last-question strategy
    for name, value in (("HEADS_ALL_MAX_T", 2), ("STOP_AFTER", 1), ("MEMBERS_ALL_MAX_T", 2), ("MEMBERS_TOP", 2)):
        monkeypatch.setattr(study, name, value)  # the budgets of the every-position measures: no bound here
    ids = model.ids(TEXT_B)
    e = study.explain(model, ids, top=3)
    assert e.scope == study.LAST_QUESTIONS and e.heads_measured == len(e.heads) and e.members_measured == len(ids)
    assert_every_last_position_effect(model, ids, e)
    sizes = [abs(h.silence_effect_last_position) for h in e.heads]
    assert sizes == sorted(sizes, reverse=True) and e.heads_silenced.startswith("all 8, each silenced at the last")


def test_the_story_tells_the_shares_of_the_gap_to_the_runner_up(model, analysis):
    """The last sentence splits the gap between the predicted word's logit and the runner-up's (what
    softmax sees), each share recomputed here from the recorded writes read along the two words'
    unembedding columns through the final norm's frozen scale."""
    e = analysis.explanation
    run = model.run(TEXT_B, record=["embed", "write", "mlp_out", "resid_final"], logits="last")
    lp = effects.log_probs(run.last_logits)
    rival = int(lp.topk(2).indices[1])
    assert e.runner_up.id == rival and e.runner_up.prob == pytest.approx(float(lp[rival].exp()), abs=1e-5)
    x = run["resid_final"][-1].double()  # (d_model,)
    read = model.w["final_norm"].double()[:, None] * model.w["unembed"][:, [e.predicted.id, rival]].double()  # (d_model, 2)
    along = (read[:, 0] - read[:, 1]) / torch.sqrt(x.pow(2).mean() + model.config.rms_eps)  # (d_model,)
    L = model.config.n_layers
    heads = sum(float((run["write", l][:, -1].double() @ along).sum()) for l in range(L))
    mlps = sum(float(run["mlp_out", l][-1].double() @ along) for l in range(L))
    g = e.logit_gap
    assert g.logit == pytest.approx(float(run.last_logits[e.predicted.id] - run.last_logits[rival]), abs=1e-4)
    assert (g.heads, g.mlps, g.embed) == pytest.approx((heads, mlps, float(run["embed"][-1].double() @ along)), abs=1e-4)
    line = e.story[-1]
    assert "minus that of" in line and f"{g.heads:+.2f}" in line and f"{g.mlps:+.2f}" in line
    assert "mostly through" not in " ".join(e.story)  # no conclusion the shares do not carry


def test_a_sink_the_head_needs_is_ranked_by_its_effect_and_not_called_a_sink(tmp_path):
    """Seed 2's most decisive head (0.0) puts 63% of the last question's weight on member 0; removing
    member 0 from that head alone moves log p by most of the head's own effect. Taken as that head's
    sink (as a head resting on member 0 would have it: the tiny model's other questions do not
    rest there, so the rule of `sinks.sinks` does not name it), the story ranks it first among the
    members the head heard and does not call it an attention sink; each number it states is a run
    with that member silenced in that head."""
    from studygroup.study.sinks import MEANING, QUIET_SHARE

    model = studygroup.load(write_tiny_gguf(tmp_path / "sink.gguf", seed=2).path)
    e = study.explain(model, TEXT_B)
    h = e.heads[0]
    assert h.listened[0].index == 0 and h.listened[0].weight > 0.6
    h.sinks, h.sink_weight = [0], 0.99  # a sink by the weights, the head resting on it
    e.story_parts = story_of.explain_parts(e, norm_after_attention=False)
    e.story = story_of.joined(e.story_parts)
    assert h.rests_on_sink
    lp = float(effects.log_probs(model.run(TEXT_B, record="none").last_logits)[e.predicted.id])
    alone = model.run(TEXT_B, record="none", silence_members=[0], member_heads={(h.layer, h.head)})
    effect = float(effects.log_probs(alone.last_logits)[e.predicted.id]) - lp
    assert abs(effect) >= QUIET_SHARE * abs(h.silence_effect)  # the head needs it
    assert h.listened[0].index == 0 and h.listened[0].effect_in_head == pytest.approx(effect, abs=1e-5)
    told = [s for s in e.story if "head 0 of layer 0" in s or "rests on" in s]
    assert told and not any("attention sink" in s or MEANING in s for s in told), told
    best = next(s for s in e.story if "the one that matters most is" in s)
    assert "its sinks included" in best and f"most is “{e.tokens[0]}”" in best and f"{effect:+.2g}" in best
    text = render_text.explanation(e)
    assert "an attention sink (weight the head does not need" not in text.split("which members decided it")[0]
