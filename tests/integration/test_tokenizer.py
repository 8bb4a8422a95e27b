"""The tokenizer of tiny GGUF files: merges, pre-tokenizers, special text, display, round trips."""
from __future__ import annotations

import pytest
from conftest import BOS_ID, write_tiny_gguf
from hypothesis import given, settings
from hypothesis import strategies as st

from studygroup.errors import InputError, ModelFileError
from studygroup.gguf.tokenizer import TOKEN_CONTROL, Tokenizer, _readable, byte_alphabet, token_text_to_bytes
from studygroup.model.weights_cache import load_tokenizer


@pytest.fixture(scope="module")
def tok(tiny_model):
    return Tokenizer.from_gguf(tiny_model.path)


def pieces(tok, text):
    return [tok.tokens[i] for i in tok.encode(text)]


def test_vocabulary_and_special_ids(tok, tiny_model):
    assert tok.vocab_size == len(tiny_model.tokens) == 273
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (1, 2, False)


def test_merges_apply_within_words(tok):
    assert pieces(tok, " the") == ["Ġthe"]
    assert pieces(tok, "the") == ["t", "he"]  # no merge ("t", "he"): only the spaced form exists
    assert pieces(tok, " sing an") == ["Ġs", "ing", "Ġan"]
    assert pieces(tok, "hi") == ["h", "i"] and pieces(tok, " hi") == ["Ġ", "h", "i"]  # Ġhi: no merge path


def test_smollm_splits_digits_one_by_one(tok):
    assert pieces(tok, "12") == ["1", "2"]  # the merge ("1", "2") cannot cross the digit split


@pytest.mark.parametrize("pre,expected", [
    ("gpt2", ["12", "3", "4"]),  # ' ?\p{N}+' keeps the number whole: the merge applies
    ("default", ["12", "3", "4"]),
    ("llama-bpe", ["12", "3", "4"]),  # \p{N}{1,3}: '123' then '4'
    ("smollm", ["1", "2", "3", "4"]),
])
def test_pre_tokenizer_follows_the_file(tmp_path, pre, expected):
    model = write_tiny_gguf(tmp_path / f"{pre}.gguf", pre=pre)
    assert pieces(Tokenizer.from_gguf(model.path), "1234") == expected


def test_llama3_takes_a_known_word_whole_and_adds_bos(tmp_path):
    model = write_tiny_gguf(tmp_path / "l3.gguf", pre="llama-bpe", metadata={"tokenizer.ggml.add_bos_token": None})
    tok = Tokenizer.from_gguf(model.path)
    assert tok.add_bos  # llama.cpp's default for llama-bpe when the file does not say
    assert [tok.tokens[i] for i in tok.encode(" hi")] == ["<|im_start|>", "Ġhi"]  # ignore_merges


def test_add_bos_from_the_file(tmp_path):
    model = write_tiny_gguf(tmp_path / "bos.gguf", add_bos=True)
    tok = Tokenizer.from_gguf(model.path)
    assert tok.encode("the")[0] == BOS_ID and tok.decode(tok.encode("the")[1:]) == "the"


def test_special_token_text_is_plain_text(tok):
    ids = tok.encode("<|im_start|>user")
    assert 1 not in ids and tok.decode(ids) == "<|im_start|>user"
    assert pieces(tok, "<|im_start|>") == list("<|im_start|>")  # byte by byte: no merges apply here


def test_user_defined_tokens_are_found_in_text(tmp_path):
    model = write_tiny_gguf(tmp_path / "user.gguf", user_tokens=("<tool>",))
    tok = Tokenizer.from_gguf(model.path)
    tool = tok.tokens.index("<tool>")
    assert tool in tok.encode("a<tool>b") and tok.decode(tok.encode("a<tool>b")) == "a<tool>b"
    assert tok.token_bytes(tool) == b"<tool>"


