"""The web app's JSON API (docs/web-api.md): every endpoint, every kind of bad request, the queue.

Most tests use the tiny random model (fast); the last few use the real default model.
"""
from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

import studygroup
from studygroup.formats import percent
from studygroup.study import DEFAULT_TEXT
from studygroup.views import assets
from studygroup.views import compact_json
from studygroup.views import payloads
from studygroup.web import app as server
from studygroup.web import guard as server_guard
from studygroup.web.app import Limits, create_app
from studygroup.model.interventions import Interventions

TEXT = "I have a lot"


@pytest.fixture(scope="module")
def client(model):
    with TestClient(create_app(model, Limits(max_tokens=48))) as c:
        yield c


def post(client, path, body):
    return client.post(path, json=body)


def error_of(r, status):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"], body
    assert "Traceback" not in body["error"]
    return body["error"]


# ---- the page and its files -----------------------------------------------------------------------
def test_page_and_static_files_come_from_the_package(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/static/page.js">' in page.text
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    for name, kind in (("page.js", "text/javascript"), ("page.css", "text/css")):
        r = client.get(f"/static/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind)


STATIC = Path(assets.__file__).parent / "static"


def test_static_files_name_no_other_host(client):
    files = sorted(STATIC.iterdir())
    assert {f.name for f in files if f.suffix == ".js"} == set(assets.SCRIPTS)  # every script is joined, and listed
    sources = {f.name: f.read_text(encoding="utf-8") for f in files} | {"served page.js": client.get("/static/page.js").text}
    for name, source in sources.items():
        assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|@import|@font-face", source, re.I), name
        if name.endswith(".js"):
            assert "innerHTML" not in source and "insertAdjacentHTML" not in source and "document.write" not in source, name
            assert "eval(" not in source and "new Function" not in source, name
            assert "</script" not in source.lower() and "<!--" not in source, name  # inlined in reports and notebooks
    assert sources["served page.js"] == assets.page_script()


def test_only_known_static_files(client):
    for path in ("/static/../server.py", "/static/server.py", "/static/%2e%2e%2fserver.py", "/static/page.html.bak"):
        r = client.get(path)
        assert r.status_code == 404, path
    error_of(client.get("/static/nothing.js"), 404)


def test_docs_pages_that_load_from_a_cdn_are_off(client):
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 404
    schema = client.get("/api/openapi.json").json()
    assert {"/api/conclusion", "/api/explain", "/api/compare", "/api/model_view", "/api/head"} <= set(schema["paths"])


# ---- every endpoint ---------------------------------------------------------------------------------
def test_info(client, model):
    d = client.get("/api/info").json()
    c = model.config
    assert d["model"]["n_layers"] == c.n_layers and d["model"]["n_heads"] == c.n_heads
    assert d["group_size"] == c.n_heads // c.n_kv_heads and d["notations"] == ["paper", "columns"]
    assert d["limits"]["max_tokens"] == 48 and d["limits"]["max_body_bytes"] == 1024 * 1024
    assert d["limits"]["context_length"] == c.context_length
    assert d["survey"] is False  # this app shows none: /api/survey answers 404
    assert d["default_text"] == DEFAULT_TEXT


def test_conclusion(client):
    d = post(client, "/api/conclusion", {"text": TEXT, "top": 5}).json()
    assert "".join(d["tokens"]).replace("␣", " ") == TEXT
    probs = [w["prob"] for w in d["top"]]
    assert len(probs) == 5 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-9
    assert d["silenced"] is None and d["words"] == []


def test_conclusion_with_silencing_shows_before_and_after(client):
    base = post(client, "/api/conclusion", {"text": TEXT}).json()
    d = post(client, "/api/conclusion", {"text": TEXT, "silence": {"members": [2, 2, 0], "heads": [[1, 0]]}}).json()
    assert d["silenced_members"] == [0, 2] and d["silenced_heads"] == [[1, 0]]
    assert d["top"] == base["top"]  # the old conclusion, for the ghost bars
    before = {w["id"]: w["prob_before"] for w in d["words"]}
    assert all(abs(before[w["id"]] - w["prob"]) < 1e-9 for w in base["top"])
    assert any(abs(w["change"]) > 1e-6 for w in d["words"])
    assert {w["id"] for w in d["silenced"]} <= {w["id"] for w in d["words"]}
    told = d["silenced_story"]  # the story's conclusion sentence, told from the silenced run
    assert told[0]["about"] == "conclusion" and told[0]["text"].startswith("With the silencing, the group concludes that")
    values = [p for p in told if "field" in p]
    assert [p["field"] for p in values] == [f"silenced[{n}].prob" for n in range(3)]
    assert all(p["value"] == d["silenced"][n]["prob"] and p["text"] == percent(p["value"]) for n, p in enumerate(values))
    assert f"“{d['silenced'][0]['token']}” (" in "".join(p["text"] for p in told)
    assert post(client, "/api/conclusion", {"text": TEXT}).json()["silenced_story"] is None


@pytest.mark.parametrize("old, new", [({"silence_members": [2, 0]}, {"silence": {"members": [0, 2]}}),
                                      ({"silence_heads": [[1, 0]]}, {"silence": {"heads": [[1, 0]]}})])
def test_a_deprecated_silencing_field_still_silences_and_says_so(client, old, new):
    """silence_members and silence_heads, the deprecated spelling of silence, answer as silence does,
    with a Deprecation header naming the field to use; the new spelling has none."""
    got, want = post(client, "/api/conclusion", {"text": TEXT, **old}), post(client, "/api/conclusion", {"text": TEXT, **new})
    assert got.json() == want.json() and got.json()["silenced"] is not None
    name = next(iter(old))
    assert got.headers["Deprecation"] == f"{name}: use silence.{name.split('_')[1]}" and "Deprecation" not in want.headers
    both = post(client, "/api/conclusion", {"text": TEXT, **old, "silence": {"members": [1], "heads": [[0, 1]]}})
    assert both.status_code == 400 and f"not both" in both.json()["error"]


def ablated(model, text, members=(), heads=(), **ablation):
    from studygroup.model.ablation import Ablation
    return Interventions(tuple(members), None, frozenset(map(tuple, heads)), ablation=Ablation(**ablation))


@pytest.mark.parametrize("ablation, extra", [({"kind": "mean"}, {}), ({"kind": "mean", "reference": ["the tin can"]}, {}),
                                             ({"kind": "resample", "from": "an ear then the tin"}, {})])
def test_every_view_takes_the_ablation_of_its_silencing(client, model, ablation, extra):
    """The conclusion, the model view, a head and the lesson of a run whose silenced member and
    head are mean- or resample-ablated: the model's run with those interventions (the ablation's
    own numbers are checked against transformers in test_ablation.py), the ablation named in each."""
    silence = {"members": [2], "heads": [[0, 1]]}
    body = {"text": TEXT, "silence": silence, "ablation": ablation}
    source = ablation.get("from")
    i = ablated(model, TEXT, [2], [[0, 1]], kind=ablation["kind"], reference=tuple(ablation.get("reference", ())), source=source)
    run = model.run(TEXT, interventions=i, record="all")
    named = {"kind": ablation["kind"], "reference": len(ablation.get("reference", ())), "from": source}
    d = post(client, "/api/conclusion", body).json()
    probs = torch.softmax(run.last_logits.double(), -1)
    assert d["ablation"] == named and all(abs(w["prob"] - float(probs[w["id"]])) < 1e-6 for w in d["silenced"])
    assert f"With the silencing by {ablation['kind']} ablation" in d["silenced_story"][0]["text"]
    view = post(client, "/api/model_view", body).json()
    assert view["ablation"] == named
    weights = run["weights", 1][0]  # (T, T): member 2 heard, with its replaced key
    assert (torch.tensor(view["heads"][1][0]["weights"]) - weights).abs().max() < 6e-4
    assert weights[3, 2] > 0
    h = post(client, "/api/head", {**body, "layer": 1, "head": 0}).json()
    assert h["ablation"] == named and (torch.tensor(h["weights"]) - weights).abs().max() < 1e-6
    assert post(client, "/api/lesson", {**body, "layer": 1, "head": 0}).json()["ablation"] == named
    zero = post(client, "/api/head", {"text": TEXT, "silence": silence, "layer": 1, "head": 0}).json()
    assert "ablation" not in zero and zero["weights"][3][2] == 0


def test_zero_ablation_answers_byte_for_byte_as_silencing(client):
    silence = {"text": TEXT, "silence": {"members": [1], "heads": [[1, 2]]}}
    for path, extra in (("/api/conclusion", {}), ("/api/model_view", {}), ("/api/head", {"layer": 1, "head": 0}),
                        ("/api/explain", {"top": 3})):
        a = post(client, path, {**silence, **extra}).content
        assert post(client, path, {**silence, **extra, "ablation": {"kind": "zero"}}).content == a


@pytest.mark.parametrize("path, body, status, words", [
    ("/api/conclusion", {"ablation": {"kind": "resample"}}, 400, "give it (--from TEXT"),
    ("/api/conclusion", {"ablation": {"kind": "resample", "from": "the tin"}}, 400, "same number of tokens"),
    ("/api/conclusion", {"ablation": {"kind": "median"}}, 422, "ablation.kind"),
    ("/api/conclusion", {"ablation": {"kind": "mean", "from": "the tin"}}, 400, "goes with the resample"),
    ("/api/conclusion", {"ablation": {"kind": "mean", "reference": [" "]}}, 400, "ablation.reference[0]"),
    ("/api/explain", {"ablation": {"kind": "mean"}}, 400, "give no --silence-member"),
    ("/api/why", {"ablation": {"kind": "mean"}, "layer": 1, "head": 0, "query": 3, "key": 1}, 400, "taken out by mean ablation"),
    ("/api/generate", {"ablation": {"kind": "resample", "from": "the tin"}}, 400, "same number of tokens")])
def test_an_ablation_that_cannot_be_made_is_refused_in_one_line(client, path, body, status, words):
    r = post(client, path, {"text": TEXT, "silence": {"members": [1]}, **body})
    assert r.status_code == status and words in r.json()["error"] and "\n" not in r.json()["error"]


def test_explain(client, model):
    d = post(client, "/api/explain", {"text": TEXT, "top": 3}).json()
    assert len(d["top"]) == 3 and d["predicted"] == d["top"][0]
    assert len(d["members"]) == len(d["tokens"]) and d["story"]
    assert all(0 <= h["layer"] < model.config.n_layers and 0 <= h["head"] < model.config.n_heads for h in d["heads"])
    own = json.loads(studygroup.explain(model, TEXT, top=3).to_json())  # what `explain --json` prints
    for key in ("contributions", "mlp_contributions", "logit_parts"):  # the page's residual stream chart draws these
        assert d[key] == own[key], key


def test_compare(client):
    d = post(client, "/api/compare", {"text_a": "a lot", "text_b": TEXT}).json()
    assert d["longer"] == "b" and d["a"]["text"] == "a lot" and d["b"]["text"] == TEXT
    assert d["shift"] and all(abs(s["change"] - (s["prob_b"] - s["prob_a"])) < 1e-9 for s in d["shift"])
    assert d["story"]


def test_model_view(client, model):
    d = post(client, "/api/model_view", {"text": TEXT}).json()
    c = model.config
    T = len(d["tokens"])
    assert (d["n_layers"], d["n_heads"], d["n_kv_heads"]) == (c.n_layers, c.n_heads, c.n_kv_heads)
    assert len(d["heads"]) == c.n_layers and all(len(row) == c.n_heads for row in d["heads"])
    assert [g["heads"] for g in d["kv_groups"]] == [[0, 1], [2, 3]]
    w = d["heads"][1][2]["weights"]
    assert d["rows"] == "all" and len(w) == T and all(len(r) == T for r in w)
    assert all(abs(sum(r) - 1) < 0.01 for r in w) and all(w[i][j] == 0 for i in range(T) for j in range(i + 1, T))
    assert any(h["rank"] == 1 for row in d["heads"] for h in row)


def test_model_view_with_silencing_shows_the_silenced_run(client, model):
    clean = post(client, "/api/model_view", {"text": TEXT}).json()
    assert clean["silenced_members"] == [] and clean["silenced_heads"] == []
    d = post(client, "/api/model_view", {"text": TEXT, "silence": {"members": [1, 1], "heads": [[0, 2]]}}).json()
    assert d["silenced_members"] == [1] and d["silenced_heads"] == [[0, 2]]
    T = len(d["tokens"])
    for row in d["heads"]:
        for h in row:  # nobody hears member 1 but member 1 itself, and only while it has nothing else
            w = h["weights"]
            assert all(w[i][1] == 0 for i in range(T) if i != 1) and all(abs(sum(r) - 1) < 0.01 for r in w)
    # the run's own numbers: the same as the library gives for that run
    run = model.run(TEXT, record=["weights"], silence_members=[1], silence_heads=[(0, 2)])
    w = run["layers.1.weights"][3].tolist()
    assert d["heads"][1][3]["weights"] == [[round(x, 3) for x in r] for r in w]
    assert d["heads"][1][3]["weights"] != clean["heads"][1][3]["weights"]


def test_head_with_silencing_masks_the_silenced_member(client, model):
    d = post(client, "/api/head", {"text": TEXT, "layer": 1, "head": 0, "silence": {"members": [2]}}).json()
    T = len(d["tokens"])
    assert d["silenced_members"] == [2] and d["silenced_heads"] == []
    assert all(not d["mask"][i][2] and d["weights"][i][2] == 0 and d["scores"][i][2] is None for i in range(T) if i != 2)
    head = model.run(TEXT, record="none", silence_members=[2]).head(1, 0)
    assert torch.allclose(torch.tensor(d["weights"]), head.weights, atol=1e-6)
    cols = post(client, "/api/head", {"text": TEXT, "layer": 1, "head": 0, "silence": {"members": [2]}, "notation": "columns"}).json()
    assert T > 3 and cols["check"]["agree"] and cols["weights"][2][T - 1] == 0  # columns: transposed
    clean = post(client, "/api/head", {"text": TEXT, "layer": 1, "head": 0}).json()
    assert clean["silenced_members"] == [] and clean["weights"] != d["weights"]


def expected_reasons(T: int, silenced: list[int]) -> list[list[str]]:
    """Why question i cannot hear answer j, worked out cell by cell (paper orientation): a later
    answer is the future; a silenced member's answer is silenced (for every question but one left
    with nothing else to hear, which hears itself)."""
    out = []
    for i in range(T):
        heard = [j for j in range(i + 1) if j not in silenced] or [i]
        out.append(["future" if j > i else "visible" if j in heard else "silenced" for j in range(T)])
    return out


def test_mask_reasons_say_why_each_cell_is_hidden(client):
    from studygroup.study.mask_reasons import REASONS

    named = lambda grid: [[REASONS[k] for k in row] for row in grid]  # noqa: E731
    for silenced in ([], [2], [0, 3]):
        body = {"text": TEXT, "layer": 1, "head": 0, "silence": {"members": silenced}}
        paper = post(client, "/api/head", body).json()
        T = len(paper["tokens"])
        want = expected_reasons(T, silenced)
        assert named(paper["mask_reasons"]) == want, silenced
        assert [[k == "visible" for k in row] for row in want] == paper["mask"]
        cols = post(client, "/api/head", body | {"notation": "columns"}).json()
        assert named(cols["mask_reasons"]) == [list(r) for r in zip(*want)]
        last = post(client, "/api/head", body | {"rows": "last"}).json()
        assert named(last["mask_reasons"]) == want[-1:]
        view = post(client, "/api/model_view", {"text": TEXT, "silence": {"members": silenced}}).json()
        assert named(view["mask_reasons"]) == want and all(h["mask_reasons"] is None for r in view["heads"] for h in r)


def test_the_model_views_json_is_json_dumps_of_its_dict(tmp_path):
    """The page's model view (its thumbnails written from their tensor) is, byte for byte, the
    compact JSON of payloads.model_view's dict: full maps, a long text's last rows, silencings."""
    from conftest import write_tiny_gguf

    model = studygroup.load(write_tiny_gguf(tmp_path / "roomy.gguf", context=256).path)
    long = "ab " * 60
    assert len(model.tokenize(long)) > payloads.FULL_MAPS_MAX_T
    for text, members, heads in ((TEXT, (), ()), (TEXT, (2,), ((0, 1),)), (long, (3,), ())):
        expected = json.dumps(payloads.model_view(model, text, None, Interventions(members, None, frozenset(heads))), ensure_ascii=False,
                              allow_nan=False, separators=(",", ":")).encode("utf-8")
        assert payloads.model_view_json(model, text, None, Interventions(members, None, frozenset(heads))) == expected
    w = torch.tensor([[[0.5, 0.25], [1 / 3, 2.0]]], dtype=torch.float64)  # not rounded, past 1: json.dumps' own way
    assert compact_json.rounded_grids(w, 3) == [b"[[0.5,0.25],[0.3333333333333333,2.0]]"]


def test_a_packed_model_view_holds_the_same_weights(tmp_path):
    """packed: true: every head's weights null, and packed_weights (whole thousandths, uint16
    little-endian, layer by layer; a full map's lower triangle only, the rest of the lists' numbers
    0) decode to the lists' numbers exactly; the rest of the view is the same: full maps, a long
    text's last rows, a silencing."""
    import base64

    import numpy as np
    from conftest import write_tiny_gguf

    model = studygroup.load(write_tiny_gguf(tmp_path / "roomy.gguf", context=256).path)
    with TestClient(create_app(model)) as c:
        for text, silencing in ((TEXT, {}), (TEXT, {"silence": {"members": [2], "heads": [[0, 1]]}}), ("ab " * 60, {})):
            lists = post(c, "/api/model_view", {"text": text, **silencing}).json()
            packed = post(c, "/api/model_view", {"text": text, **silencing, "packed": True}).json()
            p = packed.pop("packed_weights")
            want = np.array([[h["weights"] for h in layer] for layer in lists["heads"]])  # (L, H, R, T)
            L, H, R, T = want.shape
            lower = np.tril(np.ones((T, T), bool))
            assert p["triangle"] == (R == T)  # full maps: only their lower triangle is sent
            k = np.frombuffer(base64.b64decode(p["base64"]), "<u2")
            if p["triangle"]:
                assert (want[..., ~lower] == 0).all()
                full = np.zeros(want.shape, np.uint16)
                full[..., lower] = k.reshape(L, H, -1)
                k = full
            assert p["dtype"] == "uint16" and list(want.shape) == p["shape"] and (k.reshape(want.shape) / p["scale"] == want).all()
            assert all(h.pop("weights") is None for layer in packed["heads"] for h in layer)
            for layer in lists["heads"]:
                for h in layer:
                    h.pop("weights")
            assert packed == lists


@pytest.mark.parametrize("notation", ["paper", "columns"])
def test_a_packed_head_holds_the_same_vectors(client, notation):
    """packed: true: the head's vectors null and packed_vectors (float32, little-endian, row by
    row) decode to the lists' numbers exactly; the rest of the view is the same."""
    import base64

    import numpy as np

    body = {"text": TEXT, "layer": 1, "head": 2, "notation": notation, "silence": {"members": [1]}}
    lists = post(client, "/api/head", body).json()
    packed = post(client, "/api/head", body | {"packed": True}).json()
    vectors = packed.pop("packed_vectors")
    assert set(vectors) == set(compact_json.PACKED_VECTORS)
    for name, p in vectors.items():
        x = np.frombuffer(base64.b64decode(p["base64"]), "<f4").reshape(p["shape"]).astype(np.float64)
        assert p["dtype"] == "float32" and packed.pop(name) is None and (x == np.array(lists.pop(name))).all(), name
    assert packed == lists


def test_model_view_names_the_reasons_of_heads_that_differ(model):
    """Members silenced in one head only: that head's thumbnail carries its own reasons."""
    from studygroup.study.model_view import model_view

    run = model.run(TEXT, record="all", silence_members=[1], member_heads=[(0, 2)])
    view = model_view(run).to_dict()
    T = len(view["tokens"])
    assert view["mask_reasons"] == [[0 if j <= i else 1 for j in range(T)] for i in range(T)]
    own = {(h["layer"], h["head"]): h["mask_reasons"] for r in view["heads"] for h in r if h["mask_reasons"] is not None}
    assert list(own) == [(0, 2)] and all(own[0, 2][i][1] == 2 for i in range(1, T))


def test_head_in_both_notations_is_transposed(client):
    paper = post(client, "/api/head", {"text": TEXT, "layer": 1, "head": 3}).json()
    cols = post(client, "/api/head", {"text": TEXT, "layer": 1, "head": 3, "notation": "columns"}).json()
    T = len(paper["tokens"])
    assert paper["notation"] == "paper" and cols["notation"] == "columns"
    assert paper["kv_head"] == 1 and paper["shares_keys_with"] == [2, 3]
    assert paper["questions"] == list(range(T)) and paper["rows"] == "all"
    for name in ("weights", "mask", "contributions"):
        for i in range(T):
            for j in range(T):
                assert cols[name][j][i] == pytest.approx(paper[name][i][j], abs=1e-5), name
    assert paper["scores"][0][1] is None  # masked: the future
    for i, row in enumerate(paper["contributions"]):
        for j, c in enumerate(row):
            assert c == pytest.approx(paper["weights"][i][j] * paper["answer_sizes"][j], rel=1e-5, abs=1e-7)
    assert paper["check"]["agree"] is True


def test_head_last_question_only(client):
    paper = post(client, "/api/head", {"text": TEXT, "layer": 0, "head": 0, "rows": "last"}).json()
    cols = post(client, "/api/head", {"text": TEXT, "layer": 0, "head": 0, "rows": "last", "notation": "columns"}).json()
    T = len(paper["tokens"])
    assert paper["rows"] == "last" and paper["questions"] == [T - 1]
    assert len(paper["weights"]) == 1 and len(paper["weights"][0]) == T
    assert len(cols["weights"]) == T and all(len(r) == 1 for r in cols["weights"])
    assert sum(paper["weights"][0]) == pytest.approx(1, abs=1e-5)


def test_token_text_is_returned_as_data(model):
    """Markup in the text comes back as the same characters in JSON strings (the page shows them as text)."""
    with TestClient(create_app(model)) as c:
        text = "<s>{{7*7}}</script>'\""
        d = post(c, "/api/conclusion", {"text": text}).json()
        assert "".join(d["tokens"]) == text


# ---- bad requests ---------------------------------------------------------------------------------
@pytest.mark.parametrize("path, body, status, words", [
    ("/api/conclusion", {"text": ""}, 422, "text"),
    ("/api/conclusion", {"text": "   \n "}, 400, "whitespace"),
    ("/api/conclusion", {"text": "x" * 5000}, 400, "at most 48"),  # counted in tokens, never cut
    ("/api/conclusion", {"text": "ab " * 30}, 400, "at most 48"),
    ("/api/conclusion", {}, 422, "text"),
    ("/api/conclusion", {"text": 5}, 422, "string"),
    ("/api/conclusion", {"text": TEXT, "top": 0}, 422, "top"),
    ("/api/conclusion", {"text": TEXT, "top": 51}, 422, "top"),
    ("/api/conclusion", {"text": TEXT, "top": "3"}, 422, "top"),
    ("/api/conclusion", {"text": TEXT, "top": True}, 422, "top"),
    ("/api/conclusion", {"text": TEXT, "unknown": 1}, 422, "unknown"),
    ("/api/conclusion", {"text": TEXT, "silence": {"members": [99]}}, 400, "member 99 does not exist"),
    ("/api/conclusion", {"text": TEXT, "silence": {"members": [-1]}}, 422, "silence.members"),
    ("/api/conclusion", {"text": TEXT, "silence": {"members": "1"}}, 422, "silence.members"),
    ("/api/conclusion", {"text": TEXT, "silence": {"heads": [[0]]}}, 422, "silence.heads"),
    ("/api/conclusion", {"text": TEXT, "silence": {"heads": [[0, 1, 2]]}}, 422, "silence.heads"),
    ("/api/conclusion", {"text": TEXT, "silence": {"heads": [[2, 0]]}}, 400, "layer 2 does not exist"),
    ("/api/conclusion", {"text": TEXT, "silence": {"heads": [[0, 4]]}}, 400, "head 4 does not exist"),
    ("/api/explain", {"text": TEXT, "top": -1}, 422, "top"),
    ("/api/compare", {"text_a": TEXT}, 422, "text_b"),
    ("/api/compare", {"text_a": "", "text_b": TEXT}, 422, "text_a"),
    ("/api/model_view", {"text": TEXT, "top": 3}, 422, "top"),
    ("/api/model_view", {"text": TEXT, "silence": {"members": [99]}}, 400, "member 99 does not exist"),
    ("/api/model_view", {"text": TEXT, "silence": {"heads": [[0, 4]]}}, 400, "head 4 does not exist"),
    ("/api/head", {"text": TEXT, "layer": 0, "head": 0, "silence": {"members": [-1]}}, 422, "silence.members"),
    ("/api/head", {"text": TEXT, "layer": 0, "head": 0, "silence": {"heads": [[5, 0]]}}, 400, "layer 5 does not exist"),
    ("/api/head", {"text": TEXT, "layer": 2, "head": 0}, 400, "layer 2 does not exist: the model has 2 layers (0-1)"),
    ("/api/head", {"text": TEXT, "layer": 0, "head": 9}, 400, "head 9 does not exist"),
    ("/api/head", {"text": TEXT, "layer": -1, "head": 0}, 422, "layer"),
    ("/api/head", {"text": TEXT, "layer": 1.5, "head": 0}, 422, "layer"),
    ("/api/head", {"text": TEXT, "layer": 0}, 422, "head"),
    ("/api/head", {"text": TEXT, "layer": 0, "head": 0, "notation": "rows"}, 422, "notation"),
    ("/api/head", {"text": TEXT, "layer": 0, "head": 0, "rows": "some"}, 422, "rows"),
])
def test_bad_requests_get_4xx_and_a_message(client, path, body, status, words):
    assert words in error_of(post(client, path, body), status)


def test_text_past_the_model_context(model):
    with TestClient(create_app(model, Limits(max_tokens=10_000))) as c:
        message = error_of(post(c, "/api/conclusion", {"text": "ab " * 40}), 400)
    assert "context holds 64" in message


def test_one_silenced_pass_serves_the_conclusion_the_model_view_and_the_head(model, monkeypatch):
    """Silencing redrawn as the page does it (conclusion, model view, open head): one pass with the
    silencing, and the same answers, within float rounding, as an app that keeps no pass."""
    passes = []
    real = payloads.page_run
    monkeypatch.setattr(payloads, "page_run", lambda *a, **k: passes.append(a[2:] or k) or real(*a, **k))
    silencing = {"silence": {"members": [2], "heads": [[0, 1]]}}
    asks = [("/api/conclusion", {"text": TEXT}), ("/api/model_view", {"text": TEXT}),
            ("/api/head", {"text": TEXT, "layer": 1, "head": 2})]
    answers = {}
    for kept in (4, 0):
        with TestClient(create_app(model, Limits(runs_kept=kept))) as c:
            passes.clear()
            answers[kept] = [post(c, path, {**body, **silencing}).json() for path, body in asks]
            assert len(passes) == (2 if kept else 4)  # unsilenced (the conclusion's "before") and silenced
    (conclusion, view, head), (conclusion0, view0, head0) = answers[4], answers[0]
    for kept, off in zip(head["weights"], head0["weights"]):
        assert kept == pytest.approx(off, abs=1e-5)
    for row, row0 in zip(view["heads"], view0["heads"]):
        for cell, cell0 in zip(row, row0):
            assert [x for r in cell["weights"] for x in r] == pytest.approx([x for r in cell0["weights"] for x in r], abs=1e-3)
    got, want = conclusion["words"], conclusion0["words"]
    assert [w["id"] for w in got] == [w["id"] for w in want]
    assert [w["prob_after"] for w in got] == pytest.approx([w["prob_after"] for w in want], abs=1e-5)


def test_a_member_silenced_passes_only_the_rows_from_it_on(model, monkeypatch):
    """Silencing a member after the page's first views: the kept unsilenced pass gives the rows
    before the member, the new pass computes the rest, and the answers are those of an app that
    keeps no pass (every row computed), within float32 rounding."""
    from studygroup.model.model import Model

    text = "the cat sat on the mat and then the dog sat on the cat"
    T, j, L = len(model.ids(text)), 7, model.config.n_layers
    rows, real = [], Model._mlp
    monkeypatch.setattr(Model, "_mlp", lambda self, l, x, *a: rows.append(x.shape[1]) or real(self, l, x, *a))
    answers = {}
    for kept in (4, 0):
        with TestClient(create_app(model, Limits(runs_kept=kept))) as c:
            post(c, "/api/conclusion", {"text": text}).raise_for_status()
            rows.clear()
            answers[kept] = [post(c, path, {"text": text, "silence": {"members": [j]}, **extra}).json() for path, extra in
                             (("/api/conclusion", {}), ("/api/head", {"layer": L - 1, "head": 1}))]
            assert rows[:L] == ([T - j] if kept else [T]) * L
    (conclusion, head), (conclusion0, head0) = answers[4], answers[0]
    assert [w["prob_after"] for w in conclusion["words"]] == pytest.approx([w["prob_after"] for w in conclusion0["words"]], abs=1e-5)
    assert [x for r in head["weights"] for x in r] == pytest.approx([x for r in head0["weights"] for x in r], abs=1e-5)


def test_by_default_the_app_takes_the_whole_context(model):
    """No limit of the app's own below the model's context: a text of exactly the context is
    taken whole, one token more is refused with a message that says why."""
    context = model.config.context_length
    with TestClient(create_app(model)) as c:
        assert c.get("/api/info").json()["limits"]["max_tokens"] == context
        ids = [model.tokenize("ab")[0]] * context
        text = model.tokenizer.decode(ids)
        assert len(model.tokenize(text)) == context
        d = post(c, "/api/conclusion", {"text": text}).json()
        assert len(d["tokens"]) == context
        assert "context holds 64" in error_of(post(c, "/api/conclusion", {"text": text + "ab"}), 400)


JSON = {"content-type": "application/json"}


@pytest.mark.parametrize("content, headers, words", [
    (b"{not json", JSON, "not valid JSON (error at character 1)"),
    (b'{"text": "\xff"}', JSON, "not valid JSON (UTF-8 text)"),  # bytes that are not UTF-8
    ('{"text": "I have a lot"}'.encode("utf-16"), JSON, "not valid JSON (UTF-8 text)"),  # JSON, but UTF-16
    ('{"text": "I have a lot"}'.encode("utf-32-le"), JSON, "not valid JSON (UTF-8 text)"),
    (b"[1, 2]", JSON, "must be a JSON object"),
    (b'"text"', JSON, "must be a JSON object"),
    (b"text=hello", {"content-type": "application/x-www-form-urlencoded"},
     "Content-Type: application/json (got 'application/x-www-form-urlencoded')"),
    (b'{"text": "a"}', {"content-type": "text/plain"}, "Content-Type: application/json (got 'text/plain')"),
    (b"", JSON, "has no body"),
])
def test_malformed_bodies_say_what_to_send(client, content, headers, words):
    message = error_of(client.post("/api/conclusion", content=content, headers=headers), 422)
    assert words in message and ('{"text": "I have a lot"}' in message or "Content-Type" in words)


def test_a_body_the_compare_endpoint_cannot_use_gets_its_own_example(client):
    message = error_of(client.post("/api/compare", content=b"[]", headers=JSON), 422)
    assert '"text_a"' in message and '"text_b"' in message


def test_compare_names_the_text_at_fault(client):
    assert error_of(post(client, "/api/compare", {"text_a": TEXT, "text_b": " \n"}), 400).startswith("text_b: ")
    assert error_of(post(client, "/api/compare", {"text_a": "ab " * 30, "text_b": TEXT}), 400).startswith("text_a: ")


def test_text_past_the_model_context_names_the_apps_own_limit(client, model):
    """A text longer than the model's context is also longer than the app's limit: that is the one to name."""
    text = "ab " * 40
    assert len(model.tokenize(text)) > model.config.context_length > 48
    assert "at most 48" in error_of(post(client, "/api/conclusion", {"text": text}), 400)


def test_head_requests_where_get_works(client):
    for path in ("/", "/static/page.js", "/api/info"):
        got, head = client.get(path), client.head(path)
        assert head.status_code == 200 and head.content == b"", path
        assert head.headers["content-type"] == got.headers["content-type"]
    assert client.head("/api/nothing").status_code == 404


def test_a_body_that_stops_arriving_gets_408(model):
    """A client that sends half a body and stalls is answered (and its connection freed)."""
    import asyncio

    app = create_app(model, Limits(body_stall_s=0.2))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/api/conclusion", "raw_path": b"/api/conclusion", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"content-length", b"60")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    parts = [{"type": "http.request", "body": b'{"text": "a", ', "more_body": True}]
    sent = []

    async def receive():
        if parts:
            return parts.pop(0)
        await asyncio.sleep(60)  # the rest never comes

    async def send(message):
        sent.append(message)

    start = time.perf_counter()
    # in a thread of its own: another test (Playwright's) may leave an event loop running in this one
    worker = threading.Thread(target=lambda: asyncio.run(asyncio.wait_for(app(scope, receive, send), 20)))
    worker.start()
    worker.join()
    assert time.perf_counter() - start < 10
    assert sent[0]["status"] == 408
    assert "stopped arriving" in json.loads(b"".join(m.get("body", b"") for m in sent[1:]))["error"]


def test_unknown_route_and_method(client):
    error_of(client.get("/api/nothing"), 404)
    assert error_of(client.get("/api/conclusion"), 405) == "method not allowed"


def test_body_over_the_limit_is_refused_with_413(client):
    big = json.dumps({"text": "a" * (1030 * 1024)}).encode()
    assert "1024 KiB" in error_of(client.post("/api/conclusion", content=big, headers={"content-type": "application/json"}), 413)


def test_streamed_body_over_the_limit_is_refused_with_413(client):
    def chunks():  # no Content-Length: the limit is counted as the body arrives
        yield b'{"text": "'
        for _ in range(1030):
            yield b"a" * 1024
        yield b'"}'
    error_of(client.post("/api/conclusion", content=chunks(), headers={"content-type": "application/json"}), 413)


def test_lying_content_length_is_refused(client):
    error_of(client.post("/api/conclusion", content=b"{}", headers={"content-type": "application/json",
                                                                     "content-length": "9999999"}), 413)


def test_host_check_on_loopback(model):
    with TestClient(create_app(model, hosts=server.LOOPBACK_HOSTS), base_url="http://127.0.0.1:8000") as c:
        assert c.get("/api/info").status_code == 200
        assert c.get("/api/info", headers={"host": "localhost:8000"}).status_code == 200
        assert "Host" in error_of(c.get("/api/info", headers={"host": "evil.example:8000"}), 400)


@pytest.mark.parametrize("host", ["localhost:evil", "localhost:", "127.0.0.1:80a", "[::1]:8000:1", "localhost:123456"])
def test_host_check_reads_the_port_too(model, host):
    """The fault sweep: `Host: localhost:evil` was answered 200 (only the name before the last colon was read)."""
    with TestClient(create_app(model, hosts=server.LOOPBACK_HOSTS), base_url="http://127.0.0.1:8000") as c:
        assert error_of(c.get("/api/info", headers={"host": host}), 400) == (
            f"unexpected Host header {host!r}: open the address the server printed")
        assert c.get("/api/info", headers={"host": "[::1]:8000"}).status_code == 200


# ---- one model, one computation at a time, a bounded queue ---------------------------------------------
@pytest.fixture
def slow_app(model, monkeypatch):
    """An app whose `conclusion` blocks until released, counting its calls."""
    release, calls = threading.Event(), []
    real = payloads.conclusion

    def slow(*args, **kwargs):
        calls.append(args[1])
        assert release.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(payloads, "conclusion", slow)
    app = create_app(model, Limits(max_waiting=2, wait_timeout=10))
    return app, release, calls


def test_busy_server_queues_a_bounded_number_then_answers_503(slow_app):
    app, release, calls = slow_app
    results = {}
    with TestClient(app) as c:
        def ask(i):
            results[i] = c.post("/api/conclusion", json={"text": f"text {i}"})
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]  # 1 running + 2 waiting
        for t in threads:
            t.start()
        deadline = time.time() + 10
        while app.state.service.gate.pending < 3 and time.time() < deadline:
            time.sleep(0.02)
        assert app.state.service.gate.pending == 3
        refused = c.post("/api/conclusion", json={"text": "one too many"})
        assert "busy" in error_of(refused, 503) and refused.headers["retry-after"] == "5"
        release.set()
        for t in threads:
            t.join(30)
    assert sorted(r.status_code for r in results.values()) == [200, 200, 200]
    assert app.state.service.gate.pending == 0 and len(calls) == 3


def test_one_computation_at_a_time(model, monkeypatch):
    running, most = [0], [0]
    real = payloads.conclusion

    def counted(*args, **kwargs):
        running[0] += 1
        most[0] = max(most[0], running[0])
        time.sleep(0.05)
        try:
            return real(*args, **kwargs)
        finally:
            running[0] -= 1

    monkeypatch.setattr(payloads, "conclusion", counted)
    with TestClient(create_app(model)) as c:
        threads = [threading.Thread(target=c.post, args=("/api/conclusion",), kwargs={"json": {"text": f"t {i}"}})
                   for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert most[0] == 1


def test_waiting_too_long_gets_503(slow_app, model):
    app, release, _ = slow_app
    app.state.service.gate.wait_timeout = 0.3
    with TestClient(app) as c:
        first = threading.Thread(target=c.post, args=("/api/conclusion",), kwargs={"json": {"text": "first"}})
        first.start()
        time.sleep(0.2)
        assert "busy" in error_of(c.post("/api/conclusion", json={"text": "second"}), 503)
        release.set()
        first.join(30)


def test_answers_are_cached_and_served_without_waiting(slow_app):
    app, release, calls = slow_app
    release.set()
    with TestClient(app) as c:
        a = c.post("/api/conclusion", json={"text": TEXT})
        b = c.post("/api/conclusion", json={"text": TEXT})
    assert a.status_code == b.status_code == 200 and a.content == b.content and len(calls) == 1


def test_cache_is_bounded():
    cache = server_guard.LRU(entries=3, max_bytes=10)
    for i in range(5):
        cache.put(i, b"x" * 3, 3)
    assert cache.get(0) is None and cache.get(4) == b"xxx" and cache.size <= 10
    cache.put("big", b"x" * 10, 10)
    assert cache.size <= 10 and cache.get(4) is None


def test_cache_is_safe_to_share_between_threads():
    """The event loop reads it while the worker thread puts what it computed."""
    cache, errors = server_guard.LRU(entries=4, max_bytes=10**9), []

    def hammer(seed):
        try:
            for i in range(20_000):
                key = (seed * i) % 7
                cache.put(key, i, 1) if i % 2 else cache.get(key)
        except Exception as e:  # a KeyError from a check-then-act race
            errors.append(e)

    threads = [threading.Thread(target=hammer, args=(s,)) for s in (1, 3, 5)]
    [t.start() for t in threads], [t.join() for t in threads]
    assert errors == [] and cache.size == len(cache._d) <= 4


def test_internal_errors_are_json_500(model, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")
    monkeypatch.setattr(payloads, "conclusion", broken)
    with TestClient(create_app(model), raise_server_exceptions=False) as c:
        assert "RuntimeError" in error_of(c.post("/api/conclusion", json={"text": TEXT}), 500)


# ---- the serve command ------------------------------------------------------------------------------
def test_serve_arguments_and_address_checks():
    import argparse

    from studygroup.web import serve

    parser = argparse.ArgumentParser()
    serve.add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--port", "0", "--host", "localhost", "--model", "m.gguf"])
    assert (args.port, args.host, args.model, args.max_tokens, args.warm) == (0, "localhost", "m.gguf", None, True)
    assert args.handler is serve.main
    assert serve.is_loopback("127.0.0.2") and serve.is_loopback("[::1]") and not serve.is_loopback("192.168.1.4")
    sock = serve.bind("127.0.0.1", 0)
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", serve.url(sock))
        with pytest.raises(studygroup.InputError, match="cannot listen"):
            serve.bind("127.0.0.1", sock.getsockname()[1])
    finally:
        sock.close()
    with pytest.raises(studygroup.InputError, match="not a port"):
        serve.bind("127.0.0.1", 70000)


def test_served_connections_send_small_writes_at_once():
    """asyncio turns Nagle's algorithm off on the connections of a socket that says it is TCP:
    bind's must, or a small answer's body waits for the ACK of its headers (~40 ms)."""
    import asyncio
    import socket

    from studygroup.web import serve

    async def accept_one() -> int:
        sock = serve.bind("127.0.0.1", 0)
        accepted = asyncio.get_running_loop().create_future()

        class Protocol(asyncio.Protocol):
            def connection_made(self, transport):
                accepted.set_result(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Protocol, sock=sock)
        try:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            nodelay = await asyncio.wait_for(accepted, 10)
            writer.close()
            return nodelay
        finally:
            server.close()

    got = {}  # in a thread of its own: a test before this one may leave an event loop running here (Playwright's)
    worker = threading.Thread(target=lambda: got.update(nodelay=asyncio.run(accept_one())))
    worker.start()
    worker.join(30)
    assert got["nodelay"] != 0


# ---- the real default model ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_client(default_model):
    with TestClient(create_app(default_model)) as c:
        yield c


def test_default_model_concludes_of(real_client):
    d = post(real_client, "/api/conclusion", {"text": DEFAULT_TEXT}).json()
    assert d["tokens"] == ["C", "ash", "␣or", "␣credit", "␣card", "?", "␣I", "␣have", "␣a", "␣lot"]
    assert d["top"][0]["token"] == "␣of" and d["top"][0]["prob"] > 0.5
    s = post(real_client, "/api/conclusion", {"text": DEFAULT_TEXT, "silence": {"members": [8]}}).json()
    of = next(w for w in s["words"] if w["token"] == "␣of")
    assert of["prob_after"] < of["prob_before"]  # without "␣a" the group is less sure of "␣of"


def test_default_model_heads_and_grouping(real_client):
    d = post(real_client, "/api/head", {"text": "I have a lot", "layer": 24, "head": 7, "notation": "columns"}).json()
    assert d["kv_head"] == 2 and d["shares_keys_with"] == [6, 7, 8] and d["check"]["agree"]
    assert all(sum(d["weights"][j][i] for j in range(len(d["tokens"]))) == pytest.approx(1, abs=1e-5)
               for i in range(len(d["tokens"])))
    error = error_of(post(real_client, "/api/head", {"text": "I have a lot", "layer": 30, "head": 0}), 400)
    assert error == "layer 30 does not exist: the model has 30 layers (0-29)"
    mv = post(real_client, "/api/model_view", {"text": "I have a lot"}).json()
    assert (len(mv["heads"]), len(mv["heads"][0]), mv["n_kv_heads"]) == (30, 9, 3)


def test_serve_command_prints_its_url_and_serves(tiny_model):
    import os
    import subprocess
    import sys

    import httpx

    cmd = [sys.executable, "-m", "studygroup.cli", "serve", "--model", str(tiny_model.path), "--port", "0", "--no-warm"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        line = proc.stdout.readline()
        url = re.search(r" at (http://127\.0\.0\.1:\d+/)", line).group(1)
        info = httpx.get(url + "api/info", timeout=30, trust_env=False).json()
        assert info["model"]["name"] == "tiny-random-llama"
        assert httpx.get(url + "api/info", headers={"host": "example.com"}, trust_env=False).status_code == 400
    finally:
        proc.terminate()
        proc.wait(15)


def test_serve_warns_when_not_on_loopback_and_only_once_it_listens(monkeypatch, capsys):
    import argparse

    from studygroup import progress
    from studygroup.model import model as model_module
    from studygroup.web import serve

    def stop(*args, **kwargs):
        raise studygroup.InputError("stopped after listening, in a test")

    monkeypatch.setattr(model_module, "load", stop)
    args = argparse.Namespace(host="0.0.0.0", port=0, model=None, max_tokens=256, warm=False)
    with pytest.raises(studygroup.InputError, match="stopped after listening"):
        serve.main(args)
    assert "warning: listening on 0.0.0.0" in capsys.readouterr().err
    assert progress.shown()  # announcements hidden while serving only, not for the rest of the process
    args.host = "127.0.0.1"
    with pytest.raises(studygroup.InputError, match="stopped after listening"):
        serve.main(args)
    assert "warning" not in capsys.readouterr().err
    args.host = "no.such.host.invalid"  # cannot listen there: refused, and no warning first
    with pytest.raises(studygroup.InputError, match="cannot listen on no.such.host.invalid"):
        serve.main(args)
    assert "warning" not in capsys.readouterr().err
