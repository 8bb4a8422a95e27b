"""`head` over a window of its grid: the same cells as the whole grid, the same numbers as an
independent float64 computation, a refusal past 256 members without a window, text within 100
lines, one-line errors for bad windows, and the web API's rows/keys."""
import json
import math

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

import studygroup
from studygroup.cli import main
from studygroup.errors import WindowError
from studygroup.study import window as window_
from studygroup.study.head import head_view
from studygroup.study.mask_reasons import SILENCED
from studygroup.web.app import Limits, create_app
from studygroup.model.interventions import Interventions
from conftest import write_tiny_gguf

SHORT = "the tin can hold an ear of tea"  # 24 members on the tiny model
LONG = " ".join(["the tin can"] * 40)  # 281 members: past 256


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """The tiny model with a context of 600, for texts past 256 members."""
    path = write_tiny_gguf(tmp_path_factory.mktemp("wide") / "wide.gguf", context=600).path
    return str(path), studygroup.load(str(path))


def grid(values, notation):
    """Nested lists in `notation` -> array in paper orientation (questions × answers), None as NaN."""
    a = np.array([[np.nan if x is None else x for x in r] for r in values], dtype=float)
    return a.T if notation == "columns" else a


@pytest.mark.parametrize("notation", ["paper", "columns"])
@pytest.mark.parametrize("rows, keys", [(slice(3, 9), slice(0, 5)), (slice(-1, None), None), (None, slice(-4, None)),
                                        (range(0, 2), range(10, 12))])
def test_a_window_holds_the_same_cells_as_the_whole_grid(wide, notation, rows, keys):
    model = wide[1]
    whole = head_view(model, SHORT, 1, 3, notation, interventions=Interventions((2,)))
    part = head_view(model, SHORT, 1, 3, notation, interventions=Interventions((2,)), rows=rows, keys=keys)
    T = len(whole.tokens)
    as_slice = lambda x: slice(x.start, x.stop) if isinstance(x, range) else x or slice(None)  # noqa: E731
    R, K = range(T)[as_slice(rows)], range(T)[as_slice(keys)]
    assert part.rows_shown == [R.start, R.stop] and part.keys_shown == [K.start, K.stop] and part.tokens == whole.tokens
    for name in ("scores", "weights", "mask", "mask_reasons"):
        np.testing.assert_allclose(grid(getattr(part, name), notation), grid(getattr(whole, name), notation)[R.start:R.stop, K.start:K.stop],
                                   atol=1e-6, err_msg=name)
    t = (lambda a: a.T) if notation == "columns" else (lambda a: a)
    for name, members in (("q", R), ("q_pre_rope", R), ("output", R), ("k", K), ("k_pre_rope", K), ("v", K)):
        np.testing.assert_allclose(t(np.array(getattr(part, name))), t(np.array(getattr(whole, name)))[members.start:members.stop],
                                   atol=1e-6, err_msg=name)
    assert [(m.index, m.token, m.listens_most_to) for m in part.members] == [
        (i, whole.tokens[i], whole.members[i].listens_most_to) for i in R]
    norms = lambda ms: [[x["norm"] for x in m.to_dict().values() if isinstance(x, dict)] for m in ms]  # noqa: E731
    np.testing.assert_allclose(norms(part.members), norms([whole.members[i] for i in R]), rtol=1e-6)
    assert part.check.agree and part.is_whole == (len(R) == len(K) == T)


def test_a_window_equals_an_independent_float64_computation(wide):
    """Scores, weights and outputs of a window against numpy in float64 and torch's sdpa, from the
    head's own q, k, v: softmax over every earlier member of each row, then cut to the keys."""
    model = wide[1]
    whole = head_view(model, LONG, 1, 2, rows=slice(0, None), keys=slice(0, 1))  # every q, k, v... of row members
    q = np.array(whole.q, dtype=np.float64)  # (T, d_head)
    every_key = head_view(model, LONG, 1, 2, rows=slice(-1, None))
    k, v = np.array(every_key.k, dtype=np.float64), np.array(every_key.v, dtype=np.float64)  # (T, d_head)
    T, d = q.shape
    scores = q @ k.T / math.sqrt(d)  # (T, T)
    scores[np.triu_indices(T, 1)] = -np.inf
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q)[None], torch.tensor(k)[None],
                                                            torch.tensor(v)[None], is_causal=True)[0].numpy()
    assert np.allclose(weights @ v, sdpa, atol=1e-10)
    part = head_view(model, LONG, 1, 2, rows=slice(200, 260), keys=slice(150, 230))
    np.testing.assert_allclose(grid(part.weights, "paper"), weights[200:260, 150:230], atol=1e-6)
    s = grid(part.scores, "paper")
    np.testing.assert_allclose(np.where(np.isnan(s), -np.inf, s), scores[200:260, 150:230], atol=1e-5)
    np.testing.assert_allclose(np.array(part.output), sdpa[200:260], atol=1e-5)


