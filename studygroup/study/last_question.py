"""Interventions on the last member's questions only, for texts too long to rerun many times.

Silencing member j for every question (`Run.silence_member`) changes every later member's
residual stream, so the whole text must be recomputed: T forward passes to rank T members. For
long texts we answer a narrower question exactly: what if the *last* member's questions (the ones
that predict the next word) could not hear member j, in every head of every layer? The other
members never see the last one (the mask is causal), so their keys and values are unchanged and
are reused from the base run; only the last row is recomputed: one row per copy, per layer.

The same holds for silencing a head at the last position only.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from studygroup.model.interventions import PassPlan, head_gates
from studygroup.model.model import Model
from studygroup.model.record import Record

#: What a base run must keep for these interventions (keys and values of every member).
STEPS = ("k", "v")


#: Copies of the last row recomputed in one pass. They share the earlier members' keys and values
#: (`studygroup.formulas.shared_past`), so a pass costs about one read of the weights plus each copy's
#: attention: at T=600, 128 silenced heads took 1.56 s in passes of 8, 0.64 s in passes of 64
#: (0.56 s in 128); at T=2,000, 2.32, 0.83 and 1.13 s.
COPIES_PER_PASS = 64


def base_record(*extra: str) -> Record:
    """Record the keys and values of every member, and `extra` steps for the last row only."""
    return Record(steps=(*STEPS, *extra), rows="last")


def earlier_keys_and_values(model: Model, run) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Keys and values of members 0..T-2 from the run: {layer: ((1, H_kv, T-1, d), same)}."""
    past = {}
    for l in range(model.config.n_layers):
        k, v = run["k", l], run["v", l]  # (H_kv, T, d)
        past[l] = (k[None, :, :-1].to(model.dtype), v[None, :, :-1].to(model.dtype))
    return past


@torch.inference_mode()
def _last_row_logits(model: Model, run, masks=None, gates=None, token: int | None = None, on_pass=None,
                     chunk: int = COPIES_PER_PASS) -> torch.Tensor:
    """Recompute the last row with per-copy masks (B, T) and/or gates {layer: (B, H)}. -> (B, vocab)

    token: return each copy's log-probability of this token instead, (B,) float64, pass by pass
      (every member of 8,191 silenced would otherwise hold 8,191 × 49,152 logits: 1.6 GB).
    on_pass: called with the number of copies after each pass (a progress bar's advance)."""
    past = earlier_keys_and_values(model, run)
    B = masks.shape[0] if masks is not None else next(iter(gates.values())).shape[0]
    last = torch.tensor(run.token_ids[-1:], device=model.device)  # (1,)
    out = []
    for b in range(0, B, chunk):
        rows = slice(b, min(B, b + chunk))
        layer_masks = {} if masks is None else {l: masks[rows, None, None, :] for l in range(model.config.n_layers)}
        layer_gates = {} if gates is None else {l: g[rows] for l, g in gates.items()}
        if not layer_masks and not layer_gates:
            continue
        plan = PassPlan(masks=layer_masks, gates=layer_gates, past=past)
        logits = model.forward(last, plan)[0][:, -1].float()  # (b, vocab)
        if token is not None:  # a copy: a view would keep the pass's (b, vocab) log-probabilities alive
            logits = torch.log_softmax(logits.double(), dim=-1)[:, token].clone()  # (b,)
        out.append(logits)
        if on_pass is not None:
            on_pass(rows.stop - rows.start)
    return torch.cat(out)


def silenced_members_logits(model: Model, run, groups: Sequence[Sequence[int]], token: int | None = None,
                            on_pass=None) -> torch.Tensor:
    """Last-position logits with each group of members silenced for the last member's questions.

    groups: B lists of member indices (one member, or a span). Returns (B, vocab), or with
    `token` each copy's log-probability of it (B,) (see _last_row_logits, as for on_pass).
    The last member keeps hearing itself if a group would leave it no key at all.
    """
    T = run.T
    masks = torch.ones(len(groups), T, dtype=torch.bool, device=model.device)  # (B, T) keys heard
    for b, group in enumerate(groups):
        for j in group:
            model.check_member(j, T)
        masks[b, list(group)] = False
    masks[~masks.any(-1), T - 1] = True
    return _last_row_logits(model, run, masks=masks, token=token, on_pass=on_pass)


def silenced_heads_logits(model: Model, run, heads: Sequence[tuple[int, int]], token: int | None = None,
                          on_pass=None) -> torch.Tensor:
    """Last-position logits with each head's write zeroed at the last position only. (B, vocab),
    or with `token` each copy's log-probability of it (B,)."""
    heads = [model.check_head(l, h) for l, h in heads]
    gates = head_gates([{pair} for pair in heads], model.config.n_heads, model.device)  # {layer: (B, H)}
    return _last_row_logits(model, run, gates=gates, token=token, on_pass=on_pass)
