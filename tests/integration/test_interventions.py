"""--silence-member J and --silence-head L.H on explain and why: the run they show, and every
measure taken on top of it, against an independent float64 pass (tests/conftest.py: reference_llama)."""
import json

import pytest
import torch

from conftest import TEXT_A, TEXT_B, reference_llama
from studygroup.errors import InputError
from studygroup.study import compare as study_compare
from studygroup.study import explain as study
from studygroup.study.why import why
from studygroup.model.interventions import Interventions
from .test_why import cli

MEMBER, HEAD = 2, (0, 1)


def silencing(member: int, head: tuple[int, int] | None = None) -> Interventions:
    """A member silenced (in every head), and a head."""
    return Interventions((member,), None, frozenset([head] if head else []))


@pytest.fixture(scope="module")
def silenced(model):
    """explain TEXT_B with MEMBER and HEAD silenced, every head and member measured."""
    return study.explain(model, TEXT_B, top=5, interventions=silencing(MEMBER, HEAD))


def test_the_conclusion_is_the_silenced_runs(model, tiny_model, silenced):
    lp = reference_llama(tiny_model, silenced.token_ids, [MEMBER], [HEAD])  # (vocab,)
    assert silenced.predicted.id == int(lp.argmax())
    for w in silenced.top:
        assert w.prob == pytest.approx(float(lp[w.id].exp()), abs=1e-5)
    assert silenced.silenced_members == [MEMBER] and silenced.silenced_heads == [list(HEAD)]
    clean = reference_llama(tiny_model, silenced.token_ids)
    assert not torch.allclose(lp, clean, atol=1e-4)  # the silencing changes the run


def test_head_effects_are_measured_on_top_of_the_silencing(model, tiny_model, silenced):
    t, ids = silenced.predicted.id, silenced.token_ids
    base = float(reference_llama(tiny_model, ids, [MEMBER], [HEAD])[t])
    c = model.config
    assert silenced.heads_measured == c.n_layers * c.n_heads
    for h in silenced.heads:
        alone = float(reference_llama(tiny_model, ids, [MEMBER], [HEAD, (h.layer, h.head)])[t])
        assert h.silence_effect == pytest.approx(alone - base, abs=1e-4)
        assert h.silence_effect_last_position is None  # measured for the clean run only
    assert next(h for h in silenced.heads if (h.layer, h.head) == HEAD).silence_effect == pytest.approx(0, abs=1e-6)


def test_member_effects_are_measured_on_top_of_the_silencing(model, tiny_model, silenced):
    t, ids = silenced.predicted.id, silenced.token_ids
    base = float(reference_llama(tiny_model, ids, [MEMBER], [HEAD])[t])
    for m in silenced.members:
        alone = float(reference_llama(tiny_model, ids, {MEMBER, m.index}, [HEAD])[t])
        assert m.effect == pytest.approx(alone - base, abs=1e-4)


def test_the_story_and_the_text_say_what_is_silenced(silenced):
    from studygroup.views import text as render_text

    assert any(s.startswith(f"In this run member {MEMBER} (") for s in silenced.story)
    out = render_text.explanation(silenced)
    assert f"silenced in this run: member {MEMBER} " in out and f"layer {HEAD[0]} head {HEAD[1]}: writes nothing" in out


def test_compare_compares_the_silenced_runs(model, tiny_model):
    c = study_compare.compare(model, TEXT_A, TEXT_B, top=5, interventions=silencing(1, (1, 3)))
    for e in (c.a, c.b):
        lp = reference_llama(tiny_model, e.token_ids, [1], [(1, 3)])
        assert e.silenced_members == [1] and e.silenced_heads == [[1, 3]]
        assert [w.prob for w in e.top] == pytest.approx([float(lp[w.id].exp()) for w in e.top], abs=1e-5)
    quiet = reference_llama(tiny_model, c.b.token_ids, {1, *c.prefix.members}, [(1, 3)])
    assert c.prefix.prob_word == pytest.approx(float(quiet[c.word_id].exp()), abs=1e-5)
    T_a = len(c.a.tokens)
    with pytest.raises(InputError, match=f"text a: member {T_a} does not exist"):
        study_compare.compare(model, TEXT_A, TEXT_B, interventions=silencing(T_a))


