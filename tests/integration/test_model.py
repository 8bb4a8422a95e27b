"""The forward pass on a tiny random Llama (written to GGUF by a fixture) against transformers."""
import re

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import studygroup
from studygroup.formulas import attention
from studygroup.errors import InputError
from studygroup.model.record import LAYER_STEPS, Record


@pytest.fixture(scope="module")
def theirs(tiny_model):
    hf = LlamaForCausalLM(LlamaConfig(**tiny_model.hf_config, attn_implementation="eager"))
    missing, unexpected = hf.load_state_dict(tiny_model.hf_state_dict, strict=False)
    assert not unexpected and all("rotary" in m or m == "lm_head.weight" for m in missing)
    return hf.eval()


def random_ids(model, T, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (T,), generator=g).tolist()


@pytest.mark.parametrize("T,seed", [(1, 0), (5, 1), (17, 2), (40, 3)])
def test_logits_equal_transformers(model, theirs, T, seed):
    ids = random_ids(model, T, seed)
    with torch.no_grad():
        expected = theirs(torch.tensor([ids])).logits[0]  # (T, vocab)
    for record in ("none", "default", "all"):
        got = model.run(ids, record=record, logits="all").logits
        assert got.shape == expected.shape
        assert (got - expected).abs().max() < 1e-4, record


def test_last_logits_by_default(model, theirs):
    ids = random_ids(model, 9, 4)
    run = model.run(ids)
    assert run.logits.shape == (1, model.config.vocab_size)
    with torch.no_grad():
        expected = theirs(torch.tensor([ids])).logits[0, -1]
    assert (run.logits[-1] - expected).abs().max() < 1e-4


def test_recorded_weights_equal_transformers_attentions(model, theirs):
    ids = random_ids(model, 12, 5)
    with torch.no_grad():
        attn = theirs(torch.tensor([ids]), output_attentions=True).attentions
    run = model.run(ids, record="all")
    for l, expected in enumerate(attn):
        assert (run[f"layers.{l}.weights"] - expected[0]).abs().max() < 1e-5


def test_recorded_steps_fit_together(model):
    ids = random_ids(model, 11, 6)
    run = model.run(ids, record="all")
    c = model.config
    for l in range(c.n_layers):
        q, k, v = run[f"layers.{l}.q"], run[f"layers.{l}.k"], run[f"layers.{l}.v"]
        assert q.shape == (c.n_heads, 11, c.d_head) and k.shape == v.shape == (c.n_kv_heads, 11, c.d_head)
        out, weights = attention.paper(q, k, v, mask="causal")
        assert torch.allclose(out, run[f"layers.{l}.output"], atol=1e-5)
        assert torch.allclose(weights, run[f"layers.{l}.weights"], atol=1e-6)
        col_out, _ = attention.columns(q.mT, k.mT, v.mT, mask="causal")
        assert torch.allclose(col_out.mT, run[f"layers.{l}.output"], atol=1e-5)
        writes = run[f"layers.{l}.write"]  # (H, T, d_model)
        assert torch.allclose(writes.sum(0), run[f"layers.{l}.attn_out"], atol=1e-5)
        assert torch.allclose(run[f"layers.{l}.resid_pre"] + run[f"layers.{l}.attn_out"],
                              run[f"layers.{l}.resid_mid"], atol=1e-5)


def test_last_row_recording_equals_the_full_recording(model):
    ids = random_ids(model, 20, 7)
    full = model.run(ids, record="all")
    last = model.run(ids, record=studygroup.model.record.Record(steps=("weights", "write", "scores"), rows="last"))
    for l in range(model.config.n_layers):
        for s in ("weights", "write", "scores"):
            assert torch.allclose(last[f"layers.{l}.{s}"], full[f"layers.{l}.{s}"][:, -1:], atol=1e-5)
    assert "layers.0.q" not in last
    assert torch.allclose(last.logits, full.logits, atol=1e-5)


