"""Byte-level BPE ids (Qwen 2's pre-tokenizer and GPT-2's) against llama.cpp's on the same vocabulary.

The vocabulary is test_qwen_mistral.trained_vocab, written into a tiny Qwen 2 file and a tiny GPT-2
file; llama.cpp's ids for 300+ texts on each are kept in tests/data/bpe_llama_cpp.json by
tests/data/make_bpe_llama_cpp.py (CI has no llama.cpp). Special-token text typed in a text stays text.
"""
import json
from pathlib import Path

import pytest

from conftest import vocabulary_digest
from studygroup.gguf.tokenizer import Tokenizer
from tests.integration.test_gpt2 import write_gpt2
from tests.integration.test_qwen_mistral import trained_vocab, write_tiny

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "bpe_llama_cpp.json"
#: The fixture files, each written by (path, tokens, types, merges) -> path.
WRITERS = {"qwen2": lambda path, t, ty, m: write_tiny(path, "qwen2", tokens=t, types=ty, merges=m),
           "gpt2": lambda path, t, ty, m: write_gpt2(path, tokens=t, types=ty, merges=m, pre="gpt-2")}


@pytest.fixture(scope="module")
def vocab():
    return trained_vocab()


@pytest.fixture(scope="module")
def reference():
    return json.loads(REFERENCE.read_text())["vocabularies"]


@pytest.mark.parametrize("name", WRITERS)
def test_ids_equal_llama_cpp(tmp_path, vocab, reference, name):
    tokens, types, merges = vocab
    reference = reference[name]
    assert reference["vocabulary_digest"] == vocabulary_digest(tokens, merges), \
        "fixture changed: run tests/data/make_bpe_llama_cpp.py"
    tok = Tokenizer.from_gguf(WRITERS[name](tmp_path / f"{name}.gguf", tokens, types, merges))
    wrong = [(text, tok.encode(text), ids) for text, ids in reference["cases"] if tok.encode(text) != ids]
    assert not wrong and len(reference["cases"]) > 300, wrong[:3]


def test_typed_special_token_text_stays_text(vocab, reference):
    tokens = vocab[0]
    for name in WRITERS:
        ids = dict(reference[name]["cases"])["<|im_start|>"]
        assert tokens.index("<|im_start|>") not in ids and len(ids) > 1, name
