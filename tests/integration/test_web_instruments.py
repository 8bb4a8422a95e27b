"""The logit lens and activation patching through the web API (POST /api/lens, /api/patch_cost,
/api/patch; docs/web-api.md) on the tiny random model: the JSON is the library's, bad input is a
400 (or 422) in one line, answers are cached per body, and a patching stops within a layer of a
cancel or of its client leaving."""
from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

import studygroup
from conftest import write_tiny_gguf
from studygroup.errors import InputError
from studygroup.study.lens import lens
from studygroup.study.patching import cost, passes, patch
from studygroup.views import payloads
from studygroup.web.app import Limits, create_app

from .test_jobs import in_thread, post as post_served, progress, sent_then_left, served, stopped_soon, until
from .test_web_app import error_of

CLEAN, CORRUPTED = "the tin", "the ton"


@pytest.fixture(scope="module")
def client(model):
    with TestClient(create_app(model, Limits(max_tokens=48))) as c:
        yield c


def test_the_endpoints_are_in_the_schema(client):
    assert {"/api/lens", "/api/patch_cost", "/api/patch"} <= set(client.get("/api/openapi.json").json()["paths"])


def test_the_lens_is_the_librarys(client, model):
    for body, kw in (({"text": CLEAN}, {}), ({"text": CLEAN, "all_positions": True}, {"all_positions": True}),
                     ({"text": CLEAN, "top": 2, "rows": [1, 3]}, {"top": 2, "positions": slice(1, 3)})):
        r = client.post("/api/lens", json=body)
        assert r.status_code == 200, r.text
        assert r.json() == json.loads(lens(model, CLEAN, **kw).to_json())


def test_patching_and_its_cost_are_the_librarys(client, model):
    body = {"clean": CLEAN, "corrupted": CORRUPTED}
    c = client.post("/api/patch_cost", json=body)
    assert c.status_code == 200 and c.json() == {"members": 4, "layer_passes": passes(model, 4), "cost": cost(model, 4)}
    r = client.post("/api/patch", json={**body, "job": "p1"})
    assert r.status_code == 200, r.text
    assert r.json() == json.loads(patch(model, CLEAN, CORRUPTED).to_json())
    p = client.post("/api/progress", json={"job": "p1"}).json()
    assert p["state"] == "done" and p["stage"] == "patching, layer by layer" and p["done"] == p["total"] == passes(model, 4)
    words = {"answer": "t", "wrong": "in"}
    assert client.post("/api/patch", json={**body, **words}).json() == json.loads(patch(model, CLEAN, CORRUPTED, **words).to_json())


def test_the_same_text_twice_is_said_with_null_cells(client):
    d = client.post("/api/patch", json={"clean": CLEAN, "corrupted": CLEAN}).json()
    assert d["clean_diff"] == d["corrupted_diff"] and any("same difference" in s for s in d["story"])
    assert all(v is None for g in d["grids"].values() for row in g["normalised"] for v in row)


def test_answers_are_cached_per_body(client, monkeypatch):
    """The same body (its job aside) is answered from the cache, not computed again; a body that
    differs in one field is computed."""
    made = []
    for name in ("lens", "patch"):
        real = getattr(payloads, name)
        monkeypatch.setattr(payloads, name, lambda *a, _real=real, _name=name, **k: made.append(_name) or _real(*a, **k))
    for path, body, other in (("/api/lens", {"text": "the can", "top": 4}, {"text": "the can", "top": 2}),
                              ("/api/patch", {"clean": "the on", "corrupted": "the in", "wrong": "t"},
                               {"clean": "the on", "corrupted": "the in", "wrong": "n"})):
        name = path.removeprefix("/api/")
        first = client.post(path, json=body)
        assert first.status_code == 200 and made.count(name) == 1, first.text
        assert client.post(path, json={**body, "job": "again-" + name}).content == first.content
        assert made.count(name) == 1  # the same body: the cached answer
        again = client.post(path, json=other)
        assert again.status_code == 200 and again.content != first.content and made.count(name) == 2, again.text


