"""Why member i listens to member j in one head: the score q_i·k_j/√d_k split two exact ways.

1. content + position. RoPE rotates q_i by its position i and k_j by j, so
   RoPE_i(q)·RoPE_j(k) = q·R_{j−i}k depends on the distance only. `content` is the score the
   two would have at distance 0 (q and k before this layer's rotation); `position` is the rest.
   A family without RoPE (GPT-2) turns nothing: position is 0 and content is the whole score.
2. parts. The residual stream entering layer L is a sum of parts: the token embedding (and the
   learned position embedding where the family has one), each earlier head's write, each earlier
   attention's output bias (written by no head, where there is one) and each earlier MLP's write.
   With each member's norm scale held at its value in the run, the norm is linear: RMSNorm scales
   each part, a · g / rms(x); LayerNorm centres it, then scales it, (a − mean(a)) · g / σ(x).
   So q_i = RoPE_i(Σ_a norm(a_i) · W_Q[h] + β · W_Q[h] + b_Q[h]) is linear in the parts, the
   norm's bias β and the projection's bias b_Q being parts of their own (where the family has
   them); so is k_j, and the score is Σ_{a,b} q_i(a)·k_j(b)/√d_k over every (query part, key part)
   pair. A family that norms each head's q and k (Gemma 3, Qwen 3) has that norm's scale held too.

Both are computed in float64 from the run's own recorded float32 numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from studygroup.errors import InputError
from studygroup.formulas import attention, rope
from studygroup.model.interventions import Interventions
from studygroup.study.story import MEMBER_TAKEN_OUT
from studygroup.model.record import Record, step_name
from studygroup.study.text_ids import checked_ids, checked_pair
from studygroup.study.jsonable import JSONable
from studygroup.formats import brief

#: Steps of the layers before L that add up the residual stream, and the steps of layer L read.
PART_STEPS = ("write", "mlp_out")
LAYER_STEPS = ("resid_pre", "q_pre_rope", "k_pre_rope", "q", "k", "weights")
HEAD_NORMED = ("q_normed", "k_normed")  # q and k before the rotation, in a family that norms them per head
NOT_MEANING_VS_PLACE = ("This is not \"meaning vs place\": q and k are made from the residual stream, which "
                        "already carries position from earlier layers (their heads attend by position too); "
                        "content is only the score without this layer's rotation.")
LAYER_0_IS_TOKEN_VS_PLACE = ("At layer 0 q and k are made from the token embeddings alone, which carry no position: "
                             "here content is what the two tokens are, and position all that their distance adds.")
LAYER_0_CONTENT = ("At layer 0 the residual stream is the token embedding plus the position embedding, with no head's "
                   "write yet; the pairs below say which parts the score comes from.")
CONTENT_IS_NOT_MEANING = ("Content is not \"meaning\": q and k are made from the residual stream, which carries the "
                          "position embedding and what earlier heads made of it; the pairs below say which parts the "
                          "score comes from.")


def rms_scale(x: torch.Tensor, eps: float) -> float:
    """RMSNorm's scale 1/√(mean(x²) + ε) of one row x (d_model,), in float64."""
    return float(torch.rsqrt(x.double().pow(2).mean() + eps))


def layer_scale(x: torch.Tensor, eps: float) -> float:
    """LayerNorm's scale 1/√(var(x) + ε) of one row x (d_model,), in float64 (the variance over d_model)."""
    return float(torch.rsqrt(x.double().var(unbiased=False) + eps))


#: A norm with its scale held at its value for the member's stream x, by `Architecture.norm`: linear
#: in each part a. a (P, d_model), x (d_model,), ε -> (P, d_model), before the gain. LayerNorm's
#: centring is linear: the mean of x is the sum of the parts' means.
HELD_NORMS = {
    "rms": lambda a, x, eps: a * rms_scale(x, eps),
    "layer": lambda a, x, eps: (a - a.mean(-1, keepdim=True)) * layer_scale(x, eps),
}


