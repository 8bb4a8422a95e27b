"""Why member i listens to member j in one head: the score q_i·k_j/√d_k split two exact ways.

1. content + position. RoPE rotates q_i by its position i and k_j by j, so
   RoPE_i(q)·RoPE_j(k) = q·R_{j−i}k depends on the distance only. `content` is the score the
   two would have at distance 0 (q and k before this layer's rotation); `position` is the rest.
2. parts. The residual stream entering layer L is a sum of parts: the token embedding, each
   earlier head's write and each earlier MLP's write. With each member's RMSNorm scale held at
   its value in the run, q_i = RoPE_i(rms_i · (Σ_a a_i) ⊙ g · W_Q[h]) is linear in the parts, and
   so is k_j; the score is then Σ_{a,b} q_i(a)·k_j(b)/√d_k over every (query part, key part) pair.
   A family that norms each head's q and k (Gemma 3) has that norm's scale held at its value too;
   one that adds a bias to q and k (Qwen 2) has it as one more part, "bias", on each side.

Both are computed in float64 from the run's own recorded float32 numbers.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from studygroup.errors import InputError
from studygroup.formulas import attention, rope
from studygroup.model.interventions import Interventions
from studygroup.model.record import Record
from studygroup.study.explain import checked_ids
from studygroup.study.jsonable import JSONable
from studygroup.study.story import brief

#: Steps of the layers before L that add up the residual stream, and the steps of layer L read.
PART_STEPS = ("write", "mlp_out")
LAYER_STEPS = ("resid_pre", "q_pre_rope", "k_pre_rope", "q", "k", "weights")
HEAD_NORMED = ("q_normed", "k_normed")  # q and k before the rotation, in a family that norms them per head
NOT_MEANING_VS_PLACE = ("This is not \"meaning vs place\": q and k are made from the residual stream, which "
                        "already carries position from earlier layers (their heads attend by position too); "
                        "content is only the score without this layer's rotation.")


@dataclass
class PartPair(JSONable):
    """One (query part, key part) pair's share of the score."""

    query_part: str  # a part of the residual stream of the member asking: "embedding", "head 3.5", "MLP 7"
    key_part: str  # a part of the residual stream of the member answering
    value: float  # q_i(query_part) · k_j(key_part) / √d_k, after RoPE


@dataclass
class Why(JSONable):
    """Why member `query` listens to member `key` in one head. See docs/json.md."""

    text: str | None
    tokens: list[str]
    token_ids: list[int]
    layer: int
    head: int
    kv_head: int
    query: int  # i, the member asking
    key: int  # j, the member answering (j <= i)
    score: float  # q_i·k_j/√d_k as the model computed it: head --json's scores[i][j]
    weight: float  # w_ij: softmax of row i of the scores
    content: float  # the score at distance 0: q_i and k_j before this layer's rotation
    position: float  # score − content: what the distance i − j adds through RoPE
    parts_total: float  # Σ of every pair's value (float64): the score up to float error
    n_parts: int  # parts per member: 1 + layer·n_heads + layer, and 1 more ("bias") where q and k have biases
    pairs: list[PartPair]  # every (query part, key part) pair, largest |value| first
    notes: list[str]  # the two splits in words
    silenced_members: list[int] = field(default_factory=list)  # members nobody hears in this run
    silenced_heads: list[list[int]] = field(default_factory=list)  # [layer, head] pairs writing nothing in it

    def __repr__(self) -> str:
        return brief(self, f"of head {self.layer}.{self.head}: member {self.query} listens to member {self.key} "
                           f"with score {self.score:.4g} = content {self.content:.4g} + position "
                           f"{self.position:.4g}; {len(self.pairs)} part pairs", ".pairs, .notes, .to_dict()")


def part_names(layer: int, n_heads: int) -> list[str]:
    """The residual stream's parts entering `layer`, in the order `residual_parts` stacks them.

    >>> part_names(2, 2)
    ['embedding', 'head 0.0', 'head 0.1', 'MLP 0', 'head 1.0', 'head 1.1', 'MLP 1']
    """
    names = ["embedding"]
    for l in range(layer):
        names += [f"head {l}.{h}" for h in range(n_heads)] + [f"MLP {l}"]
    return names


def residual_parts(run, layer: int, rows: list[int]) -> torch.Tensor:
    """The parts that add up to the residual stream entering `layer`, at these rows (members).

    Returns (P, len(rows), d_model) float64, P = 1 + layer·n_heads + layer, in `part_names` order.
    """
    parts = [run["embed"][rows]]  # (R, d_model)
    for l in range(layer):
        parts += [*run["write", l][:, rows]]  # n_heads × (R, d_model)
        parts.append(run["mlp_out", l][rows])
    return torch.stack(parts).double()  # (P, R, d_model)


