"""Matrices kept as the file's blocks (studygroup.model.packed): a model loaded so computes the float32
model's numbers bit for bit (tiny models of each type the loader reads: the recorded steps, every
position's logits, a pass with a gradient, generated words), its matrices are the file's mapped
bytes, never copied; a block type not read, a file shorter than its blocks and a file changed while
mapped are each one checked error."""
from __future__ import annotations

import collections
import re
import mmap
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import allocation_peak, write_tiny_gemma3_gguf, write_tiny_gguf
from gguf import GGMLQuantizationType as Q

import studygroup
from studygroup.errors import InputError, ModelFileError
from studygroup.gguf.container import read_gguf
from studygroup.model import estimate, packed
from studygroup.model.record import Record
from studygroup.study.effects import gradient_run

ROOT = Path(__file__).resolve().parents[2]
TYPES = [Q.F16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS]
#: Widths whose rows are whole super-blocks of 256 (4 heads of 64, an MLP of 256).
WIDE = dict(d_head=64, d_mlp=256)
TEXT = "an ear then the tin"


def load(path, how: str, monkeypatch) -> studygroup.Model:
    """The model of `path` with its matrices as the file's blocks (how="blocks") or float32."""
    monkeypatch.setenv(estimate.WEIGHTS_SWITCH, how)
    return studygroup.load(path, cache=False)


@pytest.fixture(scope="module", params=TYPES, ids=lambda t: t.name)
def pair(request, tmp_path_factory):
    """(kept as blocks, float32) of one tiny Llama whose matrices are all of one type, untied."""
    path = tmp_path_factory.mktemp("kept") / f"{request.param.name}.gguf"
    write_tiny_gguf(path, tensor_type=request.param, untied=True, **WIDE)
    with pytest.MonkeyPatch.context() as m:
        return load(path, "blocks", m), load(path, "float32", m)


def test_the_matrices_are_kept_as_the_files_mapped_bytes(pair):
    kept, plain = pair
    assert set(kept.w.kept) >= {"embed", "unembed", "layers.0.W_QKV", "layers.1.W_down"}
    for parts in kept.w.kept.values():
        for m in parts:
            base = m.data
            while isinstance(base, np.ndarray | memoryview):
                base = base.base if isinstance(base, np.ndarray) else base.obj
            assert isinstance(base, mmap.mmap) and not m.data.flags.writeable  # the mapping itself, no copy
    assert not any(isinstance(v, torch.Tensor) and v.dim() == 2 for v in kept.w.tensors.values())


def test_every_step_and_every_logit_is_the_float32_models(pair):
    kept, plain = pair
    a, b = kept.run(TEXT, record="all", logits="all"), plain.run(TEXT, record="all", logits="all")
    assert torch.equal(a.logits, b.logits)
    assert a.steps.keys() == b.steps.keys()
    for name in a.steps:
        assert torch.equal(a.steps[name], b.steps[name]), name


def test_a_matrix_looked_up_is_the_float32_models(pair):
    kept, plain = pair
    for name in ("layers.1.W_Q", "layers.0.W_K", "layers.1.W_gate_up", "layers.0.W_O", "embed", "unembed"):
        assert torch.equal(kept.w[name], plain.w[name]), name


def test_a_pass_with_a_gradient_gives_the_float32_models_gradient(pair):
    kept, plain = pair
    ids = plain.ids(TEXT)
    (run_a, est_a), (run_b, est_b) = gradient_run(kept, ids, Record()), gradient_run(plain, ids, Record())
    assert torch.equal(run_a.logits, run_b.logits) and torch.equal(est_a, est_b)


def test_a_pass_with_a_gradient_keeps_of_each_layer_only_its_input(tmp_path, monkeypatch):
    """The backward pass computes each layer again from its input (its MLP's (T, d_mlp) rows are not
    kept), each of the layer's matrices dequantized once more for both; the gradient, the logits and
    every recorded step are the float32 model's."""
    path = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=Q.Q8_0, n_layers=3, d_head=64, d_mlp=512).path
    kept, plain = load(path, "blocks", monkeypatch), load(path, "float32", monkeypatch)
    saved, read = [], collections.Counter()
    pack, dequantize = packed.Weights._pack, packed.dequantize_rows
    monkeypatch.setattr(packed.Weights, "_pack", lambda self, t: saved.append(t.shape) or pack(self, t))
    monkeypatch.setattr(packed, "dequantize_rows", lambda m, rows, out: read.update([m.name]) or dequantize(m, rows, out))
    ids = plain.ids(TEXT)
    (run_a, est_a), (run_b, est_b) = gradient_run(kept, ids, Record()), gradient_run(plain, ids, Record())
    assert torch.equal(est_a, est_b) and est_a.abs().sum() > 0 and torch.equal(run_a.logits, run_b.logits)
    assert run_a.steps.keys() == run_b.steps.keys() and "layers.2.write" in run_a.steps
    assert all(torch.equal(run_a.steps[n], run_b.steps[n]) for n in run_a.steps)
    assert saved and not any(512 in shape for shape in saved)  # no MLP row is kept for the backward pass
    layers = {name: n for name, n in read.items() if name.startswith("blk.")}
    assert len(layers) == 3 * 7 and set(layers.values()) == {2}  # the pass, then the layer again