def test_why_explains_the_score_of_the_silenced_run(model, tiny_model):
    w = why(model, TEXT_B, 1, 2, 4, 1, silencing(3, (0, 2)))
    S = reference_llama(tiny_model, w.token_ids[:5], [3], [(0, 2)], layer=1)
    assert w.score == pytest.approx(float(S[2, 4, 1]), abs=1e-4)
    assert w.score != pytest.approx(why(model, TEXT_B, 1, 2, 4, 1).score, abs=1e-4)
    assert w.silenced_members == [3] and w.silenced_heads == [[0, 2]]
    with pytest.raises(InputError, match="member 1 is silenced in this run"):
        why(model, TEXT_B, 1, 2, 4, 1, silencing(1))


@pytest.mark.parametrize("command", [("explain", TEXT_B), ("why", TEXT_B, "--layer", 1, "--head", 2, "--key", 1),
                                     ("compare", TEXT_A, TEXT_B)])
def test_the_commands_take_the_flags(capsys, tiny_model, command):
    code, out, err = cli(capsys, *command, "--silence-member", 0, "--silence-head", "0.2", "--json",
                         "--model", tiny_model.path)
    d = json.loads(out)
    for run in (d["a"], d["b"]) if command[0] == "compare" else (d,):
        assert code == 0 and run["silenced_members"] == [0] and run["silenced_heads"] == [[0, 2]]
    code, out, err = cli(capsys, *command, "--silence-member", 0, "--silence-head", "0.2", "--model", tiny_model.path)
    assert code == 0 and "member 0" in out and len(out.splitlines()) <= 100


@pytest.mark.parametrize("args, words", [
    (("--silence-member", 99), "member 99 does not exist"), (("--silence-member", -1), "too small"),
    (("--silence-head", "5.0"), "layer 5 does not exist"), (("--silence-head", "0.9"), "head 9 does not exist"),
    (("--silence-head", "x"), "is not LAYER.HEAD")])
@pytest.mark.parametrize("command", [("explain", TEXT_B), ("why", TEXT_B, "--layer", 1, "--head", 2, "--key", 0),
                                     ("compare", TEXT_A, TEXT_B)])
def test_bad_values_are_refused_in_one_line(capsys, tiny_model, command, args, words):
    code, out, err = cli(capsys, *command, *args, "--model", tiny_model.path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and words in err


def test_explain_will_not_write_a_report_of_a_silenced_run(capsys, tiny_model, tmp_path):
    code, out, err = cli(capsys, "explain", TEXT_B, "--silence-member", 1, "--html", tmp_path / "r.html",
                         "--model", tiny_model.path)
    assert code == 2 and out == "" and "--html writes the text's own views" in err and not (tmp_path / "r.html").exists()


def test_the_web_api_takes_them_and_refuses_bad_ones(model, silenced):
    from fastapi.testclient import TestClient

    from studygroup.web.app import Limits, create_app

    quiet = {"silence": {"members": [MEMBER], "heads": [list(HEAD)]}}
    with TestClient(create_app(model, Limits(max_tokens=48))) as client:
        r = client.post("/api/explain", json={"text": TEXT_B, "top": 5, **quiet})
        assert r.status_code == 200 and r.json() == silenced.to_dict()
        r = client.post("/api/why", json={"text": TEXT_B, "layer": 1, "head": 2, "query": 4, "key": 1, **quiet})
        assert r.status_code == 200 and r.json()["silenced_members"] == [MEMBER]
        r = client.post("/api/compare", json={"text_a": TEXT_A, "text_b": TEXT_B, **quiet})
        assert r.status_code == 200 and r.json()["b"]["silenced_heads"] == [list(HEAD)]
        texts = {"text": TEXT_B}
        for path, extra in (("/api/explain", texts), ("/api/why", {**texts, "layer": 1, "head": 2, "query": 4, "key": 1}),
                            ("/api/compare", {"text_a": TEXT_A, "text_b": TEXT_B})):
            for bad, words in (({"silence": {"members": [99]}}, "member 99 does not exist"),
                               ({"silence": {"heads": [[0, 9]]}}, "head 9 does not exist"),
                               ({"silence": {"heads": [[0]]}}, "")):
                r = client.post(path, json={**extra, **bad})
                assert 400 <= r.status_code < 500 and words in json.dumps(r.json())
