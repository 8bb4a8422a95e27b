"""Write tests/data/reference/generate.json: transformers' and llama.cpp's greedy continuations of the
first eight reference prompts on the default model, 32 words each.

Per prompt: the prompt's token ids (as tests/data/reference/public.json holds them), the 32 ids
transformers' `generate(do_sample=False)` chose with the end token ignored (the GGUF dequantized to
float32, eager attention), and at each word the gap between its two best logits (where two
implementations of float32 may part); then the same for llama.cpp on the GGUF as it is (its greedy
choice from its own logits, 8-bit activations), as `llamacpp_generated` and `llamacpp_top2_gap`.
Run by hand:

    bash bench/build_llama.sh        # once: llama-cpp-python into .bench/llama
    PYTHONPATH=.bench/llama:. .venv/bin/python tests/data/make_generate_reference.py
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from make_reference import OUT, llama_cpp_last_logits, llama_cpp_model, transformers_model

WORDS = 32
PROMPTS = 8  # the first eight reference prompts


def llama_cpp_greedy(llm, ids: list[int], n: int) -> tuple[list[int], list[float]]:
    """llama.cpp's n greedy ids after `ids` (its key/value cache, one new position a step), and at
    each step the gap between its two best logits."""
    llm.reset()
    llm.eval(ids)
    chosen, gaps = [], []
    for _ in range(n):
        z = llama_cpp_last_logits(llm)  # (vocab,)
        best = np.argsort(-z)[:2]
        chosen.append(int(best[0]))
        gaps.append(float(z[best[0]] - z[best[1]]))
        llm.eval([chosen[-1]])
    return chosen, gaps


def main() -> None:
    from studygroup.gguf.model_path import default_model_path

    path = default_model_path()
    hf, llm = transformers_model(path), llama_cpp_model(path)
    prompts = json.loads((OUT / "public.json").read_text(encoding="utf-8"))
    out = []
    for p in prompts[:PROMPTS]:
        ids = torch.tensor([p["token_ids"]])
        with torch.inference_mode():
            g = hf.generate(ids, max_new_tokens=WORDS, min_new_tokens=WORDS, do_sample=False, eos_token_id=None,
                            pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        top2 = [torch.topk(z[0].float(), 2).values for z in g.logits]
        out.append({"index": p["index"], "token_ids": p["token_ids"], "generated": g.sequences[0, ids.shape[1]:].tolist(),
                    "top2_gap": [float(t[0] - t[1]) for t in top2]})
        out[-1]["llamacpp_generated"], out[-1]["llamacpp_top2_gap"] = llama_cpp_greedy(llm, p["token_ids"], WORDS)
        print(p["index"], len(out[-1]["generated"]), min(out[-1]["top2_gap"]), flush=True)
        (OUT / "generate.json.part").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    (OUT / "generate.json.part").rename(OUT / "generate.json")


if __name__ == "__main__":
    main()
