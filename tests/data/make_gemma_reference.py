"""Write tests/data/reference_gemma/: llama.cpp's and transformers' next-token logits for Gemma 3 270M (Q4_K_M).

For each prompt of PROMPTS, llama.cpp (llama-cpp-python) tokenizes the text (BOS added, as the file
asks; special-token text read as text, as a user's typed text is read) and computes its last-position
logits on the GGUF as it is (quantized weights, 8-bit activations). transformers computes the same
position on the same ids with the GGUF dequantized to float32 and eager attention: the exact-arithmetic
reference; its own tokenizer's ids are kept beside llama.cpp's (they differ where markup is typed).
tests/model/test_gemma_reference.py holds studygroup to both; see reference_gemma/README.md.

    bash bench/build_llama.sh        # once: llama-cpp-python into .bench/llama
    .venv/bin/pip install transformers==5.24.0 accelerate gguf sentencepiece
    PYTHONPATH=.bench/llama:. .venv/bin/python tests/data/make_gemma_reference.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from make_reference import THREADS, kl, llama_cpp_logits, llama_cpp_model, llama_cpp_words, softmax, top_words

OUT = Path(__file__).resolve().parent / "reference_gemma"
N_CTX = 1024  # room for the longest prompt in one batch
# A text past the 512-member window of Gemma 3's local layers (952 tokens with the BOS).
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
    "<start_of_turn>user\nHello<end_of_turn>",  # typed markup: text to llama.cpp, special tokens to transformers
]


def transformers_from_gguf(path: Path):
    """(tokenizer, model) transformers builds from the GGUF: float32, eager attention."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(THREADS)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                              attn_implementation="eager").eval()
    return tokenizer, hf


def main() -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from studygroup.model.packaged import model_file

    path = model_file("gemma-3-270m")
    llm = llama_cpp_model(path, N_CTX)
    runs, words = llama_cpp_logits(llm, PROMPTS), llama_cpp_words(llm)
    del llm
    tokenizer, hf = transformers_from_gguf(path)
    OUT.mkdir(parents=True, exist_ok=True)
    prompts = []
    for index, (text, (ids, ours)) in enumerate(zip(PROMPTS, runs)):
        with torch.inference_mode():
            exact = hf(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float().numpy()
        np.save(OUT / f"gemma_{index:02d}_llamacpp.npy", ours)
        np.save(OUT / f"gemma_{index:02d}_hf.npy", exact.astype(np.float32))
        p, q = softmax(ours), softmax(exact)
        prompts.append({"index": index, "text": text, "token_ids": list(map(int, ids)),
                        "hf_token_ids": tokenizer(text)["input_ids"], "top10": top_words(p, words),
                        "hf_top1": int(exact.argmax()), "kl_llamacpp_hf": kl(p, q),
                        "max_abs_logit_diff": float(np.abs(ours - exact).max())})
        r = prompts[-1]
        print(f"{index:2d} T={len(ids):3d} same ids {r['hf_token_ids'] == r['token_ids']} top1 {r['top10'][0]['token']!r} "
              f"hf {words[r['hf_top1']]!r} KL {r['kl_llamacpp_hf']:.2e} max|d| {r['max_abs_logit_diff']:.3f}")
    (OUT / "gemma.json").write_text(json.dumps(prompts, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
