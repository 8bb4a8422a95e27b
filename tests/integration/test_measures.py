"""explain's estimate_missed_by against a direct recomputation: the first-order estimate by finite
differences of an independent float64 pass (tests/conftest.py: reference_llama), the exact effect
by the same pass with the head zeroed, over exactly the heads explain measured (and in a run that
already silences a member and a head: every measure is then taken on top of that)."""
import pytest
import torch

from conftest import TEXT_B, reference_llama
from studygroup.study import explain as study
from studygroup.model.interventions import Interventions

EPS = 1e-4


def reference_gaps(tiny, ids, token, heads, members=(), quiet=()):
    """{(layer, head): |first-order estimate - exact silence effect|} from the reference pass, in a
    run that silences `members` and the heads `quiet`."""
    def lp(silenced=(), gates=None):
        return float(reference_llama(tiny, ids, members, [*quiet, *silenced], gates=gates)[token])
    clean, gaps = lp(), {}
    for p in heads:
        if p in quiet:  # its write is already zero: no gate left to move
            gaps[p] = 0.0
            continue
        estimate = -(lp(gates={p: 1 + EPS}) - lp(gates={p: 1 - EPS})) / (2 * EPS)  # -∂ log p(t) / ∂g at g = 1
        gaps[p] = abs(estimate - (lp([p]) - clean))
    return gaps


@pytest.mark.parametrize("ids, measured, members, quiet", [(None, "all", (), ()), (17, 3, (), ()),
                                                           (None, "all", (2,), ((0, 1),))])
def test_estimate_missed_by_is_the_largest_gap_over_the_heads_measured(model, tiny_model, ids, measured, members,
                                                                       quiet):
    ids = TEXT_B if ids is None else torch.randint(0, model.config.vocab_size, (ids,),
                                                  generator=torch.Generator().manual_seed(5)).tolist()
    e = study.explain(model, ids, measure_heads=measured, interventions=Interventions(members, None, frozenset(quiet)))
    c = model.config
    assert e.heads_measured == (c.n_layers * c.n_heads if measured == "all" else measured)
    exact = e.heads[:e.heads_measured]  # those measured at every position come first
    assert all(h.silence_effect is not None for h in exact) and all(h.silence_effect is None for h in e.heads[len(exact):])
    heads = [(h.layer, h.head) for h in exact]
    gaps = reference_gaps(tiny_model, e.token_ids, e.predicted.id, heads, members, quiet)
    for h in exact:
        assert abs(h.silence_estimate - h.silence_effect) == pytest.approx(gaps[h.layer, h.head], abs=2e-4)
    assert e.estimate_missed_by == pytest.approx(max(gaps.values()), abs=2e-4)
