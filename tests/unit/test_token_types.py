"""llama.cpp's overrides of token types by text, rule by rule (llama-vocab.cpp of llama-cpp-python
0.3.36, read by hand: the expected types below follow that reading, not studygroup's code)."""
from __future__ import annotations

import pytest

from studygroup.gguf.token_types import (END_OF_GENERATION, TOKEN_BYTE, TOKEN_CONTROL, TOKEN_NORMAL,
                                         TOKEN_UNKNOWN, TOKEN_USER_DEFINED, llama_cpp_token_types)

N, C, U = TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED


def types_of(entries: dict[str, int], named=None) -> dict[str, int]:
    out = llama_cpp_token_types(list(entries), list(entries.values()), named or {})
    return dict(zip(entries, out))


@pytest.mark.parametrize("kind", [N, U, TOKEN_UNKNOWN, TOKEN_BYTE])
@pytest.mark.parametrize("text", ["</s>", "<|endoftext|>", "<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<eos>"])
def test_an_end_of_generation_is_a_control_token_whatever_the_file_says(text, kind):
    assert types_of({"a": N, text: kind, "<s>": U}) == {"a": N, text: C, "<s>": U}


def test_the_list_holds_what_llama_cpp_ends_on_and_no_start():
    assert {"</s>", "<|endoftext|>", "<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>",
            "<｜end▁of▁sentence｜>"} <= set(END_OF_GENERATION)
    assert not {"<s>", "<|im_start|>", "<start_of_turn>", "<bos>"} & set(END_OF_GENERATION)


def test_a_fill_in_the_middle_text_is_control_unless_the_file_names_that_kind():
    entries = {"<|fim_prefix|>": U, "<fim_suffix>": U, "<PAD>": U}
    assert types_of(entries) == {"<|fim_prefix|>": C, "<fim_suffix>": C, "<PAD>": C}
    named = types_of(entries, {"fim_pre_token_id": 2})  # the file names the prefix: no text is looked for
    assert named == {"<|fim_prefix|>": U, "<fim_suffix>": C, "<PAD>": C}
    assert types_of(entries, {"prefix_token_id": 1})["<|fim_prefix|>"] == U  # the older key counts too
    assert types_of(entries, {"fim_pre_token_id": 99})["<|fim_prefix|>"] == C  # out of range: not named


def test_only_one_entry_of_a_kind_becomes_control():
    # llama.cpp takes the first its hash map yields; studygroup the lowest id (no known file has two)
    assert types_of({"<PRE>": U, "<fim_prefix>": U}) == {"<PRE>": C, "<fim_prefix>": U}


def test_gpt_oss_tokens_are_always_found_in_text():
    assert types_of({"<|start|>": C, "<|channel|>": N, "<|message|>": C}) == {
        "<|start|>": U, "<|channel|>": U, "<|message|>": U}


@pytest.mark.parametrize("others,end", [(("<|return|>", "<|call|>"), U), (("<|calls|>", "<|flush|>"), U),
                                        (("<|return|>",), C), (("<|call|>",), C)])
def test_harmony_end_is_user_defined_beside_return_and_call(others, end):
    assert types_of({"<|end|>": C, **{t: C for t in others}})["<|end|>"] == end


def test_end_of_sentence_is_a_word_beside_a_tool_response_or_plamo_end():
    assert types_of({"</s>": U, "<|tool_response>": C})["</s>"] == N
    assert types_of({"</s>": U, "<|plamo:eos|>": C})["</s>"] == C  # not an end of generation by its text
    assert types_of({"</s>": U, "<|plamo:eos|>": C}, {"eos_token_id": 1})["</s>"] == N