@dataclass(frozen=True)
class Layout:
    """The parts a family has beyond the embedding, the heads' writes and the MLPs' writes."""

    position: bool = False  # a learned position embedding, added to the first layer's input (GPT-2)
    attention_bias: bool = False  # each attention's output bias b_O, written by no head (GPT-2)
    norm_bias: str | None = None  # the norm's name when it adds a bias β ("LayerNorm"), else None
    projection_bias: bool = False  # q and k have biases of their own, b_Q and b_K (GPT-2, Qwen 2)

    @classmethod
    def of(cls, model, layer: int) -> "Layout":
        """The layout of `model`'s residual stream and of layer `layer`'s q and k, from its weights."""
        w, p = model.w, f"layers.{layer}."
        return cls("pos_embed" in w, "layers.0.b_O" in w,
                   model.config.arch.norm_name if p + "attn_norm_bias" in w else None, p + "b_Q" in w)


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
    content: float  # the score at distance 0: q_i and k_j before this layer's rotation (no RoPE: the score)
    position: float  # score − content: what the distance i − j adds through RoPE (no RoPE: 0)
    rope: bool  # whether this layer turns q and k (RoPE); False: position is 0
    parts_total: float  # Σ of every pair's value (float64): the score up to float error
    n_parts: int  # parts per member: len(part_names(...)), 1 + layer·n_heads + layer in a Llama
    pairs: list[PartPair]  # every (query part, key part) pair, largest |value| first
    notes: list[str]  # the two splits in words
    silenced_members: list[int] = field(default_factory=list)  # members taken out in this run (zero: nobody hears them)
    silenced_heads: list[list[int]] = field(default_factory=list)  # [layer, head] pairs taken out (zero: writing nothing)
    ablation: dict | None = None  # how they were taken out where not by zero ablation: {"kind", "reference", "from"}

    def __repr__(self) -> str:
        return brief(self, f"of head {self.layer}.{self.head}: member {self.query} listens to member {self.key} "
                           f"with score {self.score:.4g} = content {self.content:.4g} + position "
                           f"{self.position:.4g}; {len(self.pairs)} part pairs", ".pairs, .notes, .to_dict()")


def part_names(layer: int, n_heads: int, layout: Layout = Layout()) -> list[str]:
    """The parts of q and k at `layer`, in the order `_projected` stacks them: the residual
    stream's (`residual_parts`), then the biases added after the norm.

    >>> part_names(2, 2)
    ['embedding', 'head 0.0', 'head 0.1', 'MLP 0', 'head 1.0', 'head 1.1', 'MLP 1']
    >>> part_names(1, 2, Layout(True, True, "LayerNorm", True))
    ['embedding', 'position embedding', 'head 0.0', 'head 0.1', 'attention bias 0', 'MLP 0', 'LayerNorm bias', 'q/k bias']
    """
    names = ["embedding"] + (["position embedding"] if layout.position else [])
    for l in range(layer):
        names += [f"head {l}.{h}" for h in range(n_heads)] + ([f"attention bias {l}"] if layout.attention_bias else [])
        names.append(f"MLP {l}")
    return names + ([f"{layout.norm_bias} bias"] if layout.norm_bias else []) + (["q/k bias"] if layout.projection_bias else [])


def residual_parts(run, layer: int, row: int, layout: Layout = Layout()) -> torch.Tensor:
    """The parts that add up to the residual stream entering `layer` at member `row`.

    Returns (S, d_model) float64 in `part_names` order (the stream's parts, without the biases after the norm).
    """
    parts = [run["embed"][row]] + ([run["pos_embed"][row]] if layout.position else [])  # (d_model,) each
    for l in range(layer):
        parts += [*run["write", l][:, row]]  # n_heads × (d_model,)
        parts += [run.model.w[f"layers.{l}.b_O"]] if layout.attention_bias else []
        parts.append(run["mlp_out", l][row])
    return torch.stack(parts).double()  # (S, d_model)


