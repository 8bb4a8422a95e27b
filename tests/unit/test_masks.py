"""Silencing masks: which keys each question can still hear."""
import pytest
import torch

from studygroup.formulas import masks as silence
from studygroup.formulas.attention import causal_mask


def test_member_mask_removes_the_key_everywhere_but_keeps_every_row_answerable():
    T = 6
    m = silence.member_mask(T, [2, 4])
    assert not m[:, 2][torch.arange(T) != 2].any() and not m[:, 4][torch.arange(T) != 4].any()
    assert m.any(-1).all()
    untouched = [0, 1, 3, 5]
    assert torch.equal(m[:, untouched], causal_mask(T, T)[:, untouched])


def test_a_member_with_no_other_key_hears_itself_only():
    m = silence.member_mask(4, [0])
    assert m[0].tolist() == [True, False, False, False]
    assert not m[1:, 0].any()


def test_silencing_all_but_the_first_leaves_only_the_first():
    m = silence.member_mask(5, range(1, 5))
    assert torch.equal(m, torch.zeros(5, 5, dtype=torch.bool).index_fill_(1, torch.tensor([0]), True))


def test_batched_masks_equal_one_at_a_time():
    T = 7
    batch = silence.each_member_masks(T, range(T))
    for j in range(T):
        assert torch.equal(batch[j], silence.member_mask(T, [j]))


def test_per_layer_applies_to_chosen_heads_only():
    T, mask = 5, silence.member_mask(5, [1])[None]
    layers = silence.per_layer(mask, frozenset({(1, 2)}), n_layers=3, n_heads=4)
    assert set(layers) == {1}
    assert torch.equal(layers[1][0, 2], mask[0])
    for h in (0, 1, 3):
        assert torch.equal(layers[1][0, h], causal_mask(T, T))
    assert set(silence.per_layer(mask, None, 3, 4)) == {0, 1, 2}


def test_per_layer_with_a_base_covers_every_layer_and_shares_the_untouched_ones():
    silenced, base = silence.packed_member_masks(5, [3, 1])
    layers = silence.per_layer(silenced[None], frozenset({(1, 2)}), n_layers=3, n_heads=4, base=base[None])
    assert set(layers) == {0, 1, 2}
    assert layers[0].shape == (1, 1, *base.shape) and layers[0].data_ptr() == layers[2].data_ptr()  # one tensor
    assert torch.equal(layers[1][0, 2], silenced) and torch.equal(layers[1][0, 0], base)


def test_packed_masks_equal_the_copies_one_at_a_time():
    T, members = 7, [4, 0, 6, 2, 2]
    silenced, base = silence.packed_member_masks(T, members)
    P, o = max(members), 0
    assert silenced.shape == base.shape == (sum(T - j for j in members), P + sum(T - j for j in members))
    for j in members:  # copy j's rows j..T-1 see the reused keys 0..j-1 and their own rows, as the whole copy would
        n, full = T - j, silence.member_mask(T, [j])
        rows = silenced[o:o + n]
        assert torch.equal(rows[:, :j], full[j:, :j]) and not rows[:, j:P].any()
        assert torch.equal(rows[:, P + o:P + o + n], full[j:, j:])
        assert not rows[:, P:P + o].any() and not rows[:, P + o + n:].any()  # never another copy's rows
        assert torch.equal(base[o:o + n, P + o:P + o + n], causal_mask(n, n)) and base[o:o + n, :j].all()
        o += n


@pytest.mark.parametrize("members", [(), (0,), (3, 5), (0, 1, 2, 3, 4, 5, 6, 7)])
def test_a_window_of_rows_of_the_member_mask_equals_those_rows_of_the_whole(members):
    T = 8
    whole = silence.member_mask(T, members)  # (T, T)
    for rows in (range(0, 8), range(2, 5), range(7, 8), range(0, 1)):
        assert torch.equal(silence.member_mask(T, members, rows=rows), whole[rows.start:rows.stop])
