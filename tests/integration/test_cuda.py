"""The same code on a CUDA device: every result equals the CPU's (runs only where CUDA is present).

Without a GPU these tests are reported as skipped, never as passed; docs/performance.md names the
GPU they run on.
"""
import pytest
import torch

import studygroup
from studygroup.study import effects
from studygroup.views import payloads
from studygroup.model import record
from studygroup.study import explain as study
from studygroup.study import compare as study_compare
from studygroup.study import head as study_head
from studygroup.errors import InputError
from studygroup.study.lesson_sections import lesson_sections

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


@pytest.fixture(scope="module")
def cpu(model):
    return model  # the shared tiny model (tests/integration/conftest.py), on the CPU


@pytest.fixture(scope="module")
def gpu(tiny_model):
    return studygroup.load(tiny_model.path, device="cuda")


def ids_of(model, T, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, model.config.vocab_size, (T,), generator=g).tolist()


def test_weights_and_results_live_on_the_gpu(gpu):
    run = gpu.run(ids_of(gpu, 9, 0), record="all")
    assert gpu.device.type == "cuda" and run.logits.device.type == "cuda"
    assert run["layers.0.weights"].device.type == "cuda"


@pytest.mark.parametrize("T,seed", [(1, 0), (17, 1), (60, 2)])
def test_logits_and_every_recorded_step_equal_the_cpu(cpu, gpu, T, seed):
    ids = ids_of(cpu, T, seed)
    a, b = cpu.run(ids, record="all", logits="all"), gpu.run(ids, record="all", logits="all")
    assert (a.logits - b.logits.cpu()).abs().max() < 1e-4
    for name in record.names(cpu.config.n_layers):
        assert (a[name] - b[name].cpu()).abs().max() < 1e-4, name
    h_a, h_b = a.head(1, 3), b.head(1, 3)
    for step in ("q", "k", "v", "scores", "weights", "output"):
        assert (getattr(h_a, step) - getattr(h_b, step).cpu()).abs().max() < 1e-4, step


def test_interventions_equal_the_cpu(cpu, gpu):
    ids = ids_of(cpu, 24, 3)
    a, b = cpu.run(ids), gpu.run(ids)
    pairs = [(a.silence_member(5), b.silence_member(5)), (a.silence_head(1, 2), b.silence_head(1, 2)),
             (a.silence_member(7, heads=[(0, 1)]), b.silence_member(7, heads=[(0, 1)]))]
    for x, y in pairs:
        assert (x.last_logits - y.last_logits.cpu()).abs().max() < 1e-4
    assert (cpu.silenced_logits(ids, members=[1, 4, 9]) - gpu.silenced_logits(ids, members=[1, 4, 9]).cpu()).abs().max() < 1e-4
    kv_a = effects.keys_and_values(cpu.run(ids, record=["k", "v"]))
    kv_b = effects.keys_and_values(gpu.run(ids, record=["k", "v"]))
    packed = gpu.silenced_logits(ids, [9, 1, 4], heads=[(0, 1), (1, 3)], kv=kv_b, packed=True)
    assert packed.device.type == "cuda"
    assert (cpu.silenced_logits(ids, [9, 1, 4], heads=[(0, 1), (1, 3)], kv=kv_a, packed=True) - packed.cpu()).abs().max() < 1e-4
    assert (cpu.silenced_logits(ids, [9, 1, 4], heads=[(0, 1), (1, 3)]) - packed.cpu()).abs().max() < 1e-4


def test_head_recomputed_on_demand_on_the_gpu(cpu, gpu):
    ids = ids_of(cpu, 30, 4)
    full = cpu.run(ids, record="all").head(0, 2)
    lazy = gpu.run(ids, record="none").head(0, 2)
    assert lazy.weights.device.type == "cuda" and (full.weights - lazy.weights.cpu()).abs().max() < 1e-5


