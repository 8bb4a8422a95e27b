"""roles on a tiny random model: every role score equals a plain numpy recomputation from the
recorded weights, and heads built for one role score 1 in it."""
import math

import numpy as np
import pytest
import torch

import studygroup
from conftest import TEXT_B, write_tiny_gguf
from studygroup.errors import InputError
from studygroup.gguf.tokenizer import TOKEN_NORMAL
from studygroup.study.roles import ROLES, probe_ids, role_scores, roles

TEXT_REPEATS = "the tin the tin an ear the tin"


@pytest.fixture(scope="module")
def roomy_model(tmp_path_factory):
    """A tiny model whose context holds the probe and texts past 512 members."""
    return studygroup.load(write_tiny_gguf(tmp_path_factory.mktemp("roomy") / "roomy.gguf", context=1024).path)


def numpy_roles(W, ids, R):
    """The role definitions, question by question, in plain numpy (W: (T, T) weights)."""
    T = len(ids)
    rows = [i for i in range(T - R, T) if i >= 1]
    sinks = {j for j in range(T) if np.mean([W[i, j] >= 0.3 for i in rows]) >= 0.8}
    per = {r: [] for r in ROLES}
    for i in rows:
        per["previous"].append(W[i, i - 1])
        if any(ids[j] == ids[i] for j in range(i)):
            per["duplicate"].append(sum(W[i, j] for j in range(i) if ids[j] == ids[i]))
        if any(ids[j] == ids[i] for j in range(i - 1)):
            per["induction"].append(sum(W[i, j + 1] for j in range(i - 1) if ids[j] == ids[i]))
        per["sink"].append(sum(W[i, j] for j in sinks))
        per["local"].append(sum(W[i, j] for j in range(max(0, i - 8), i + 1)))
        p = W[i, :i + 1]
        per["broad"].append(-sum(x * math.log(x) for x in p if x > 0) / math.log(i + 1))
    return {r: (float(np.mean(v)) if v else math.nan) for r, v in per.items()}


@pytest.mark.parametrize("text", [TEXT_B, TEXT_REPEATS, None])
def test_every_role_equals_a_plain_recomputation(roomy_model, text):
    model = roomy_model
    r = roles(model, text)
    run = model.run(r.token_ids, record="all")
    T = len(r.token_ids)
    assert r.questions == [1, T - 1] and len(r.heads) == model.config.n_layers * model.config.n_heads
    for h in r.heads:
        W = run["weights", h.layer][h.head].double().numpy()  # (T, T)
        expected = numpy_roles(W, r.token_ids, T)
        for role in ROLES:
            got = getattr(h.roles, role)
            assert (math.isnan(got) and math.isnan(expected[role])) or got == pytest.approx(expected[role], abs=1e-6)
            assert math.isnan(got) or -1e-9 <= got <= 1 + 1e-9


def test_long_texts_score_the_last_512_questions(roomy_model):
    ids = torch.randint(3, roomy_model.config.vocab_size, (530,), generator=torch.Generator().manual_seed(0)).tolist()
    r = roles(roomy_model, ids)
    assert r.questions == [18, 529]
    W = roomy_model.run(ids, record=["layers.1.weights"])["weights", 1][2].double().numpy()
    expected = numpy_roles(W, ids, 512)
    got = next(h.roles for h in r.heads if (h.layer, h.head) == (1, 2))
    for role in ROLES:
        assert getattr(got, role) == pytest.approx(expected[role], abs=1e-6)


def test_only_the_last_questions_are_scored():
    ids = [5, 6, 7, 5, 6, 7, 5, 6]
    W = torch.rand(8, 8).tril()
    W = W / W.sum(1, keepdim=True)
    last = role_scores(W[-3:], ids)
    expected = numpy_roles(W.double().numpy(), ids, 3)
    for role in ROLES:
        assert getattr(last, role) == pytest.approx(expected[role], abs=1e-6)


def test_a_pure_previous_member_head_scores_previous_1():
    T = 12
    W = torch.zeros(T, T)
    W[0, 0] = 1.0
    W[torch.arange(1, T), torch.arange(T - 1)] = 1.0  # every question on the member before
    s = role_scores(W, list(range(T)))
    assert s.previous == 1.0 and s.local == 1.0 and s.broad == 0.0
    assert math.isnan(s.duplicate) and math.isnan(s.induction)  # no token comes twice


def test_a_pure_induction_head_scores_induction_1():
    ids = [3, 4, 5, 6, 3, 4, 5, 6]
    W = torch.zeros(8, 8)
    W[:4, 0] = 1.0  # the first half rests on member 0
    for i in range(4, 8):
        W[i, i - 3] = 1.0  # the member after the earlier copy (i − 4)
    s = role_scores(W, ids)
    assert s.induction == 1.0 and s.duplicate == 0.0