@pytest.mark.parametrize("path, body, status, words", [
    ("/api/patch", {"clean": CLEAN, "corrupted": "the tin can"}, 400, "the clean text is 4 members and the corrupted text 8"),
    ("/api/patch_cost", {"clean": CLEAN, "corrupted": "the tin can"}, 400, "same number of tokens"),
    ("/api/patch", {"clean": CLEAN, "corrupted": CORRUPTED, "answer": "tin can"}, 400, "the word 'tin can' is 6 tokens"),
    ("/api/patch", {"clean": CLEAN, "corrupted": CORRUPTED, "wrong": " tin"}, 400, "is 2 tokens (␣t | in)"),
    ("/api/patch", {"clean": "   ", "corrupted": CORRUPTED}, 400, "clean: the text is only whitespace"),
    ("/api/patch", {"clean": CLEAN, "corrupted": "the ton " * 20}, 400, "corrupted: the text is"),
    ("/api/patch", {"clean": "", "corrupted": CORRUPTED}, 422, "clean: String should have at least 1 character"),
    ("/api/lens", {"text": "  "}, 400, "the text is only whitespace"),
    ("/api/lens", {"text": ""}, 422, "text: String should have at least 1 character"),
    ("/api/lens", {"text": CLEAN, "rows": [5, 9]}, 400, "rows 5:9 leaves the text: the text's 4 members are 0-3"),
    ("/api/lens", {"text": CLEAN, "rows": [2, 9]}, 400, 'give "rows": [A, B]'),
    ("/api/lens", {"text": CLEAN, "top": 11}, 422, "top: Input should be less than or equal to 10"),
    ("/api/lens", {"text": CLEAN, "rows": [0, 2], "all_positions": True}, 400, "give rows or all_positions, not both"),
])
def test_bad_input_is_refused_in_one_line(client, path, body, status, words):
    message = error_of(client.post(path, json=body), status)
    assert words in message and "\n" not in message, message


def test_a_body_that_is_not_json_names_the_patching_body(client):
    for path in ("/api/patch", "/api/patch_cost"):
        message = error_of(client.post(path, content=b"{", headers={"content-type": "application/json"}), 422)
        assert message.startswith("the body is not valid JSON") and '{"clean": ' in message, message


def test_the_lens_shows_at_most_its_rows_at_once():
    with pytest.raises(InputError, match=r"rows \[0, 100\] hold 100 members: the lens shows at most 64 at once"):
        payloads.lens_rows([0, 100], 200)
    assert payloads.lens_rows([-64, None], 200) == (-64, None)


#: Two texts of the same length (8 members each time), ending in "can" and "cat": a patching of
#: seconds on the tiny model, hundreds of layers of passes.
LONG_CLEAN = " ".join(["the tin can"] * 40)
LONG_CORRUPTED = LONG_CLEAN[:-1] + "t"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    model = studygroup.load(str(write_tiny_gguf(tmp_path_factory.mktemp("patch") / "m.gguf", context=600).path))
    yield from served(model)


def test_a_cancelled_patching_stops_within_a_layer(base):
    body = {"clean": LONG_CLEAN, "corrupted": LONG_CORRUPTED, "job": "patch-stop"}
    out, t = in_thread(lambda: post_served(base, "patch", body))
    until(base, "patch-stop", lambda p: p["stage"].startswith("patching") and p["done"] > 3)
    at_cancel = post_served(base, "cancel", {"job": "patch-stop"}).json()
    t.join(60)
    r = out[0]
    assert r.status_code == 409 and "cancelled during patching" in r.json()["error"], r.text
    p = progress(base, "patch-stop")
    assert p["state"] == "cancelled" and p["steps"] <= at_cancel["steps"] + 1, (at_cancel, p)  # within a layer
    assert p["done"] < p["total"]
    time.sleep(0.3)
    assert progress(base, "patch-stop")["steps"] == p["steps"]  # no layer ran after it stopped


def test_a_patching_whose_client_leaves_stops(base):
    before, left = sent_then_left(base, "patch", {"clean": LONG_CLEAN, "corrupted": LONG_CORRUPTED}, "patch-left")
    stopped_soon(base, "patch-left", before, left)