def test_past_256_members_a_view_needs_a_window(wide, capsys):
    path, model = wide
    with pytest.raises(WindowError, match=r"281 × 281 = 78,961 cells.*rows=slice\(A, B\) keys=slice\(C, D\)"):
        head_view(model, LONG, 1, 2)
    code, out, err = cli(capsys, "head", LONG, "--layer", 1, "--head", 2, "--model", path, "--json")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--rows A:B --keys C:D" in err
    code, out, _ = cli(capsys, "head", LONG, "--layer", 1, "--head", 2, "--model", path, "--json", "--rows", "-1:")
    d = json.loads(out)
    assert code == 0 and d["rows_shown"] == [280, 281] and d["keys_shown"] == [0, 281] and len(d["weights"][0]) == 281
    assert [m["index"] for m in d["members"]] == [280] and len(d["k"]) == 281 and len(d["q"]) == 1
    with pytest.raises(WindowError, match="300 questions × 300 answers"):
        head_view(model, LONG * 2, 0, 0, rows=slice(0, 300), keys=slice(0, 300))


def test_the_threshold_is_the_cells_a_view_holds(wide, monkeypatch):
    monkeypatch.setattr(window_, "MAX_CELLS", 20)
    with pytest.raises(WindowError, match="more than the 20"):
        head_view(wide[1], "the tin can", 0, 0)  # 5 × 5 members
    assert len(head_view(wide[1], "the tin can", 0, 0, rows=slice(-2, None), keys=slice(0, 5)).weights) == 2


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def within_the_100_line_rule(out: str) -> bool:
    lines = out.splitlines()
    return len(lines) <= 100 and max(map(len, lines)) <= 400


@pytest.mark.parametrize("extra", [[], ["--notation", "columns"], ["--rows", "0:256", "--keys", "0:256"],
                                   ["--rows", "-1:"], ["--top", "64", "--rows", "-40:"],
                                   ["--silence-member", "3"] * 1 + sum((["--silence-member", str(j)] for j in range(4, 60)), [])])
def test_text_output_follows_the_100_line_rule(wide, capsys, extra):
    path, _ = wide
    code, out, err = cli(capsys, "head", LONG, "--layer", 1, "--head", 2, "--model", path, *extra)
    assert code == 0 and err == "" and within_the_100_line_rule(out)
    assert "281" in out.splitlines()[0] and "the same result" in out
    if not extra:  # the last question by default, and how to see more
        assert "window: the questions of members 280:281" in out and "--rows A:B --keys C:D" in out
        assert "more answers hold" in out and "--full" in out


@pytest.mark.parametrize("notation, line", [("paper", "row"), ("columns", "column")])
def test_the_weights_say_what_the_window_sums_to(wide, capsys, notation, line):
    path, model = wide
    v = head_view(model, SHORT, 1, 2, notation, rows=slice(10, 14), keys=slice(2, 5))
    sums = grid(v.weights, notation).sum(-1)  # (4,): each question's weights within keys 2:5
    assert sums.max() < 0.9  # the rest of each question's weight lies outside the window
    code, out, _ = cli(capsys, "head", SHORT, "--layer", 1, "--head", 2, "--model", path, "--notation", notation,
                       "--rows", "10:14", "--keys", "2:5")
    assert code == 0 and f"weights (each {line} of weights sums to 1)" not in out
    assert (f"the {line}s of this window sum to {sums.min():.2g} to {sums.max():.2g}, the rest of the weight lies "
            "on answers outside it") in " ".join(out.split())
    code, out, _ = cli(capsys, "head", SHORT, "--layer", 1, "--head", 2, "--model", path, "--notation", notation,
                       "--rows", "10:14", "--keys", ":14", "--silence-member", "3")
    assert code == 0 and f"weights (each {line} of weights sums to 1)" in out  # every answer they hear is shown