def test_head_is_recomputed_on_demand_when_not_kept(model):
    ids = random_ids(model, 15, 8)
    kept = model.run(ids, record="all").head(1, 3)
    recomputed = model.run(ids, record="none").head(1, 3)
    for name in ("q", "k", "v", "scores", "weights", "output", "write", "k_pre_rope", "q_pre_rope"):
        assert torch.allclose(getattr(kept, name), getattr(recomputed, name), rtol=1e-5, atol=1e-5), name  # float32 rounding: a few ulps
    assert kept.kv_head == 3 // model.config.group_size


def test_silencing_a_member_a_head_cannot_see_leaves_earlier_questions_unchanged(model):
    ids = random_ids(model, 10, 9)
    base = model.run(ids, record="all")
    j = 6
    quiet = base.silence_member(j, heads=[(1, 2)])
    before, after = base.head(1, 2), quiet.head(1, 2)
    assert torch.allclose(after.output[:j], before.output[:j], atol=1e-6)  # questions before j never saw j
    assert not torch.allclose(after.output[j + 1:], before.output[j + 1:], atol=1e-4)
    assert (after.weights[j + 1:, j] == 0).all()
    assert torch.allclose(quiet.head(0, 2).output, base.head(0, 2).output, atol=1e-6)  # layer 0 is untouched
    # (its rows from j on passed again, on their own: float32 rounding apart)


def test_silencing_every_member_but_the_first_makes_the_weights_one_hot(model):
    ids = random_ids(model, 8, 10)
    run = model.run(ids, record="all", silence_members=range(1, 8))
    for l in range(model.config.n_layers):
        w = run[f"layers.{l}.weights"]
        assert torch.equal(w[..., 0], torch.ones_like(w[..., 0]))


def test_silencing_a_head_zeroes_its_write_and_changes_the_logits(model):
    ids = random_ids(model, 9, 11)
    base = model.run(ids, record="all")
    quiet = base.silence_head(0, 1)
    assert torch.equal(quiet["layers.0.write"][1], torch.zeros_like(quiet["layers.0.write"][1]))
    assert not torch.allclose(quiet.logits, base.logits, atol=1e-5)
    assert torch.allclose(quiet["layers.0.write"][0], base["layers.0.write"][0])


def test_silencing_heads_starts_from_the_runs_own_layers_before_them(model, monkeypatch):
    """A run that kept every member's resid_pre: silencing heads of layer 1 computes layer 1 only,
    and gives every step and logit a whole pass with those heads silenced gives, bit for bit."""
    from studygroup.model.model import Model

    ids = random_ids(model, 10, 12)
    base = model.run(ids, record="all", silence_members=[3])
    layers = []
    real = Model._mlp
    monkeypatch.setattr(Model, "_mlp", lambda self, l, *a: layers.append(l) or real(self, l, *a))
    quiet = base.silence_heads([(1, 2), (1, 0)])
    assert layers == [1]
    whole = model.run(ids, record="all", silence_members=[3], silence_heads=[(1, 0), (1, 2)])
    assert quiet.interventions == whole.interventions and list(quiet.steps) == list(whole.steps)
    assert torch.equal(quiet.logits, whole.logits)
    assert all(torch.equal(quiet.steps[n], whole.steps[n]) for n in whole.steps)
    layers.clear()
    earlier = quiet.silence_heads([(0, 1)])  # a head of layer 0: a whole pass
    assert layers == [0, 1]
    assert torch.equal(earlier.logits, model.run(ids, silence_members=[3], silence_heads=[(0, 1), (1, 0), (1, 2)]).logits)


def _rows_passed(monkeypatch) -> list[int]:
    """The rows each layer's MLP is given from now on (a pass's rows, layer by layer)."""
    from studygroup.model.model import Model

    rows, real = [], Model._mlp
    monkeypatch.setattr(Model, "_mlp", lambda self, l, x, *a: rows.append(x.shape[1]) or real(self, l, x, *a))
    return rows


def _same_within_rounding(a, b) -> None:
    assert a.interventions == b.interventions and list(a.steps) == list(b.steps)
    assert all(a.steps[n].shape == b.steps[n].shape for n in b.steps)
    assert all(torch.allclose(a.steps[n], b.steps[n], rtol=1e-5, atol=1e-5) for n in b.steps)
    assert a.logits.shape == b.logits.shape and (a.logits - b.logits).abs().max() < 1e-4


