"""The logit lens on the default model against transformers on the same file (`theirs`,
tests/model/conftest.py): every cell of the default lens (the last member) and of the grid (every
member) within 1e-4 of transformers' hidden_states through its final norm and lm_head."""
from __future__ import annotations

from integration.test_lens import same_as_theirs, their_lens
from studygroup.study.lens import lens

TEXT = "Cash or credit card? I have a lot"


def test_every_cell_equals_transformers_hidden_states_through_its_final_norm_and_unembedding(model, theirs):
    ids = model.ids(TEXT)
    want = their_lens(theirs, "llama", ids)  # (L, T, vocab) log-probabilities
    default, grid = lens(model, TEXT, top=5), lens(model, TEXT, top=5, all_positions=True)
    assert default.positions == [len(ids) - 1] and grid.positions == list(range(len(ids)))
    for e in (default, grid):
        same_as_theirs(e, want)
