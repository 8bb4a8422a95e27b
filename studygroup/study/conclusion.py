"""The group's conclusion on a text, and what a silencing changes in it: the most likely next words
with and without it, and every word of either list with its probability both ways."""
from __future__ import annotations

from dataclasses import dataclass, field

from studygroup.model.interventions import Interventions
from studygroup.study import effects
from studygroup.study import story
from studygroup.study.jsonable import JSONable
from studygroup.study.results import Word, top_words
from studygroup.study.text_ids import checked_ids


@dataclass
class WordChange(JSONable):
    """A next word's probability without and with a silencing; change = prob_after - prob_before."""

    token: str
    id: int
    prob_before: float
    prob_after: float
    change: float


@dataclass
class Conclusion:
    """The top next words of a run of `token_ids`, and, when `interventions` (checked) silence
    anything, the top words with them, the story's sentence told from those, and every word of
    either list with its probability both ways (`words`)."""

    tokens: list[str]
    token_ids: list[int]
    top: list[Word]
    interventions: Interventions
    silenced: list[Word] | None = None
    silenced_story: list[dict] | None = None  # story.conclusion_parts of the silenced top words
    words: list[WordChange] = field(default_factory=list)


def conclusion(model, text, top: int = 10, interventions: Interventions = Interventions(), base=None,
               after=None) -> Conclusion:
    """The conclusion on `text`, before and (when anything is silenced) after silencing.

    One pass without recording (two when silencing); base, after: runs of this text without and
    with the silencing (study.page_run) to take the logits from instead.

    >>> c = conclusion(model, "I have a lot", interventions=Interventions(silenced_members=(2,)))
    >>> c.top[0].token, c.words[0].prob_before > 0
    ('␣of', True)
    """
    ids = checked_ids(model, text)
    base = base if base is not None else model.run(ids, record="none")
    lp = effects.log_probs(base.last_logits)  # (vocab,)
    i = interventions.checked(model, len(ids))
    c = Conclusion(base.tokens, list(ids), top_words(base, lp, top), i)
    if not (i.silenced_members or i.silenced_heads):
        return c
    if after is None:
        after = model.run(ids, record="none", interventions=i)
    lp_after = effects.log_probs(after.last_logits)  # (vocab,)
    c.silenced = top_words(after, lp_after, top)
    c.silenced_story = story.conclusion_parts(c.silenced, [f"silenced[{n}].prob" for n in range(len(c.silenced))],
                                              silenced=True, ablation=i.ablation.kind)
    shown = list(dict.fromkeys([w.id for w in c.top] + [w.id for w in c.silenced]))
    readable = model.tokenizer.readable
    c.words = [WordChange(readable(j), j, float(lp[j].exp()), float(lp_after[j].exp()), float(lp_after[j].exp() - lp[j].exp()))
               for j in shown]
    return c