@pytest.mark.parametrize("logits", ["last", "all"])
def test_silencing_members_computes_the_rows_from_the_first_one_on(model, monkeypatch, logits):
    """A run that kept every row of its keys and values: silencing members 6 and 8 passes rows 6-11
    only, and every step and logit is a whole pass's with them silenced (float32 rounding apart:
    the multiplies see fewer rows); the rows before 6 are the kept run's, bit for bit."""
    ids = random_ids(model, 12, 13)
    record = Record(steps=tuple(s for s in LAYER_STEPS if s != "scores") + ("embed", "resid_final", "final"))
    base = model.run(ids, record=record, silence_heads=[(1, 0)], logits=logits)
    rows = _rows_passed(monkeypatch)
    quiet = base.silence_members([8, 6])
    assert rows == [6] * model.config.n_layers
    whole = model.run(ids, record=record, silence_members=[6, 8], silence_heads=[(1, 0)], logits=logits)
    _same_within_rounding(quiet, whole)
    every_row = [n for n, t in base.steps.items() if t.shape[-2] == 12]
    assert every_row and all(torch.equal(quiet.steps[n][..., :6, :], base.steps[n][..., :6, :]) for n in every_row)
    rows.clear()
    earlier = quiet.silence_member(3)  # members 6 and 8 stay silenced: rows 3-11
    assert rows == [9] * model.config.n_layers
    _same_within_rounding(earlier, model.run(ids, record=record, silence_members=[3, 6, 8], silence_heads=[(1, 0)],
                                             logits=logits))


@pytest.mark.parametrize("how", ["member 0", "other heads", "last rows", "no keys kept", "scores kept"])
def test_silencing_members_passes_every_row_where_the_kept_rows_do_not_serve(model, monkeypatch, how):
    """A whole pass, and the same numbers, where rows cannot be taken from the run: member 0
    silenced (every row changes), members already silenced in other heads than the new ones, a
    run that kept only the last row of its steps, one that kept no keys and values, one that kept
    the scores (before the mask, an earlier question's reach the changed keys of later members)."""
    ids = random_ids(model, 10, 14)
    record = {"last rows": Record(rows="last"), "no keys kept": Record(steps=("weights",)),
              "scores kept": "all"}.get(how, Record(steps=("weights", "k", "v")))
    base = model.run(ids, record=record, silence_members=[2] if how == "other heads" else [], member_heads=None)
    rows = _rows_passed(monkeypatch)
    j, heads = (0, None) if how == "member 0" else (5, [(0, 1)] if how == "other heads" else None)
    quiet = base.silence_members([j], heads)
    assert len(rows) == model.config.n_layers and rows[0] == 10  # (the last layer may pass the last row alone)
    members = [2, j] if how == "other heads" else [j]
    _same_within_rounding(quiet, model.run(ids, record=record, silence_members=members, member_heads=heads))


def test_the_last_layer_asks_only_the_last_question_unless_more_is_kept(model, monkeypatch):
    from studygroup.model.model import Model
    from studygroup.model.record import KEY_STEPS, LAYER_STEPS, Record

    rows, attend = {}, Model._attention

    def spy(self, l, E, *args):
        out = attend(self, l, E, *args)
        rows[l] = out.shape[1]  # questions answered in layer l
        return out

    monkeypatch.setattr(Model, "_attention", spy)
    ids, L = random_ids(model, 10, 21), model.config.n_layers - 1
    full = model.run(ids, record="all")
    assert rows == {l: 10 for l in range(L + 1)}
    for record in ("none", Record(steps=("*",), rows="last")):
        rows.clear()
        run = model.run(ids, record=record)
        assert rows == {**{l: 10 for l in range(L)}, L: 1}  # the last layer: the last question only
        assert torch.allclose(run.logits[-1], full.logits[-1], atol=1e-5)
    for step in LAYER_STEPS:  # what the last layer keeps is the same, keys and values for every member
        a, b = run[f"layers.{L}.{step}"], full[f"layers.{L}.{step}"]
        assert torch.allclose(a, b if step in KEY_STEPS else b[..., -1:, :], atol=1e-5), step
    rows.clear()
    every = model.run(ids, record="none", logits="all").logits  # (T, vocab)
    assert every.shape[0] == 10 and torch.allclose(every[-1], full.logits[-1], atol=1e-5)
    assert rows[L] == 10  # every position's logits need every question