def rotated(parts: torch.Tensor, scale: float, gain: torch.Tensor, W: torch.Tensor, cos: torch.Tensor,
            sin: torch.Tensor, head_gain: torch.Tensor | None = None, eps: float = 0.0,
            bias: torch.Tensor | None = None) -> torch.Tensor:
    """Each part's question (or key) at one position, the RMSNorm scale held: RoPE(a · scale ⊙ g · W);
    with `bias` (Qwen 2's b_Q or b_K), RoPE(bias) as one more part, the last; with `head_gain`
    (Gemma's per-head norm), RoPE(p · rms(Σ p) ⊙ head_gain) for each such p.

    parts (P, d_model), gain (d_model,), W (d_model, d_head), cos, sin, head_gain, bias (d_head,)
    -> (P, d_head), or (P + 1, d_head) with a bias
    """
    projected = (parts * scale * gain) @ W  # (P, d_head)
    if bias is not None:
        projected = torch.cat([projected, bias.double()[None]])  # (P + 1, d_head)
    if head_gain is not None:  # the scale of the whole q (or k), held: linear in the parts again
        projected = projected * rms_scale(projected.sum(0), eps) * head_gain.double()
    return rope.apply(projected, cos[None], sin[None])  # (P, d_head)


def pair_values(q_parts: torch.Tensor, k_parts: torch.Tensor) -> torch.Tensor:
    """Every (query part, key part) pair's score: q(a)·k(b)/√d_k. (P, d), (P, d) -> (P, P)

    >>> pair_values(torch.tensor([[2.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 1.0]])).tolist()
    [[1.4142135381698608], [0.7071067690849304]]
    """
    return q_parts @ k_parts.T / math.sqrt(q_parts.shape[-1])  # (P, P)


def rms_scale(x: torch.Tensor, eps: float) -> float:
    """RMSNorm's scale 1/√(mean(x²) + ε) of one row x (d_model,), in float64."""
    return float(torch.rsqrt(x.double().pow(2).mean() + eps))


def why(model, text, layer: int, head: int, query: int, key: int, silenced_members: Sequence[int] = (),
        silenced_heads: Sequence[tuple[int, int]] = ()) -> Why:
    """Why member `query` (i) listens to member `key` (j) in head `head` of layer `layer`.

    The score q_i·k_j/√d_k split into content + position, and into every (query part, key part)
    pair of the residual stream's parts (see the module's docstring). A question hears only the
    members up to itself, so key <= query; the text after member i changes nothing and is not run.
    silenced_members, silenced_heads: the score in a run with these silenced (members in every
    head; a silenced key is refused: nobody hears it, so its score decides nothing).

    >>> w = why(model, "I have a lot", layer=2, head=0, query=3, key=1)
    >>> abs(w.content + w.position - w.score) < 1e-5, len(w.pairs) == w.n_parts ** 2
    (True, True)
    """
    arch = model.config.arch
    if arch.norm != "rms" or arch.position != "rope":
        raise InputError(f"why splits a score through RMSNorm and RoPE; a {arch.name!r} model's LayerNorm, biases and "
                         "learned positions are not split: why does not explain this family's scores")
    layer, head = model.check_head(layer, head)
    ids = checked_ids(model, text)
    i, j = model.check_member(query, len(ids)), model.check_member(key, len(ids))
    if j > i:
        raise InputError(f"member {j} comes after member {i}: a question hears only the members up to itself "
                         f"(0-{i}); give a key of {i} or less, or a later query")
    chosen = Interventions.make(model, len(ids), silenced_members, heads=silenced_heads)
    before = Interventions(tuple(m for m in chosen.silenced_members if m <= i), None, chosen.silenced_heads)
    if not before.mask(layer, head, i + 1)[i, j]:  # (members after i change nothing up to i)
        raise InputError(f"member {j} is silenced in this run: member {i}'s question does not hear it, so its "
                         f"score decides nothing; give another key, or leave member {j} heard")
    run = model.run(ids[:i + 1], record=_record(layer, _head_norms(model, layer)), silence_members=before.silenced_members,
                    silence_heads=sorted(before.silenced_heads))
    score, weight, content = _score(run, layer, head, i, j)
    values = _pair_values(model, run, layer, head, i, j)  # (P, P) float64
    names = part_names(layer, model.config.n_heads) + (["bias"] if f"layers.{layer}.b_Q" in model.w else [])
    pairs = _sorted_pairs(values, names)
    total = float(values.sum())
    tokens = [model.tokenizer.readable(t) for t in ids]
    return Why(text if isinstance(text, str) else None, tokens, list(ids), layer, head, model.config.kv_head_of(head),
               i, j, score, weight, content, score - content, total, len(names), pairs,
               _notes(layer, model.config.n_heads, i, j, score, content, total, len(names), names[-1] == "bias"),
               **chosen.silenced())


