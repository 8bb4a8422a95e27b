"""Two continuations of one text, the group whole and with members or heads silenced at every word:
where they part, and how likely each of the two words is there, in either group.

Both are generated with the same settings (and seed, when sampled), so they part because of what
was silenced. At the first word where they differ, one pass of the shared sequence so far is made
for each group, and both words' probabilities read from each (the silenced group's with the
generation's own ablation values: `Ablation.over_generated`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace as with_fields

import torch

from studygroup.model.interventions import Interventions
from studygroup.study.jsonable import JSONable


@dataclass
class Parting:
    """The first word (from 1) where the continuations differ, and both words' probabilities there."""

    word: int
    whole_token: str
    whole_id: int
    silenced_token: str
    silenced_id: int
    prob_whole_in_whole: float  # p(the whole group's word) in the whole group
    prob_silenced_in_whole: float  # p(the silenced group's word) in the whole group
    prob_whole_in_silenced: float
    prob_silenced_in_silenced: float


@dataclass
class Continuations(JSONable):
    """The prompt, both continuations as text and ids, what was silenced, and where they part (None: nowhere)."""

    prompt: str
    whole: str
    whole_ids: list[int]
    silenced: str
    silenced_ids: list[int]
    silenced_members: list[int]
    silenced_heads: list[list[int]]
    ablation: dict | None  # how the silenced were taken out (Ablation.to_dict) where not by zero ablation
    parting: Parting | None


def continuations(model, text, whole, settings: dict, interventions: Interventions) -> Continuations:
    """whole: the Generation of the whole group; settings: its generate() keywords; interventions:
    what the other continuation silences."""
    other = model.generate(text, **settings, interventions=interventions)
    prompt, a, b = whole.prompt_ids, whole.ids, other.ids
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    parting = None
    if k is not None:
        seq = prompt + a[:k]
        p_whole = _probs(model.run(seq))
        ablation = interventions.ablation.over_generated(model, prompt, a[:k])  # the generation's values
        p_silenced = _probs(model.run(seq, interventions=with_fields(interventions, ablation=ablation)))
        tok = model.tokenizer
        parting = Parting(k + 1, tok.readable(a[k]), a[k], tok.readable(b[k]), b[k], float(p_whole[a[k]]),
                          float(p_whole[b[k]]), float(p_silenced[a[k]]), float(p_silenced[b[k]]))
    i = other.interventions.silenced()
    return Continuations(model.tokenizer.decode(prompt), whole.text, a, other.text, b, i["silenced_members"],
                         i["silenced_heads"], interventions.ablation_field().get("ablation"), parting)


def _probs(run) -> torch.Tensor:
    """(vocab,) the next word's probabilities, softmax in float64."""
    return torch.softmax(run.last_logits.double(), -1)
