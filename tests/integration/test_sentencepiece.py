"""SentencePiece vocabularies (Llama 2, TinyLlama, Mistral): ids equal llama.cpp's and transformers'.

The fixture vocabulary is learned from a short text by conftest.spm_vocab and written to GGUF as
llama.cpp's converter writes a SentencePiece model (scores, byte tokens <0x00>..<0xFF>).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import spm_vocab, vocabulary_digest, write_tiny_gguf
from hypothesis import given, settings
from hypothesis import strategies as st

import studygroup
from studygroup.study import explain as study
from studygroup.study.compare import prefix_members
from studygroup.errors import InputError, ModelFileError
from studygroup.gguf.tokenizer import Tokenizer
from studygroup.model.weights_cache import load_tokenizer
from studygroup.gguf.sentencepiece import SPACE

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "spm_llama_cpp.json"
VOCABULARIES = {"plain": {}, "user_tokens": {"user_tokens": ["<tool>", "ab", "<t"]},
                "no_space_prefix": {"metadata": {"tokenizer.ggml.add_space_prefix": False}}}
# Text drawn from the fixture's own pieces, spaces, and characters it lacks (byte fallback).
TEXT = st.text(st.sampled_from(list("the answer questions group lot I have Cash é12.50?\n\t") + ["🙂", "日", "ÿ", "\x00"]),
               min_size=1, max_size=40)  # empty text: transformers versions differ on its BOS; llama.cpp's is kept above


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spm")
    return {name: write_tiny_gguf(folder / f"{name}.gguf", tokenizer="llama", **kw) for name, kw in VOCABULARIES.items()}


@pytest.fixture(scope="module")
def tok(files):
    return Tokenizer.from_gguf(files["plain"].path)


@pytest.fixture(scope="module")
def hf_tok(files):
    from transformers import AutoTokenizer

    path = files["plain"].path
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def test_reads_the_sentencepiece_metadata(tok, files):
    assert tok.model == "llama" and tok.vocab_size == len(files["plain"].tokens)
    assert (tok.bos_id, tok.eos_id, tok.add_bos, tok.add_space_prefix) == (1, 2, True, True)
    assert tok.encode("")[:1] == [1]


@pytest.mark.parametrize("name", VOCABULARIES)
def test_ids_equal_llama_cpp(files, name):
    """llama.cpp's ids, kept in tests/data by make_spm_llama_cpp.py (CI has no llama.cpp)."""
    reference = json.loads(REFERENCE.read_text())["vocabularies"][name]
    model = files[name]
    assert reference["vocabulary_digest"] == vocabulary_digest(model.tokens), "fixture changed: run tests/data/make_spm_llama_cpp.py"
    tok = Tokenizer.from_gguf(model.path)
    wrong = [(text, tok.encode(text), ids) for text, ids in reference["cases"] if tok.encode(text) != ids]
    assert not wrong and len(reference["cases"]) > 300, wrong[:3]


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_ids_equal_transformers_gguf_tokenizer(tok, hf_tok, text):
    # transformers puts the '▁' prefix only where the text does not already start with a space;
    # llama.cpp and SentencePiece always do (see the llama.cpp reference above for those texts).
    if text[:1] in (" ", "\t", "\n"):
        text = "x" + text
    without_bos = lambda ids: ids[1:] if ids[:1] == [tok.bos_id] else ids  # noqa: E731
    # transformers 5.17 adds no BOS here, 5.24 does; llama.cpp's BOS is checked above
    assert without_bos(tok.encode(text)) == without_bos(hf_tok(text)["input_ids"])
    assert tok.encode(text)[0] == tok.bos_id


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40).filter(lambda s: SPACE not in s))
def test_decode_inverts_encode(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_a_typed_escape_mark_reads_as_a_space(tok):
    # SentencePiece writes a space as '▁': typed '▁' is the same piece, as in llama.cpp (the one
    # text that does not come back as typed).
    assert tok.encode("a▁lot") == tok.encode("a lot") and tok.decode(tok.encode("a▁lot")) == "a lot"


def test_user_defined_tokens_are_found_and_followed_by_a_space_prefix(files):
    tok = Tokenizer.from_gguf(files["user_tokens"].path)
    ids = tok.encode("x<tool>y")
    tool = files["user_tokens"].tokens.index("<tool>")
    assert tool in ids and tok.decode(ids) == "x<tool>y"
    after = ids[ids.index(tool) + 1]
    assert tok.tokens[after].startswith(SPACE)  # llama.cpp: a fragment after a special token gets the prefix


def test_end_of_generation_text_is_plain_text_even_when_the_file_says_user_defined(tmp_path):
    """As llama.cpp reads the file, `<end_of_turn>` is a control token, never matched in text: the
    ids are those of a vocabulary without it; `<start_of_turn>` (on no list) is found."""
    typed = "x<end_of_turn>y<start_of_turn>z"
    with_it = Tokenizer.from_gguf(write_tiny_gguf(tmp_path / "with.gguf", tokenizer="llama",
                                                  user_tokens=("<start_of_turn>", "<end_of_turn>")).path)
    without = Tokenizer.from_gguf(write_tiny_gguf(tmp_path / "without.gguf", tokenizer="llama",
                                                  user_tokens=("<start_of_turn>",)).path)
    start = with_it.tokens.index("<start_of_turn>")
    assert with_it.encode(typed) == without.encode(typed)
    assert start in without.encode(typed) and with_it.tokens.index("<end_of_turn>") not in with_it.encode(typed)
    assert with_it.decode(with_it.encode(typed)) == typed


def test_without_space_prefix(files):
    tok = Tokenizer.from_gguf(files["no_space_prefix"].path)
    assert not tok.add_space_prefix
    assert not tok.tokens[tok.encode("have")[1]].startswith(SPACE)


def test_byte_fallback_and_readable_tokens(tok):
    ids = tok.encode("I 🙂")
    assert [tok.readable(i) for i in ids] == ["<s>", "␣I", "␣", "<0xF0>", "<0x9F>", "<0x99>", "<0x82>"]
    assert [tok.token_bytes(i) for i in ids[3:]] == [bytes([b]) for b in "🙂".encode()]
    assert tok.readable(tok.encode("a\tb")[2]) == "⇥"


def test_a_missing_byte_token_is_a_clear_error(tmp_path):
    tokens, types, scores = spm_vocab()
    tokens[3 + 0xF0] = "<unused-F0>"  # drop the byte token that 🙂 starts with
    model = write_tiny_gguf(tmp_path / "f0.gguf", tokenizer="llama",
                            metadata={"tokenizer.ggml.tokens": tokens})
    tok = Tokenizer.from_gguf(model.path)
    with pytest.raises(InputError, match="cannot be tokenized.*<0xF0>"):
        tok.encode("hi 🙂")
    assert tok.encode("hi") == Tokenizer.from_gguf(model.path).encode("hi")


def test_scores_are_required(tmp_path):
    model = write_tiny_gguf(tmp_path / "s.gguf", tokenizer="llama", metadata={"tokenizer.ggml.scores": None})
    with pytest.raises(ModelFileError, match="tokenizer.ggml.scores"):
        Tokenizer.from_gguf(model.path)


def test_other_tokenizer_models_are_refused(tmp_path):
    model = write_tiny_gguf(tmp_path / "b.gguf", metadata={"tokenizer.ggml.model": "bert"})
    with pytest.raises(ModelFileError, match="tokenizer is of type 'bert'.*SentencePiece"):
        Tokenizer.from_gguf(model.path)


def test_cached_tokenizer_gives_the_same_ids(files):
    path = files["user_tokens"].path
    first, second = load_tokenizer(path), load_tokenizer(path)  # the second comes from the cache
    for text in ("x<tool>y", " lead 🙂", "Cash or credit card?"):
        assert first.encode(text) == second.encode(text) == Tokenizer.from_gguf(path).encode(text)
    assert second.model == "llama" and second.scores == first.scores


def test_model_with_a_sentencepiece_vocabulary_runs_and_explains(files):
    from transformers import LlamaConfig, LlamaForCausalLM

    tiny = files["plain"]
    model = studygroup.load(tiny.path)
    hf = LlamaForCausalLM(LlamaConfig(**tiny.hf_config, attn_implementation="eager"))
    hf.load_state_dict(tiny.hf_state_dict, strict=False)
    ids = model.tokenize("I have a lot of questions")
    assert ids[0] == model.tokenizer.bos_id
    with torch.no_grad():
        expected = hf.eval()(torch.tensor([ids])).logits[0, -1]
    assert (model.run(ids).logits[-1] - expected).abs().max() < 1e-4
    e = study.explain(model, "Cash or credit card? I have a lot", top=3, measure_heads=2, measure_members=3)
    assert e.tokens[0] == "<s>" and "␣lot" in e.tokens and e.predicted.id < model.config.vocab_size


@pytest.mark.parametrize("prefix", ["Cash or credit card?", "Cash or credit card? ", "Cash or"])
def test_compare_finds_the_members_of_a_prefix(files, prefix):
    model = studygroup.load(files["plain"].path)
    ids = model.tokenize(prefix + "I have a lot" if prefix.endswith(" ") else prefix + " I have a lot")
    members = prefix_members(model, ids, len(prefix.encode()))
    assert members == list(range(1, len(members) + 1))  # after <s>, from the first member on
    assert model.tokenizer.decode(ids[:members[-1] + 1]) == prefix.rstrip(" ")
    assert len(model.tokenizer.decode(ids[:members[-1] + 2])) > len(prefix)
