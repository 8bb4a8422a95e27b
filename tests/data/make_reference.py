"""Write tests/data/reference/: llama.cpp's and transformers' next-token logits for the default model.

For each prompt of PROMPTS, llama.cpp (llama-cpp-python) tokenizes the text and computes its
last-position logits on the GGUF as it is (quantized weights, 8-bit activations); transformers
computes the same position on the same token ids with the GGUF dequantized to float32 and eager
attention: the exact-arithmetic reference. tests/model/ holds studygroup to both. No test runs this
script (the tests have no llama.cpp); see reference/README.md for the versions and the build.

    .venv/bin/pip install transformers==5.24.0 accelerate gguf
    CMAKE_ARGS="..." .venv/bin/pip install --no-binary llama-cpp-python llama-cpp-python==0.3.36
    .venv/bin/python tests/data/make_reference.py
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "reference"
THREADS = 2  # the reference files were made with 2 threads (llama.cpp's sums depend on the split)
TOP = 10  # llama.cpp's most likely next tokens kept per prompt
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
    "<|im_start|>user\nHello<|im_end|>",
    "A study group meets every week in the library. Each member brings a question from the reading, and "
    "the others try to answer it. Some answers fit the question well, others only a little. The group "
    "listens most to the answers that fit, and together they decide what comes next. Last week the topic "
    "was the French Revolution; this week it is the history of mathematics, from Euclid's Elements to the "
    "invention of calculus by Newton and",
]


def llama_cpp_model(path: Path, n_ctx: int = 512):
    """llama.cpp (llama-cpp-python) on the GGUF as it is, THREADS threads, one batch of up to n_ctx tokens."""
    from llama_cpp import Llama

    return Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_threads=THREADS, n_threads_batch=THREADS,
                 logits_all=False, verbose=False)


def llama_cpp_tokens(llm, text: str) -> list[int]:
    """llama.cpp's ids for a user's text: BOS as the file says, special-token text read as text."""
    # add_bos=True lets the file decide (SmolLM2's add_bos_token is false: no BOS); special=False reads
    # special-token text such as <|im_start|> as plain text, as a user's typed text is read.
    return llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)


def llama_cpp_last_logits(llm) -> np.ndarray:
    """The logits (vocab,) of the last position llm evaluated, as float32."""
    # With logits_all=False llama-cpp-python keeps the last position's logits in the context only.
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(np.float32).copy()


def llama_cpp_logits(llm, prompts: list[str]) -> list[tuple[list[int], np.ndarray]]:
    """[(token ids, last-position logits (vocab,))] of each prompt, from llama.cpp."""
    out = []
    for text in prompts:
        ids = llama_cpp_tokens(llm, text)
        llm.reset()
        llm.eval(ids)
        out.append((ids, llama_cpp_last_logits(llm)))
    return out


def llama_cpp_words(llm) -> list[str]:
    """Each token's text, as llama.cpp decodes it alone."""
    return [llm.detokenize([i]).decode("utf-8", errors="replace") for i in range(llm.n_vocab())]


def transformers_model(path: Path):
    """transformers' Llama on the GGUF dequantized to float32, with eager (plain softmax) attention."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(THREADS)
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                attn_implementation="eager").eval()


def transformers_logits(model, ids: list[int]) -> np.ndarray:
    """transformers' last-position logits (vocab,) on `ids`."""
    import torch

    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float().numpy()


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64) - logits.max()
    return np.exp(z) / np.exp(z).sum()


def top_words(p: np.ndarray, words: list[str]) -> list[dict]:
    """The TOP most likely tokens of the distribution p (vocab,), most likely first: {id, token, prob}."""
    return [{"id": int(i), "token": words[i], "prob": round(float(p[i]), 6)} for i in np.argsort(-p)[:TOP]]


def kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p ‖ q) in nats."""
    keep = p > 0
    return float((p[keep] * (np.log(p[keep]) - np.log(q[keep]))).sum())


def main() -> None:
    from studygroup.gguf.model_path import default_model_path

    path = default_model_path()
    OUT.mkdir(parents=True, exist_ok=True)
    llm = llama_cpp_model(path)
    runs, words = llama_cpp_logits(llm, PROMPTS), llama_cpp_words(llm)
    hf = transformers_model(path)
    prompts = []
    for index, (text, (ids, ours)) in enumerate(zip(PROMPTS, runs)):
        exact = transformers_logits(hf, ids)
        np.save(OUT / f"public_{index:02d}_llamacpp.npy", ours)
        np.save(OUT / f"public_{index:02d}_hf.npy", exact.astype(np.float32))
        p, q = softmax(ours), softmax(exact)
        prompts.append({"index": index, "text": text, "token_ids": list(map(int, ids)), "top10": top_words(p, words),
                        "hf_top1": int(exact.argmax()), "kl_llamacpp_hf": kl(p, q)})
        print(f"{index:2d} T={len(ids):3d} top1 {prompts[-1]['top10'][0]['token']!r} KL {prompts[-1]['kl_llamacpp_hf']:.2e}")
    (OUT / "public.json").write_text(json.dumps(prompts, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
