"""Write tests/data/spm_llama_cpp.json: llama.cpp's token ids for texts on the SentencePiece fixtures.

The ids are llama.cpp's own (llama-cpp-python, vocab only), the reference that
tests/integration/test_sentencepiece.py holds studygroup to; CI has no llama.cpp, so they are kept
here. Run again whenever conftest.spm_vocab changes (the test checks a digest of the vocabulary):

    bash bench/build_llama.sh        # once: llama-cpp-python into .bench/llama
    PYTHONPATH=.bench/llama .venv/bin/python tests/data/make_spm_llama_cpp.py
"""
from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from conftest import vocabulary_digest, write_tiny_gguf  # noqa: E402

#: The fixtures, as write_tiny_gguf keyword arguments.
VOCABULARIES = {
    "plain": {},
    "user_tokens": {"user_tokens": ["<tool>", "ab", "<t"]},
    "no_space_prefix": {"metadata": {"tokenizer.ggml.add_space_prefix": False}},
}
EDGE_CASES = ["I have a lot", "Cash or credit card? I have a lot", " lead", "  two spaces", "trail  ", "",
              " ", "\n", "emoji 🙂 and 日本", "a\nb\tc", "Café au lait 12.50", "xyz<s>abc</s>", "<tool>x<tool> y",
              "▁already▁escaped", "\x00nul", "ÿ", "questionsquestions", "the the the"]
ALPHABET = list("the answer questions group lot I have a Cash é 12.50 \n\t  ") + [
    "🙂", "日", "<tool>", "<t", "ab", "▁", "\x00", "ÿ", "<s>"]


def texts(n: int, seed: int, edge_cases: list[str] = EDGE_CASES, alphabet: list[str] = ALPHABET) -> list[str]:
    """The edge cases, then n random texts of 1 to 30 pieces drawn from the alphabet."""
    rng = random.Random(seed)
    return edge_cases + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(n)]


def one_case_per_line(data: dict) -> str:
    text = json.dumps(data, ensure_ascii=False, indent=1)
    return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":")).replace("],[\"", "],\n[\"") + "\n"


def main() -> None:
    import llama_cpp

    out = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, kwargs in VOCABULARIES.items():
            model = write_tiny_gguf(Path(folder) / f"{name}.gguf", tokenizer="llama", **kwargs)
            llama = llama_cpp.Llama(str(model.path), vocab_only=True, verbose=False)
            cases = [[t, llama.tokenize(t.encode(), add_bos=True, special=False)] for t in texts(300, seed=len(out))]
            out[name] = {"vocabulary_digest": vocabulary_digest(model.tokens), "cases": cases}
    meta = {"llama_cpp_python": llama_cpp.__version__}
    (HERE / "spm_llama_cpp.json").write_text(one_case_per_line({"made_by": meta, "vocabularies": out}))
    print({k: len(v["cases"]) for k, v in out.items()})


if __name__ == "__main__":
    main()
