"""explain's estimate_missed_by against a direct recomputation: the first-order estimate by finite
differences of an independent float64 pass (tests/conftest.py: reference_llama), the exact effect
by the same pass with the head zeroed, over exactly the heads explain measured."""
import pytest
import torch

from conftest import TEXT_B, reference_llama
from studygroup.study import explain as study

EPS = 1e-4


def reference_gaps(tiny, ids, token, heads):
    """{(layer, head): |first-order estimate - exact silence effect|} from the reference pass."""
    clean = float(reference_llama(tiny, ids)[token])
    gaps = {}
    for p in heads:
        up, down = (float(reference_llama(tiny, ids, silenced_heads=[p], head_gate=1 + s)[token]) for s in (EPS, -EPS))
        estimate = -(up - down) / (2 * EPS)  # -∂ log p(t) / ∂g at g = 1
        exact = float(reference_llama(tiny, ids, silenced_heads=[p])[token]) - clean
        gaps[p] = abs(estimate - exact)
    return gaps


@pytest.mark.parametrize("ids, measured", [(None, "all"), (17, 3)])
def test_estimate_missed_by_is_the_largest_gap_over_the_heads_measured(model, tiny_model, ids, measured):
    ids = TEXT_B if ids is None else torch.randint(0, model.config.vocab_size, (ids,),
                                                  generator=torch.Generator().manual_seed(5)).tolist()
    e = study.explain(model, ids, silence_heads=measured)
    heads = [(h.layer, h.head) for h in e.heads]
    c = model.config
    assert len(heads) == (c.n_layers * c.n_heads if measured == "all" else measured)
    gaps = reference_gaps(tiny_model, e.token_ids, e.predicted.id, heads)
    for h in e.heads:
        assert abs(h.silence_estimate - h.silence_effect) == pytest.approx(gaps[h.layer, h.head], abs=2e-4)
    assert e.estimate_missed_by == pytest.approx(max(gaps.values()), abs=2e-4)