def test_generated_words_are_the_float32_models(pair):
    kept, plain = pair
    a, b = kept.generate(TEXT, 6, ignore_eos=True), plain.generate(TEXT, 6, ignore_eos=True)
    assert a.ids == b.ids


def test_the_unembedding_by_slices_is_the_whole_multiply(tmp_path, monkeypatch):
    path = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=Q.Q8_0, **WIDE).path
    whole = load(path, "blocks", monkeypatch).run(TEXT, logits="all").logits
    monkeypatch.setattr(packed, "UNEMBED_SLICE_BYTES", 4 * 256 * 7)  # 7 rows of the vocabulary at a time
    sliced = load(path, "blocks", monkeypatch).run(TEXT, logits="all").logits
    torch.testing.assert_close(sliced, whole, rtol=0, atol=1e-6)  # float32 sums of 256 terms, another blocking


def test_logits_of_many_rows_take_the_place_of_the_layers_float32_buffers(tmp_path, monkeypatch):
    """After a pass, final_logits lets the layers' float32 buffers go before it makes its logits (an
    8B layer is 872 MB, 1,024 rows of logits 525 MB): its peak over what was held before is the
    logits, the unembedding's float32 rows and the normed rows, less the layer's buffers, as the
    allocator records them (torch's profiler); the logits are the float32 model's."""
    path = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=Q.Q8_0, d_head=64, d_mlp=1024,
                           user_tokens=[f"<|w{i}|>" for i in range(3000)]).path
    kept, plain = load(path, "blocks", monkeypatch), load(path, "float32", monkeypatch)
    file = read_gguf(path)
    layer = 4 * sum(int(np.prod(t.dims)) for n, t in file.tensors.items() if n.startswith("blk.0.") and len(t.dims) == 2)
    c = kept.config
    x = torch.randn(50, c.d_model)  # (R, d_model)
    logits, peak = allocation_peak(lambda: kept.final_logits(x), first=lambda: kept.run(TEXT))  # (R, vocab); the run makes the buffers
    unembed = 4 * c.vocab_size * c.d_model
    assert layer > logits.nbytes and peak <= logits.nbytes + unembed + x.nbytes - layer
    assert torch.equal(logits, plain.final_logits(x))


def test_gemma3_kept_as_blocks_is_the_float32_model(tmp_path, monkeypatch):
    path = write_tiny_gemma3_gguf(tmp_path / "g.gguf", tensor_type=Q.Q8_0).path
    a = load(path, "blocks", monkeypatch).run("the tin", record="all", logits="all")
    b = load(path, "float32", monkeypatch).run("the tin", record="all", logits="all")
    assert torch.equal(a.logits, b.logits) and all(torch.equal(a.steps[n], b.steps[n]) for n in a.steps)


def test_a_block_type_not_read_is_one_line_naming_the_tensor(tmp_path, monkeypatch):
    path = write_tiny_gguf(tmp_path / "m.gguf", type_overrides={"blk.1.ffn_up.weight": Q.IQ2_XXS}, **WIDE).path
    monkeypatch.setenv(estimate.WEIGHTS_SWITCH, "blocks")
    with pytest.raises(ModelFileError, match=r"tensor blk\.1\.ffn_up\.weight has type IQ2_XXS, which studygroup cannot"):
        studygroup.load(path, cache=False)


def test_a_file_shorter_than_its_blocks_is_refused(tmp_path, monkeypatch):
    path = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=Q.Q4_K, **WIDE).path
    os.truncate(path, path.stat().st_size - 100)
    monkeypatch.setenv(estimate.WEIGHTS_SWITCH, "blocks")
    with pytest.raises(ModelFileError, match="is truncated: tensor .* needs bytes up to"):
        studygroup.load(path, cache=False)


