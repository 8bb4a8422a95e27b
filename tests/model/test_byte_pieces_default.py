"""Conclusions a learner can read on the default model: a byte piece says which characters its bytes
complete or may begin (checked against Python's own UTF-8), and a note says what a byte piece or a
lone space is."""
from __future__ import annotations

import pytest

from studygroup.study.explain import explain
from studygroup.study.results import top_words
from studygroup.views import text as render

JAPANESE = "私は公園へ"  # ends in へ, spelled <0xE3><0x81> <0xB8> by this vocabulary


def conclusion(model, ids, k=5):
    run = model.run(ids, record="none")
    return top_words(run, run.last_logits.double().log_softmax(-1), k)


def test_a_word_that_begins_a_character_says_which_characters_it_may_begin(model):
    top = conclusion(model, JAPANESE)[0]
    start = model.tokenizer.token_bytes(top.id)
    assert top.token == "<0xE3><0x82>" and start == b"\xe3\x82"
    # every character whose UTF-8 begins with these two bytes lies between the two named, both included
    begun = [c for c in map(chr, range(0x800, 0x10000)) if not 0xD800 <= ord(c) < 0xE000 and c.encode()[:2] == start]
    assert (begun[0], begun[-1]) == ("\u3080", "\u30bf")
    assert top.reads_as == "the first 2 of the 3 bytes of a character from U+3080 “む” to U+30BF “タ”"


def test_a_word_that_finishes_the_texts_last_character_names_it(model):
    ids = model.tokenize(JAPANESE)[:-1]  # the text stops after the first two bytes of へ
    for w in conclusion(model, ids):
        completed = (model.tokenizer.token_bytes(ids[-1]) + model.tokenizer.token_bytes(w.id)).decode()
        assert w.token.startswith("<0x") and w.reads_as == f"completes “{completed}” with the bytes before it"


def test_whole_words_read_as_themselves(model):
    assert all(w.reads_as == "" for w in conclusion(model, "Cash or credit card? I have a lot"))


@pytest.mark.parametrize("text, shown, note", [
    (JAPANESE, "<0xE3><0x82>", "<0x..> is a byte piece: the vocabulary has no token for the whole character"),
    ("The total was 3 + 4 =", "␣", "␣ alone is a space written as its own token"),
])
def test_the_conclusion_says_what_a_byte_piece_or_a_lone_space_is(model, text, shown, note):
    e = explain(model, text, top=3, measure_heads=1, measure_members=1)
    out = render.explanation(e)
    conclusion_lines = out.split("which heads decided it:")[0]
    assert e.top[0].token == shown and note in " ".join(conclusion_lines.split())
    if e.top[0].reads_as:
        assert f"({e.top[0].reads_as})" in conclusion_lines
    assert "byte piece" not in render.explanation(explain(model, "I have a lot", top=3, measure_heads=1,
                                                          measure_members=1))
