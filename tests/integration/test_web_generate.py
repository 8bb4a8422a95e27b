"""POST /api/generate on the tiny model: streamed lines equal Model.generate, going on from a kept
generation, bad input refused 4xx before the stream."""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

import studygroup

from integration.test_web_app import error_of
from studygroup.web.app import Limits, create_app
from studygroup.model.ablation import Ablation
from studygroup.model.interventions import Interventions

TEXT = "the tin"


@pytest.fixture(scope="module")
def client(model):
    with TestClient(create_app(model, Limits(max_tokens=48))) as c:
        yield c


def lines(r) -> list[dict]:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in r.text.splitlines()]


def generate(client, **body):
    return lines(client.post("/api/generate", json={"text": TEXT, "ignore_eos": True, **body}))


@pytest.mark.parametrize("settings", [{}, {"temperature": 0.9, "top_k": 9, "top_p": 0.9, "seed": 5},
                                      {"silence": {"members": [1], "heads": [[0, 1]]}},
                                      {"silence": {"members": [1], "heads": [[0, 1]]}, "ablation": {"kind": "mean"}},
                                      {"silence": {"heads": [[1, 2]]}, "ablation": {"kind": "resample", "from": "tin tin"}}])
def test_streamed_words_equal_model_generate(client, model, settings):
    got = generate(client, n=6, **settings)
    silence, a = settings.get("silence", {}), settings.get("ablation", {})
    kw = {k: v for k, v in settings.items() if k not in ("silence", "ablation")}
    quiet = Interventions(tuple(silence.get("members", ())), None, frozenset(map(tuple, silence.get("heads", ()))),
                          ablation=Ablation(a.get("kind", "zero"), source=a.get("from")))
    g = model.generate(TEXT, 6, ignore_eos=True, **kw, interventions=quiet)
    assert [line["word"] for line in got] == [1, 2, 3, 4, 5, 6]
    assert [line["id"] for line in got] == g.ids
    assert got == [{"word": k, **json.loads(json.dumps(g.word_json(k)))} for k in range(1, 7)]


def test_more_words_go_on_from_the_kept_generation(client, model):
    first = generate(client, n=3, temperature=0.7, seed=2)
    kept = client.app.state.service.generations.kept
    before = kept.size
    more = generate(client, n=4, temperature=0.7, seed=2, words=[x["id"] for x in first])
    assert [x["word"] for x in more] == [4, 5, 6, 7]
    g = model.generate(TEXT, 7, ignore_eos=True, temperature=0.7, seed=2)
    assert [x["id"] for x in first + more] == g.ids
    assert kept.size >= before > 0  # the cache kept (and grown), not a second one


def test_more_words_under_resample_ablation_go_on_as_one_generation(client, model):
    """The kept generation goes on with the source's own cache: 3 words, then 4, are the 7 of one call."""
    body = {"silence": {"members": [0], "heads": [[0, 2]]}, "ablation": {"kind": "resample", "from": "tin tin"}}
    first = generate(client, n=3, **body)
    more = generate(client, n=4, words=[x["id"] for x in first], **body)
    i = Interventions((0,), None, frozenset({(0, 2)}), ablation=Ablation("resample", source="tin tin"))
    assert [x["id"] for x in first + more] == model.generate(TEXT, 7, ignore_eos=True, interventions=i).ids


def test_a_generation_no_longer_kept_is_made_again(model):
    with TestClient(create_app(model, Limits(max_tokens=48, generations_kept=0))) as c:
        first = generate(c, n=2)
        more = generate(c, n=3, words=[x["id"] for x in first])
    assert [x["id"] for x in first + more] == model.generate(TEXT, 5, ignore_eos=True).ids


def test_listened_is_the_words_record_in_that_head(client, model):
    got = generate(client, n=3, layer=1, head=2)
    g = model.generate(TEXT, 3, ignore_eos=True)
    for line, w in zip(got, g.words):
        heard = line["listened"]
        assert heard["members"] == w.members[1, 2].tolist() and heard["layer"] == 1 and heard["head"] == 2
        assert heard["weights"] == pytest.approx(w.weights[1, 2].tolist()) and heard["sink"] == pytest.approx(float(w.sink[1, 2]))


