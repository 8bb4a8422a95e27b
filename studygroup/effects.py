"""Effects of silencing on the predicted word: exact (batched passes) and first-order (one gradient).

The effect of an intervention is the change in the log-probability of the predicted word t,
log p'(t) - log p(t): negative when what was silenced was helping the group reach t.

- Silencing member j in every head (batched: one pass over copies of the text, each with one
  member's key removed; see `studygroup.silence`).
- Silencing head (l, h): its write to the residual stream is zeroed (batched per layer).
- The first-order estimate of every head's silencing effect at once: put a gate g on each head's
  write (g = 1 is the run itself, g = 0 silences it); then  effect ≈ -∂ log p(t) / ∂g  at g = 1,
  from one backward pass. It ranks candidates; the exact effect is then computed for the best.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from studygroup.model import Forward, Model
from studygroup.record import Record
from studygroup.run import Run, Settings

#: Rows (copies × tokens) one batched member-silencing pass may hold, to bound its memory.
ROWS_PER_PASS = 4096


def log_probs(logits: torch.Tensor) -> torch.Tensor:
    """log softmax in float64: (…, vocab) -> (…, vocab)."""
    return torch.log_softmax(logits.double(), dim=-1)


def gradient_run(model: Model, ids: list[int], record: Record) -> tuple[Run, torch.Tensor]:
    """One pass that records `record`, and the first-order silencing estimate of every head.

    Returns the Run (no interventions) and estimate (n_layers, n_heads): -∂ log p(t)/∂g_{l,h},
    with t the run's predicted word and g_{l,h} the gate on head (l, h)'s write.

    >>> run, estimate = gradient_run(model, model.ids("I have a lot"), Record())  # doctest: +SKIP
    >>> estimate.shape                                                           # doctest: +SKIP
    torch.Size([30, 9])
    """
    c = model.config
    gates = {l: torch.ones(1, c.n_heads, device=model.device, requires_grad=True) for l in range(c.n_layers)}
    with torch.enable_grad():
        logits, steps = model.forward(torch.tensor(ids, device=model.device), Forward(gates=gates, record=record))
        last = log_probs(logits[0, -1])  # (vocab,)
        last[int(last.argmax())].backward()
    estimate = -torch.stack([gates[l].grad[0] for l in range(c.n_layers)]).float().cpu()  # (L, H)
    run = Run(model, ids, Settings(), record, logits[0].detach().float(), {k: v[0] for k, v in steps.items()})
    return run, estimate


def member_log_probs(model: Model, ids: list[int], token: int, members: Sequence[int]) -> torch.Tensor:
    """log p(token) with each member silenced alone in every head: (len(members),) float64.

    Batched: model.silenced_logits takes many copies in one pass; the copies are split into
    passes of at most ROWS_PER_PASS rows so that long texts do not exhaust memory.
    """
    per_pass = max(1, ROWS_PER_PASS // len(ids))
    out = [log_probs(model.silenced_logits(ids, list(members[i:i + per_pass])))[:, token]
           for i in range(0, len(members), per_pass)]
    return torch.cat(out) if out else torch.empty(0, dtype=torch.float64)


def head_log_probs(model: Model, ids: list[int], token: int, heads: Sequence[tuple[int, int]]) -> torch.Tensor:
    """log p(token) with each head silenced alone: (len(heads),) float64 (one pass per layer)."""
    if not heads:
        return torch.empty(0, dtype=torch.float64)
    return log_probs(model.head_silenced_logits(ids, heads))[:, token]