def test_a_file_rewritten_while_mapped_is_a_checked_error(tmp_path, monkeypatch):
    path = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=Q.Q8_0, **WIDE).path
    model = load(path, "blocks", monkeypatch)
    model.run(TEXT)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(data)  # the same size, other weights
    os.utime(path, ns=(1, 1))
    with pytest.raises(ModelFileError, match="changed while studygroup had it open: load the model again"):
        model.run(TEXT)


CUT_WHILE_MAPPED = """
import os, sys
os.environ["STUDYGROUP_WEIGHTS"] = "blocks"
import studygroup
from studygroup.errors import InputError, ModelFileError
from studygroup.gguf.container import read_gguf
model = studygroup.load(sys.argv[1], cache=False)
model.run("the tin")
os.truncate(sys.argv[1], 4096)  # the mapped blocks gone: reading them would kill the process
try:
    model.run("the tin")
except ModelFileError as e:
    print(e)
"""


def test_a_file_cut_while_mapped_is_a_checked_error_not_a_crash(tmp_path):
    path = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=Q.Q8_0, **WIDE).path
    env = dict(os.environ, STUDYGROUP_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", CUT_WHILE_MAPPED, str(path)], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "changed while studygroup had it open" in p.stdout


def test_a_model_over_the_memory_free_is_refused_with_what_its_blocks_need(tmp_path, monkeypatch):
    path = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=Q.Q4_K, **WIDE).path
    file = read_gguf(path)
    matrices = sum(t.n_bytes for t in file.tensors.values() if len(t.dims) == 2)  # embedding and layers' matrices
    c = load(path, "float32", monkeypatch).config
    float32 = 4 * sum(int(np.prod(t.dims)) for t in file.tensors.values())
    layer = 4 * sum(int(np.prod(t.dims)) for n, t in file.tensors.items() if n.startswith("blk.0.") and len(t.dims) == 2)
    need = matrices + layer + 4 * c.vocab_size * c.d_model + 4 * (2 * c.n_layers + 1) * c.d_model
    assert need < float32
    monkeypatch.setattr(estimate, "available_bytes", lambda device: 1000)
    monkeypatch.setenv(estimate.WEIGHTS_SWITCH, "blocks")
    with pytest.raises(InputError, match=rf"needs {need / 2**20:.3g} MiB for its weights \(the file's blocks and one "
                                         r"layer in float32\); this machine has 0.000954 MiB of memory available"):
        studygroup.load(path, cache=False)


def test_blocks_loaded_in_bfloat16_never_hold_every_matrix_in_float32(tmp_path, monkeypatch):
    """Blocks turned into bfloat16 (or sent to a GPU) are dequantized one matrix at a time, each on its
    way to its dtype and device, and fusing frees the parts it joins: the allocations never pass the
    weights in bfloat16 by more than one matrix in float32 and bfloat16."""
    path = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=Q.Q4_K, untied=True, n_layers=4, **WIDE).path
    sizes = [int(np.prod(t.dims)) for t in read_gguf(path).tensors.values()]
    monkeypatch.setenv(estimate.WEIGHTS_SWITCH, "blocks")
    model, peak = allocation_peak(lambda: studygroup.load(path, cache=False, dtype="bfloat16", require_native=False))
    assert model.dtype == torch.bfloat16 and not model.w.kept
    assert peak < 2 * sum(sizes) + 2 * 4 * max(sizes)  # the weights in bfloat16, and a matrix in float32 and bfloat16


def test_weights_over_the_gpus_free_memory_are_refused_in_one_line(monkeypatch):
    c = studygroup.load().config
    monkeypatch.setattr(estimate, "available_bytes", lambda device: 3 * 2**30)
    estimate.check_weights_fit_device(c, 2**30, torch.device("cuda"), torch.float32)  # fits: nothing said
    with pytest.raises(InputError, match=r"needs 5.5 GiB of GPU memory for its weights in float32 "
                                         r"\(half of it in bfloat16: --dtype bfloat16\); cuda has 3 GiB free: choose a "
                                         r"smaller model or --device cpu$"):
        estimate.check_weights_fit_device(c, int(5.5 * 2**30), torch.device("cuda"), torch.float32)
    with pytest.raises(InputError, match=r"in bfloat16; cuda has 3 GiB free"):
        estimate.check_weights_fit_device(c, int(5.5 * 2**30), torch.device("cuda"), torch.bfloat16)