def test_a_member_most_questions_lean_on_is_a_sink():
    W = torch.zeros(6, 6)
    W[0, 0] = 1.0
    W[1:, 1] = 0.5  # member 1 takes half of every later question's weight
    W[1, 1] = 1.0
    W[torch.arange(2, 6), torch.arange(2, 6)] = 0.5
    assert role_scores(W, list(range(6))).sink == pytest.approx(0.6)  # 1 for question 1, 0.5 for 2-5


def test_the_probe_is_ordinary_tokens_twice(roomy_model):
    model = roomy_model
    ids = probe_ids(model.tokenizer, model.config.vocab_size)
    assert len(ids) == 100 and ids[:50] == ids[50:] and len(set(ids)) == 50
    assert all(model.tokenizer.token_types[i] == TOKEN_NORMAL for i in ids)
    assert probe_ids(model.tokenizer, model.config.vocab_size) == ids  # seed 0: always the same


def test_one_member_has_no_question_to_score(model):
    with pytest.raises(InputError, match="at least 2 members"):
        roles(model, "t")


def test_the_api_has_roles(model):
    assert studygroup.roles(model, TEXT_B).heads == roles(model, TEXT_B).heads


def cli(capsys, *argv):
    from studygroup.cli import main

    code = main([str(a) for a in argv])
    return code, *capsys.readouterr()


def test_the_command_prints_the_top_heads_per_role_and_json(capsys, tiny_model):
    code, out, err = cli(capsys, "roles", TEXT_REPEATS, "--model", tiny_model.path)
    assert code == 0 and err == "" and all(f"{role}: " in out for role in ROLES) and len(out.splitlines()) <= 100
    code, out, _ = cli(capsys, "roles", TEXT_B, "--model", tiny_model.path, "--json")
    import json

    data = json.loads(out)
    assert code == 0 and len(data["heads"]) == 8 and set(data["heads"][0]["roles"]) == set(ROLES)


def test_the_command_refuses_a_text_of_one_member(capsys, tiny_model):
    code, out, err = cli(capsys, "roles", "t", "--model", tiny_model.path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "at least 2 members" in err


def test_the_model_view_and_explain_carry_each_heads_roles(roomy_model):
    from studygroup.study.explain import explain
    from studygroup.study.model_view import model_view

    run = roomy_model.run(TEXT_REPEATS, record="all")
    view = model_view(run)
    ids = list(run.token_ids)
    for layer in view.heads:
        for h in layer:
            expected = numpy_roles(run["weights", h.layer][h.head].double().numpy(), ids, len(ids))
            for role in ROLES:
                got = getattr(h.roles, role)
                assert (math.isnan(got) and math.isnan(expected[role])) or got == pytest.approx(expected[role], abs=1e-6)
    e = explain(roomy_model, TEXT_REPEATS)
    for h in e.heads:
        np.testing.assert_allclose([getattr(h.roles, r) for r in ROLES],
                                   [getattr(view.heads[h.layer][h.head].roles, r) for r in ROLES], atol=1e-6)
    long = explain(roomy_model, [3 + i % 200 for i in range(530)], measure_heads=2, measure_members=2)  # past 512 members
    assert all(h.roles is None and h.sink_weight is not None for h in long.heads)


SHORT = "the tin an ear the"  # fewer than 17 members: too few questions reach past local's window
LONG = "the tin an ear then the tin, " * 3 + "an ear"


def test_a_text_too_short_to_tell_names_no_role_and_says_why(model, capsys, tiny_model):
    from studygroup.study.model_view import model_view
    from studygroup.study.roles import LOCAL_WINDOW, TELLING, strongest

    short, long = roles(model, SHORT), roles(model, LONG)
    assert len(short.tokens) < LOCAL_WINDOW + 1 + TELLING <= len(long.tokens)
    assert short.untold and "too few to name a role" in short.untold and all(h.role is None for h in short.heads)
    assert long.untold is None and all(h.role == strongest(h.roles) for h in long.heads)
    assert all(getattr(h.roles, h.role) == max(getattr(h.roles, r) for r in ROLES if not math.isnan(getattr(h.roles, r)))
               for h in long.heads)
    view, long_view = model_view(model.run(SHORT, record="all")), model_view(model.run(LONG, record="all"))
    assert view.roles_untold == short.untold and all(h.role is None for layer in view.heads for h in layer)
    assert long_view.roles_untold is None and [h.role for layer in long_view.heads for h in layer] == [h.role for h in long.heads]

    import json

    code, out, _ = cli(capsys, "roles", SHORT, "--model", tiny_model.path)
    assert code == 0 and "no head's role is named: " + short.untold[:40] in " ".join(out.split())
    code, out, _ = cli(capsys, "roles", SHORT, "--model", tiny_model.path, "--json")
    data = json.loads(out)
    assert data["untold"] == short.untold and all(h["role"] is None for h in data["heads"])
    code, out, _ = cli(capsys, "roles", LONG, "--model", tiny_model.path, "--json")
    data = json.loads(out)
    assert data["untold"] is None and [h["role"] for h in data["heads"]] == [h.role for h in long.heads]
