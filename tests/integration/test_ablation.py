"""Zero, mean and resample ablation of heads (studygroup.study.ablation) against transformers with a
hook on the same weights, in every family: mean ablation puts each head's mean output (over the
text's members, or a reference set) in front of W_O at every member; resample the other text's."""
from __future__ import annotations

import pytest
import torch

import studygroup
from integration.test_every_family import FAMILIES, _pair, ids_of
from integration.test_patching import modules
from studygroup.cli import main
from studygroup.errors import InputError
from studygroup.study.ablation import Ablation, head_effects


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request, tmp_path_factory):
    path, theirs = _pair(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, studygroup.load(path, cache=False), theirs


def their_outputs(theirs, family, ids, L):
    """{layer: (T, H·d)}: what each layer's W_O reads, in transformers' run of ids."""
    got = {}
    hooks = [modules(theirs, family, l)[3].register_forward_pre_hook(lambda m, a, l=l: got.__setitem__(l, a[0][0].clone()))
             for l in range(L)]
    with torch.no_grad():
        theirs(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    return got


def their_log_p(theirs, family, ids, token, l, h, d, value):
    """log p(token) at the last member with head h of layer l's slice of W_O's input set to value (T|1, d)."""
    def put(m, a):
        x = a[0].clone()
        x[0, :, h * d:(h + 1) * d] = value
        return (x, *a[1:])
    handle = modules(theirs, family, l)[3].register_forward_pre_hook(put)
    try:
        with torch.no_grad():
            return float(torch.log_softmax(theirs(torch.tensor([ids])).logits[0, -1].double(), -1)[token])
    finally:
        handle.remove()


def test_zero_mean_and_resample_equal_a_hooked_transformers_run(pair):
    family, model, theirs = pair
    c = model.config
    ids, other, ref = ids_of(model, 6, seed=1), ids_of(model, 6, seed=2), ids_of(model, 9, seed=3)
    heads = [(0, 1), (c.n_layers - 1, c.n_heads - 1)]
    a = head_effects(model, ids, heads, reference=[ref, ids], resample_from=other)
    t = model.run(ids).last_logits.argmax()
    with torch.no_grad():
        base = float(torch.log_softmax(theirs(torch.tensor([ids])).logits[0, -1].double(), -1)[t])
    mine, theirs_other = their_outputs(theirs, family, ref, c.n_layers), their_outputs(theirs, family, other, c.n_layers)
    own = their_outputs(theirs, family, ids, c.n_layers)
    d = c.d_head
    for row in a.heads:
        l, h = row.layer, row.head
        sl = slice(h * d, (h + 1) * d)
        mean = torch.cat([mine[l][:, sl], own[l][:, sl]]).mean(0, keepdim=True)  # over both texts' members
        want = {"zero": torch.zeros(1, d), "mean": mean, "resample": theirs_other[l][:, sl]}
        for kind, value in want.items():
            got = getattr(row, kind)
            assert abs(got - (their_log_p(theirs, family, ids, t, l, h, d, value) - base)) < 1e-4, (family, l, h, kind)


def test_a_head_resting_on_a_sink_matters_far_less_under_mean_ablation():
    model = studygroup.load()
    a = head_effects(model, "Cash or credit card? I have a lot", [(24, 6)])
    h = a.heads[0]
    assert h.zero < -0.03 and abs(h.mean) < abs(h.zero) / 10
    assert "zero ablation overstates" in " ".join(a.story)


def test_bad_input_is_refused_in_one_line(tiny_model, tmp_path, capsys):
    model = studygroup.load(tiny_model.path, cache=False)
    with pytest.raises(InputError, match="same number of tokens"):
        head_effects(model, ids_of(model, 4), [(0, 0)], resample_from=ids_of(model, 5))
    with pytest.raises(InputError, match="holds no text"):
        head_effects(model, ids_of(model, 4), [(0, 0)], reference=[])
    with pytest.raises(InputError, match="does not exist"):
        head_effects(model, ids_of(model, 4), [(9, 0)])
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    assert main(["ablate", "the tin", "--model", str(tiny_model.path), "--reference", str(binary)]) == 2
    err = capsys.readouterr().err
    assert "cannot read" in err and err.count("\n") == 1


@pytest.mark.parametrize("T", [6, 40])
def test_explain_with_mean_and_resample_ablation_measures_heads_as_head_effects_does(tiny_model, T):
    """explain's silence_effect of each head under an ablation equals ablation.head_effects' (an
    independent path: its own passes), and the story and the JSON name the ablation."""
    model = studygroup.load(tiny_model.path, cache=False)
    ids, other = ids_of(model, T, seed=1), ids_of(model, T, seed=2)
    for kind, source in (("mean", None), ("resample", other)):
        e = studygroup.explain(model, ids, silence_heads="all", ablation=Ablation(kind, source=source))
        a = head_effects(model, ids, resample_from=other)
        want = {(h.layer, h.head): getattr(h, kind) for h in a.heads}
        assert e.ablation == kind and all(abs(h.silence_effect - want[(h.layer, h.head)]) < 1e-5 for h in e.heads)
        assert "taken out (its output" in e.heads_silenced and "taking it out" in " ".join(e.story)


def test_explain_refuses_an_ablation_beside_a_silencing_and_sources_that_do_not_fit(tiny_model, capsys):
    model = studygroup.load(tiny_model.path, cache=False)
    with pytest.raises(InputError, match="give no --silence-member"):
        studygroup.explain(model, ids_of(model, 5), silenced_heads=[(0, 1)], ablation=Ablation("mean"))
    for argv, words in ((["--ablation", "resample"], "give it (--from TEXT)"),
                        (["--ablation", "mean", "--from", "the tin"], "goes with the resample ablation")):
        assert main(["explain", "the tin", "--model", str(tiny_model.path), *argv]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1
