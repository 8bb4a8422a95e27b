"""Zero, mean and resample ablation of heads (studygroup.study.ablation) against transformers with a
hook on the same weights, in every family: mean ablation puts each head's mean output (over the
text's members, or a reference set) in front of W_O at every member; resample the other text's."""
from __future__ import annotations

import contextlib
import inspect

import pytest
import torch

import studygroup
from integration.test_every_family import FAMILIES, _pair, ids_of
from integration.test_patching import modules
from studygroup.cli import main
from studygroup.errors import InputError
from studygroup.study.ablation import Ablation, head_effects
from studygroup.model.interventions import Interventions


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
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n")
    assert main(["ablate", "the tin", "--model", str(tiny_model.path), "--reference", str(empty)]) == 2
    err = capsys.readouterr().err
    assert f"{empty} holds no text" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv", [["head", "the tin", "--layer", "0", "--head", "0"],
                                  ["why", "the tin", "--layer", "1", "--head", "0", "--key", "1"],
                                  ["generate", "the tin", "-n", "2"]])
@pytest.mark.parametrize("how", [["mean"], ["resample", "--from", "the ton"]])
def test_an_ablation_of_the_silenced_with_nothing_silenced_is_refused_not_ignored(tiny_model, capsys, argv, how):
    assert main([*argv, "--model", str(tiny_model.path), "--ablation", *how]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert f"--ablation {how[0]} takes out the silenced members and heads, and nothing is silenced" in err
    assert main([*argv, "--model", str(tiny_model.path), "--ablation", *how, "--silence-head", "0.1"]) == 0


@pytest.mark.parametrize("T", [6, 40])
def test_explain_with_mean_and_resample_ablation_measures_heads_as_head_effects_does(tiny_model, T):
    """explain's silence_effect of each head under an ablation equals ablation.head_effects' (an
    independent path: its own passes), and the story and the JSON name the ablation."""
    model = studygroup.load(tiny_model.path, cache=False)
    ids, other = ids_of(model, T, seed=1), ids_of(model, T, seed=2)
    for kind, source in (("mean", None), ("resample", other)):
        e = studygroup.explain(model, ids, measure_heads="all", interventions=Interventions(ablation=Ablation(kind, source=source)))
        a = head_effects(model, ids, resample_from=other)
        want = {(h.layer, h.head): getattr(h, kind) for h in a.heads}
        assert e.ablation == kind and all(abs(h.silence_effect - want[(h.layer, h.head)]) < 1e-5 for h in e.heads)
        assert "taken out (its output" in e.heads_silenced and "taking it out" in " ".join(e.story)


def test_explain_refuses_an_ablation_beside_a_silencing_and_sources_that_do_not_fit(tiny_model, capsys):
    model = studygroup.load(tiny_model.path, cache=False)
    with pytest.raises(InputError, match="give no --silence-member"):
        studygroup.explain(model, ids_of(model, 5), interventions=Interventions(silenced_heads=frozenset({(0, 1)}), ablation=Ablation("mean")))
    for argv, words in ((["--ablation", "resample"], "give it (--from TEXT"),
                        (["--ablation", "mean", "--from", "the tin"], "goes with the resample ablation")):
        assert main(["explain", "the tin", "--model", str(tiny_model.path), *argv]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1


def their_kv(theirs, family, l, H, H_kv, d):
    """(module, k columns, v columns): where transformers' layer l writes every member's key and value
    projections (W_K·E and W_V·E with their biases, before any k-norm and RoPE), in its output's last axis."""
    if family == "gpt2":
        D = H * d
        return theirs.transformer.h[l].attn.c_attn, slice(D, 2 * D), slice(2 * D, 3 * D)
    a = theirs.model.layers[l].self_attn
    if family == "phi3":
        return a.qkv_proj, slice(H * d, (H + H_kv) * d), slice((H + H_kv) * d, (H + 2 * H_kv) * d)
    return (a.k_proj, a.v_proj), slice(None), slice(None)


@contextlib.contextmanager
def replaced(theirs, family, c, members, heads, source):
    """transformers with each member's key and value projections and each head's output replaced by
    `source`'s while the block runs: source(place, l) -> the value (T, n·d), place "k", "v" or "output"."""
    H, H_kv, d = c.n_heads, c.n_kv_heads, c.d_head
    handles = []
    for l in range(c.n_layers):
        module, ks, vs = their_kv(theirs, family, l, H, H_kv, d)
        pairs = [(module[0], "k", ks), (module[1], "v", vs)] if isinstance(module, tuple) else [(module, "k", ks), (module, "v", vs)]
        for m, place, cols in pairs:
            def put(mod, args, out, place=place, cols=cols, l=l):
                out = out.clone()
                view = out[0, :, cols]  # (T, H_kv·d)
                view[members] = source(place, l)[members]
                out[0, :, cols] = view
                return out
            handles.append(m.register_forward_hook(put))
        for h in [h for (ll, h) in heads if ll == l]:
            def put_output(mod, a, h=h, l=l):
                x = a[0].clone()
                x[0, :, h * d:(h + 1) * d] = source("output", l)[:, h * d:(h + 1) * d]
                return (x, *a[1:])
            handles.append(modules(theirs, family, l)[3].register_forward_pre_hook(put_output))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def their_ablated_log_probs(theirs, family, c, ids, members, heads, source):
    """transformers' last log-probabilities with each member's key and value projections and each
    head's output replaced by `source`'s (`replaced`)."""
    with replaced(theirs, family, c, members, heads, source), torch.no_grad():
        return torch.log_softmax(theirs(torch.tensor([ids])).logits[0, -1].double(), -1)


def their_steps(theirs, family, c, ids):
    """{("k" | "v" | "output", layer): (T, n·d)}: transformers' key and value projections and W_O's input."""
    got, handles = {}, []
    for l in range(c.n_layers):
        module, ks, vs = their_kv(theirs, family, l, c.n_heads, c.n_kv_heads, c.d_head)
        pairs = [(module[0], "k", ks), (module[1], "v", vs)] if isinstance(module, tuple) else [(module, "k", ks), (module, "v", vs)]
        for m, place, cols in pairs:
            handles.append(m.register_forward_hook(lambda mod, a, out, place=place, cols=cols, l=l: got.__setitem__((place, l), out[0, :, cols].clone())))
    outputs = their_outputs(theirs, family, ids, c.n_layers)
    for h in handles:
        h.remove()
    return got | {("output", l): o for l, o in outputs.items()}


def test_mean_and_resample_ablation_of_members_and_heads_equal_a_hooked_transformers_run(pair):
    """A silenced member's key and value projections, in every layer, and a silenced head's output
    replaced by their mean over the text's members (or a reference set) or by the other text's at
    the same member: ours within 1e-4 of transformers with hooks doing the same, every family."""
    family, model, theirs = pair
    c = model.config
    ids, other, ref = ids_of(model, 7, seed=4), ids_of(model, 7, seed=5), ids_of(model, 5, seed=6)
    members, heads = [1, 4], [(0, 1), (c.n_layers - 1, c.n_heads - 1)]
    own, theirs_other, theirs_ref = (their_steps(theirs, family, c, t) for t in (ids, other, ref))
    cases = {Ablation("mean"): lambda place, l: own[place, l].mean(0, keepdim=True).expand_as(own[place, l]),
             Ablation("mean", reference=(tuple(ref), tuple(ids))): lambda place, l: torch.cat(
                 [theirs_ref[place, l], own[place, l]]).mean(0, keepdim=True).expand_as(own[place, l]),
             Ablation("resample", source=tuple(other)): lambda place, l: theirs_other[place, l]}
    for ablation, source in cases.items():
        i = Interventions(tuple(members), None, frozenset(heads), ablation=ablation)
        ours = torch.log_softmax(model.run(ids, interventions=i, record="none").last_logits.double(), -1)
        want = their_ablated_log_probs(theirs, family, c, ids, members, heads, source)
        assert (ours - want).abs().max() < 1e-4, (family, ablation.kind)
        assert (ours - want).abs().max() < (ours - torch.log_softmax(model.run(ids).last_logits.double(), -1)).abs().max()


def test_zero_ablation_is_silencing_bit_for_bit(tiny_model):
    model = studygroup.load(tiny_model.path, cache=False)
    ids = ids_of(model, 8, seed=7)
    i = Interventions((2, 5), None, frozenset({(0, 1), (1, 3)}), ablation=Ablation("zero"))
    a = model.run(ids, interventions=i, record="all")
    b = model.run(ids, silence_members=[2, 5], silence_heads=[(0, 1), (1, 3)], record="all")
    assert torch.equal(a.logits, b.logits) and all(torch.equal(a.steps[n], b.steps[n]) for n in b.steps)


def test_a_member_ablation_in_chosen_heads_is_refused(tiny_model):
    model = studygroup.load(tiny_model.path, cache=False)
    with pytest.raises(InputError, match="zero ablation only"):
        Interventions.make(model, 5, [1], member_heads=[(0, 1)], ablation=Ablation("mean"))


def test_head_and_compare_take_the_ablation_of_their_silencing_from_the_command_line(tiny_model, capsys):
    """`head --silence-member J --ablation mean` is head_view of the mean-ablated run (a run checked
    against transformers above); `compare` the explanations of both texts' resample-ablated runs;
    a resample text of another length: one line, exit 2."""
    import json

    from studygroup.study.head import head_view

    model = studygroup.load(tiny_model.path, cache=False)
    assert main(["head", "the tin can", "--model", str(tiny_model.path), "--layer", "1", "--head", "0", "--json",
                 "--silence-member", "2", "--ablation", "mean"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = head_view(model, "the tin can", 1, 0, interventions=Interventions((2,), ablation=Ablation("mean")))
    assert got["weights"] == want.to_dict()["weights"] and got["weights"][3][2] > 0  # heard, with its mean key
    assert main(["compare", "tin can", "the tin can", "--model", str(tiny_model.path), "--silence-head", "0.1",
                 "--ablation", "resample", "--from", "the can tin", "--json"]) == 2
    err = capsys.readouterr().err
    assert "give no --silence-member/--silence-head" in err and err.count("\n") == 1
    assert main(["head", "the tin can", "--model", str(tiny_model.path), "--layer", "1", "--head", "0",
                 "--silence-member", "2", "--ablation", "resample", "--from", "the tin"]) == 2
    err = capsys.readouterr().err
    assert "same number of tokens" in err and err.count("\n") == 1


def test_explain_takes_each_member_out_by_its_ablation_as_a_hooked_transformers_run_does(pair):
    """explain --ablation mean|resample: each member's effect is the change of log p with its key and
    value projections replaced in every layer (transformers' k_proj/v_proj outputs replaced by
    hooks); the JSON and the story name the ablation for the members too."""
    family, model, theirs = pair
    c = model.config
    ids, other = ids_of(model, 6, seed=8), ids_of(model, 6, seed=9)
    own, theirs_other = their_steps(theirs, family, c, ids), their_steps(theirs, family, c, other)
    with torch.no_grad():
        base = torch.log_softmax(theirs(torch.tensor([ids])).logits[0, -1].double(), -1)
    for ablation, source in ((Ablation("mean"), lambda place, l: own[place, l].mean(0, keepdim=True).expand_as(own[place, l])),
                             (Ablation("resample", source=tuple(other)), lambda place, l: theirs_other[place, l])):
        e = studygroup.explain(model, ids, measure_heads=0, measure_members="all", interventions=Interventions(ablation=ablation))
        t = e.predicted.id
        for m in e.members:
            want = their_ablated_log_probs(theirs, family, c, ids, [m.index], [], source)[t] - base[t]
            assert abs(m.effect - want) < 1e-4, (family, ablation.kind, m.index)
        assert e.ablation == ablation.kind and "its key and value" in e.members_silenced
        assert "taking out one member at a time (its key and value" in " ".join(e.story)


def test_explain_takes_each_member_out_for_the_last_question_as_transformers_with_a_swapped_cache_does(tmp_path):
    """effect_last_question under mean ablation: transformers runs the first T-1 members clean, the
    member's cached key and value (after RoPE) swapped for those of a run with every member's
    k_proj/v_proj outputs replaced by their mean (hooks), then the last member over that cache."""
    path, theirs = _pair("llama", tmp_path)
    model = studygroup.load(path, cache=False)
    c = model.config
    ids = ids_of(model, 6, seed=10)
    own = their_steps(theirs, "llama", c, ids)
    mean = lambda place, l: own[place, l].mean(0, keepdim=True).expand_as(own[place, l])  # noqa: E731
    T, handles = len(ids), []
    for l in range(c.n_layers):
        a = theirs.model.layers[l].self_attn
        for m, place in ((a.k_proj, "k"), (a.v_proj, "v")):
            handles.append(m.register_forward_hook(lambda mod, args, out, place=place, l=l: mean(place, l)[None].clone()))
    with torch.no_grad():
        ablated = _their_cache(theirs(torch.tensor([ids]), use_cache=True))
        for h in handles:
            h.remove()
        full = theirs(torch.tensor([ids]))
    base = torch.log_softmax(full.logits[0, -1].double(), -1)
    e = studygroup.explain(model, ids, measure_heads=0, measure_members="all", interventions=Interventions(ablation=Ablation("mean")))
    t = e.predicted.id
    for m in e.members[:T]:
        j = m.index
        if j == T - 1:
            assert m.effect_last_question == pytest.approx(m.effect, abs=1e-9)
            continue
        with torch.no_grad():
            cache = _their_cache(theirs(torch.tensor([ids[:-1]]), use_cache=True))
            for l in range(c.n_layers):
                cache.layers[l].keys[0, :, j] = ablated.layers[l].keys[0, :, j]
                cache.layers[l].values[0, :, j] = ablated.layers[l].values[0, :, j]
            out = theirs(torch.tensor([ids[-1:]]), use_cache=True, **{_cache_argument(theirs): cache})
        want = float(torch.log_softmax(out.logits[0, -1].double(), -1)[t] - base[t])
        assert abs(m.effect_last_question - want) < 1e-4, j
        assert abs(want) > 1e-6  # the swap changes something



def _cache_argument(theirs) -> str:
    """The name transformers' forward takes its key/value cache by: `cache`, `past_key_values` before it."""
    return "cache" if "cache" in inspect.signature(theirs.forward).parameters else "past_key_values"


def _their_cache(out):
    """The key/value cache of one of transformers' outputs, under either name."""
    return out.cache if "cache" in out else out.past_key_values

def test_a_long_text_takes_each_member_out_for_the_last_question_by_its_ablation(tiny_model, monkeypatch):
    """Past LONG_T members explain measures members for the last question only: under mean
    ablation, the short text's numbers (checked against transformers above), to float32 rounding."""
    from studygroup.study import explain as study
    model = studygroup.load(tiny_model.path, cache=False)
    ids = ids_of(model, 6, seed=11)
    mean = Interventions(ablation=Ablation("mean"))
    short = studygroup.explain(model, ids, measure_heads=0, measure_members="all", interventions=mean)
    monkeypatch.setattr(study, "LONG_T", 4)
    long = studygroup.explain(model, ids, measure_heads=0, interventions=mean)
    assert long.scope != short.scope and "taken out" in long.members_silenced
    got = {m.index: m.effect_last_question for m in long.members}
    assert all(abs(got[m.index] - m.effect_last_question) < 1e-4 for m in short.members)  # float32 passes of another shape


@pytest.mark.parametrize("kind", ["zero", "mean", "resample"])
def test_the_head_view_of_a_head_taken_out_shows_what_it_computes_and_says_what_the_run_puts_in(tiny_model, capsys, kind):
    """A head taken out itself: the view's output is its own weighted sum (the clean run's, nothing
    silenced before it), and its `taken_out` sentence says what the run passes on instead, which the
    run's recorded output is: the mean of the outputs shown (mean ablation over the text's own
    members), or the other text's output (resample)."""
    from studygroup.study.head import head_view

    model = studygroup.load(tiny_model.path, cache=False)
    ids, other = ids_of(model, 7, seed=12), ids_of(model, 7, seed=13)
    l, h = 1, 2
    i = Interventions((), None, frozenset({(l, h)}), ablation=Ablation(kind, source=tuple(other) if kind == "resample" else None))
    view, clean = head_view(model, ids, l, h, interventions=i), head_view(model, ids, l, h)
    shown = torch.tensor(view.output)  # (T, d_head)
    assert torch.equal(shown, torch.tensor(clean.output)) and clean.taken_out is None
    put = model.run(ids, interventions=i, record=["output"])["output", l][h]  # (T, d_head): what the run passes on
    if kind == "mean":
        assert (put - shown.mean(0)).abs().max() < 1e-5 and "replaced by its mean over the text's members" in view.taken_out
    if kind == "resample":
        assert (put - model.run(other, record=["output"])["output", l][h]).abs().max() < 1e-5
        assert "taken from the other text's run" in view.taken_out
    if kind == "zero":
        assert "its write is zeroed" in view.taken_out
    assert view.taken_out.startswith(f"Head {l}.{h} is ") and head_view(model, ids, 0, h, interventions=i).taken_out is None
    argv = ["head", "the tin can", "--model", str(tiny_model.path), "--layer", str(l), "--head", str(h), "--silence-head", f"{l}.{h}",
            *(["--ablation", kind] if kind != "resample" else ["--ablation", "resample", "--from", "the can tin"])]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    said = "writes nothing" if kind == "zero" else f"taken out by {kind} ablation in this run: layer {l} head {h}: its output"
    assert said in out and f"Head {l}.{h} is " in out