def test_full_rows_keeps_chosen_steps_for_every_member_while_the_rest_is_the_last_row(model):
    from studygroup.model.record import KEY_STEPS, Record

    ids, L = random_ids(model, 10, 22), model.config.n_layers - 1
    full = model.run(ids, record="all")
    for extra in ("resid_pre", "mlp_out"):  # before the last layer's questions, and after them
        run = model.run(ids, record=Record(steps=("resid_pre", "mlp_out", "weights", "v"), rows="last",
                                          full_rows=KEY_STEPS | {extra}))
        for l in range(L + 1):
            for step in ("resid_pre", "mlp_out", "weights", "v"):
                got, want = run[f"layers.{l}.{step}"], full[f"layers.{l}.{step}"]
                every = step in ("v", extra)
                assert got.shape[-2] == (10 if every else 1), (extra, l, step)
                assert torch.allclose(got, want if every else want[..., -1:, :], atol=1e-5), (extra, l, step)


def test_batched_member_silencing_equals_one_at_a_time(model):
    ids = random_ids(model, 9, 12)
    batched = model.silenced_logits(ids, range(9))
    for j in range(9):
        single = model.run(ids, record="none", silence_members=[j]).logits[-1]
        assert torch.allclose(batched[j], single, atol=1e-5), j


def test_bad_inputs_get_clear_errors(model):
    with pytest.raises(InputError, match="empty"):
        model.run("")
    with pytest.raises(InputError, match="context"):
        model.run([1] * (model.config.context_length + 1))
    with pytest.raises(InputError, match="vocabulary"):
        model.run([model.config.vocab_size])
    run = model.run([1, 2, 3])
    with pytest.raises(InputError, match="layer 2 does not exist: the model has 2 layers"):
        run.head(2, 0)
    with pytest.raises(InputError, match="head 4 does not exist"):
        run.head(0, 4)
    with pytest.raises(InputError, match="member 3 does not exist"):
        run.silence_member(3)


@pytest.mark.parametrize("copies_per_pass", [None, 3, 1])
def test_batched_head_silencing_equals_one_at_a_time(model, monkeypatch, copies_per_pass):
    from studygroup.study import effects

    ids, token = random_ids(model, 7, 13), 11
    if copies_per_pass is not None:  # passes split: copies joining at several layers, or one copy each
        monkeypatch.setattr(effects, "ROWS_PER_PASS", copies_per_pass * len(ids))
    heads = [(l, h) for l in range(model.config.n_layers) for h in range(model.config.n_heads)][::-1]
    batched = effects.head_log_probs(model, ids, token, heads)  # copies join the pass at their layer
    base = model.run(ids, record="none")
    for b, (l, h) in enumerate(heads):
        alone = effects.log_probs(base.silence_head(l, h).logits[-1])[token]
        assert torch.allclose(batched[b], alone, atol=1e-5), (l, h)


def test_recomputed_head_follows_the_runs_interventions(model):
    ids = random_ids(model, 12, 14)
    for settings in ({"silence_members": [3]}, {"silence_heads": [(1, 2)]}):
        kept = model.run(ids, record="all", **settings).head(1, 2)
        recomputed = model.run(ids, record="none", **settings).head(1, 2)
        for name in ("q", "k", "v", "scores", "weights", "output", "write", "mask"):
            a, b = getattr(kept, name).float(), getattr(recomputed, name).float()
            assert torch.allclose(a, b, atol=1e-5), (settings, name, (a - b).abs().max())


@pytest.mark.parametrize("settings", [{}, {"silence_members": [2, 5]},
                                      {"silence_members": [4], "member_heads": [(1, 2)]}, {"silence_heads": [(0, 1)]}])
