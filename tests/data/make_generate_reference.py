"""Write tests/data/reference/generate.json: transformers' greedy continuations of the first
eight reference prompts on the default model (the GGUF dequantized to float32, eager attention), 32 words each.

Per prompt: the prompt's token ids (as tests/data/reference/public.json holds them), the 32 ids
transformers' `generate(do_sample=False)` chose with the end token ignored, and at each word the gap
between its two best logits (where two implementations of float32 may part). Run by hand:

    .venv/bin/python tests/data/make_generate_reference.py
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from make_reference import OUT, transformers_model

WORDS = 32
PROMPTS = 8  # the first eight reference prompts


def main() -> None:
    from studygroup.gguf.model_path import default_model_path

    hf = transformers_model(default_model_path())
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
        print(p["index"], len(out[-1]["generated"]), min(out[-1]["top2_gap"]), flush=True)
        (OUT / "generate.json.part").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    (OUT / "generate.json.part").rename(OUT / "generate.json")


if __name__ == "__main__":
    main()
