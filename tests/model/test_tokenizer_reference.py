"""The default model's tokenizer against llama.cpp's token ids (shared/reference/public.json)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from studygroup.errors import InputError
from studygroup.model.weights_cache import load_tokenizer

N_PROMPTS = 12


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def prompts(reference_dir):
    prompts = json.loads((reference_dir / "public.json").read_text(encoding="utf-8"))
    assert len(prompts) == N_PROMPTS, f"expected {N_PROMPTS} reference prompts in {reference_dir}"
    return prompts


def test_special_ids_and_flags(tok):
    assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.add_bos, tok.pre) == (49152, 1, 2, False, "smollm")


@pytest.mark.parametrize("index", range(N_PROMPTS))
def test_ids_equal_llama_cpp(tok, prompts, index):
    prompt = prompts[index]
    assert tok.encode(prompt["text"]) == prompt["token_ids"]
    assert tok.decode(prompt["token_ids"]) == prompt["text"]


def test_top_tokens_read_as_llama_cpp_prints_them(tok, prompts):
    for prompt in prompts:
        for top in prompt["top10"]:
            assert tok.token_bytes(top["id"]).decode("utf-8", errors="replace") == top["token"], top


def test_readable_forms(tok):
    assert [tok.readable(i) for i in tok.encode("I have\n\ta lot")] == ["I", "␣have", "↵", "⇥", "a", "␣lot"]
    assert tok.readable(1) == "<|im_start|>"
    assert all("Ġ" not in tok.readable(i) and "Ċ" not in tok.readable(i) for i in range(tok.vocab_size))


def test_partial_utf8_tokens_show_their_bytes(tok):
    ids = tok.encode("🙂")  # one emoji, several byte-level tokens
    shown = "".join(tok.readable(i) for i in ids)
    assert tok.decode(ids) == "🙂" and ("🙂" in shown or "<0xF0>" in shown)


# Bytes SmolLM2's vocabulary has no token for: never in valid UTF-8 (0xC0, 0xC1, 0xF5-0xFF), lead
# bytes of planes 4-11 (0xF1, 0xF2) and six control bytes. llama.cpp drops them; we refuse them.
MISSING_BYTES = {0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100), 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D}


def writable(text):
    return MISSING_BYTES.isdisjoint(text.encode("utf-8"))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_decode_inverts_encode(tok, text):
    if writable(text):
        assert tok.decode(tok.encode(text)) == text
    else:
        with pytest.raises(InputError, match="cannot be tokenized"):
            tok.encode(text)


@settings(max_examples=200, deadline=None)
@given(st.text().filter(writable))
def test_decode_inverts_encode_on_writable_text(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_unwritable_characters_are_refused_not_dropped(tok):
    assert tok._missing_bytes == MISSING_BYTES
    with pytest.raises(InputError, match=r"'\\U00040000' \(U\+40000\) cannot be tokenized.*byte 0xF1"):
        tok.encode("a \U00040000 b")
    with pytest.raises(InputError, match=r"U\+0004"):
        tok.encode("end of transmission \x04")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["é", "e\u0301", "🙂", "漢字", "\n", "\t", "\r", " ", "  ", "<|im_end|>", "123",
                                 "don't", "Ünïcödé", "\u200d", "👨‍👩‍👧"]), max_size=12).map("".join))
def test_decode_inverts_encode_on_tricky_pieces(tok, text):
    assert tok.decode(tok.encode(text)) == text