def _record(layer: int, head_norms: bool) -> Record:
    """The embedding, every earlier layer's writes, and this layer's input, q, k (normed per head
    where the family does) and weights."""
    steps = [f"layers.{l}.{s}" for l in range(layer) for s in PART_STEPS]
    own = LAYER_STEPS + (HEAD_NORMED if head_norms else ())
    return Record(steps=("embed", *steps, *(f"layers.{layer}.{s}" for s in own)))


def _score(run, layer: int, head: int, i: int, j: int) -> tuple[float, float, float]:
    """The run's score and weight of cell (i, j), and the score before the rotation (float64)."""
    kv = run.model.config.kv_head_of(head)
    q, k = run["q", layer][head], run["k", layer][kv]  # (T, d_head) each
    score = float(attention.scores(q[None], k[None], validate=False)[0, i, j])
    before = HEAD_NORMED if _head_norms(run.model, layer) else ("q_pre_rope", "k_pre_rope")  # before the rotation
    q_pre, k_pre = (run[f"layers.{layer}.{before[0]}"][head, i].double(),
                    run[f"layers.{layer}.{before[1]}"][kv, j].double())  # (d_head,)
    content = float(q_pre @ k_pre) / math.sqrt(q_pre.shape[0])
    return score, float(run["weights", layer][head, i, j]), content


def _pair_values(model, run, layer: int, head: int, i: int, j: int) -> torch.Tensor:
    """(P, P) float64: every pair's value, q_i's parts by k_j's parts (see `rotated`)."""
    c, w = model.config, model.w
    d = c.d_head
    kv = c.kv_head_of(head)
    W_Q = w[f"layers.{layer}.W_Q"][:, head * d:(head + 1) * d].double()  # (d_model, d_head)
    W_K = w[f"layers.{layer}.W_K"][:, kv * d:(kv + 1) * d].double()  # (d_model, d_head)
    gain = w[f"layers.{layer}.attn_norm"].double()  # (d_model,)
    cos, sin = model.rope_angles(layer, i + 1)  # (i + 1, d_head), float32 as the pass (Gemma's local layers: their own base)
    cos, sin = cos.double(), sin.double()
    resid = run["resid_pre", layer]  # (T, d_model)
    parts = residual_parts(run, layer, [i, j])  # (P, 2, d_model)
    b_Q, b_K = w.get(f"layers.{layer}.b_Q"), w.get(f"layers.{layer}.b_K")  # (n_heads·d_head,), (n_kv_heads·d_head,)
    q = rotated(parts[:, 0], rms_scale(resid[i], c.rms_eps), gain, W_Q, cos[i], sin[i],
                w.get(f"layers.{layer}.q_norm"), c.rms_eps, None if b_Q is None else b_Q[head * d:(head + 1) * d])
    k = rotated(parts[:, 1], rms_scale(resid[j], c.rms_eps), gain, W_K, cos[j], sin[j],
                w.get(f"layers.{layer}.k_norm"), c.rms_eps, None if b_K is None else b_K[kv * d:(kv + 1) * d])
    return pair_values(q, k)  # (P, P)


def _head_norms(model, layer: int) -> bool:
    """Whether the family norms each head's q and k (Gemma 3)."""
    return f"layers.{layer}.q_norm" in model.w


def _sorted_pairs(values: torch.Tensor, names: list[str]) -> list[PartPair]:
    """Every pair, largest |value| first."""
    P = len(names)
    flat = values.flatten()  # (P·P,)
    order = torch.argsort(flat.abs(), descending=True, stable=True).tolist()
    vals = flat.tolist()
    return [PartPair(names[n // P], names[n % P], vals[n]) for n in order]


def _notes(layer: int, n_heads: int, i: int, j: int, score: float, content: float, total: float, P: int,
           bias: bool = False) -> list[str]:
    with_bias = ", and the bias this layer adds to q and to k (one more part)" if bias else ""
    return [
        f"The score {score:.4g} = content {content:.4g} (q_{i}·k_{j} before this layer's rotation: the two at "
        f"distance 0) + position {score - content:.4g} (what their distance, {i - j}, adds through RoPE).",
        NOT_MEANING_VS_PLACE,
        f"With each member's RMSNorm scale held at its value in the run, q_{i} and k_{j} are linear in the "
        f"{P - bias} parts of the residual stream entering layer {layer} (the embedding, the writes of the {layer * n_heads} "
        f"earlier heads and of the {layer} earlier MLPs){with_bias}, so the score is the sum of {P}×{P} pair values: "
        f"{total:.6g} in float64.",
    ]