def pair_values(q_parts: torch.Tensor, k_parts: torch.Tensor) -> torch.Tensor:
    """Every (query part, key part) pair's score: q(a)·k(b)/√d_k. (P, d), (P, d) -> (P, P)

    >>> pair_values(torch.tensor([[2.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 1.0]])).tolist()
    [[1.4142135381698608], [0.7071067690849304]]
    """
    return q_parts @ k_parts.T / math.sqrt(q_parts.shape[-1])  # (P, P)


def why(model, text, layer: int, head: int, query: int, key: int,
        interventions: Interventions = Interventions()) -> Why:
    """Why member `query` (i) listens to member `key` (j) in head `head` of layer `layer`.

    The score q_i·k_j/√d_k split into content + position, and into every (query part, key part)
    pair of the residual stream's parts (see the module's docstring). A question hears only the
    members up to itself, so key <= query; the text after member i changes nothing and is not run.
    interventions: the score in a run with its members and heads silenced (members in every head),
    taken out by its ablation. Zero: a silenced key is refused (nobody hears it, so its score decides
    nothing). Mean or resample: the values put in are the whole text's (its members' mean, or the
    other text's at the same member), as in a run of the whole text; a silenced key is refused (its
    key is the ablation's, not made from its residual stream: it has no parts).

    >>> w = why(model, "I have a lot", layer=2, head=0, query=3, key=1)
    >>> abs(w.content + w.position - w.score) < 1e-5, len(w.pairs) == w.n_parts ** 2
    (True, True)
    """
    layer, head = model.check_head(layer, head)
    ids = checked_ids(model, text)
    i, j = checked_pair(model, len(ids), query, key)
    chosen = interventions.checked(model, len(ids))
    if not chosen.zero and j in chosen.silenced_members:
        raise InputError(f"member {j} is taken out by {chosen.ablation.kind} ablation in this run: its key is the "
                         f"ablation's ({MEMBER_TAKEN_OUT[chosen.ablation.kind]}), not made from its residual stream, so "
                         f"its score has no parts to split; give another key, or leave member {j} as it is")
    # the ablation's values from the whole text (the runs below stop at the members asking; members after i change nothing up to i)
    before = chosen.taken_out(model, ids).cut(range(i + 1))
    if not before.mask(layer, head, i + 1, rows=range(i, i + 1))[0, j]:
        raise InputError(f"member {j} is silenced in this run: member {i}'s question does not hear it, so its "
                         f"score decides nothing; give another key, or leave member {j} heard")
    layout = Layout.of(model, layer)
    asking = _last_row_run(model, ids, i, layer, layout, before)
    answering = asking if j == i else _last_row_run(model, ids, j, layer, layout, before)
    score, weight, content = _score(asking, layer, head, j)
    values = _pair_values(model, asking, answering, layer, head, i, j, layout)  # (P, P) float64
    names = part_names(layer, model.config.n_heads, layout)
    total = float(values.sum())
    tokens = [model.tokenizer.readable(t) for t in ids]
    notes = _notes(model, layer, layout, i, j, score, content, total, len(names)) + _ablation_notes(model, before, layer)
    return Why(text if isinstance(text, str) else None, tokens, list(ids), layer, head, model.config.kv_head_of(head),
               i, j, score, weight, content, score - content, model.rope, total, len(names),
               _sorted_pairs(values, names), notes, **chosen.silenced(), ablation=chosen.ablation_field().get("ablation"))


def _record(model, layer: int, layout: Layout) -> Record:
    """The last member's row of the embedding (and position embedding), of every earlier layer's
    writes, and of this layer's input, q (normed per head where the family does) and weights;
    this layer's k for every member. No T×T map: what it keeps grows with the text's length as
    one layer's keys do (model.estimate.recording_bytes)."""
    steps = [step_name(s, l) for l in range(layer) for s in PART_STEPS]
    own = LAYER_STEPS + (HEAD_NORMED if _head_norms(model, layer) else ())
    first = ("embed", "pos_embed") if layout.position else ("embed",)
    return Record(steps=(*first, *steps, *(step_name(s, layer) for s in own)), rows="last")


