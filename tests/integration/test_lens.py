"""The logit lens (studygroup.study.lens) against transformers on the same weights, in every family:
each layer's residual stream (transformers' hidden_states) through its final norm and lm_head gives
the same probabilities; after the last layer, at the last member, the lens is the run's own logits."""
from __future__ import annotations

import pytest
import torch

import studygroup
from integration.test_every_family import FAMILIES, _pair, ids_of
from studygroup.errors import InputError
from studygroup.model.record import Record
from studygroup.study.lens import lens


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request, tmp_path_factory):
    path, theirs = _pair(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, studygroup.load(path, cache=False), theirs


def their_lens(theirs, family, ids) -> torch.Tensor:
    """(L, T, vocab) float64 log-probabilities: hidden_states[l + 1] through the final norm and lm_head
    (the last layer: the model's logits, as transformers' last hidden state is already normed)."""
    norm = theirs.transformer.ln_f if family == "gpt2" else theirs.model.norm
    with torch.no_grad():
        out = theirs(torch.tensor([ids]), output_hidden_states=True)
        layers = [theirs.lm_head(norm(h))[0] for h in out.hidden_states[1:-1]] + [out.logits[0]]
    return torch.log_softmax(torch.stack(layers).double(), -1)


def test_every_cell_equals_transformers_hidden_states_through_its_final_norm_and_unembedding(pair):
    family, model, theirs = pair
    ids = ids_of(model, 7)
    want = their_lens(theirs, family, ids)
    for ours in (lens(model, ids, top=4), lens(model, ids, top=4, all_positions=True)):
        assert len(ours.layers) == want.shape[0] == model.config.n_layers
        same_as_theirs(ours, want)


def same_as_theirs(ours, want: torch.Tensor) -> None:
    """Every cell of the lens `ours` against their (L, T, vocab) log-probabilities, within 1e-4; the
    final word's rank up to the words whose log-probability is within 1e-4 of its own (near-ties that
    float32 rounding orders either way)."""
    for l, row in enumerate(ours.layers):
        for p, cell in zip(ours.positions, row):
            final = ours.final[ours.positions.index(p)].id
            assert abs(cell.final_prob - float(want[l, p, final].exp())) < 1e-4, (l, p)
            for word in cell.top:
                assert abs(word.prob - float(want[l, p, word.id].exp())) < 1e-4, (l, p, word)
            f = want[l, p, final]
            assert int((want[l, p] > f + 1e-4).sum()) + 1 <= cell.final_rank <= int((want[l, p] > f - 1e-4).sum()) + 1, (l, p)


@pytest.mark.parametrize("every, rows", [(False, "last"), (True, "all")])
def test_after_the_last_layer_at_the_last_member_it_is_the_runs_own_conclusion(tiny_model, every, rows):
    model = studygroup.load(tiny_model.path, cache=False)
    ids = ids_of(model, 9)
    # the pass the lens makes: the last member's rows alone (the default) or every member's
    e, run = lens(model, ids, top=5, all_positions=every), model.run(ids, record=Record(steps=("resid_post",), rows=rows))
    lp = torch.log_softmax(run.last_logits.double(), -1)
    assert [w.id for w in e.layers[-1][-1].top] == lp.topk(5).indices.tolist()
    own = lp.topk(5).values.exp().tolist()  # the same pass's logits: equal up to float64 rounding of the softmax
    assert all(abs(w.prob - p) < 1e-12 for w, p in zip(e.layers[-1][-1].top, own))
    assert e.final[-1].id == int(lp.argmax()) and e.layers[-1][-1].final_rank == 1
    plain = torch.softmax(model.run(ids).last_logits.double(), -1)  # a pass that records the maps too
    assert all(abs(w.prob - float(plain[w.id])) < 1e-5 for w in e.layers[-1][-1].top)


def test_the_story_says_when_the_final_word_leads_and_with_which_probabilities():
    model = studygroup.load()
    e = lens(model, "Cash or credit card? I have a lot")
    column = [row[-1] for row in e.layers]
    first = next(l for l, cell in enumerate(column) if cell.final_rank == 1)
    stays = min(l for l in range(len(column)) if all(c.final_rank == 1 for c in column[l:]))
    assert (e.first_top, e.top_from) == (first, stays)
    said = " ".join(e.story)
    assert f"from layer {stays}" in said and "“␣of”" in said
    assert f"{len(column) - 1}: {round(100 * column[-1].final_prob)}%" in said


def test_positions_choose_the_members_shown_and_an_empty_choice_is_refused(tiny_model):
    model = studygroup.load(tiny_model.path, cache=False)
    ids = ids_of(model, 9)
    assert lens(model, ids, positions=slice(-3, None)).positions == [6, 7, 8]
    assert lens(model, ids).positions == [8] and lens(model, ids, all_positions=True).positions == list(range(9))
    with pytest.raises(InputError, match="leaves the text"):
        lens(model, ids, positions=slice(20, 30))
    with pytest.raises(InputError, match="leaves the text"):  # an end past the text: refused, not clipped to 6:9
        lens(model, ids, positions=slice(6, 12))
