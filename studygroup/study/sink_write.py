"""What a head resting on a sink matters through: what it writes, compared across texts.

A head that puts nearly all of a question's weight on a sink writes, at that question, about the
sink's answer through its output projection: w_sink · v_sink · W_O[h]. Where that write is nearly
the same on every text, the head adds a near-constant vector to the residual stream, and its part
in the conclusion comes through that vector, not through what the question asks. The measure:
the cosine between the head's write at the last member of this text and at the last member of each
of a few other texts (OTHER_TEXTS), each run on its own. Those writes depend on the model alone:
they are made once per model and layer (every head of the layer at once) and kept while the model lives.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from studygroup.formulas import attention
from studygroup.study.jsonable import JSONable
from studygroup.study.text_ids import checked_ids

#: The texts the write is compared with: unrelated to each other in topic and form.
OTHER_TEXTS = ("The weather was cold and the roads were empty.", "She opened the door and", "My list: apples, bread, tea")
#: Cosines at least this high call the write nearly the same on every text.
NEARLY_SAME = 0.9


@dataclass
class SinkWrite(JSONable):
    """A head's write at the last member on this text beside its writes on OTHER_TEXTS."""

    norm: float  # ‖write‖ at this text's last member: output_{T-1} · W_O[h], (d_model,)
    texts: list[str]  # the other texts
    cosines: list[float]  # the cosine of this text's write and each other text's (same order)
    said: str  # the same in a sentence


def last_write(run, layer: int, head: int) -> torch.Tensor:
    """The head's write at the run's last member: (Σ_j w_{T-1,j} v_j) · W_O[h], (d_model,)."""
    vec, T = run.head_vectors(layer, head), run.T  # (T, d_head) each
    mask = run.head_mask(layer, head, range(T - 1, T))  # (1, T)
    out, _ = attention.paper(vec["q"][-1:][None], vec["k"][None], vec["v"][None], mask=mask)  # (1, 1, d_head)
    return out[0, 0] @ run.model.W_O_head(layer, head).float()  # (d_head,) @ (d_head, d_model) -> (d_model,)


def sink_write(model, run, layer: int, head: int) -> SinkWrite:
    """The head's write at the last member of `run` compared with its writes on OTHER_TEXTS.

    >>> s = sink_write(model, model.before_pass("Cash or credit card? I have a lot"), 24, 6)
    >>> len(s.cosines), min(s.cosines) > 0.9
    (3, True)
    """
    here = last_write(run, layer, head)
    others = other_writes(model, layer)[head]  # (len(OTHER_TEXTS), d_model)
    cosines = [float(torch.nn.functional.cosine_similarity(here, w, dim=0)) for w in others]
    return SinkWrite(float(here.norm()), list(OTHER_TEXTS), cosines, _said(float(here.norm()), cosines))


#: Per model, per layer: every head's writes at the last member of each of OTHER_TEXTS.
_kept: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def other_writes(model, layer: int) -> torch.Tensor:
    """Each head's write at the last member of each of OTHER_TEXTS, in `layer`: one pass of each text
    up to the layer (its vectors serve every head), made once per model and layer and kept.
    -> (n_heads, len(OTHER_TEXTS), d_model)"""
    layers = _kept.setdefault(model, {})
    if layer not in layers:
        runs = [model.before_pass(checked_ids(model, t)) for t in OTHER_TEXTS]
        layers[layer] = torch.stack([torch.stack([last_write(r, layer, h) for r in runs])
                                     for h in range(model.config.n_heads)])
    return layers[layer]


def _said(norm: float, cosines: list[float]) -> str:
    """The sentence: what a head resting on a sink writes, and what it matters through."""
    low, high = min(cosines), max(cosines)
    spread = f"{low:.3f}" if f"{low:.3f}" == f"{high:.3f}" else f"{low:.3f} to {high:.3f}"
    compared = (f"the cosine of its write at the last member (norm {norm:.3g}) with its write at the last member of "
                f"{len(cosines)} unrelated texts is {spread}")
    if low >= NEARLY_SAME:
        return (f"What it writes is nearly the same whatever the text: {compared}. So it matters through that "
                "near-constant vector it adds to the residual stream, not through what the question asks.")
    return (f"What it writes still depends on the text: {compared}. So the sink's answer carries something of "
            "this text, and the head may matter through it.")