def _last_row_run(model, ids: list[int], m: int, layer: int, layout: Layout, silenced: Interventions):
    """A run of members 0…m recording `_record`'s rows of member m (the members after m change
    nothing up to m, and neither do the silenced ones after it); `silenced` holds its ablation's
    values for the whole text, cut here to members 0…m."""
    return model.run(ids[:m + 1], record=_record(model, layer, layout), interventions=silenced.cut(range(m + 1)))


def _score(run, layer: int, head: int, j: int) -> tuple[float, float, float]:
    """The score and weight of the run's last member asking member j, and the score before the
    rotation (float64; the score itself where nothing is rotated)."""
    kv = run.model.config.kv_head_of(head)
    q, k = run["q", layer][head], run["k", layer][kv]  # (1, d_head), (T, d_head)
    score = float(attention.scores(q[None], k[None], validate=False)[0, -1, j])
    weight = float(run["weights", layer][head, -1, j])
    if not run.model.rope:
        return score, weight, score
    before = HEAD_NORMED if _head_norms(run.model, layer) else ("q_pre_rope", "k_pre_rope")  # before the rotation
    q_pre, k_pre = (run[before[0], layer][head, -1].double(),
                    run[before[1], layer][kv, j].double())  # (d_head,)
    return score, weight, float(q_pre @ k_pre) / math.sqrt(q_pre.shape[0])


def _pair_values(model, asking, answering, layer: int, head: int, i: int, j: int, layout: Layout) -> torch.Tensor:
    """(P, P) float64: every pair's value, q_i's parts by k_j's parts (see `_projected`), from the
    runs whose last members are i (asking) and j (answering)."""
    c = model.config
    q = _projected(model, asking, layer, "q", head, layout)  # (P, d_head)
    k = _projected(model, answering, layer, "k", c.kv_head_of(head), layout)  # (P, d_head)
    if model.rope:
        cos, sin = model.rope_angles(layer, i + 1)  # (i + 1, d_head), float32 as the pass (the layer's base and scale)
        q = rope.apply(q, cos[i].double()[None], sin[i].double()[None])
        k = rope.apply(k, cos[j].double()[None], sin[j].double()[None])
    return pair_values(q, k)  # (P, P)


def _projected(model, run, layer: int, side: str, h: int, layout: Layout) -> torch.Tensor:
    """Each part's q (side "q", query head h) or k (side "k", key/value head h) at the run's last
    member, before the rotation: norm(a) ⊙ g · W, then β · W and the projection's bias (where the family
    has them); with a per-head norm of q and k (Gemma 3, Qwen 3), its scale held at the whole
    q's (or k's) value. -> (P, d_head) float64, in `part_names` order."""
    c, w, p = model.config, model.w, f"layers.{layer}."
    cols = slice(h * c.d_head, (h + 1) * c.d_head)
    W = w[p + ("W_Q" if side == "q" else "W_K")][:, cols].double()  # (d_model, d_head)
    stream = residual_parts(run, layer, -1, layout)  # (S, d_model)
    normed = HELD_NORMS[c.arch.norm](stream, run["resid_pre", layer][-1].double(), c.rms_eps)  # (S, d_model)
    parts = [(normed * w[p + "attn_norm"].double()) @ W]  # (S, d_head)
    if layout.norm_bias:
        parts.append((w[p + "attn_norm_bias"].double() @ W)[None])  # (1, d_head)
    if layout.projection_bias:
        parts.append(w[p + ("b_Q" if side == "q" else "b_K")][cols].double()[None])  # (1, d_head)
    projected = torch.cat(parts)  # (P, d_head)
    gain = w.get(p + f"{side}_norm")
    if gain is not None:  # the scale of the whole q (or k), held: linear in the parts again
        projected = projected * rms_scale(projected.sum(0), c.rms_eps) * gain.double()
    return projected


def _head_norms(model, layer: int) -> bool:
    """Whether the family norms each head's q and k (Gemma 3, Qwen 3)."""
    return f"layers.{layer}.q_norm" in model.w