@pytest.mark.parametrize("rows", ["all", "last"])
def test_maps_on_demand_equal_the_kept_maps(model, settings, rows):
    from studygroup.model.record import Record

    ids, T, c = random_ids(model, 11, 15), 11, model.config
    kept = model.run(ids, record=Record(rows=rows), **settings)
    lazy = model.run(ids, record=Record(rows=rows, maps="on_demand"), **settings)
    R = T if rows == "all" else 1
    for l in range(c.n_layers):
        for step in ("scores", "weights"):
            name = f"layers.{l}.{step}"
            assert name in lazy and name not in lazy.steps  # computed when read, never kept
            assert lazy[name].shape == kept[name].shape == (c.n_heads, R, T)
            assert torch.allclose(lazy[name], kept[name], rtol=1e-4, atol=1e-5), (settings, name)  # kernels differ before
            two = lazy.map(l, step, heads=[3, 0])  # some heads only, in the order asked
            assert torch.equal(two, lazy[name][[3, 0]])
    assert not any(t.shape[-2:] == (T, T) for t in lazy.steps.values())  # no T×T tensor held
    if rows == "all":
        for l, h in ((0, 1), (1, 2), (1, 3)):
            a, b = kept.head(l, h), lazy.head(l, h)
            for name in ("q", "k", "v", "scores", "weights", "output", "write", "mask"):
                assert torch.allclose(getattr(a, name).float(), getattr(b, name).float(), rtol=1e-4, atol=1e-5), (l, h, name)


@pytest.mark.parametrize("settings", [{}, {"silence_members": [2, 5]}, {"silence_heads": [(0, 1)]}])
def test_the_last_rows_of_maps_on_demand_need_only_the_last_rows_questions(model, settings):
    """Record(last_rows=R) keeps every member's k but the last R members' q only: the last R rows
    of every map equal a run that kept every q, and the recording's size is known before the pass."""
    from studygroup.model.estimate import recording_bytes
    from studygroup.model.record import Record

    ids, T, R, c = random_ids(model, 13, 17), 13, 4, model.config
    whole = model.run(ids, record=Record(steps=("weights",), maps="on_demand"), **settings)
    cut = Record(steps=("weights",), maps="on_demand", last_rows=R)
    last = model.run(ids, record=cut, **settings)
    for l in range(c.n_layers):
        assert last.steps[f"layers.{l}.q"].shape[-2] == R and last.steps[f"layers.{l}.k"].shape[-2] == T
        assert torch.equal(last.map(l, "weights", last=R), whole.map(l, "weights", last=R)), (settings, l)
    held = sum(t.numel() * t.element_size() for t in last.steps.values())
    assert recording_bytes(c, T, cut) == held
    with pytest.raises(ValueError, match="last_rows takes a positive count"):
        Record(rows="last", last_rows=2)


def test_maps_on_demand_keep_only_q_and_k_for_the_maps(model):
    from studygroup.model.record import Record

    run = model.run(random_ids(model, 9, 16), record=Record(steps=("layers.1.weights",), maps="on_demand"))
    assert sorted(run.steps) == ["layers.1.k", "layers.1.q"]
    assert "layers.1.weights" in run and "layers.0.weights" not in run and "layers.1.scores" not in run
    with pytest.raises(KeyError, match="was not recorded"):
        run["layers.1.scores"]
    with pytest.raises(ValueError, match="maps must be"):
        Record(maps="later")
    with pytest.raises(KeyError, match="need its q and k"):
        run.map(0)
    with pytest.raises(InputError, match="head 9 does not exist"):
        run.map(1, heads=[9])
    with pytest.raises(ValueError, match="step must be one of"):
        run.map(1, "output")


def test_record_all_computes_long_texts_maps_on_demand(model, monkeypatch):
    from studygroup.model import record

    assert record.resolve("all", record.FULL_RECORD_MAX_T).maps == "kept"
    assert record.resolve("all", record.FULL_RECORD_MAX_T + 1).maps == "on_demand"
    monkeypatch.setattr(record, "FULL_RECORD_MAX_T", 8)  # the tiny model's context is short
    T = 12
    run = model.run(random_ids(model, T, 17), record="all")
    w = run["layers.1.weights"]  # (H, T, T)
    assert w.shape == (model.config.n_heads, T, T) and torch.allclose(w.sum(-1), torch.ones(model.config.n_heads, T))
    assert torch.equal(w, w.tril())  # causal
    assert torch.allclose(run.head(1, 2).weights, w[2], atol=1e-6)


