"""Gemma 3 270M (Q4_K_M), the second real model: by name, ids and logits against transformers.

tests/data/reference_gemma/ holds transformers' float32 eager logits on the GGUF dequantized and the
ids of the tokenizer transformers builds from the GGUF (made by tests/data/make_gemma_reference.py;
llama.cpp did not run where they were made). One prompt is longer than the local layers' 512-member window.
"""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import studygroup
from studygroup.model import disk_cache
from studygroup.model.packaged import PACKAGED, model_file

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference_gemma"
PROMPTS = json.loads((REFERENCE / "gemma.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def gemma():
    return studygroup.load("gemma-3-270m")


def test_the_file_is_assembled_once_checked_and_never_pruned(gemma):
    path = model_file("gemma-3-270m")
    assert path == disk_cache.cache_dir() / "models" / "gemma-3-270m-q4_k_m.gguf"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == PACKAGED["gemma-3-270m"].sha256
    disk_cache.prune(keep="", limit=0)
    assert path.is_file()


def test_config_is_gemma3_with_a_window_of_512(gemma):
    c = gemma.config
    assert (c.architecture, c.n_layers, c.n_heads, c.n_kv_heads, c.d_model, c.d_head) == ("gemma3", 18, 4, 1, 640, 256)
    assert c.sliding_window == 512 and [l for l in range(18) if c.window_of(l) is None] == [5, 11, 17]
    assert c.rope_base_of(0) == 1e4 and c.rope_base_of(5) == 1e6


def test_a_prompt_passes_the_window():
    assert max(len(p["token_ids"]) for p in PROMPTS) > 512 and len(PROMPTS) >= 12


@pytest.mark.parametrize("prompt", PROMPTS, ids=lambda p: f"prompt{p['index']:02d}")
def test_ids_and_last_logits_match_transformers(gemma, prompt):
    ids = gemma.tokenize(prompt["text"])
    assert ids == prompt["token_ids"]
    logits = gemma.run(ids, record="none").logits[-1].numpy()
    hf = np.load(REFERENCE / f"gemma_{prompt['index']:02d}_hf.npy")
    assert np.abs(logits - hf).max() <= 2e-3
    assert int(logits.argmax()) == int(hf.argmax()) == prompt["hf_top1"]


@pytest.mark.parametrize("text,p_of", [("I have a lot", 0.854), ("Cash or credit card? I have a lot", 0.903)])
def test_the_issues_figures(gemma, text, p_of):
    p = gemma.run(text).logits[-1].softmax(-1)
    assert round(float(p[gemma.tokenize(" of")[-1]]), 3) == p_of


def test_a_local_layer_masks_members_outside_its_window(gemma):
    long = max(PROMPTS, key=lambda p: len(p["token_ids"]))
    T = len(long["token_ids"])
    run = gemma.run(long["token_ids"], record=studygroup.Record(steps=("weights",), rows="last"))
    local, global_ = run["layers.0.weights"][:, -1], run["layers.5.weights"][:, -1]  # (H, T)
    assert (local[:, :T - 512] == 0).all() and (local[:, T - 512:].sum(-1) - 1).abs().max() < 1e-5
    assert (global_[:, :T - 512] > 0).any()


def test_gemma_is_named_with_its_quantization_and_file_size(gemma):
    import gguf

    reader = gguf.GGUFReader(gemma.path)  # gguf's own reader of the same file
    file_type = gguf.LlamaFileType(int(reader.fields["general.file_type"].contents()))
    assert (file_type.name, gemma.path.stat().st_size) == ("MOSTLY_Q4_K_M", PACKAGED["gemma-3-270m"].size)
    assert gemma.config.label == "gemma-3 270M · Q4_K_M · 253 MB" and gemma.config.rope_scale == 1.0