@pytest.mark.parametrize("untied", [False, True], ids=["tied", "untied"])
def test_studygroup_models_says_what_the_weights_take_either_way(tmp_path, monkeypatch, untied):
    """In float32: every tensor of the file, the unembedding counted where it is one of them."""
    from studygroup.gguf.summary import summarize
    from studygroup.model.model_names import Listed

    path = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=Q.Q4_K, untied=untied, **WIDE).path
    file = read_gguf(path)
    listed = Listed("m", "llama.cpp", str(path), summarize((path,)))
    float32 = 4 * sum(int(np.prod(t.dims)) for t in file.tensors.values() if t.name != "output_norm.weight"
                      and not t.name.endswith("_norm.weight"))  # the matrices; norms counted below
    c = listed.summary.config
    norms = 4 * (2 * c.n_layers + 1) * c.d_model
    monkeypatch.setenv(estimate.WEIGHTS_SWITCH, "float32")
    assert listed.memory == float32 + norms
    assert estimate.loaded_bytes(studygroup.load(str(path), cache=False)) == float32 + norms
    monkeypatch.setenv(estimate.WEIGHTS_SWITCH, "blocks")
    matrices = sum(t.n_bytes for t in file.tensors.values() if len(t.dims) == 2)
    layer = 4 * sum(int(np.prod(t.dims)) for n, t in file.tensors.items() if n.startswith("blk.0.") and len(t.dims) == 2)
    assert listed.memory == matrices + layer + 4 * c.vocab_size * c.d_model + norms


def test_explain_says_the_memory_of_the_weights_as_loaded(tmp_path, monkeypatch, capsys):
    """The announcement before a long explain counts the weights as they are held: the file's
    blocks and one layer in float32 (not the float32 model), and the pass with a gradient checkpointed."""
    from studygroup.study import explain as study

    path = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=Q.Q4_K, **WIDE).path
    file = read_gguf(path)
    kept = load(path, "blocks", monkeypatch)
    c = kept.config
    matrices = sum(t.n_bytes for t in file.tensors.values() if len(t.dims) == 2)
    layer = 4 * sum(int(np.prod(t.dims)) for n, t in file.tensors.items() if n.startswith("blk.0.") and len(t.dims) == 2)
    need = matrices + layer + 4 * c.vocab_size * c.d_model + 4 * (2 * c.n_layers + 1) * c.d_model
    assert estimate.loaded_bytes(kept) == need < estimate.weight_bytes(c)
    asked = []
    explain_bytes = estimate.explain_bytes
    monkeypatch.setattr(estimate, "explain_bytes", lambda *a, **k: asked.append((a, k)) or explain_bytes(*a, **k))
    monkeypatch.setattr(study, "ANNOUNCE_PAST_T", 4)
    monkeypatch.setattr(study, "shown", lambda: True)
    study.explain(kept, kept.ids(TEXT), measure_heads=1, measure_members=1)
    (args, kwargs), = asked
    assert args[4] == need and kwargs["checkpointed"]
    assert re.search(rf"about {explain_bytes(*args, **kwargs) / 2**30:.1f} GiB and", capsys.readouterr().err)


def test_explain_says_a_memory_that_covers_what_its_steps_hold(tmp_path, monkeypatch):
    """What the announcement says, less the file's blocks and the 200 MiB it counts for the process,
    is at least the most torch's allocator holds during the explain (torch's profiler): the layers'
    float32 buffers and the unembedding's slice it makes, its batched passes, its pass with a
    gradient, and every head's one-row copy at the last position, whose logits grow with the heads
    and the vocabulary (here 256 heads, 20,300 words)."""
    from studygroup.study import explain as study

    path = write_tiny_gguf(tmp_path / "m.gguf", tensor_type=Q.Q8_0, n_layers=8, n_heads=32, n_kv_heads=4, d_head=8,
                           d_mlp=256, context=128, user_tokens=[f"<|w{i}|>" for i in range(20000)]).path
    kept = load(path, "blocks", monkeypatch)
    said = []
    explain_bytes = estimate.explain_bytes
    monkeypatch.setattr(estimate, "explain_bytes", lambda *a, **k: said.append(explain_bytes(*a, **k)) or said[-1])
    monkeypatch.setattr(study, "shown", lambda: True)
    ids = (kept.ids(TEXT) * 20)[:70]  # past ANNOUNCE_PAST_T: announced
    _, peak = allocation_peak(lambda: study.explain(kept, ids, measure_heads=1, measure_members=1))
    c = kept.config
    norms = 4 * (2 * c.n_layers + 1) * c.d_model
    assert len(said) == 1 and peak <= said[0] - 200 * 2**20 - kept.w.blocks_bytes - norms