@pytest.mark.parametrize("record", [
    "all", "default", ["weights", "v"], Record(rows="last"), Record(map_dtype=torch.float16),
    Record(steps=("weights", "scores"), maps="on_demand"), Record(steps=("layers.1.*",), rows="last"),
    Record(steps=("q", "resid_pre"), rows="last", full_rows=frozenset({"resid_pre"})), "none",
])
def test_what_a_run_will_keep_is_known_before_it_starts(model, record):
    from studygroup.model import estimate
    from studygroup.model.record import resolve

    ids = random_ids(model, 11, 21)
    for logits in ("last", "all"):
        run = model.run(ids, record=record, logits=logits)
        kept = sum(t.numel() * t.element_size() for t in run.steps.values())
        assert estimate.recording_bytes(model.config, len(ids), resolve(record, len(ids)), logits == "all") == kept


def test_a_recording_that_would_not_fit_is_refused_before_the_pass(model, monkeypatch):
    from studygroup.model import estimate

    ids = random_ids(model, 12, 22)
    need = estimate.recording_bytes(model.config, 12, Record()) + estimate.activation_bytes(model.config, 12)
    monkeypatch.setattr(estimate, "available_bytes", lambda device: need - 1)
    passes = []
    monkeypatch.setattr(model, "forward", lambda *a, **k: passes.append(1))
    with pytest.raises(InputError, match=r"recording this on 12 tokens would keep about .* GiB and .* GiB is free: "
                                         r"keep fewer steps .*rows=\"last\".*maps=\"on_demand\""):
        model.run(ids, record="all")
    assert passes == []  # refused before any work
    monkeypatch.setattr(estimate, "available_bytes", lambda device: need)
    monkeypatch.undo()
    assert model.run(ids, record="all").logits.shape == (1, model.config.vocab_size)


def test_free_memory_is_read_here():
    from studygroup.model import estimate

    free = estimate.available_bytes(torch.device("cpu"))
    assert free is None or 0 < free  # None only where /proc/meminfo cannot be read


@pytest.mark.parametrize("call, words", [
    (lambda m: m.run(b"the tin"), "must be a string, not bytes"),
    (lambda m: m.run("a\ud800b"), "lone surrogate"),
    (lambda m: m.run([True, 2]), "True is not a token id"),
    (lambda m: m.run([1.5]), "1.5 is not a token id"),
    (lambda m: m.run("the tin", record="weigths"), "record='weigths' names no step"),
    (lambda m: m.run("the tin", record=["nope.*"]), "record='nope.*' names no step"),
    (lambda m: m.run("the tin", silence_heads=["0.1"]), "'0.1' is not a (layer, head) pair"),
    (lambda m: m.run("the tin", silence_members=[1.0]), "1.0 is not a member"),
    (lambda m: m.run("the tin").head(True, 0), "True is not a layer"),
    (lambda m: m.run("the tin").head(0, "1"), "'1' is not a head"),
    (lambda m: studygroup.head_view(m, "the tin", 0, 0, largest=-1), "largest=-1"),
    (lambda m: studygroup.head_view(m, "the tin", 1.0, 0), "1.0 is not a layer"),
])
def test_bad_arguments_to_the_api_are_input_errors(model, call, words):
    with pytest.raises(InputError, match=re.escape(words)):
        call(model)


def test_recording_by_step_name_and_pattern_still_works(model):
    run = model.run("the tin", record=["weights", "layers.1.v"])
    assert {"layers.0.weights", "layers.1.weights", "layers.1.v"} <= set(run.steps) and "layers.0.v" not in run.steps


def test_silencing_no_member_in_a_batch_gives_no_rows(model):
    assert model.silenced_logits("the tin", []).shape == (0, model.config.vocab_size)


def test_only_cpu_and_cuda_devices(tiny_model):
    with pytest.raises(InputError, match="device 'meta' is not supported"):
        studygroup.load(tiny_model.path, device="meta")
