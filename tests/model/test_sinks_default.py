"""Attention sinks and the story on the real default model, on the article's sentence: the sinks
and their weights equal a plain recomputation from every kept map, the story names the sink
wherever it names a head that rests on one, every number in the story resolves to its JSON field,
and what a head listened to is ranked by effect_in_head; the conclusion on the last sentence alone
equals a run on its ids."""
import math
import re

import numpy as np
import pytest
import torch

from conftest import rope64
from studygroup.study.explain import explain
from studygroup.formats import quote
from studygroup.views import text as render_text

TEXT = "Cash or credit card? I have a lot"


@pytest.fixture(scope="module")
def explained(model):
    return explain(model, TEXT)


def numpy_sinks(W):
    """Sinks by the rule, from a (T, T) map: the members with >= 0.3 of >= 80 % of rows 1..T-1."""
    rows = W[1:]
    return sorted({j for j in range(W.shape[1]) if np.mean(rows[:, j] >= 0.3) >= 0.8})


def test_sinks_equal_a_recomputation_from_the_kept_maps(model, explained):
    run = model.run(explained.token_ids, record="all")
    assert len(explained.heads) == 270
    for h in explained.heads:
        W = run["weights", h.layer][h.head].double().numpy()  # (T, T)
        expected = numpy_sinks(W)
        assert h.sinks == expected
        assert h.sink_weight == pytest.approx(W[-1, expected].sum(), abs=1e-5)
        assert [x.is_sink for x in h.listened] == [x.index in expected for x in h.listened]
    h = next(h for h in explained.heads if (h.layer, h.head) == (24, 6))
    assert h.sinks == [0] and h.sink_weight > 0.95 and h.rests_on_sink


def resolve(data, field):
    """The value at a path such as heads[0].listened[2].effect_in_head."""
    for name, index in re.findall(r"(\w+)(?:\[(\d+)\])?", field):
        data = data[name]
        if index:
            data = data[int(index)]
    return data


def test_every_number_in_the_story_resolves_to_its_field(explained):
    d = explained.to_dict()
    assert ["".join(p["text"] for p in s) for s in d["story_parts"]] == d["story"]
    values = [p for s in d["story_parts"] for p in s if "field" in p]
    assert len(values) >= 10
    for p in values:
        assert resolve(d, p["field"]) == pytest.approx(p["value"], rel=1e-12), p
    members = [p for s in d["story_parts"] for p in s if "member" in p]
    assert {p["member"] for p in members} >= set(range(len(d["tokens"])))  # every member named, a chip each
    for p in members:
        assert p["text"] == quote(d["tokens"][p["member"]])


def test_the_story_names_the_sink_wherever_it_names_a_head_that_rests_on_one(explained):
    from studygroup.study.sinks import quiet_sinks

    story = explained.story
    named = 0
    for h in explained.heads:
        said = [i for i, s in enumerate(story) if f"head {h.head} of layer {h.layer}" in s]
        if not said or not h.rests_on_sink:
            continue
        named += 1
        near = " ".join(story[i] + " " + (story[i + 1] if i + 1 < len(story) else "") for i in said)
        quiet = set(h.sinks[:3]) <= set(quiet_sinks(h))  # removing them from the head matters little beside it
        assert ("attention sink" in near) == quiet and quote(explained.tokens[h.sinks[0]]) in near, h
        assert f"{100 * h.sink_weight:.0f}%" in near
    assert named >= 1  # head 24.6 rests on “C” and is named
    assert sum("a head puts attention it does not need" in s for s in story) == 1  # explained once


def test_what_a_head_listened_to_is_ranked_by_effect_in_head(explained):
    for h in explained.heads[:3]:
        measured = [x for x in h.listened if x.effect_in_head is not None]
        assert measured and h.listened[:len(measured)] == measured
        sizes = [abs(x.effect_in_head) for x in measured]
        assert sizes == sorted(sizes, reverse=True)


