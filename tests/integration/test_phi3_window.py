"""Phi-3's `phi3.attention.sliding_window`: llama.cpp reads it and sets it aside (src/models/phi3.cpp,
llama_model_phi3::load_arch_hparams: "Phi SWA is currently disabled", swa_type NONE, n_swa 0, PR
13676), so every layer hears every earlier member; studygroup does the same. The reference is
transformers in float64 on the same file, with the mask given: causal only, and causal within the
window, to show that the two differ on this text and which one studygroup follows."""
import torch
from transformers import AutoModelForCausalLM

import studygroup
from integration.test_every_family import additive, ids_of, visible
from integration.test_qwen_mistral import write_tiny

WINDOW = 4  # what write_tiny writes as phi3.attention.sliding_window


def test_phi3_sliding_window_is_set_aside_as_llama_cpp_does(tmp_path):
    path = write_tiny(tmp_path / "phi3.gguf", "phi3")
    ours = studygroup.load(path, cache=False)
    assert ours.config.sliding_window == 0 and all(ours.config.window_of(l) is None for l in range(ours.config.n_layers))
    theirs = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float64,
                                                  attn_implementation="eager", pad_token_id=0).eval()
    ids = ids_of(ours, 20, seed=8)
    T = len(ids)
    with torch.no_grad():
        every = theirs(torch.tensor([ids]), attention_mask=additive(visible(T)).double()).logits[0]  # (T, vocab)
        windowed = theirs(torch.tensor([ids]), attention_mask=additive(visible(T, window=WINDOW)).double()).logits[0]
    got = ours.run(ids, record="none", logits="all").logits.double()  # (T, vocab)
    assert (got - every).abs().max() < 1e-4  # past the window too: every member heard
    assert (got - windowed)[:WINDOW].abs().max() < 1e-4  # up to the window the two masks agree
    assert (got - windowed)[WINDOW:].abs().max() > 1e-2  # past it, a window would change the logits
