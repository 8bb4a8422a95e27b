"""why under mean and resample ablation, every family: its runs stop at the members asking, with the
values the ablation takes from the whole text (the mean over all its members, the other text's at
each member). Its weight equals transformers' attention weight with hooks replacing the same key
and value projections and head outputs over the whole text, its score the score of one un-cut run
of the whole text, and its parts still add up to the score."""
from __future__ import annotations

import json

import pytest
import torch

import studygroup
from integration.test_ablation import replaced, their_steps
from integration.test_every_family import FAMILIES, _pair, ids_of
from studygroup.cli import main
from studygroup.errors import InputError
from studygroup.model.ablation import Ablation
from studygroup.model.interventions import Interventions
from studygroup.study.why import why


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request, tmp_path_factory):
    path, theirs = _pair(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, studygroup.load(path, cache=False), theirs


def their_weights(theirs, family, c, ids, members, heads, source) -> list[torch.Tensor]:
    """transformers' attention weights per layer, (H, T, T), with the replacements of `replaced`."""
    with replaced(theirs, family, c, members, heads, source), torch.no_grad():
        return [a[0] for a in theirs(torch.tensor([ids]), output_attentions=True).attentions]


@pytest.mark.parametrize("kind", ["mean", "resample"])
def test_the_score_and_weight_are_those_of_the_whole_ablated_text(pair, kind):
    family, model, theirs = pair
    c = model.config
    ids, other = ids_of(model, 8, seed=31), ids_of(model, 8, seed=32)
    members, heads = [1, 5], [(0, 1), (0, c.n_heads - 1)]
    ablation = Ablation(kind, source=tuple(other) if kind == "resample" else None)
    i = Interventions(tuple(members), None, frozenset(heads), ablation=ablation)
    own, theirs_other = their_steps(theirs, family, c, ids), their_steps(theirs, family, c, other)
    source = (lambda place, l: own[place, l].mean(0, keepdim=True).expand_as(own[place, l])) if kind == "mean" else \
        (lambda place, l: theirs_other[place, l])
    want = their_weights(theirs, family, c, ids, members, heads, source)
    clean = their_weights(theirs, family, c, ids, [], [], source)
    whole = model.run(ids, interventions=i, record=["scores"])  # one un-cut run of the whole text
    layer = c.n_layers - 1
    for head, query, key in ((0, 6, 2), (c.n_heads - 1, 4, 4), (1, 3, 0)):
        w = why(model, ids, layer, head, query, key, i)
        assert abs(w.weight - float(want[layer][head, query, key])) < 1e-5, (family, kind, head, query, key)
        assert abs(w.score - float(whole["scores", layer][head, query, key])) < 1e-4
        assert abs(w.parts_total - w.score) <= 1e-5 * max(1.0, abs(w.score))
        assert w.ablation == ablation.to_dict() and any(n.startswith(f"By {kind} ablation") for n in w.notes)
    assert (want[layer] - clean[layer]).abs().max() > 1e-4  # the ablation changes the weights


def test_a_taken_out_key_is_refused_in_one_line(tiny_model, capsys):
    """Its key is the ablation's, not made from its residual stream: no parts to split."""
    model = studygroup.load(tiny_model.path, cache=False)
    with pytest.raises(InputError, match="taken out by mean ablation"):
        why(model, ids_of(model, 5), 1, 0, 4, 2, Interventions((2,), ablation=Ablation("mean")))
    path = str(tiny_model.path)
    for argv, words in ((["--silence-member", "1", "--key", "1", "--ablation", "mean"], "taken out by mean ablation"),
                        (["--silence-head", "0.1", "--key", "1", "--ablation", "resample", "--from", "the tin"],
                         "same number of tokens")):
        assert main(["why", "the tin can", "--model", path, "--layer", "1", "--head", "0", *argv]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1


def test_the_command_and_the_web_api_name_the_ablation(tiny_model, capsys):
    from fastapi.testclient import TestClient

    from studygroup.web.app import Limits, create_app

    model = studygroup.load(tiny_model.path, cache=False)
    text, source = "the tin can", "the can tin"
    i = Interventions((1,), None, frozenset({(0, 1)}), ablation=Ablation("resample", source=source))
    want = why(model, text, 1, 0, 2, 0, i).to_dict()
    argv = ["why", text, "--model", str(tiny_model.path), "--layer", "1", "--head", "0", "--query", "2", "--key", "0",
            "--silence-member", "1", "--silence-head", "0.1", "--ablation", "resample", "--from", source]
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == want
    assert want["ablation"] == {"kind": "resample", "reference": 0, "from": source}
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "taken out by resample ablation in this run: member 1" in out and "By resample ablation, the part of head 0.1" in out
    with TestClient(create_app(model, Limits(max_tokens=48))) as client:
        r = client.post("/api/why", json={"text": text, "layer": 1, "head": 0, "query": 2, "key": 0,
                                          "silence": {"members": [1], "heads": [[0, 1]]},
                                          "ablation": {"kind": "resample", "from": source}})
        assert r.status_code == 200 and r.json() == want