def test_the_story_gives_the_conclusion_without_the_first_sentence(model, explained):
    s = explained.last_sentence
    assert s.text == "I have a lot" and "".join(explained.tokens[s.start:]) == "␣I␣have␣a␣lot"
    assert s.token_ids == model.ids("I have a lot")  # the sentence as a learner would type it, not "␣I" on
    lp = torch.log_softmax(model.run(s.token_ids, record="none").last_logits.double(), -1).numpy()  # (vocab,)
    assert s.predicted.token == "␣of" and s.predicted.prob == pytest.approx(float(np.exp(lp.max())), rel=1e-6)
    assert s.prob_of_predicted == pytest.approx(float(np.exp(lp[explained.predicted.id])), rel=1e-6)
    said = [line for line in explained.story if "Without its earlier sentences" in line]
    assert len(said) == 1 and "“I have a lot”" in said[0] and f"{100 * s.predicted.prob:.0f}%" in said[0]


def test_why_adds_up_for_the_decisive_heads_largest_weight_off_the_sink(model, explained):
    """The most decisive head's last question: the member it weighs most apart from its sinks; why's
    pairs add up to head's score for that pair, which equals q·k/√d_k from the recorded vectors."""
    from studygroup.study.why import why

    h = explained.heads[0]
    run = model.run(explained.token_ids, record="all")
    W = run["weights", h.layer][h.head].double().numpy()  # (T, T)
    i = W.shape[0] - 1
    j = max((j for j in range(i + 1) if j not in numpy_sinks(W)), key=lambda j: W[i, j])
    w = why(model, TEXT, h.layer, h.head, i, j)
    head = run.head(h.layer, h.head)
    q, k = head.q[i].double(), head.k[j].double()  # (d_head,)
    assert w.score == pytest.approx(float(q @ k) / q.numel() ** 0.5, abs=1e-4)
    assert abs(sum(p.value for p in w.pairs) - w.score) <= 1e-5 * max(1.0, abs(w.score))
    assert w.content + w.position == pytest.approx(w.score, abs=1e-9)


