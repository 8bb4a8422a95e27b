"""Write tests/data/reference_gemma/: transformers' next-token logits for Gemma 3 270M (Q4_K_M).

For each prompt of PROMPTS, transformers tokenizes the text with the tokenizer it builds from the
GGUF and computes the last-position logits with the GGUF dequantized to float32 and eager
attention: the exact-arithmetic reference. tests/model/test_gemma_reference.py holds studygroup to
it. llama.cpp was not available where these files were made: its ids and logits are not stored
(add them with llama-cpp-python as make_reference.py does, where it builds).

    .venv/bin/pip install transformers==5.24.0 accelerate gguf sentencepiece
    .venv/bin/python tests/data/make_gemma_reference.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "reference_gemma"
THREADS = 2
TOP = 10
# A text past the 512-member window of Gemma 3's local layers (about 700 tokens).
LONG = " ".join(
    f"In week {i} the study group read chapter {i} of the book, asked {i + 2} questions about it and "
    f"argued over the answers until the library closed; member {chr(65 + i % 26)} kept the notes."
    for i in range(1, 25)) + " At the end of the term they had read every chapter and asked a lot of"
PROMPTS = [
    "I have a lot",
    "Cash or credit card? I have a lot",
    "The quick brown fox jumps over the lazy",
    "Attention is all you",
    "Paris is the capital of",
    "def fibonacci(n):\n    if n <",
    "She opened the door and saw a",
    "Café crème brûlée — très",
    "3 + 4 = 7, 12 + 30 =",
    "Line one\nLine two 🙂\n\tTabbed",
    "  Two spaces, then   three, and a trailing space ",
    "日本の首都は",
    LONG,
]


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from studygroup.model.packaged import model_file

    path = model_file("gemma-3-270m")
    torch.set_num_threads(THREADS)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                              attn_implementation="eager").eval()
    OUT.mkdir(parents=True, exist_ok=True)
    prompts = []
    for index, text in enumerate(PROMPTS):
        ids = tokenizer(text)["input_ids"]
        with torch.inference_mode():
            logits = hf(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float().numpy()
        np.save(OUT / f"gemma_{index:02d}_hf.npy", logits.astype(np.float32))
        p = np.exp(logits.astype(np.float64) - logits.max())
        p /= p.sum()
        top = np.argsort(-p)[:TOP]
        prompts.append({"index": index, "text": text, "token_ids": list(map(int, ids)),
                        "top10": [{"id": int(i), "token": tokenizer.decode([int(i)]), "prob": round(float(p[i]), 6)}
                                  for i in top], "hf_top1": int(logits.argmax())})
        print(f"{index:2d} T={len(ids):3d} top1 {prompts[-1]['top10'][0]}")
    (OUT / "gemma.json").write_text(json.dumps(prompts, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