def test_end_of_generation_text_is_plain_text_even_when_the_file_says_user_defined(tmp_path):
    """llama.cpp makes `</s>`, `<|im_end|>`, ... control tokens whatever the file says, and text never
    matches a control token: the ids are those of a vocabulary without these entries (appended last,
    they move no other id), while `<s>`, on no list, is still found."""
    typed = "a</s>b<s>c<|im_end|>"
    with_them = Tokenizer.from_gguf(write_tiny_gguf(tmp_path / "with.gguf", user_tokens=("<s>", "</s>")).path)
    without = Tokenizer.from_gguf(write_tiny_gguf(tmp_path / "without.gguf", user_tokens=("<s>",)).path)
    s = with_them.tokens.index("<s>")
    assert with_them.encode(typed) == without.encode(typed) == [*without.encode("a</s>b"), s, *without.encode("c<|im_end|>")]
    assert with_them.token_types[with_them.tokens.index("</s>")] == TOKEN_CONTROL
    assert with_them.decode(with_them.encode(typed)) == typed


def test_token_bytes(tok):
    alphabet = byte_alphabet()
    assert all(tok.token_bytes(tok.tokens.index(alphabet[b])) == bytes([b]) for b in range(256))
    assert tok.token_bytes(tok.tokens.index("Ġthe")) == b" the"
    assert tok.token_bytes(1) == b"<|im_start|>"


def test_readable(tok):
    show = lambda text: [tok.readable(i) for i in tok.encode(text)]
    assert show(" the") == ["␣the"]
    assert show("a\nb\tc\r") == ["a", "↵", "b", "⇥", "c", "␍"]
    assert show("é") == ["<0xC3>", "<0xA9>"]  # one character, two byte tokens: neither is valid alone
    assert show("\x00") == ["<0x00>"]
    assert _readable("\x85".encode()) == "<0xC2><0x85>"  # a whole but invisible (C1 control) character
    assert _readable("naïve 🙂".encode()) == "naïve␣🙂"
    assert tok.readable(1) == "<|im_start|>"


def test_readable_never_shows_byte_alphabet_symbols(tok):
    for i in range(tok.vocab_size):
        shown = tok.readable(i)
        assert "Ġ" not in shown and "Ċ" not in shown and "ĉ" not in shown, (i, shown)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_decode_inverts_encode_for_any_text(tok, text):
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("text", ["", " ", "  leading and trailing  ", "\r\n\t", "e\u0301", "🙂👍🏽",
                                  "漢字かな", "\U0010ffff", "a\x00b", "\ufeffBOM"])
def test_decode_inverts_encode_on_hard_cases(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_bad_input(tok):
    with pytest.raises(InputError, match="token id 273 does not exist.*273 tokens \\(0-272\\)"):
        tok.decode([273])
    with pytest.raises(InputError, match="token id -1"):
        tok.readable(-1)
    with pytest.raises(InputError, match="not bytes"):
        tok.encode(b"bytes")
    with pytest.raises(InputError, match="must be an integer"):
        tok.token_bytes("a")


def test_unknown_pre_tokenizer(tmp_path):
    model = write_tiny_gguf(tmp_path / "q.gguf", pre="chatglm-bpe")
    with pytest.raises(ModelFileError, match="tokenizer.ggml.pre = 'chatglm-bpe'.*known: "):
        Tokenizer.from_gguf(model.path)


def test_missing_pre_tokenizer_is_llama_cpp_default(tmp_path):
    model = write_tiny_gguf(tmp_path / "d.gguf", metadata={"tokenizer.ggml.pre": None})
    assert Tokenizer.from_gguf(model.path).pre == "default"


def test_tokenizer_of_a_broken_file(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_text("hello")
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        load_tokenizer(path)


def test_json_round_trip(tok):
    again = Tokenizer.from_json(tok.to_json())
    text = "the 12 sing <|im_end|> 🙂"
    assert again.encode(text) == tok.encode(text) and again.readable(5) == tok.readable(5)


def test_token_text_to_bytes_by_type():
    assert token_text_to_bytes("ĠĠ", 1) == b"  "
    assert token_text_to_bytes("Ġ", 3) == "Ġ".encode()  # a control token's text is kept as written
