"""The pass's hook points can replace what they record (studygroup.model.interventions.Replacement):
every step replaced by its own recorded value gives the same run bit for bit, in every family; a
layer's residual stream taken from another text (some members' rows, or all) gives transformers'
logits with a hook doing the same; a head's output replaced by zeros is that head silenced; bad
replacements are refused in one line."""
from __future__ import annotations

import pytest
import torch

import studygroup
from integration.test_every_family import FAMILIES, _pair, ids_of
from studygroup.errors import InputError
from studygroup.model.interventions import Replacement


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request, tmp_path_factory):
    path, theirs = _pair(request.param, tmp_path_factory.mktemp(request.param))
    return studygroup.load(path, cache=False), theirs


def test_every_step_replaced_by_its_own_value_gives_the_same_run_bit_for_bit(pair):
    model, _ = pair
    ids = ids_of(model, 6)
    run = model.run(ids, record="all", logits="all")
    assert len(run.steps) > 10 * model.config.n_layers
    for name, value in run.steps.items():
        again = model.run(ids, record="all", logits="all", replace={name: value})
        assert torch.equal(again.logits, run.logits), name
        assert all(torch.equal(again.steps[n], t) for n, t in run.steps.items()), name


def _their_layers(theirs):
    return theirs.model.layers if hasattr(theirs, "model") else theirs.transformer.h


def _their_logits_with(theirs, ids, layer, value, rows):
    """transformers' last logits with layer `layer`'s input replaced at `rows` by `value` (T, d)."""
    def hook(module, args, kwargs):
        h = (args[0] if args else kwargs["hidden_states"]).clone()
        h[0, rows] = value[rows].to(h.dtype)
        if args:
            return (h, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": h}

    handle = _their_layers(theirs)[layer].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            return theirs(torch.tensor([ids])).logits[0, -1]
    finally:
        handle.remove()


@pytest.mark.parametrize("rows", [[2, 5], None], ids=["two members", "every member"])
def test_a_layers_residual_stream_from_another_text_matches_a_transformers_hook(pair, rows):
    model, theirs = pair
    clean, other = ids_of(model, 7, seed=1), ids_of(model, 7, seed=2)
    layer = model.config.n_layers - 1
    with torch.no_grad():
        their_other = theirs(torch.tensor([other]), output_hidden_states=True).hidden_states[layer][0]  # (T, d)
    our_other = model.run(other, record=["resid_pre"])["resid_pre", layer]  # (T, d_model)
    assert (our_other - their_other).abs().max() < 1e-4  # the two passes agree on what is put in
    members = list(range(7)) if rows is None else rows
    r = Replacement(f"layers.{layer}.resid_pre", our_other[members], members=rows)
    ours = model.run(clean, replace=[r]).last_logits
    want = _their_logits_with(theirs, clean, layer, their_other, members)
    plain = model.run(clean).last_logits
    assert (ours - want).abs().max() < 1e-4 * max(1.0, float(want.abs().max()))
    assert (ours - plain).abs().max() > 1e-3  # the replacement changed something


def test_a_heads_output_replaced_by_zeros_is_that_head_silenced(tiny_model):
    model = studygroup.load(tiny_model.path, cache=False)
    ids = ids_of(model, 8)
    zero = Replacement("layers.1.output", torch.zeros(1, 8, model.config.d_head), heads=[2])
    replaced = model.run(ids, record="all", replace=[zero])
    silenced = model.run(ids, record="all", silence_heads=[(1, 2)])
    assert torch.equal(replaced.logits, silenced.logits)
    assert torch.equal(replaced["resid_post", 1], silenced["resid_post", 1])


def test_some_rows_and_heads_are_replaced_and_the_rest_kept(tiny_model):
    model = studygroup.load(tiny_model.path, cache=False)
    ids = ids_of(model, 8)
    run = model.run(ids, record="all")
    value = torch.full((2, 3, model.config.d_head), 0.25)
    again = model.run(ids, record="all", replace=[Replacement("layers.0.v", value, members=[1, 4, 6], heads=[0, 1])])
    v, before = again["v", 0], run["v", 0]  # (n_kv_heads, T, d_head)
    assert torch.equal(v[:, [1, 4, 6]], value)
    kept = [j for j in range(8) if j not in (1, 4, 6)]
    assert torch.equal(v[:, kept], before[:, kept])
    assert torch.equal(again["k", 0], run["k", 0])  # the keys are not the answers
    assert not torch.equal(again["output", 0], run["output", 0])


def test_a_replaced_map_is_what_the_weighted_sum_uses(tiny_model):
    """Weights replaced by a uniform average over the members each question sees: the output is the
    mean of the answers it sees, computed here in float64."""
    model = studygroup.load(tiny_model.path, cache=False)
    T, c = 6, model.config
    ids = ids_of(model, T)
    uniform = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]  # (T, T), rows sum to 1
    run = model.run(ids, record="all", replace={"layers.1.weights": uniform})
    v = run["v", 1].double()  # (n_kv_heads, T, d_head)
    want = uniform.double() @ v.repeat_interleave(c.n_heads // c.n_kv_heads, 0)  # (n_heads, T, d_head)
    assert (run["output", 1].double() - want).abs().max() < 1e-6
    assert torch.equal(run["weights", 1], uniform.expand(c.n_heads, T, T))


@pytest.mark.parametrize("replacement, words", [
    (Replacement("layers.9.resid_pre", torch.zeros(3, 32)), "no hook point of this model"),
    (Replacement("resid_pre", torch.zeros(3, 32)), "no hook point of this model"),
    (Replacement("layers.0.q_normed", torch.zeros(4, 3, 8)), "no hook point of this model"),
    (Replacement("layers.0.resid_pre", torch.zeros(3, 31)), "must fit (3, 32)"),
    (Replacement("layers.0.resid_pre", torch.zeros(2, 32), members=[0, 3]), "member 3 does not exist"),
    (Replacement("layers.0.resid_pre", torch.zeros(3, 32), heads=[0]), "not a step per head"),
    (Replacement("layers.0.k", torch.zeros(1, 3, 8), heads=[2]), "head 2 does not exist"),
    (Replacement("layers.0.q", torch.zeros(2, 3, 8), heads=[0, 1], members=[1]), "must fit (2, 1, 8)"),
], ids=lambda x: x.name if isinstance(x, Replacement) else None)
def test_a_bad_replacement_is_refused_in_one_line(tiny_model, replacement, words):
    model = studygroup.load(tiny_model.path, cache=False)
    with pytest.raises(InputError) as e:
        model.run(ids_of(model, 3), replace=[replacement])
    assert words in str(e.value) and "\n" not in str(e.value)
