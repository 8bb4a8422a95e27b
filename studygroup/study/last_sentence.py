"""The conclusion without the text's earlier sentences: one extra pass on the last sentence alone.

Sentences are split on the members' token text, simply: a sentence ends at a member whose text,
spaces aside, ends with ".", "?" or "!" and that has members with more than spaces after it. The
last sentence is what follows the last such member; a text with no such member has one sentence. The pass runs
the last sentence as a text of its own, as `explain` and `compare` would read it (its first word
without the space it had after the earlier sentence), so its numbers are theirs on that sentence.
"""
from __future__ import annotations

from studygroup.study import effects
from studygroup.study.results import LastSentence, Word

#: What a sentence's last member ends with (after its spaces are set aside).
ENDS = (".", "?", "!")


def last_sentence_start(tokens: list[str], first: int = 0) -> int | None:
    """The index of the last sentence's first member; None when the text has one sentence.

    tokens: the members' readable texts; first: the first member of the text (1 after a BOS).

    >>> last_sentence_start(["Cash", "␣or", "␣card", "?", "␣I", "␣have", "␣a", "␣lot"])
    4
    >>> last_sentence_start(["I", "␣have", "␣a", "␣lot", "."]) is None
    True
    >>> last_sentence_start(["I", "␣have", ".", "␣You", "␣too", ".", "␣"])  # trailing spaces are no sentence
    3
    """
    words = [i for i in range(first, len(tokens)) if _bare(tokens[i])]
    ends = [i for i in words[:-1] if _bare(tokens[i]).endswith(ENDS)]
    return ends[-1] + 1 if ends else None


def _bare(token: str) -> str:
    """A member's text without its spaces and line breaks."""
    return token.strip("␣ \t\n↵")


def last_sentence(model, ids: list[int], tokens: list[str], predicted_id: int) -> LastSentence | None:
    """The group's conclusion on the last sentence alone, and the probability it gives the full
    text's predicted word; None when the text has one sentence."""
    tok = model.tokenizer
    first = 1 if tok.add_bos and ids and ids[0] == tok.bos_id else 0
    start = last_sentence_start(tokens, first)
    if start is None:
        return None
    text = tok.decode(ids[start:]).strip()
    alone = model.ids(text)  # (T',): the sentence read as a text of its own
    logits = model.run(alone, record="none").last_logits  # (vocab,)
    lp = effects.log_probs(logits)  # (vocab,)
    t = int(lp.argmax())
    word = Word(tok.readable(t), t, float(lp[t].exp()), float(logits[t]))
    return LastSentence(start=start, text=text, token_ids=alone, predicted=word,
                        prob_of_predicted=float(lp[predicted_id].exp()))
