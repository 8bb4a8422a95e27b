"""why on a tiny random model: the score split two ways adds up, and equals the head's own score
and an independent float64 pass from the Hugging Face weights."""
import math

import pytest
import torch

import studygroup
from conftest import TEXT_B, reference_llama
from studygroup.errors import InputError
from studygroup.study import head as study_head
from studygroup.formats import percent
from studygroup.study.why import part_names, why

CELLS = [(1, 2, 4, 1), (1, 0, 3, 3), (0, 3, 2, 0), (1, 3, 4, 0)]  # layer, head, query, key


@pytest.mark.parametrize("layer, head, query, key", CELLS)
def test_the_two_splits_add_up_to_the_score(model, tiny_model, layer, head, query, key):
    w = why(model, TEXT_B, layer, head, query, key)
    tolerance = 1e-5 * max(1.0, abs(w.score))
    assert math.fsum(p.value for p in w.pairs) == pytest.approx(w.score, abs=tolerance)
    assert abs(w.parts_total - w.score) <= tolerance
    assert w.content + w.position == pytest.approx(w.score, abs=1e-12)
    view = study_head.head_view(model, TEXT_B, layer, head)
    assert w.score == pytest.approx(view.scores[query][key], abs=1e-6)
    assert w.weight == pytest.approx(view.weights[query][key], abs=1e-6)
    q_pre, k_pre = torch.tensor(view.q_pre_rope[query]).double(), torch.tensor(view.k_pre_rope[key]).double()
    assert w.content == pytest.approx(float(q_pre @ k_pre) / math.sqrt(len(view.q_pre_rope[0])), abs=1e-6)
    S = reference_llama(tiny_model, w.token_ids, layer=layer)
    assert w.score == pytest.approx(float(S[head, query, key]), abs=1e-4)


def test_every_pair_is_there_once_largest_first(model):
    w = why(model, TEXT_B, 1, 2, 4, 1)
    names = part_names(1, model.config.n_heads)
    assert w.n_parts == len(names) == 1 + model.config.n_heads + 1
    assert sorted((p.query_part, p.key_part) for p in w.pairs) == sorted((a, b) for a in names for b in names)
    sizes = [abs(p.value) for p in w.pairs]
    assert sizes == sorted(sizes, reverse=True)
    assert names[:3] == ["embedding", "head 0.0", "head 0.1"] and names[-1] == "MLP 0"


def test_at_distance_zero_there_is_no_position(model):
    w = why(model, TEXT_B, 1, 1, 3, 3)
    assert abs(w.position) < 1e-5


def test_layer_0_has_only_the_embedding(model):
    w = why(model, TEXT_B, 0, 0, 2, 1)
    assert [(p.query_part, p.key_part) for p in w.pairs] == [("embedding", "embedding")]


def test_layer_0_says_its_q_and_k_carry_no_position_and_a_later_layer_that_its_stream_does(model):
    """At layer 0 q and k come from the token embeddings alone: the split there is the tokens against
    their distance, and no "earlier layers" carry position into it."""
    first, later = " ".join(why(model, TEXT_B, 0, 0, 2, 1).notes), " ".join(why(model, TEXT_B, 1, 0, 2, 1).notes)
    assert "token embeddings alone, which carry no position" in first and "earlier layers" not in first
    assert "already carries position from earlier layers" in later and "at layer 0" not in later.lower()


def test_what_it_records_grows_with_the_text_as_one_layers_keys(model, monkeypatch):
    """The fault sweep: why on 8,192 tokens peaked at 4.3 GB (every member's row of every earlier
    layer's writes, and the layer's T×T maps), where lesson and head keep theirs bounded."""
    from studygroup.model.estimate import activation_bytes, recording_bytes

    records, run = [], model.run
    monkeypatch.setattr(model, "run", lambda ids, record, **kw: records.append(record) or run(ids, record=record, **kw))
    why(model, TEXT_B, 1, 2, 4, 1)
    assert records
    for record in records:
        at = {T: recording_bytes(model.config, T, record) for T in (4096, 8192)}
        assert at[8192] <= 2 * at[4096]  # no T×T map
        assert at[8192] < activation_bytes(model.config, 8192)  # less than one layer's work in the pass