def test_full_prints_the_whole_window(wide, capsys):
    path, _ = wide
    code, out, _ = cli(capsys, "head", LONG, "--layer", 1, "--head", 2, "--model", path, "--rows", "-1:", "--full")
    assert code == 0 and len(out.splitlines()) > 281  # every answer listed
    code, out, _ = cli(capsys, "head", SHORT, "--layer", 1, "--head", 2, "--model", path, "--full")
    assert code == 0 and "left out" not in out and out.count("listens most to") == 24


@pytest.mark.parametrize("flags, words", [
    (["--rows", "3:3"], ["rows 3:3 is empty", "--rows A:B", "0-23"]),
    (["--rows", "5:3"], ["rows 5:3 is reversed", "--rows A:B", "0-23"]),
    (["--keys", "3:3"], ["keys 3:3 is empty", "--keys C:D with its start before its end"]),
    (["--keys", "0:25"], ["keys 0:25 leaves the text", "--keys C:D", "0-23"]),
    (["--rows", "-25:"], ["rows -25: leaves the text", "0-23"]),
    (["--keys", "5"], ["argument --keys: '5' is not A:B"]),
    (["--rows", "a:b"], ["argument --rows: 'a:b' is not A:B"]),
    (["--rows", "0:10:2"], ["argument --rows"]),
])
def test_a_bad_window_is_one_line_and_exit_2(wide, capsys, flags, words):
    code, out, err = cli(capsys, "head", SHORT, "--layer", 0, "--head", 0, "--model", wide[0], *flags)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert all(w in err for w in words) and "A < B" not in err, err  # the letters of the flag named


def test_figures_need_whole_rows(wide, capsys, tmp_path):
    code, _, err = cli(capsys, "head", SHORT, "--layer", 0, "--head", 0, "--model", wide[0], "--keys", "0:3",
                       "--png", tmp_path / "f.png")
    assert code == 2 and "--png/--svg" in err and not (tmp_path / "f.png").exists()


@pytest.fixture(scope="module")
def client(wide):
    with TestClient(create_app(wide[1], Limits(max_tokens=600))) as c:
        yield c


def test_api_head_windows(client, wide):
    body = {"text": SHORT, "layer": 1, "head": 3}
    whole = client.post("/api/head", json=body | {"rows": "all"}).json()
    for notation in ("paper", "columns"):
        d = client.post("/api/head", json=body | {"rows": [2, 8], "keys": [-5, None], "notation": notation}).json()
        assert d["rows_shown"] == [2, 8] and d["keys_shown"] == [19, 24] and d["rows"] == "window"
        assert d["questions"] == list(range(2, 8)) and len(d["answer_sizes"]) == 5
        for name in ("weights", "scores", "contributions", "mask_reasons"):
            np.testing.assert_allclose(grid(d[name], notation), grid(whole[name], "paper")[2:8, 19:24], atol=1e-6)
    last = client.post("/api/head", json={"text": LONG, "layer": 1, "head": 3}).json()  # auto: the last question
    assert last["rows"] == "last" and last["rows_shown"] == [280, 281] and len(last["weights"][0]) == 281
    corner = client.post("/api/head", json={"text": LONG, "layer": 1, "head": 3, "rows": [-256, None],
                                            "keys": [-256, None]}).json()
    assert corner["rows_shown"] == [25, 281] and len(corner["weights"]) == 256 == len(corner["weights"][0])


@pytest.mark.parametrize("extra, status, words", [
    ({"rows": "all"}, 400, ['"rows": [A, B]', '"keys": [C, D]', "78,961 cells"]),
    ({"rows": [5, 3]}, 400, ["rows 5:3 is reversed", '"rows": [A, B]', "0-280"]),
    ({"keys": [0, 0]}, 400, ["keys 0:0 is empty", '"keys": [C, D]']),
    ({"keys": [0, 900]}, 400, ["keys 0:900 leaves the text"]),
    ({"rows": [1, 2, 3]}, 422, ["rows"]),
    ({"keys": "last"}, 422, ["keys"]),
])
def test_api_head_refuses_bad_or_too_large_windows(client, extra, status, words):
    r = client.post("/api/head", json={"text": LONG, "layer": 1, "head": 3} | extra)
    assert r.status_code == status and all(w in r.json()["error"] for w in words), r.json()


def test_silenced_cells_of_a_window_keep_their_reason(wide):
    v = head_view(wide[1], SHORT, 1, 0, interventions=Interventions((4,)), rows=slice(10, 12), keys=slice(3, 6))
    assert [r[1] for r in v.mask_reasons] == [SILENCED, SILENCED] and v.silenced_members == [4]