def float64_log_p_from(model, resid, start, token, silenced=None):
    """log p(token) at the last member from a plain float64 Llama pass over layers start … end,
    written from the paper, from `resid` (T, d_model), the stream entering layer `start`;
    silenced: (layer, head, member), a key that one head's questions do not hear (the member's own
    question, left with no key, hears itself, as studygroup's mask does)."""
    c, w = model.config, {k: v.double() for k, v in model.w.items() if not k.startswith("layers.")}
    H, H_kv, d, eps, T = c.n_heads, c.n_kv_heads, c.d_head, c.rms_eps, resid.shape[0]
    x = resid.double()  # (T, d_model)
    norm = lambda x, g: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g.double()  # noqa: E731
    for l in range(start, c.n_layers):
        p = f"layers.{l}."
        E = norm(x, model.w[p + "attn_norm"])
        q = rope64((E @ model.w[p + "W_Q"].double()).view(T, H, d).transpose(0, 1), c.rope_base)  # (H, T, d)
        k = rope64((E @ model.w[p + "W_K"].double()).view(T, H_kv, d).transpose(0, 1), c.rope_base)  # (H_kv, T, d)
        v = (E @ model.w[p + "W_V"].double()).view(T, H_kv, d).transpose(0, 1)
        k, v = k.repeat_interleave(H // H_kv, 0), v.repeat_interleave(H // H_kv, 0)  # (H, T, d)
        mask = torch.ones(H, T, T, dtype=torch.bool).tril()
        if silenced is not None and silenced[0] == l:
            mask[silenced[1], :, silenced[2]] = False
            mask[silenced[1], silenced[2], silenced[2]] = True  # a question left with no key hears itself
        z = torch.softmax((q @ k.mT / math.sqrt(d)).masked_fill(~mask, -math.inf), -1) @ v  # (H, T, d)
        x = x + z.transpose(0, 1).reshape(T, H * d) @ model.w[p + "W_O"].double()
        M = norm(x, model.w[p + "mlp_norm"])
        x = x + (torch.nn.functional.silu(M @ model.w[p + "W_gate"].double()) * (M @ model.w[p + "W_up"].double())) \
            @ model.w[p + "W_down"].double()
    logits = norm(x[-1], w["final_norm"]) @ w["unembed"]  # (vocab,)
    return float(torch.log_softmax(logits, -1)[token])


@pytest.mark.parametrize("layer, head", [(24, 6), (24, 7), (24, 8)])
def test_the_sinks_effect_in_head_equals_a_float64_pass(model, explained, layer, head):
    """Removing “C” from one head of layer 24 alone, recomputed in float64 from layer 24's input: each
    head's own value (24.6 and 24.7 print the same two digits, +0.0023, yet differ: 0.00227, 0.00234)."""
    token = explained.predicted.id
    resid = model.run(explained.token_ids, record=["layers.24.resid_pre"])["resid_pre", 24]  # (T, d_model)
    clean = float64_log_p_from(model, resid, 24, token)
    assert clean == pytest.approx(math.log(explained.predicted.prob), abs=1e-4)
    h = next(x for x in explained.heads if (x.layer, x.head) == (layer, head))
    sink = next(x for x in h.listened if x.index == 0)
    assert sink.is_sink and sink.effect_in_head is not None
    assert sink.effect_in_head == pytest.approx(float64_log_p_from(model, resid, 24, token, (layer, head, 0)) - clean,
                                                abs=2e-5)


def test_every_number_in_a_sentence_about_a_head_is_that_heads(explained):
    """Each sentence naming exactly one head reads its head numbers from that head's JSON entry."""
    d = explained.to_dict()
    checked = 0
    for sentence in d["story_parts"]:
        text = "".join(p["text"] for p in sentence)
        named = set(re.findall(r"head (\d+) of layer (\d+)", text))
        if len(named) != 1:
            continue
        head, layer = map(int, named.pop())
        for p in sentence:
            if "field" in p and p["field"].startswith("heads["):
                k = int(re.match(r"heads\[(\d+)\]", p["field"]).group(1))
                assert (d["heads"][k]["layer"], d["heads"][k]["head"]) == (layer, head), (text, p)
                checked += 1
    assert checked >= 5


def test_the_story_tells_direct_contribution_from_silencing_and_the_mlps_share(model, explained):
    """The two measures defined once, with why they disagree; the heads' and the MLPs' direct shares
    ("thinking alone") of the gap to the runner-up, as a float64 recomputation from the run's writes
    through the final RMSNorm."""
    story = explained.story
    defined = [s for s in story if "A head's direct contribution is" in s]
    assert len(defined) == 1 and "They can disagree" in defined[0] and "only silencing sees" in defined[0]
    run = model.run(explained.token_ids, record="all")
    t, r = run.last_logits.double().topk(2).indices.tolist()  # the predicted word and the runner-up
    assert (t, r) == (explained.predicted.id, explained.runner_up.id)
    x = run["resid_final"][-1].double()  # (d_model,)
    u = model.w["final_norm"].double() * (model.w["unembed"][:, t].double() - model.w["unembed"][:, r].double())
    u = u / torch.sqrt(x.pow(2).mean() + model.config.rms_eps)  # the gap's direction, the norm's scale held
    L = model.config.n_layers
    heads = sum(float((run["write", l][:, -1].double() @ u).sum()) for l in range(L))
    mlps = sum(float(run["mlp_out", l][-1].double() @ u) for l in range(L))
    embed = float(run["embed"][-1].double() @ u)
    assert heads + mlps + embed == pytest.approx(float(run.last_logits[t] - run.last_logits[r]), abs=1e-2)
    line = next(s for s in story if "thinking alone" in s)
    assert line.startswith("Attention moves information between members") and "mostly through" not in line
    assert f"the 270 heads' writes add {heads:+.2f} directly, the 30 MLPs {mlps:+.2f}" in line


def test_the_text_tables_tag_each_listened_member_that_is_a_sink(explained):
    """explain's text: under each head shown, a member's row ends in "yes" exactly when it is one of
    that head's attention sinks, and the column says so."""
    e = explained
    lines = render_text.explanation(e).splitlines()
    starts = [n for n, line in enumerate(lines) if re.match(r"layer \d+ head \d+: the last member", line)]
    assert starts
    tagged = 0
    for n in starts:
        layer, head = map(int, re.match(r"layer (\d+) head (\d+)", lines[n]).groups())
        h = next(x for x in e.heads if (x.layer, x.head) == (layer, head))
        header = next(k for k in range(n, len(lines)) if lines[k].rstrip().endswith("attention sink"))
        rows = [line.split() for line in lines[header + 1:] if line.strip()][:len(h.listened[:3])]
        assert [int(r[1]) for r in rows] == [x.index for x in h.listened[:3]]
        assert [r[-1] == "yes" for r in rows] == [x.index in h.sinks for x in h.listened[:3]]
        tagged += sum(r[-1] == "yes" for r in rows)
    assert tagged >= 3  # “C”, the sink of heads 24.6, 24.8 and 24.7, is shown under each


def test_a_member_the_head_barely_weighs_is_no_sink(model):
    """Head 0 of layer 1 on "I have a lot": the last question gives member 0 0.2% of its weight, and
    only 2 of the 3 questions that may look elsewhere give it >= 0.3: no sink of that head, in the
    result, the text and the figure."""
    from studygroup.study.head import head_view
    from studygroup.views import figures, text

    v = head_view(model, "I have a lot", 1, 0)
    W = np.array(v.weights, dtype=float)  # (T, T), paper orientation
    assert W[-1, 0] < 0.01 and np.mean(W[1:, 0] >= 0.3) < 0.8 and v.sinks == numpy_sinks(W) == []
    assert "attention sink" not in text.head_view(v)
    ax = figures.head_view_figure(v.to_dict()).axes[0]
    assert not any("attention sink" in t.get_text() for t in [*ax.get_xticklabels(), ax.xaxis.label])


def test_a_head_resting_on_a_sink_says_what_it_matters_through(model, explained):
    """Explore and the lesson open on the most decisive head not resting on a sink; the head view of
    the most decisive head, which rests on one, says its write at the last member is nearly the same
    on unrelated texts, with the cosines an independent recomputation from each run's recorded write gives."""
    from studygroup.study.head import head_view
    from studygroup.study.lesson_sections import default_head
    from studygroup.study.sink_write import NEARLY_SAME, OTHER_TEXTS

    top = explained.heads[0]
    assert top.rests_on_sink and explained.first_head != [top.layer, top.head]
    assert explained.first_head == list(default_head(model, TEXT, [(h.layer, h.head) for h in explained.heads]))
    first = next(h for h in explained.heads if [h.layer, h.head] == explained.first_head)
    assert not first.rests_on_sink and head_view(model, TEXT, first.layer, first.head).sink_write is None
    v = head_view(model, TEXT, top.layer, top.head)
    write = lambda text: model.run(text, record="all").head(top.layer, top.head).write[-1].double()  # noqa: E731
    here = write(TEXT)
    expected = [float(torch.nn.functional.cosine_similarity(here, write(t), dim=0)) for t in OTHER_TEXTS]
    assert v.sink_write.cosines == pytest.approx(expected, abs=1e-4) and v.sink_write.norm == pytest.approx(float(here.norm()), rel=1e-4)
    assert min(expected) >= NEARLY_SAME and v.sink_write.said.startswith("What it writes is nearly the same whatever the text")
    assert f"{min(expected):.3f}" in v.sink_write.said
    assert v.sink_write.said in " ".join(render_text.head_view(v).split())


def test_the_other_texts_writes_are_made_once_per_layer(model, explained, monkeypatch):
    """A sink head's view compares its write with OTHER_TEXTS' writes: one pass of each text up to the
    head's layer the first time, none for any head of that layer after (a redraw with the head open),
    with the numbers each text's own recorded run gives."""
    import weakref

    from studygroup.study import sink_write as sw

    monkeypatch.setattr(sw, "_kept", weakref.WeakKeyDictionary(), raising=False)  # none kept yet
    top = explained.heads[0]
    passes, forward = [], model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **k: passes.append(1) or forward(*a, **k))
    first = sw.sink_write(model, model.before_pass(TEXT), top.layer, top.head)
    made = len(passes)
    again = [sw.sink_write(model, model.before_pass(TEXT), top.layer, h) for h in (top.head, (top.head + 1) % model.config.n_heads)]
    assert made == len(sw.OTHER_TEXTS) + 1 and len(passes) == made + 2  # this text's own pass each time, no other
    assert again[0] == first
    runs = [model.run(t, record="all") for t in sw.OTHER_TEXTS]
    for h, s in ((top.head, first), ((top.head + 1) % model.config.n_heads, again[1])):
        here = model.run(TEXT, record="all").head(top.layer, h).write[-1]
        expected = [float(torch.nn.functional.cosine_similarity(here, r.head(top.layer, h).write[-1], dim=0)) for r in runs]
        assert s.cosines == pytest.approx(expected, abs=1e-5)
