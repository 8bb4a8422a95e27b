"""How a silenced head or member is taken out: zero, mean or resample ablation.

- zero: what silencing does. A head's write is zeroed; a member's keys are removed from every
  question (attention knockout: the edges to that member blocked).
- mean: a head's output (its weighted sum of answers, before W_O) is replaced, at every member,
  by its mean over a reference set (the text's own members by default, or every member of the
  reference texts given): mean ablation as in Wang et al. (2022, the IOI circuit). A member's key
  and value projections (W_K·E_j and W_V·E_j, before the family's k-norm and RoPE, which then apply
  at the member's own position) are replaced, in every layer, by their mean over the same set:
  the member stays in every softmax, but says what an average member says.
- resample: the same places take the values of another text of the same length, member by member
  (resample ablation, Chan et al. 2022, causal scrubbing).

Mean and resample ablation are `Replacement`s at the pass's hook points ("output", "k_pre_rope",
"v"); zero ablation is the masks and gates of `Interventions.plan`.
Shapes: L = n_layers, H = n_heads, H_kv = n_kv_heads, T members, d = d_head.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from studygroup.errors import InputError
from studygroup.model.record import Record

KINDS = ("zero", "mean", "resample")
#: The steps a mean or resample ablation reads from its reference or source texts.
STEPS = ("output", "k_pre_rope", "v")


@dataclass(frozen=True)
class Ablation:
    """How silenced heads and members are taken out: kind "zero", "mean" (over `reference` texts;
    none: the text's own members) or "resample" (from `source`, a text of the same number of
    members). Texts are strings or tuples of token ids.

    >>> Ablation("mean").kind, Ablation("resample", source="You have a lot").source
    ('mean', 'You have a lot')
    """

    kind: str = "zero"
    reference: tuple = ()
    source: object = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InputError(f"ablation {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind == "resample" and self.source is None:
            raise InputError("resample ablation takes each head's output from another text: give it (--from TEXT; \"from\" in a request)")
        if self.kind != "resample" and self.source is not None:
            raise InputError("a text to resample from goes with the resample ablation (--ablation resample; kind \"resample\" in a request)")
        if self.kind != "mean" and self.reference:
            raise InputError("reference texts go with the mean ablation (--ablation mean; kind \"mean\" in a request)")

    def values(self, model, ids: list[int]) -> torch.Tensor | None:
        """What each head's output becomes, (L, H, 1 or T, d); None for zero ablation (the write zeroed)."""
        if self.kind == "zero":
            return None
        return torch.stack([r["output"] for r in self.taken(model, ids, ("output",))])

    def to_dict(self) -> dict:
        """The ablation as the JSON views name it: {"kind", "reference": how many reference texts
        (0: the text's own members), "from": the resample text (null unless resample)}."""
        source = self.source if self.source is None or isinstance(self.source, str) else list(self.source)
        return {"kind": self.kind, "reference": len(self.reference), "from": source}

    def over_generated(self, model, prompt: list[int], words: list[int]) -> "Ablation":
        """The ablation under which one run of the prompt and these generated words puts in what a
        generation with this ablation did (`studygroup.model.generation_ablation`): a mean over the
        prompt's members (unless reference texts are given); resample from the source followed by
        the same words.

        >>> Ablation("mean").over_generated(model, [1, 2], [3]).reference
        ((1, 2),)
        """
        if self.kind == "mean" and not self.reference:
            return Ablation("mean", (tuple(prompt),))
        if self.kind == "resample":
            return Ablation("resample", source=(*same_length(model, prompt, self.source), *words))
        return self

    def taken(self, model, ids: list[int], steps=STEPS) -> list[dict[str, torch.Tensor]]:
        """Per layer, what the places this ablation takes out take instead in a run of ids:
        {step of `steps` (of STEPS): (H or H_kv, 1 or T, d)} (1: a mean; T: a resampled text's members).
        Only the steps asked are recorded (what a pass records can change its last float bits)."""
        if self.kind == "mean":
            return step_means(model, [ids] if not self.reference else [_ids(model, r) for r in self.reference], steps)
        return steps_of(model, same_length(model, ids, self.source), steps)


ZERO = Ablation()


def _recorded(model, ids: list[int], steps) -> dict[str, torch.Tensor]:
    """{step: (L, H or H_kv, T, d)}: these steps of every layer in a run of ids."""
    run = model.run(ids, record=Record(steps=tuple(steps)))
    return {s: torch.stack([run[s, l] for l in range(model.config.n_layers)]) for s in steps}


def _per_layer(stacked: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """{step: (L, …)} -> per layer {step: (…)}."""
    L = next(iter(stacked.values())).shape[0] if stacked else 0
    return [{s: t[l] for s, t in stacked.items()} for l in range(L)]


def step_means(model, reference: Sequence[list[int]], steps=STEPS) -> list[dict[str, torch.Tensor]]:
    """Per layer, each of these steps averaged over every member of the reference texts: {step: (H, 1, d)}."""
    total, n = None, 0
    for ids in reference:
        sums = {s: t.sum(2, keepdim=True) for s, t in _recorded(model, ids, steps).items()}  # (L, H, 1, d)
        total = sums if total is None else {s: total[s] + sums[s] for s in sums}
        n += len(ids)
    return _per_layer({s: (t / n).to(model.dtype) for s, t in total.items()})


def steps_of(model, ids: list[int], steps=STEPS) -> list[dict[str, torch.Tensor]]:
    """Per layer, each of these steps at every member of a text: {step: (H, T, d)}."""
    return _per_layer({s: t.to(model.dtype) for s, t in _recorded(model, ids, steps).items()})


def _ids(model, text) -> list[int]:
    ids = model.ids(list(text) if isinstance(text, tuple) else text)
    if not ids or (isinstance(text, str) and not text.strip()):
        raise InputError("a reference text of the mean ablation is empty: give at least one word")
    return ids


def same_length(model, ids: list[int], text) -> list[int]:
    """The resample text's ids, InputError unless it has as many members as ids."""
    other = _ids(model, text)
    if len(other) != len(ids):
        raise InputError(f"the resample text is {len(other)} members and this text {len(ids)}: resampling takes each "
                         "member's output from the same member of the other text, so give a text of the same number "
                         "of tokens")
    return other