def test_explain_compare_and_head_view_agree_with_the_cpu(cpu, gpu):
    text_a, text_b = "the tin", "an ear then the tin"
    ea, eb = study.explain(cpu, text_b, top=5), study.explain(gpu, text_b, top=5)
    assert ea.predicted.id == eb.predicted.id and ea.predicted.prob == pytest.approx(eb.predicted.prob, abs=1e-4)
    assert [(h.layer, h.head) for h in ea.heads] == [(h.layer, h.head) for h in eb.heads]
    assert [m.effect for m in ea.members] == pytest.approx([m.effect for m in eb.members], abs=1e-4)
    ca, cb = study_compare.compare(cpu, text_a, text_b, top=5), study_compare.compare(gpu, text_a, text_b, top=5)
    assert ca.word_id == cb.word_id and [s.prob_b for s in ca.shift] == pytest.approx([s.prob_b for s in cb.shift], abs=1e-4)
    assert [h.change for h in ca.heads] == pytest.approx([h.change for h in cb.heads], abs=1e-4)
    va, vb = study_head.head_view(cpu, text_b, 1, 3), study_head.head_view(gpu, text_b, 1, 3)
    assert (torch.tensor(va.weights) - torch.tensor(vb.weights)).abs().max() < 1e-5
    assert va.check.agree and vb.check.agree


#: Payload numbers agree to this: some are rounded for display (thumbnails to 3 decimals), and a value
#: on either side of a rounding boundary on the two devices differs by one unit of the last decimal.
PAYLOAD_ATOL = 1.5e-3


def numbers(x):
    """Every number in a nested JSON-like value, in order (None for a null)."""
    if isinstance(x, dict):
        return [n for key in sorted(x) for n in numbers(x[key])]
    if isinstance(x, (list, tuple)):
        return [n for item in x for n in numbers(item)]
    return [None if x is None else float(x)] if isinstance(x, (int, float, type(None))) and not isinstance(x, bool) else []


def assert_numbers_agree(a, b, at_least=10, nulls_alike=True, what=None):
    """a and b, `numbers` of one answer from the CPU and from the GPU, alike: as many, more than
    at_least; nulls in the same places (nulls_alike; else a pair holding a null is skipped); each
    pair within PAYLOAD_ATOL of each other, relative to max(1, |a's|)."""
    assert len(a) == len(b) and len(a) > at_least, what
    if nulls_alike:
        assert [x is None for x in a] == [y is None for y in b], what
    assert max(abs(x - y) / max(1.0, abs(x)) for x, y in zip(a, b) if x is not None and y is not None) < PAYLOAD_ATOL, what


def test_payloads_report_and_lesson_agree_with_the_cpu(cpu, gpu):
    for build in (lambda m: payloads.head(m, "an ear then the tin", 1, 2),
                  lambda m: payloads.report_data(m, "an ear then the tin", "the tin", heads=3),
                  lambda m: lesson_sections(m, "an ear then the tin", 1, 2).to_dict()):
        assert_numbers_agree(numbers(build(cpu)), numbers(build(gpu)))


def test_long_path_on_the_gpu(cpu, gpu, monkeypatch):
    monkeypatch.setattr(study, "LONG_T", 8)
    ids = ids_of(cpu, 20, 5)
    ea = study.explain(cpu, ids, top=5, measure_heads=4, measure_members=6)
    eb = study.explain(gpu, ids, top=5, measure_heads=4, measure_members=6)
    assert eb.scope == study.LAST_QUESTIONS and ea.predicted.id == eb.predicted.id
    assert [m.effect for m in ea.members] == pytest.approx([m.effect for m in eb.members], abs=1e-4)


def test_bfloat16_on_the_gpu_keeps_the_top_word(cpu, tiny_model):
    fast = studygroup.load(tiny_model.path, device="cuda", dtype="bfloat16")
    ids = ids_of(cpu, 40, 6)
    exact = torch.log_softmax(cpu.run(ids, logits="all").logits.double(), -1)  # (T, vocab)
    approx = torch.log_softmax(fast.run(ids, logits="all").logits.double().cpu(), -1)
    kl = (exact.exp() * (exact - approx)).sum(-1)  # (T,)
    assert fast.dtype == torch.bfloat16 and kl.mean() < 1e-2 and kl.max() < 5e-2  # random weights: flat, close calls
    assert (exact.argmax(-1) == approx.argmax(-1)).float().mean() > 0.9


def test_unknown_device_is_refused(tiny_model):
    with pytest.raises(InputError, match="unknown device"):
        studygroup.load(tiny_model.path, device="tpu")


