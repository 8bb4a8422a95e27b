"""Activation patching (studygroup.study.patching) against transformers with hooks on the same weights,
in every family: each cell of the residual-stream, attention, MLP and head grids is a hooked
transformers run of the corrupted text with that one thing taken from its own clean run."""
from __future__ import annotations

import pytest
import torch

import studygroup
from integration.test_every_family import FAMILIES, _pair, ids_of
from studygroup.errors import InputError
from studygroup.study.patching import GRIDS, patch


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request, tmp_path_factory):
    path, theirs = _pair(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, studygroup.load(path, cache=False), theirs


def modules(theirs, family: str, l: int):
    """transformers' modules of layer l: the block, what writes attn_out, what writes mlp_out, W_O."""
    if family == "gpt2":
        b = theirs.transformer.h[l]
        return b, b.attn, b.mlp, b.attn.c_proj
    b = theirs.model.layers[l]
    if family == "gemma3":  # our attn_out and mlp_out are after the norms that follow them
        return b, b.post_attention_layernorm, b.post_feedforward_layernorm, b.self_attn.o_proj
    return b, b.self_attn, b.mlp, b.self_attn.o_proj


def _first(o):
    return o[0] if isinstance(o, tuple) else o


class Hooked:
    """transformers' run of ids with one hook, which may read (clean) or replace (patch) a value."""

    def __init__(self, theirs, family, d_head):
        self.theirs, self.family, self.d_head = theirs, family, d_head

    def run(self, ids, hooks=()) -> torch.Tensor:
        handles = [register(fn) for register, fn in hooks]
        try:
            with torch.no_grad():
                return self.theirs(torch.tensor([ids])).logits[0, -1].double()
        finally:
            for h in handles:
                h.remove()

    def capture(self, ids, L):
        """{(grid, l): the clean value}: resid_pre (T, d), attn_out (T, d), mlp_out (T, d), heads (T, H·d)."""
        got = {}
        hooks = []
        for l in range(L):
            block, attn, mlp, w_o = modules(self.theirs, self.family, l)
            hooks += [(lambda fn, b=block: b.register_forward_pre_hook(fn, with_kwargs=True),
                       lambda m, a, k, l=l: got.__setitem__(("resid_pre", l), (a[0] if a else k["hidden_states"])[0].clone())),
                      (attn.register_forward_hook, lambda m, i, o, l=l: got.__setitem__(("attn_out", l), _first(o)[0].clone())),
                      (mlp.register_forward_hook, lambda m, i, o, l=l: got.__setitem__(("mlp_out", l), _first(o)[0].clone())),
                      (w_o.register_forward_pre_hook, lambda m, a, l=l: got.__setitem__(("heads", l), a[0][0].clone()))]
        self.run(ids, hooks)
        return got

    def patched(self, ids, grid, l, i, clean):
        """The corrupted run's last logits with (grid, l)'s member or head i taken from `clean`."""
        block, attn, mlp, w_o = modules(self.theirs, self.family, l)
        value = clean[(grid, l)]

        def put(t):
            t = t.clone()
            if grid == "heads":
                t[0, :, i * self.d_head:(i + 1) * self.d_head] = value[:, i * self.d_head:(i + 1) * self.d_head]
            else:
                t[0, i] = value[i]
            return t

        if grid == "resid_pre":
            def pre(m, a, k):
                if a:
                    return (put(a[0]), *a[1:]), k
                return a, {**k, "hidden_states": put(k["hidden_states"])}
            hook = (lambda fn: block.register_forward_pre_hook(fn, with_kwargs=True), pre)
        elif grid == "heads":
            hook = (w_o.register_forward_pre_hook, lambda m, a: (put(a[0]), *a[1:]))
        else:
            module = attn if grid == "attn_out" else mlp
            hook = (module.register_forward_hook,
                    lambda m, inp, o: (put(o[0]), *o[1:]) if isinstance(o, tuple) else put(o))
        return self.run(ids, [hook])


def test_every_cell_equals_a_hooked_transformers_run(pair):
    family, model, theirs = pair
    c, T = model.config, 5
    clean, corrupted = ids_of(model, T, seed=1), ids_of(model, T, seed=1)
    corrupted[1], corrupted[3] = ids_of(model, 2, seed=7)
    ours = patch(model, clean, corrupted)
    hooked = Hooked(theirs, family, c.d_head)
    values = hooked.capture(clean, c.n_layers)
    a, b = ours.answer.id, ours.wrong.id
    assert abs(float(hooked.run(clean)[a] - hooked.run(clean)[b]) - ours.clean_diff) < 1e-4
    assert abs(float(hooked.run(corrupted)[a] - hooked.run(corrupted)[b]) - ours.corrupted_diff) < 1e-4
    for grid in GRIDS:
        for l, row in enumerate(ours.grids[grid].raw):
            for i, m in enumerate(row):
                logits = hooked.patched(corrupted, grid, l, i, values)
                assert abs(float(logits[a] - logits[b]) - m) < 1e-4, (grid, l, i)


def one_member_changed(tiny_model, T: int, j: int):
    """The tiny model, and a clean and a corrupted text of T members that differ at member j only."""
    model = studygroup.load(tiny_model.path, cache=False)
    clean, corrupted = ids_of(model, T, seed=3), ids_of(model, T, seed=3)
    corrupted[j] = (corrupted[j] + 1) % model.config.vocab_size
    return model, clean, corrupted


def test_normalised_is_zero_for_nothing_and_one_for_everything(tiny_model):
    model, clean, corrupted = one_member_changed(tiny_model, 6, 2)
    p = patch(model, clean, corrupted)
    resid = torch.tensor(p.grids["resid_pre"].normalised)  # (L, T)
    assert torch.allclose(resid[0, 2], torch.tensor(1.0), atol=1e-5)  # the changed member at the start: all of it
    assert torch.allclose(resid[0, [0, 1]], torch.zeros(2), atol=1e-6)  # members before it: the same in both
    assert abs(p.grids["resid_pre"].raw[0][2] - p.clean_diff) < 1e-4  # raw: the clean run's difference


def test_identical_texts_are_said_not_nan(tiny_model):
    model = studygroup.load(tiny_model.path, cache=False)
    ids = ids_of(model, 4, seed=5)
    p = patch(model, ids, ids)
    assert all(v is None for row in p.grids["heads"].normalised for v in row)
    assert "same difference" in " ".join(p.story)
    assert p.to_json()  # every number finite or null


def test_the_same_text_twice_is_said_not_normalised_by_rounding(tiny_model):
    """The same text as clean and corrupted: the two runs' m are one number, so every normalised cell
    is 0/0 (null), not a ratio of two float32 roundings."""
    model = studygroup.load(tiny_model.path, cache=False)
    p = patch(model, "the tin", "the tin")
    assert p.clean_diff == p.corrupted_diff
    assert all(v is None for g in p.grids.values() for row in g.normalised for v in row)
    assert "same difference" in " ".join(p.story) and "nan" not in p.to_json().lower()


def test_texts_of_different_lengths_are_refused_in_one_line(tiny_model):
    model = studygroup.load(tiny_model.path, cache=False)
    with pytest.raises(InputError, match="same number of tokens"):
        patch(model, ids_of(model, 4), ids_of(model, 5))


def test_an_answer_word_of_several_tokens_is_refused_naming_its_pieces():
    model = studygroup.load()
    with pytest.raises(InputError, match=r"is 3 tokens \(␣unbelie \| v \| ably\)"):
        patch(model, "The cat sat on the", "The dog sat on the", answer=" unbelievably")


def test_a_changed_last_member_is_said_to_hold_the_difference_not_to_be_given_it_by_attention(tiny_model):
    p = patch(*one_member_changed(tiny_model, 5, -1))
    assert p.grids["resid_pre"].normalised[0][-1] == pytest.approx(1.0, abs=1e-5)  # the last member's own input: all of it
    said = " ".join(p.story)
    assert "The last member is itself a changed member" in said and "from layer 0 on" in said
    assert "moved it there" not in said


def test_a_changed_member_before_the_last_is_said_to_reach_it_by_attention(tiny_model):
    p = patch(*one_member_changed(tiny_model, 5, 1))
    resid = torch.tensor(p.grids["resid_pre"].normalised)  # (L, T)
    last = next((l for l in range(resid.shape[0]) if resid[l:, -1].min() >= 0.5), None)
    said = " ".join(p.story)
    assert "itself a changed member" not in said
    assert (last is None) == ("moved it there" not in said)
    if last is not None:
        assert last > 0 and f"from layer {last} on: below that layer, attention moved it there" in said


def test_the_same_word_as_answer_and_wrong_is_refused_before_any_pass(tiny_model):
    model = studygroup.load(tiny_model.path, cache=False)
    word = next(w for w in ("t", "a", " t", "e") if len(model.tokenizer.encode(w)) == 1)
    with pytest.raises(InputError, match="both .*: the metric is the difference of their logits, 0 in every run"):
        patch(model, ids_of(model, 4), ids_of(model, 4, seed=9), answer=word, wrong=word)
