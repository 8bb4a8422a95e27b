"""Write tests/data/bpe_llama_cpp.json: llama.cpp's token ids for texts on the byte-level BPE fixtures.

The vocabulary is the one tests/integration/test_qwen_mistral.py trains (`trained_vocab`, with Qwen's
special tokens), written once with pre-tokenizer `qwen2` (a tiny Qwen 2 file) and once with `gpt2` (a
tiny GPT-2 file). llama.cpp (llama-cpp-python, vocab only) tokenizes each text as a user's typed text
(special=False: "<|im_start|>" stays text); tests/integration/test_bpe_llama_cpp.py holds studygroup
to these ids. CI has no llama.cpp, so they are kept here. Run again whenever the fixture vocabulary
changes (the test checks a digest of the tokens and merges):

    bash bench/build_llama.sh        # once: llama-cpp-python into .bench/llama
    PYTHONPATH=.bench/llama .venv/bin/python tests/data/make_bpe_llama_cpp.py
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]
from conftest import vocabulary_digest  # noqa: E402
from integration.test_bpe_llama_cpp import WRITERS  # noqa: E402
from integration.test_qwen_mistral import TEXTS, trained_vocab  # noqa: E402
from make_spm_llama_cpp import one_case_per_line, texts  # noqa: E402

EDGE_CASES = [*TEXTS, "", " ", "  ", "\n", "\n\n\n", "\t\t x", "<|im_start|>", "<|endoftext|>", "<s>hi</s>",
              "<|im_start|>user\nHello<|im_end|>", "2024", "12345678", "3.14159", "don't I'M we'll THEY'RE",
              "日本の首都は", "🙂🙂 a", "  trailing  ", "a\r\nb", "x" * 40]
ALPHABET = [*"abcdefgh I'sSmtT 0123456789 .,;!?\n\t  ", "é", "€", "🙂", "日", "<|im_start|>", "<|im_end|>",
            "<s>", "'re", "'LL", "questions", "group", "Cash", "  ", "\n\n"]


def main() -> None:
    import llama_cpp

    tokens, types, merges = trained_vocab()
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        for seed, (name, write) in enumerate(WRITERS.items()):
            path = write(Path(folder) / f"{name}.gguf", tokens, types, merges)
            llama = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
            cases = [[t, llama.tokenize(t.encode(), add_bos=True, special=False)] for t in texts(300, seed, EDGE_CASES, ALPHABET)]
            out[name] = {"vocabulary_digest": vocabulary_digest(tokens, merges), "cases": cases}
    meta = {"llama_cpp_python": llama_cpp.__version__}
    (HERE / "bpe_llama_cpp.json").write_text(one_case_per_line({"made_by": meta, "vocabularies": out}))
    print({k: len(v["cases"]) for k, v in out.items()})


if __name__ == "__main__":
    main()