def test_maps_on_demand_and_joined_head_silencing_equal_the_cpu(cpu, gpu):
    from studygroup.study import effects

    ids = ids_of(cpu, 33, 9)
    rec = record.Record(maps="on_demand")
    for settings in ({}, {"silence_members": [4, 20]}, {"silence_members": [6], "member_heads": [(1, 0)]}):
        a, b = cpu.run(ids, record=rec, **settings), gpu.run(ids, record=rec, **settings)
        kept = gpu.run(ids, record="all", **settings)
        for l in range(cpu.config.n_layers):
            for step in ("scores", "weights"):
                name = f"layers.{l}.{step}"
                assert b[name].device.type == "cuda" and name not in b.steps
                assert (a[name] - b[name].cpu()).abs().max() < 1e-4, (settings, name)
                assert (kept[name] - b[name]).abs().max() < 1e-4, (settings, name)
        assert (a.head(1, 2).weights - b.head(1, 2).weights.cpu()).abs().max() < 1e-4
    heads = [(1, 3), (0, 1), (1, 0), (0, 2)]
    x = effects.head_log_probs(cpu, ids, 7, heads)
    y = effects.head_log_probs(gpu, ids, 7, heads)
    assert (x - y.cpu()).abs().max() < 1e-4


def test_free_memory_is_read_on_the_gpu(gpu):
    from studygroup.model import estimate

    free = estimate.available_bytes(torch.device("cuda"))
    assert free is not None and 0 < free <= torch.cuda.get_device_properties(0).total_memory


def test_a_replaced_step_equals_the_cpu(cpu, gpu):
    ids, other = ids_of(cpu, 12, 10), ids_of(cpu, 12, 11)
    resid = cpu.run(other, record=["resid_pre"])["resid_pre", 1]  # (T, d), on the CPU
    a = cpu.run(ids, replace={record.step_name("resid_pre", 1): resid})
    b = gpu.run(ids, replace={record.step_name("resid_pre", 1): resid.cuda()})
    assert (a.last_logits - b.last_logits.cpu()).abs().max() < 1e-4
    assert (a.last_logits - cpu.run(other).last_logits).abs().max() < 1e-4  # the whole stream replaced: the other text's answer


def test_lens_patching_and_ablations_equal_the_cpu(cpu, gpu):
    from studygroup.study import ablation, lens, patching

    ids, other = ids_of(cpu, 10, 12), ids_of(cpu, 10, 13)
    for build in (lambda m: lens.lens(m, ids, top=3).to_dict(),
                  lambda m: patching.patch(m, ids, other).to_dict(),
                  lambda m: ablation.head_effects(m, ids, resample_from=other).to_dict()):
        assert_numbers_agree(numbers(build(cpu)), numbers(build(gpu)))


def test_in_head_copies_over_the_kept_keys_and_values_equal_the_cpu(cpu, gpu):
    ids = ids_of(cpu, 20, 14)
    silenced = [(0, 1, 3), (1, 2, 11), (1, 0, 19), (0, 3, 0)]

    def measured(m):
        run = m.run(ids, record=["resid_pre", "k", "v"])
        resid_pre = {l: run["resid_pre", l] for l in range(m.config.n_layers)}
        token = int(run.last_logits.argmax())
        return token, effects.member_in_head_log_probs(m, ids, token, silenced, resid_pre, kv=effects.keys_and_values(run))
    (ta, a), (tb, b) = measured(cpu), measured(gpu)
    assert ta == tb and (a - b.cpu()).abs().max() < 1e-4
    assert (a - effects.member_in_head_log_probs(cpu, ids, ta, silenced)).abs().max() < 1e-4  # whole rows, on the CPU


