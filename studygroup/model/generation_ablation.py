"""What a generation's silenced heads and members take, member by member, under a mean or resample
ablation (`studygroup.model.ablation`).

A generation passes the prompt once, then one member at a time over a key/value cache: what is put
in at a member must be known when that member is passed, and must not change for the members
already in the cache. So:

- mean: the mean over the prompt's members (or over every member of the reference texts), taken
  once before the first word, is put in at every member, the generated ones too. (A mean over the
  prompt and the words so far would change with each word, and with it every cached key and value.)
- resample: the source text has as many members as the prompt. At a generated member, a silenced
  head takes its output in the source followed by the same words: the source keeps a key/value
  cache of its own and passes each word too (a second row's pass per word, where heads are silenced).

The silenced members are the prompt's: their keys and values enter the cache taken out, once.
So the words and logits after k words are those of one run of the prompt and the k words with the
same interventions and `Ablation.over_generated`'s ablation.
Shapes: L = n_layers, H = n_heads, H_kv = n_kv_heads, d = d_head, P members of the prompt.
"""
from __future__ import annotations

from dataclasses import replace as with_fields

import torch

from studygroup.model.ablation import same_length
from studygroup.model.interventions import Interventions, PassPlan, Replacement
from studygroup.model.kv_cache import Cache
from studygroup.model.record import Record, step_name


class GenerationAblation:
    """The values a generation's mean or resample ablation puts in: `prompt` for the prompt's pass,
    `at(p)` for the pass of member p alone; `add(word)` passes a word in the resample source."""

    def __init__(self, model, interventions: Interventions, prompt: list[int], capacity: int):
        self.model, self.P = model, len(prompt)
        self.heads = sorted(interventions.silenced_heads)  # [(layer, head)]
        self.source, self.outputs, taken = None, [], None  # outputs: per generated member, (len(heads), d)
        if interventions.ablation.kind == "resample":
            ids = same_length(model, prompt, interventions.ablation.source)
            self.source = Cache(model.config, capacity, model.device, model.dtype)
            steps = self._pass(ids, Record(steps=("k", "v", "k_pre_rope", "output")))
            taken = [{s: steps[step_name(s, l)][0].to(model.dtype) for s in ("output", "k_pre_rope", "v")}
                     for l in range(model.config.n_layers)]  # {step: (H or H_kv, P, d)}
            self.source = self.source if self.heads else None  # members alone: the words need nothing of it
        self.prompt = interventions.taken_out(model, prompt, taken)

    def at(self, p: int) -> Interventions:
        """The interventions of member p's pass alone (p ≥ 1, over the cache of the members before it)."""
        if self.source is None or p < self.P:  # a mean (the same at every member), or the prompt's own values
            return self.prompt.cut(range(p, p + 1))
        out = self.outputs[p - self.P]  # (len(heads), d)
        ablated = tuple(Replacement(step_name("output", l), out[n][None], heads=(h,)) for n, (l, h) in enumerate(self.heads))
        return with_fields(self.prompt, silenced_members=(), ablated=ablated)

    def reserve(self, capacity: int) -> None:
        """Room in the source's cache for `capacity` members."""
        if self.source is not None:
            self.source.reserve(capacity)

    def add(self, word_id: int) -> None:
        """Resample: the source passes the word, so that its output is there for the word's own pass."""
        if self.source is None:
            return
        layers = sorted({l for l, _ in self.heads})
        steps = self._pass([word_id], Record(steps=("k", "v", *(step_name("output", l) for l in layers))))
        self.outputs.append(torch.stack([steps[step_name("output", l)][0, h, -1] for l, h in self.heads]).to(self.model.dtype)
                            if self.heads else torch.empty(0))

    @property
    def nbytes(self) -> int:
        """Bytes of the source's cache and outputs."""
        return 0 if self.source is None else self.source.nbytes + sum(t.numel() * t.element_size() for t in self.outputs)

    def _pass(self, ids: list[int], record: Record) -> dict[str, torch.Tensor]:
        """The source's pass of these members after those in its cache, unmodified; the cache grows."""
        plan = PassPlan(record=record, past=self.source.past() if self.source.T else {})
        _, steps = self.model.forward(torch.tensor(ids, device=self.model.device), plan)
        self.source.append(steps)
        return steps