@pytest.mark.parametrize("layer, head, query, key, words", [
    (1, 0, 1, 3, "comes after member 1"), (2, 0, 3, 1, "layer 2 does not exist"),
    (0, 4, 3, 1, "head 4 does not exist"), (0, 0, 99, 1, "member 99 does not exist"),
    (0, 0, 3, -1, "member -1 does not exist")])
def test_bad_cells_are_refused(model, layer, head, query, key, words):
    with pytest.raises(InputError, match=words):
        why(model, TEXT_B, layer, head, query, key)


def test_the_api_has_why(model):
    assert studygroup.why(model, TEXT_B, 1, 0, 2, 2).score == why(model, TEXT_B, 1, 0, 2, 2).score


def model_of(tiny):
    return studygroup.load(tiny.path)


def cli(capsys, *argv):
    from studygroup.cli import main

    code = main([str(a) for a in argv])
    return code, *capsys.readouterr()


def test_the_command_prints_the_splits_and_json(capsys, tiny_model):
    code, out, err = cli(capsys, "why", TEXT_B, "--layer", 1, "--head", 2, "--query", 4, "--key", 1,
                         "--model", tiny_model.path)
    assert code == 0 and err == "" and "content" in out and "position" in out and "meaning vs place" in out
    assert "the largest of 36 (query part, key part) pairs" in out and len(out.splitlines()) <= 60
    w = why(model_of(tiny_model), TEXT_B, 1, 2, 4, 1)
    rest = w.pairs[20:]  # the CLI shows 20 pairs, then the rest's sum and share of Σ|value|
    share = sum(abs(p.value) for p in rest) / sum(abs(p.value) for p in w.pairs)
    assert f"the other 16 pairs: {sum(p.value for p in rest):+.4f} in all, {percent(share)} of Σ|value|" in out
    code, out, _ = cli(capsys, "why", TEXT_B, "--layer", 1, "--head", 2, "--key", 1, "--model", tiny_model.path,
                       "--json")
    import json

    data = json.loads(out)
    assert code == 0 and data["query"] == len(data["tokens"]) - 1 and len(data["pairs"]) == 36


@pytest.mark.parametrize("args, words", [
    (("--layer", 1, "--head", 0, "--query", 1, "--key", 3), "comes after member 1"),
    (("--layer", 5, "--head", 0, "--key", 0), "layer 5 does not exist"),
    (("--layer", 0, "--head", 9, "--key", 0), "head 9 does not exist"),
    (("--layer", 0, "--head", 0, "--query", 50, "--key", 0), "member 50 does not exist"),
    (("--layer", 0, "--head", 0), "required: --key")])
def test_the_command_refuses_bad_cells_in_one_line(capsys, tiny_model, args, words):
    code, out, err = cli(capsys, "why", TEXT_B, *args, "--model", tiny_model.path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and words in err


def test_the_web_api_answers_why_and_refuses_bad_cells(model):
    from fastapi.testclient import TestClient

    from studygroup.web.app import Limits, create_app

    with TestClient(create_app(model, Limits(max_tokens=48))) as client:
        r = client.post("/api/why", json={"text": TEXT_B, "layer": 1, "head": 2, "query": 4, "key": 1})
        assert r.status_code == 200 and r.json() == why(model, TEXT_B, 1, 2, 4, 1).to_dict()
        for body, words in [({"query": 1, "key": 3}, "comes after member 1"), ({"layer": 7}, "layer 7 does not exist"),
                            ({"query": 40}, "member 40 does not exist")]:
            r = client.post("/api/why", json={"text": TEXT_B, "layer": 1, "head": 2, "query": 4, "key": 1, **body})
            assert 400 <= r.status_code < 500 and words in r.json()["error"]