def test_generation_equals_the_cpu(cpu, gpu):
    ids = ids_of(cpu, 7, 15)
    a, b = cpu.generate(ids, 12, ignore_eos=True), gpu.generate(ids, 12, ignore_eos=True)
    assert a.ids == b.ids
    a, b = (m.generate(ids, 12, ignore_eos=True, silence_members=[2], silence_heads=[(1, 1)]) for m in (cpu, gpu))
    assert a.ids == b.ids


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_K"])
def test_a_file_of_blocks_on_the_gpu_equals_its_blocks_on_the_cpu(kind, tmp_path, monkeypatch):
    from conftest import write_tiny_gguf
    from gguf import GGMLQuantizationType as Q

    from studygroup.model import estimate

    path = tmp_path / f"{kind}.gguf"
    write_tiny_gguf(path, tensor_type=Q[kind], untied=True, d_head=64, d_mlp=256)
    monkeypatch.setenv(estimate.WEIGHTS_SWITCH, "blocks")
    on_cpu = studygroup.load(path, cache=False)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    on_gpu = studygroup.load(path, cache=False, device="cuda")
    held, largest = torch.cuda.memory_allocated() - before, 4 * max(m.n_out * m.n_in for ms in on_cpu.w.kept.values() for m in ms)
    assert torch.cuda.max_memory_allocated() - before <= held + 2 * largest  # fusing frees the parts it joins
    assert on_cpu.w.kept and on_gpu.device.type == "cuda"
    ids = ids_of(on_cpu, 25, 16)
    a, b = on_cpu.run(ids, logits="all").logits, on_gpu.run(ids, logits="all").logits
    assert b.device.type == "cuda" and (a - b.cpu()).abs().max() < 5e-5 * a.abs().max()  # float32 rounding (Q4_K: logits in the hundreds)


def test_the_pages_answers_under_mean_ablation_equal_the_cpu(cpu, gpu):
    from studygroup.model.ablation import Ablation
    from studygroup.model.interventions import Interventions

    text = "an ear then the tin"
    T = len(cpu.tokenizer.encode(text))
    silenced = dict(members=[1], heads=[(0, 3)])
    for build, silence in ((lambda m, i: payloads.conclusion(m, text, interventions=i), silenced),
                           (lambda m, i: payloads.model_view(m, text, interventions=i), silenced),
                           (lambda m, i: payloads.why(m, text, 1, 2, T - 1, 2, interventions=i), silenced),
                           (lambda m, i: payloads.explanation(m, text, interventions=i).to_dict(), {})):  # explain measures the run as it is
        a, b = (numbers(build(m, Interventions.make(m, T, **silence, ablation=Ablation("mean")))) for m in (cpu, gpu))
        assert_numbers_agree(a, b, nulls_alike=False)


def test_the_web_pages_answers_equal_the_cpus(cpu, gpu):
    """Every answer the page asks for, from `serve --device cuda`, equals the same answer on the CPU."""
    import json

    from fastapi.testclient import TestClient

    from studygroup.web.app import create_app

    text, silence = "an ear then the tin", {"members": [2], "heads": [[0, 1]]}
    mean = {"silence": silence, "ablation": {"kind": "mean"}}
    asked = [("/api/conclusion", {"text": text, **mean}), ("/api/model_view", {"text": text, "silence": silence}),
             ("/api/head", {"text": text, "layer": 1, "head": 0, **mean}), ("/api/lesson", {"text": text, "layer": 1, "head": 0}),
             ("/api/why", {"text": text, "layer": 1, "head": 0, "query": 5, "key": 3}), ("/api/explain", {"text": text, "top": 3}),
             ("/api/compare", {"text_a": "the tin", "text_b": text}), ("/api/lens", {"text": text, "all_positions": True}),
             ("/api/patch", {"clean": "an ear", "corrupted": "an ea "})]
    with TestClient(create_app(cpu)) as a, TestClient(create_app(gpu)) as b:
        for path, body in asked:
            x, y = a.post(path, json=body), b.post(path, json=body)
            assert x.status_code == y.status_code == 200, (path, x.text, y.text)
            assert_numbers_agree(numbers(x.json()), numbers(y.json()), at_least=5, nulls_alike=False, what=path)
        lines = [[json.loads(s) for s in c.post("/api/generate", json={"text": text, "n": 6, "ignore_eos": True}).text.splitlines()]
                 for c in (a, b)]
        assert [d.get("id") for d in lines[0]] == [d.get("id") for d in lines[1]] and len(lines[0]) >= 6


def test_weights_over_the_gpus_free_memory_are_refused_before_any_is_copied(tiny_model, monkeypatch):
    from studygroup.model import estimate

    monkeypatch.setattr(estimate, "available_bytes", lambda device: 1000 if device.type == "cuda" else None)
    before = torch.cuda.memory_allocated()
    with pytest.raises(InputError, match=r"of GPU memory for its weights in float32 .*; cuda has 0.000954 MiB free"):
        studygroup.load(tiny_model.path, device="cuda")
    assert torch.cuda.memory_allocated() == before
