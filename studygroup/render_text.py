"""Terminal rendering of runs and explanations (plain text; no model logic)."""
from __future__ import annotations

import torch


def percent(p: float) -> str:
    """Probabilities as percentages: one decimal under 10%, none above (see UI.md)."""
    return f"{100 * p:.1f}%" if p < 0.1 else f"{100 * p:.0f}%"


def members_and_conclusion(run, top: int = 10) -> str:
    """The members of the text and the top next words with their probabilities."""
    tok = run.model.tokenizer
    probs = torch.softmax(run.last_logits.double(), -1)
    p, ids = probs.topk(top)
    lines = [f"members ({run.T}): " + " | ".join(run.tokens), "", "the group's conclusion (next word):"]
    for pi, i in zip(p.tolist(), ids.tolist()):
        lines.append(f"  {tok.readable(i):>16}  {percent(pi):>6}  {'█' * max(1, round(40 * pi))}")
    return "\n".join(lines)