@pytest.mark.parametrize("body, status, words", [
    ({"n": 0}, 422, "n"), ({"n": -1}, 422, "n"), ({"n": "3"}, 422, "n"), ({"n": 100}, 400, "exceed"), ({"n": 300}, 422, "n"),
    ({"temperature": -0.1}, 400, "temperature"), ({"top_p": 0}, 400, "top-p"), ({"top_p": 1.5}, 400, "top-p"),
    ({"top_k": 0}, 400, "top-k"), ({"temperature": "1"}, 422, "temperature"), ({"seed": 1.5}, 422, "seed"),
    ({"silence": {"members": [9]}}, 400, "member 9"), ({"layer": 1}, 400, "both layer"),
    ({"layer": 7, "head": 0}, 400, "layer 7"), ({"words": [10 ** 6]}, 400, "token id"),
    ({"words": [5, 6, 7]}, 400, "not the words"), ({"text": " "}, 400, "whitespace")])
def test_bad_input_is_4xx_before_the_stream(client, body, status, words):
    r = client.post("/api/generate", json={"text": TEXT, "n": 3, **body})
    assert words in error_of(r, status)


@pytest.mark.parametrize("body, words", [
    ({"temperature": 5e-324}, "the temperature must be 0 (greedy) or from 1e-06 to 1e+06, not 5e-324"),
    ({"temperature": 1e-320}, "from 1e-06 to 1e+06"), ({"temperature": 2e6}, "from 1e-06 to 1e+06"),
    ({"seed": 2**64}, "the seed must be a whole number from 0 to 18446744073709551615, not 18446744073709551616"),
    ({"seed": 10**30}, "from 0 to 18446744073709551615"), ({"seed": -1}, "from 0 to 18446744073709551615")])
def test_sampling_outside_its_range_is_400_naming_the_range(client, body, words):
    """The fault sweep's settings that reached torch (a 500): refused by the library's one rule."""
    r = client.post("/api/generate", json={"text": TEXT, "n": 3, **body})
    assert words in error_of(r, 400)


def test_sampling_at_the_ends_of_its_range_generates(client):
    for settings in ({"temperature": 1e-6, "seed": 0}, {"temperature": 1e6, "seed": 2**64 - 1}):
        assert len(generate(client, n=2, **settings)) == 2


TEMPLATE = "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }}\n{% endfor %}<assistant>"


@pytest.mark.parametrize("system", [None, "be brief"])
def test_chat_words_equal_model_generate_with_chat(client, model, monkeypatch, system):
    monkeypatch.setattr(model.tokenizer, "chat_template", TEMPLATE)
    got = generate(client, n=4, chat=True, **({"system": system} if system else {}))
    g = model.generate(TEXT, 4, ignore_eos=True, chat=True, system=system)
    assert [x["id"] for x in got] == g.ids
    assert g.prompt_ids == model.chat(TEXT, system) != model.ids(TEXT)  # the template's markup is in the prompt
    assert got == [{"word": k, **json.loads(json.dumps(g.word_json(k)))} for k in range(1, 5)]


@pytest.mark.parametrize("body, words", [({"chat": True}, "has no chat template"),
                                         ({"system": "be brief"}, "system goes with chat")])
def test_chat_refusals_are_one_line_of_json(client, body, words):
    r = client.post("/api/generate", json={"text": TEXT, "n": 3, **body})
    message = error_of(r, 400)
    assert words in message and "\n" not in message


def test_explain_takes_chat_as_the_cli_does(client, model, monkeypatch):
    monkeypatch.setattr(model.tokenizer, "chat_template", TEMPLATE)
    r = client.post("/api/explain", json={"text": TEXT, "top": 3, "chat": True, "system": "be brief"})
    assert r.status_code == 200, r.text
    expected = studygroup.explain(model, model.chat(TEXT, "be brief"), top=3).to_dict()
    assert json.loads(r.text) == json.loads(json.dumps(expected))
    assert r.json()["token_ids"] == model.chat(TEXT, "be brief")
    measured = client.post("/api/explain", json={"text": TEXT, "top": 3, "chat": True, "measure_heads": 2}).json()
    assert measured == json.loads(json.dumps(studygroup.explain(model, model.chat(TEXT), top=3, measure_heads=2).to_dict()))
    assert measured["heads_measured"] == 2  # a chat's measure_heads is followed (it was left out)
    monkeypatch.setattr(model.tokenizer, "chat_template", None)
    assert "has no chat template" in error_of(client.post("/api/explain", json={"text": TEXT, "chat": True}), 400)
