"""The lesson's sections on a text (study.lesson_sections): /api/lesson and `studygroup lesson TEXT
--json` give the same numbers, and every one equals a float64 numpy recomputation from the run's
records and the file's weights (Hugging Face layout, as the tiny model's fixture wrote them)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from fastapi.testclient import TestClient

from studygroup.cli import DEFAULT_TEXT, main
from studygroup.formulas.softmax_example import softmax_example
from studygroup.study import lesson_sections as ls
from studygroup.study.roles import SINK_SHARE, SINK_WEIGHT
from studygroup.formats import percent, quote
from studygroup.web.app import create_app

TEXT = "I have a lot. Cash or card"


@pytest.fixture(scope="module")
def client(model):
    with TestClient(create_app(model)) as c:
        yield c


def np64(x):
    return np.asarray(x, dtype=np.float64)


def rms(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def test_api_numbers_equal_a_numpy_recomputation(client, model, tiny_model):
    layer, head, query, key = 1, 3, 20, 7
    d = client.post("/api/lesson", json={"text": TEXT, "layer": layer, "head": head, "query": query, "key": key}).json()
    s = {x["name"]: x for x in d["sections"]}
    assert [x["name"] for x in d["sections"]] == list(ls.SECTIONS)
    run = model.run(TEXT, record="all")
    sd, c = {k: np64(v) for k, v in tiny_model.hf_state_dict.items()}, tiny_model.hf_config
    ids = model.tokenize(TEXT)
    E0 = rms(sd["model.embed_tokens.weight"][ids], sd["model.layers.0.input_layernorm.weight"], c["rms_norm_eps"])
    assert np.allclose(s["embedding"]["query_row"], E0[query], atol=1e-5)
    EL = np64(run[f"layers.{layer}.E"])  # (T, d_model) the layer's input, recorded
    assert np.allclose(s["layer_input"]["query_row"], EL[query], atol=1e-6)
    assert np.allclose(s["layer_input"]["norms"], np.linalg.norm(EL, axis=-1), atol=1e-5)
    d_head = c["hidden_size"] // c["num_attention_heads"]
    kv = head // (c["num_attention_heads"] // c["num_key_value_heads"])
    W_V = sd[f"model.layers.{layer}.self_attn.v_proj.weight"][kv * d_head:(kv + 1) * d_head]  # (d_head, d_model)
    assert np.allclose(s["qkv"]["v"], EL @ W_V.T, atol=1e-4)  # V = E·W_V
    W_Q = sd[f"model.layers.{layer}.self_attn.q_proj.weight"][head * d_head:(head + 1) * d_head]
    q_pre = EL @ W_Q.T  # (T, d_head) Q = E·W_Q, before RoPE
    assert np.allclose(np64(run.head(layer, head).q_pre_rope), q_pre, atol=1e-4)
    q, k, v = (np64(s["qkv"][n]) for n in "qkv")  # (T, d_head) each
    # another float32 pass of the same numbers, whose multiplies may block the rows otherwise: equal
    # to float32 rounding at the vectors' scale (up to ~3e-6 here, with |q| up to ~5)
    assert np.allclose(q, np64(run.head(layer, head).q), rtol=0, atol=1e-5)
    assert s["scores"]["terms"] == pytest.approx(list(q[query] * k[key]), rel=1e-12)
    assert s["scores"]["sqrt_d_k"] == math.sqrt(d_head)
    assert s["scores"]["score"] == pytest.approx(q[query] @ k[key] / math.sqrt(d_head), abs=1e-5)
    T = len(ids)
    scores = q @ k.T / math.sqrt(d_head)  # (T, T)
    scores[np.triu_indices(T, 1)] = -np.inf
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)  # (T, T) softmax per row
    grid = np.array([[np.nan if x is None else x for x in row] for row in s["scores"]["grid"]])
    assert np.allclose(np.where(np.isinf(scores), np.nan, scores), grid, atol=1e-5, equal_nan=True)
    assert np.allclose(s["softmax"]["weights"], w[query], atol=1e-6)
    assert s["softmax"]["scores"][query + 1:] == [None] * (T - query - 1)
    heavy = (w[1:] >= SINK_WEIGHT).mean(0) >= SINK_SHARE  # question 0 hears only itself: left out
    assert s["softmax"]["sinks"] == list(np.flatnonzero(heavy))
    assert s["softmax"]["sink_weight"] == pytest.approx(w[query, heavy].sum(), abs=1e-6)
    assert np.allclose(s["weighted_sum"]["output"], w[query] @ v, atol=1e-5)  # Σ_j w_j v_j
    W_O = sd[f"model.layers.{layer}.self_attn.o_proj.weight"][:, head * d_head:(head + 1) * d_head]  # (d_model, d_head)
    assert np.allclose(s["weighted_sum"]["contributions"], w[query] * np.linalg.norm(v @ W_O.T, axis=-1), atol=1e-4)
    logits = np64(run.last_logits).ravel()
    p = np.exp(logits - logits.max())
    p /= p.sum()
    assert [x["id"] for x in s["conclusion"]["top"]] == list(np.argsort(-p)[:ls.TOP])
    assert s["conclusion"]["top"][0]["prob"] == pytest.approx(p.max(), rel=1e-5)  # two float32 passes (~2e-6 apart)
    assert s["conclusion"]["shorter_text"] == "Cash or card"


def np_weights(run, layer, head):
    """(T, T) softmax per row of q·kᵀ/√d_head from the run's recorded q and k, float64, causal."""
    q, k = np64(run.head(layer, head).q), np64(run.head(layer, head).k)
    s = q @ k.T / math.sqrt(q.shape[1])
    s[np.triu_indices(len(q), 1)] = -np.inf
    w = np.exp(s - s.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def np_top(model, text, n):
    logits = np64(model.run(text, record="none").last_logits).ravel()
    p = np.exp(logits - logits.max())
    p /= p.sum()
    return list(np.argsort(-p)[:n]), p


def test_lesson_without_text_is_the_article_pair(client, capsys, model, tiny_model):
    """`lesson` alone: the sections on the article's text, its conclusion beside “I have a lot”."""
    assert main(["lesson", "--json", "--top", "3", "--model", str(tiny_model.path)]) == 0
    d = json.loads(capsys.readouterr().out)
    api = client.post("/api/lesson", json={"text": DEFAULT_TEXT}).json()
    assert (d["text"], d["layer"], d["head"]) == (DEFAULT_TEXT, api["layer"], api["head"])
    assert [s["name"] for s in d["sections"]] == list(ls.SECTIONS)
    s = {x["name"]: x for x in d["sections"]}
    w = np_weights(model.run(DEFAULT_TEXT, record="all"), d["layer"], d["head"])
    assert np.allclose(s["softmax"]["weights"], w[-1], atol=1e-6) and d["query"] == len(d["tokens"]) - 1
    assert d["key"] == int(np.argmax(w[-1]))
    assert s["conclusion"]["shorter_text"] == "I have a lot"
    for words, text in ((s["conclusion"]["top"], DEFAULT_TEXT), (s["conclusion"]["shorter_top"], "I have a lot")):
        ids, p = np_top(model, text, 3)
        assert [x["id"] for x in words] == ids and words[0]["prob"] == pytest.approx(p.max(), rel=1e-6)


def test_lesson_text_and_html_show_the_recomputed_numbers(capsys, model, tiny_model, tmp_path):
    layer, head = 1, 3
    w = np_weights(model.run(TEXT, record="all"), layer, head)[-1]  # (T,) the last question's row
    j = int(np.argmax(w))
    argv = ["lesson", TEXT, "--head", f"{layer}.{head}", "--model", str(tiny_model.path)]
    assert main([*argv, "--section", "6"]) == 0
    assert f"member {j} gets weight {w[j]:.4g}." in capsys.readouterr().out.replace("\n  ", " ")
    page = tmp_path / "lesson.html"
    assert main([*argv, "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    softmax = html[html.index('<section id="s6">'):html.index('<section id="s7">')]
    example = softmax_example()
    shaded = len(w) + len(example.alone.weights) + len(example.after_question.weights)  # the row, the two scenes
    assert all(f">{x:.4g}</td>" in softmax for x in w) and softmax.count("background: rgb") == shaded
    assert '<a href="#s5" rel="prev">' in softmax and '<a href="#s7" rel="next">' in softmax


def test_html_escapes_the_text_and_its_tokens(model):
    from studygroup.views.lesson_html import lesson_html

    evil = "<b>&amp;</b>"
    page = lesson_html(ls.lesson_sections(model, evil, 0, 0))
    assert "<b>" not in page and "&lt;b&gt;&amp;amp;&lt;/b&gt;" in page
    assert "&lt;" in page[page.index('<section id="s1">'):page.index('<section id="s2">')]  # the tokens, escaped


def test_cli_json_equals_the_api(client, capsys, tiny_model):
    api = client.post("/api/lesson", json={"text": TEXT, "layer": 0, "head": 1}).json()
    assert main(["lesson", TEXT, "--head", "0.1", "--json", "--model", str(tiny_model.path)]) == 0
    assert json.loads(capsys.readouterr().out) == api


def test_default_head_is_decisive_and_not_resting_on_a_sink(client, model):
    d = client.post("/api/lesson", json={"text": TEXT}).json()
    ranked = [(h["layer"], h["head"]) for h in client.post("/api/explain", json={"text": TEXT}).json()["heads"]]
    resting = []
    for l, h in ranked:
        w = np64(model.run(TEXT, record="all").head(l, h).weights)
        heavy = (w >= SINK_WEIGHT).mean(0) >= SINK_SHARE
        heavy[0] = True
        resting.append(w[-1, heavy].sum() >= 0.5)
    expected = ranked[resting.index(False)] if False in resting else ranked[0]
    assert (d["layer"], d["head"]) == expected
    assert client.post("/api/explain", json={"text": TEXT}).json()["first_head"] == list(expected)  # the page's first head
    assert d["query"] == len(d["tokens"]) - 1


def test_bad_requests_are_refused_in_one_line(client):
    r = client.post("/api/lesson", json={"text": TEXT, "layer": 1})
    assert r.status_code == 400 and "both layer and head" in r.json()["error"]
    r = client.post("/api/lesson", json={"text": TEXT, "layer": 0, "head": 0, "query": 99})
    assert r.status_code == 400 and "99" in r.json()["error"]
    r = client.post("/api/lesson", json={"text": TEXT, "layer": 9, "head": 0})
    assert r.status_code == 400 and "layer 9 does not exist" in r.json()["error"]


def test_a_key_after_the_query_is_refused_as_why_refuses_it(client):
    """The fault sweep: {"query": 0, "key": 2} gave 200 and a score for a pair the causal mask hides."""
    pair = {"text": TEXT, "layer": 0, "head": 0, "query": 0, "key": 2}
    lesson, why = client.post("/api/lesson", json=pair), client.post("/api/why", json=pair)
    assert lesson.status_code == why.status_code == 400
    assert lesson.json() == why.json() == {"error": "member 2 comes after member 0: a question hears only the members "
                                                    "up to itself (0-0); give a key of 0 or less, or a later query"}
    assert client.post("/api/lesson", json={**pair, "key": 0}).json()["key"] == 0  # the question hears itself


def test_a_gemma_lesson_names_its_per_head_norm(tiny_gemma3, model):
    import studygroup

    gemma = studygroup.load(tiny_gemma3.path, cache=False)
    d = ls.lesson_sections(gemma, "the tin", 0, 0)
    qkv = d.sections[ls.SECTIONS.index("qkv")]
    assert "normalised per head" in qkv["formula_paper"]
    assert np.allclose(qkv["q"], np64(gemma.run("the tin", record="all").head(0, 0).q), atol=1e-6)
    llama = ls.lesson_sections(model, "the tin", 0, 0).sections[ls.SECTIONS.index("qkv")]
    assert "normalised per head" not in llama["formula_paper"]


def test_a_long_text_shows_the_rows_of_some_members(client, model, tiny_model, tmp_path, monkeypatch):
    """Past VECTORS_MAX_T members (here 12: the tiny model's window is 64) Q, K and V hold that
    many members' rows (the first four, the answer and its neighbours, the question and those
    before it), each the run's own; the CLI's HTML reads the question's and the answer's rows."""
    monkeypatch.setattr(ls, "VECTORS_MAX_T", 12)
    layer, head, query, key = 1, 2, 22, 9
    d = client.post("/api/lesson", json={"text": TEXT, "layer": layer, "head": head, "query": query, "key": key}).json()
    T, qkv = len(d["tokens"]), d["sections"][ls.SECTIONS.index("qkv")]
    assert qkv["members"] == [0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 22]
    h = model.run(TEXT, record="all").head(layer, head)
    for name in "qkv":
        assert np.allclose(qkv[name], np64(getattr(h, name))[qkv["members"]], rtol=0, atol=1e-5)
    assert any(f"Of the {T} members, the rows of 12 are shown here (members 0-3, 6-12, 22)" in x for x in qkv["says"])
    page = tmp_path / "long.html"
    argv = ["lesson", TEXT, "--head", f"{layer}.{head}", "--model", str(tiny_model.path)]
    assert main([*argv, "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    q_html = html[html.index('<section id="s4">'):html.index('<section id="s5">')]
    same = client.post("/api/lesson", json={"text": TEXT, "layer": layer, "head": head}).json()  # as the CLI asks
    rows = same["sections"][ls.SECTIONS.index("qkv")]
    q_last = ", ".join(f"{x:.4g}" for x in rows["q"][rows["members"].index(T - 1)])  # the last member's question
    assert f"q_{T - 1} (" in q_html and f"= [{q_last}]" in q_html


def test_every_section_gives_both_notations_and_names_its_matrices(client):
    """Each section's formula in rows (the paper) and in columns (the video); the weights W_Q, W_K,
    W_V and √d_k written as text; why the video's drawn form does not fit the shapes."""
    d = client.post("/api/lesson", json={"text": TEXT, "layer": 1, "head": 0}).json()
    for s in d["sections"]:
        assert s["formula_paper"] and s["formula_columns"] and s["formula_paper"] != s["formula_columns"], s["name"]
    s = {x["name"]: x for x in d["sections"]}
    assert "Q = E·W_Q, K = E·W_K, V = E·W_V" in s["qkv"]["formula_paper"]
    assert "Q = W_Qᵀ·E, K = W_Kᵀ·E, V = W_Vᵀ·E" in s["qkv"]["formula_columns"]
    assert "W_Q, W_K and W_V are d_model × d_head" in s["qkv"]["says"][0]
    assert "√d_k = √8" in s["scores"]["says"][0]
    assert "softmax per row" in s["softmax"]["formula_paper"] and "softmax per column" in s["softmax"]["formula_columns"]
    assert "V softmax(KᵀQ/√d_k)" in s["weighted_sum"]["formula_columns"]
    assert any("softmax(KᵀQ/√d_k)·V does not fit the shapes" in x for x in s["weighted_sum"]["says"])


def test_the_terminal_shows_each_sections_numbers(client, capsys, tiny_model):
    """`lesson TEXT --section N` prints the numbers the section shows, each equal to the API's:
    the question's q and the answer's k and v, the dot product term by term and its sum, the
    question's largest weights, the next words."""
    layer, head = 1, 3
    d = client.post("/api/lesson", json={"text": TEXT, "layer": layer, "head": head}).json()
    s, i, j = {x["name"]: x for x in d["sections"]}, d["query"], d["key"]
    argv = ["lesson", TEXT, "--head", f"{layer}.{head}", "--model", str(tiny_model.path)]

    def section(n):
        assert main([*argv, "--section", str(n)]) == 0
        return capsys.readouterr().out.replace("\n  ", " ")

    qkv, rows = section(4), s["qkv"]["members"]
    for name, m in (("q", i), ("k", j), ("v", j)):
        first = ", ".join(f"{x:.4g}" for x in s["qkv"][name][rows.index(m)][:8])  # the first 8 of d_head = 8
        assert f"{name}_{m} “" in qkv and f"= [{first}]" in qkv
    scores = section(5)
    assert f"sum of the 8 products {s['scores']['dot']:.6g}; ÷ √d_k = 2.828: score {s['scores']['score']:.6g}" in scores
    assert all(f"{x:.4g}" in scores for x in s["scores"]["terms"])
    softmax = section(6)
    w = s["softmax"]["weights"]
    top = sorted(range(len(w)), key=lambda m: -w[m])[:8]
    assert [f"{w[m]:.4g}" in softmax for m in top] == [True] * len(top)
    conclusion = section(8)
    words = ", ".join(f"{quote(x['token'])} {percent(x['prob'])}" for x in s["conclusion"]["top"])
    assert f"next word: {words}" in conclusion


def test_softmax_and_the_weighted_sum_are_worked_out_with_the_runs_numbers(client, model):
    """The softmax as exp(s_j − max) / Σ exp, one coordinate t of the weighted sum as Σ_j w_j · v_j[t],
    and each Q/K/V drawing's colour scale: each equal to a float64 numpy recomputation."""
    layer, head, query = 1, 3, 20
    d = client.post("/api/lesson", json={"text": TEXT, "layer": layer, "head": head, "query": query}).json()
    s = {x["name"]: x for x in d["sections"]}
    q, k, v = (np64(s["qkv"][n]) for n in "qkv")  # (T, d_head) each: every member of this short text
    scores = q[query] @ k[:query + 1].T / math.sqrt(q.shape[1])  # (query + 1,) the members it hears
    sm = s["softmax"]
    assert sm["shift"] == pytest.approx(scores.max(), abs=1e-5)
    exps = np.exp(np64(sm["scores"][:query + 1]) - sm["shift"])
    assert sm["exps"][:query + 1] == pytest.approx(list(exps), rel=1e-12) and sm["exps"][query + 1:] == [None] * (len(q) - query - 1)
    assert sm["exp_sum"] == pytest.approx(exps.sum(), rel=1e-12)
    assert np.allclose(exps / sm["exp_sum"], sm["weights"][:query + 1], atol=1e-6)
    assert f"{sm['exp_sum']:.4g}" in " ".join(sm["says"])
    ws, w = s["weighted_sum"], np64(sm["weights"])
    t = int(np.argmax(np.abs(ws["output"])))
    assert ws["t"] == t and ws["v_t"][:query + 1] == pytest.approx(list(v[:query + 1, t]), rel=1e-6)
    assert ws["terms"][:query + 1] == pytest.approx(list(w[:query + 1] * v[:query + 1, t]), rel=1e-6)
    assert ws["terms_sum"] == pytest.approx(ws["output"][t], abs=1e-5) and ws["v_t"][query + 1:] == [None] * (len(q) - query - 1)
    assert f"t = {t}" in " ".join(ws["says"])
    assert s["qkv"]["scales"] == pytest.approx({n: float(np.abs(x).max()) for n, x in zip("qkv", (q, k, v))}, rel=1e-6)


def test_the_terminal_and_the_html_work_out_the_softmax_and_one_coordinate(client, capsys, tiny_model, tmp_path):
    layer, head = 1, 3
    d = client.post("/api/lesson", json={"text": TEXT, "layer": layer, "head": head}).json()
    s, i = {x["name"]: x for x in d["sections"]}, d["query"]
    argv = ["lesson", TEXT, "--head", f"{layer}.{head}", "--model", str(tiny_model.path)]
    sm, ws = s["softmax"], s["weighted_sum"]
    heard = [m for m, x in enumerate(sm["scores"]) if x is not None]
    assert main([*argv, "--section", "6"]) == 0
    out = capsys.readouterr().out.replace("\n  ", " ")
    top = sorted(heard, key=lambda m: -sm["weights"][m])[:8]
    assert all(f"{sm['exps'][m]:.4g}" in out for m in top) and f"Σ of the {len(heard)} exps {sm['exp_sum']:.6g}" in out
    assert main([*argv, "--section", "7"]) == 0
    out = capsys.readouterr().out.replace("\n  ", " ")
    t = ws["t"]
    assert f"output_{i}[{t}] = Σ_j w_j · v_j[{t}]" in out
    largest = sorted(heard, key=lambda m: -abs(ws["terms"][m]))[:8]
    assert all(f"{ws['terms'][m]:.4g}" in out and f"{ws['v_t'][m]:.4g}" in out for m in largest)
    assert f"sum of the {len(heard)} terms {ws['terms_sum']:.6g}; the model's output_{i}[{t}] {ws['output'][t]:.6g}" in out
    page = tmp_path / "lesson.html"
    assert main([*argv, "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    softmax, weighted = (html[html.index(f'<section id="s{n}">'):html.index(f'<section id="s{n + 1}">')] for n in (6, 7))
    assert all(f">{sm['exps'][m]:.4g}</td>" in softmax for m in heard) and f">{sm['exp_sum']:.4g}</td>" in softmax
    assert all(f">{ws['terms'][m]:.4g}</td>" in weighted and f">{ws['v_t'][m]:.4g}</td>" in weighted for m in heard)
    assert f">{ws['terms_sum']:.4g}</td>" in weighted and f"output_{i}[{t}] = Σ_j w_j · v_j[{t}]" in weighted



def test_a_head_not_resting_on_a_sink_is_not_ablated(model):
    """The tiny model's heads have no sink (random weights): no question rests on one (recomputed
    from the weights here), so no section measures an ablation or speaks of one."""
    run = model.run(TEXT, record="all")
    for layer, head in ((0, 0), (1, 3)):
        w = np64(run.head(layer, head).weights)  # (T, T)
        heavy = (w >= SINK_WEIGHT).mean(0) >= SINK_SHARE
        heavy[0] = True
        assert w[-1, heavy].sum() < 0.5
        soft = ls.lesson_sections(model, TEXT, layer, head).section(6)
        assert soft["ablation"] is None and "ablation" not in " ".join(soft["says"])
