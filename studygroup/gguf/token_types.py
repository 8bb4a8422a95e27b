"""The kind of each vocabulary entry (`tokenizer.ggml.token_type`), as llama.cpp reads it.

The file's kinds are not the last word: llama.cpp's vocabulary loader (llama-vocab.cpp of the
llama.cpp in llama-cpp-python 0.3.36, the version the tests compare with) overrides some entries
by their text, for every family:

1. the texts that end a generation (`</s>`, `<|endoftext|>`, `<end_of_turn>`, `<|im_end|>`,
   `<|eot_id|>`, ...) become control tokens, whatever the file says;
2. for each fill-in-the-middle kind (prefix, suffix, middle, pad, repo, file separator) whose id
   the file does not name, the entry with one of that kind's texts becomes a control token;
3. gpt-oss's `<|channel|>`, `<|message|>`, `<|start|>` and `<|constrain|>` become user-defined;
4. `<|end|>` becomes user-defined in a vocabulary with `<|return|>` and `<|call|>`, or with
   `<|call|>` (or `<|calls|>`) and `<|flush|>`;
5. `</s>` becomes normal where an end of generation is `<|tool_response>` or `<|plamo:eos|>`.

Plain text never matches a control token; it matches a user-defined one wherever it occurs
(see tokenizer.py). So a Gemma 3 text that types `</s>` (user-defined in the file, a control
token after rule 1) is spelled in plain pieces, while `<s>` (user-defined, on no list) is one token.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

# Rule 1: llama.cpp's list of texts that end a generation.
END_OF_GENERATION = (
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
)
# Rule 2: each fill-in-the-middle kind, the keys that name its id, and the texts llama.cpp looks for.
FILL_IN_THE_MIDDLE = (
    (("fim_pre_token_id", "prefix_token_id"),
     ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
      "<|code_prefix|>", "<|prefix|>")),
    (("fim_suf_token_id", "suffix_token_id"),
     ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
      "<|code_suffix|>", "<|suffix|>")),
    (("fim_mid_token_id", "middle_token_id"),
     ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
      "<|code_middle|>", "<|middle|>")),
    (("fim_pad_token_id",), ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")),
    (("fim_rep_token_id",), ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")),
    (("fim_sep_token_id",), ("<|file_sep|>",)),
)
# Rule 3: gpt-oss's tokens, always found in text.
ALWAYS_IN_TEXT = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")
# Rule 5: the ends of generation beside which `</s>` is an ordinary word.
ORDINARY_END_OF_SENTENCE = ("<|tool_response>", "<|plamo:eos|>")
# The ids a file may name as ends of generation (rule 5 looks at their texts too).
NAMED_ENDS = ("eos_token_id", "eot_token_id", "eom_token_id", "fim_pad_token_id", "fim_rep_token_id",
              "fim_sep_token_id")


def llama_cpp_token_types(tokens: Sequence[str], types: Sequence[int], named: Mapping[str, int]) -> list[int]:
    """The file's token types (vocab,) with llama.cpp's overrides by text applied, rules 1-5 in order.

    `named`: the ids the file names under `tokenizer.ggml.` ({"eos_token_id": 1, ...}: ids out of
    range are ignored, as llama.cpp ignores them). An overridden type is CONTROL, USER_DEFINED or
    NORMAL; llama.cpp adds the control flag to the old kind, which tokenizes as a control token.

    >>> llama_cpp_token_types(["<s>", "</s>", "a"], [TOKEN_USER_DEFINED] * 2 + [TOKEN_NORMAL], {})
    [4, 3, 1]
    """
    ids = {t: i for i, t in enumerate(tokens)}
    named = {key: i for key, i in named.items() if isinstance(i, int) and 0 <= i < len(tokens)}
    out = list(types)
    for text in END_OF_GENERATION:
        _set(out, ids, text, TOKEN_CONTROL)
    for keys, texts in FILL_IN_THE_MIDDLE:
        if not any(key in named for key in keys) and (found := [ids[t] for t in texts if t in ids]):
            # llama.cpp takes the first entry its hash map yields; no vocabulary we know holds two
            out[min(found)] = TOKEN_CONTROL
    for text in ALWAYS_IN_TEXT:
        _set(out, ids, text, TOKEN_USER_DEFINED)
    if _harmony_end(ids):
        _set(out, ids, "<|end|>", TOKEN_USER_DEFINED)
    ends = {*END_OF_GENERATION, *(tokens[named[key]] for key in NAMED_ENDS if key in named)}
    if "</s>" in ids and any(t in ids and t in ends for t in ORDINARY_END_OF_SENTENCE):
        out[ids["</s>"]] = TOKEN_NORMAL
    return out


def _set(types: list[int], ids: Mapping[str, int], text: str, kind: int) -> None:
    if text in ids:
        types[ids[text]] = kind


def _harmony_end(ids: Mapping[str, int]) -> bool:
    """Rule 4: gpt-oss's and solar-open's `<|end|>` ends a message, not a generation."""
    has_call = "<|call|>" in ids or "<|calls|>" in ids
    return "<|end|>" in ids and has_call and ("<|return|>" in ids or "<|flush|>" in ids)