def _sorted_pairs(values: torch.Tensor, names: list[str]) -> list[PartPair]:
    """Every pair, largest |value| first."""
    P = len(names)
    flat = values.flatten()  # (P·P,)
    order = torch.argsort(flat.abs(), descending=True, stable=True).tolist()
    vals = flat.tolist()
    return [PartPair(names[n // P], names[n % P], vals[n]) for n in order]


def _notes(model, layer: int, layout: Layout, i: int, j: int, score: float, content: float, total: float,
           P: int) -> list[str]:
    """The two splits in words: content + position (or no rotation at all), and the parts."""
    c = model.config
    if model.rope:
        first = [f"The score {score:.4g} = content {content:.4g} (q_{i}·k_{j} before this layer's rotation: the two "
                 f"at distance 0) + position {score - content:.4g} (what their distance, {i - j}, adds through RoPE).",
                 NOT_MEANING_VS_PLACE if layer else LAYER_0_IS_TOKEN_VS_PLACE]
    else:
        first = [f"The score {score:.4g} is all content: this model turns no q or k (no RoPE), so position is 0; "
                 "where the members stand enters through the learned position embedding, one of the parts below.",
                 CONTENT_IS_NOT_MEANING if layer else LAYER_0_CONTENT]
    centred = " (LayerNorm also centres: each part is centred, then scaled)" if c.arch.norm == "layer" else ""
    return first + [
        f"With each member's {c.arch.norm_name} scale held at its value in the run{centred}, q_{i} and k_{j} are "
        f"linear in the {P} parts ({_listing(layer, c.n_heads, layout)}), so the score is the sum of {P}×{P} pair "
        f"values: {total:.6g} in float64.",
    ]


def _ablation_notes(model, chosen: Interventions, layer: int) -> list[str]:
    """Under a mean or resample ablation, what the silenced heads' parts and the silenced members up
    to the one asking are in this run."""
    if chosen.zero or not (chosen.silenced_members or chosen.silenced_heads):
        return []
    a = chosen.ablation
    over = "the other text's at the same member" if a.kind == "resample" else \
        "{} mean over " + ("the text's members" if not a.reference else "every member of the reference texts")
    said = []
    below = [f"{l}.{h}" for l, h in sorted(chosen.silenced_heads) if l < layer]
    if below:
        said.append(f"By {a.kind} ablation, the part of {_each('head', below)} is its write with its output replaced by "
                    f"{over.format('its')}.")
    if chosen.silenced_members:
        said.append(f"By {a.kind} ablation, the key and value projections of {_each('member', list(map(str, chosen.silenced_members)))} "
                    f"are replaced by {over.format('their')} in every layer{_then(model)}; " + (
                        "they reach this score through what the earlier layers' heads heard, and this row's weights "
                        "through its softmax." if layer else "in layer 0 they do not enter this score (its q and k come "
                        "from the embeddings alone), only this row's weights through its softmax."))
    return said


def _then(model) -> str:
    """What the family does to a replaced key projection next, in words ("" where nothing)."""
    done = (["normed per head"] if _head_norms(model, 0) else []) + (["turned by RoPE"] if model.rope else [])
    return f" (the key then {' and '.join(done)} at the member's own position)" if done else ""


def _each(what: str, names: list[str]) -> str:
    """"head 3.0", or "each of heads 3.0, 10.2"."""
    return f"{what} {names[0]}" if len(names) == 1 else f"each of {what}s {', '.join(names)}"


def _listing(layer: int, n_heads: int, layout: Layout) -> str:
    """The parts in words: "the embedding, the writes of the 9 earlier heads and of the 1 earlier MLPs"
    (at layer 0: "the embedding")."""
    stream = ["the embedding"] + (["the position embedding"] if layout.position else [])
    if layer:  # layer 0's stream is the embeddings alone
        biases = f", of the {layer} earlier attention output biases" if layout.attention_bias else ""
        stream.append(f"the writes of the {layer * n_heads} earlier heads{biases} and of the {layer} earlier MLPs")
    after = ([f"the {layout.norm_bias}'s bias"] if layout.norm_bias else []) + (
        ["q's and k's own biases"] if layout.projection_bias else [])
    return (", ".join(stream) + f", entering layer {layer}" + (", then " + " and ".join(after) if after else ""))
