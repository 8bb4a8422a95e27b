"""Three ways to take a head out, and what each says about it.

- zero: the head's write is zeroed (what silencing does everywhere else). A head that rests on an
  attention sink writes nearly the same vector on every text; zeroing removes that constant too,
  so its effect mixes "what the head adds on this text" with "the constant every text gets".
- mean: the head's output (its weighted sum of answers, before W_O) is replaced, at every member,
  by its mean over a reference set: the text's own members by default, or every member of the
  reference texts given. What is removed is only how this text's output differs from the usual one.
- resample: the head's output is taken, member by member, from another text of the same length.

`head_effects` measures each head's effect on log p of the conclusion under one ablation, at every
position, in the batched passes explain uses (each copy joins at its head's layer).
Shapes: L = n_layers, H = n_heads, T members, d = d_head.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from studygroup.errors import InputError
from studygroup.model.ablation import KINDS, ZERO, Ablation, same_length  # noqa: F401 (the study's names for them)
from studygroup.model.interventions import Interventions, PassPlan
from studygroup.model.record import Record, step_name
from studygroup.study import effects, last_question
from studygroup.study.jsonable import JSONable
from studygroup.study.results import ModelInfo, model_info
from studygroup.formats import change, quote
from studygroup.study.text_ids import checked_ids


@dataclass
class HeadAblations(JSONable):
    """One head's effect on log p of the conclusion under each ablation measured (None: not asked)."""

    layer: int
    head: int
    zero: float
    mean: float | None
    resample: float | None


@dataclass
class Ablations(JSONable):
    """A text's heads under zero, mean and resample ablation. See docs/json.md."""

    model: ModelInfo
    tokens: list[str]
    predicted: str  # the conclusion whose log p is followed
    prob: float
    reference: str  # what the mean is taken over, in words
    resample_from: list[str] | None  # the other text's members, where resample was asked
    heads: list[HeadAblations]
    story: list[str]


def head_effects(model, text, heads: Sequence[tuple[int, int]] | None = None, *, reference=None,
                 resample_from=None) -> Ablations:
    """Each head's effect on log p of the conclusion under zero and mean ablation (and resample where
    `resample_from` is given): the change in log p(t) when the head is taken out at every member.

    heads: (layer, head) pairs (default every head). reference: texts whose members' mean output the
    mean ablation puts in (default: this text's own members). resample_from: a text of the same
    number of members.

    >>> a = head_effects(model, "Cash or credit card? I have a lot", [(24, 6)])
    >>> h = a.heads[0]
    >>> abs(h.mean) < abs(h.zero)   # a head resting on a sink: most of its zero effect is its constant
    True
    """
    ids = checked_ids(model, text)
    c = model.config
    heads = [model.check_head(l, h) for l, h in (heads if heads is not None else
                                                 [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)])]
    averaged = Ablation("mean", () if reference is None else tuple(checked_ids(model, r) for r in _texts(reference)))
    other = None if resample_from is None else same_length(model, ids, resample_from)
    run = model.run(ids, record=Record(steps=("resid_pre",)))
    lp = effects.log_probs(run.last_logits[None].double())[0]
    t = int(lp.argmax())
    resid_pre = {l: run["resid_pre", l] for l in range(c.n_layers)}
    measure = lambda values: (effects.head_log_probs(model, ids, t, heads, resid_pre, values=values) - lp[t]).tolist()  # noqa: E731
    zero, mean = measure(None), measure(averaged.values(model, ids))
    resample = None if other is None else measure(Ablation("resample", source=other).values(model, ids))
    rows = [HeadAblations(l, h, z, m, None if resample is None else resample[i])
            for i, ((l, h), z, m) in enumerate(zip(heads, zero, mean))]
    rows.sort(key=lambda r: -abs(r.zero))
    result = Ablations(model_info(model), run.tokens, model.tokenizer.readable(t), float(lp[t].exp()),
                       "this text's own members" if reference is None else f"every member of {len(averaged.reference)} reference texts",
                       None if other is None else [model.tokenizer.readable(i) for i in other], rows, [])
    result.story = story(result)
    return result


@torch.inference_mode()
def member_log_probs(model, run, token: int, ablation: Ablation, every: Sequence[int] = (),
                     last: Sequence[int] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(token) with each member taken out by a mean or resample ablation (its key and value
    projections replaced in every layer, `Interventions.taken_out`): for each of `every` at every
    question (a pass of the whole text each), and for each of `last` for the last member's
    questions only; (len(every),) and (len(last),) float64. The last: the last row recomputed over
    the run's keys and values with the member's own swapped for its ablated ones, taken from one
    pass with every member ablated (an ablated key or value does not depend on the residual stream:
    the replaced projection, then the family's k-norm and RoPE at the member's own position). The
    last member is heard by its own question only: its two measures are one."""
    ids, T = list(run.token_ids), run.T
    taken = ablation.taken(model, ids, ("k_pre_rope", "v"))
    made = lambda members: Interventions.make(model, T, members=members, ablation=ablation).taken_out(model, ids, taken)  # noqa: E731
    whole = lambda j: _log_p(model.run(ids, record="none", interventions=made([j])).last_logits, token)  # noqa: E731
    at_every = [whole(j) for j in every]
    past = last_question.earlier_keys_and_values(model, run) if last else {}  # {layer: ((1, H_kv, T-1, d), same)}
    ablated = model.run(ids, record=Record(steps=("k", "v")), interventions=made(range(T))) if past else None
    at_last = []
    for j in last:
        if j == T - 1:
            at_last.append(at_every[list(every).index(j)] if j in every else whole(j))
            continue
        swapped = {l: tuple(_swapped(x, ablated[step_name(s, l)], j, model.dtype) for x, s in zip(kv, "kv"))
                   for l, kv in past.items()}
        logits = model.forward(torch.tensor(ids[-1:], device=model.device), PassPlan(past=swapped))[0][:, -1]
        at_last.append(_log_p(logits, token))
    return torch.tensor(at_every, dtype=torch.float64), torch.tensor(at_last, dtype=torch.float64)


def _log_p(logits: torch.Tensor, token: int) -> float:
    """log p(token) from last-position logits ((vocab,) or (1, vocab))."""
    return float(effects.log_probs(logits.double().reshape(1, -1))[0, token])


def _swapped(past: torch.Tensor, ablated: torch.Tensor, j: int, dtype) -> torch.Tensor:
    """past (1, H_kv, T-1, d) with member j's row taken from ablated (H_kv, T, d)."""
    out = past.clone()
    out[0, :, j] = ablated[:, j].to(dtype)
    return out


def _texts(reference) -> list:
    texts = [reference] if isinstance(reference, str) else list(reference)
    if not texts:
        raise InputError("the reference set holds no text: give at least one, or none for this text's own members")
    return texts


def story(a: Ablations) -> list[str]:
    """What the three ablations say about the head zero ablation ranks first."""
    if not a.heads:
        return []
    h = a.heads[0]
    said = [f"Zeroing head {h.layer}.{h.head} changes log p({quote(a.predicted)}) by {change(h.zero)}; replacing its "
            f"output by its mean over {a.reference} changes it by {change(h.mean)}."]
    if abs(h.mean) < abs(h.zero) / 2:
        said.append(f"Most of what zeroing it removes is its usual output (its mean over {a.reference}), not what it "
                    "adds on this text: zero ablation overstates what it does here.")
    if h.resample is not None:
        said.append(f"Taking its output from the other text instead changes log p by {change(h.resample)}.")
    return said
