"""The logit lens: what the group would conclude after each layer.

After layer l the residual stream of member i (`resid_post`) is put through the model's own final
norm and unembedding, as if the layers above it were not there: logits_l,i = unembed(norm(x_l,i)),
then softmax. After the last layer this is the model's own conclusion: at the last member, the
run's own logits as they are; at the others, the same product over the rows shown (float32
rounding of the order of a multiply of another row count). A member's "final
word" is the model's own top-1 next word at that member; the lens follows its probability and
rank layer by layer. (The lens reads the stream in the last layer's basis: early layers' streams
were not trained to be read that way, so a low probability there says "not yet in that basis",
not "unknown".) By default the lens reads the last member alone, after every layer; the grid of
every member (`all_positions`) costs a row of the unembedding per layer and member, since each
cell's probabilities need every logit of its row.

Shapes: L = n_layers, P positions shown, vocab.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from studygroup.model.linear import ONEDNN_MAX_ROWS
from studygroup.model.record import Record
from studygroup.study.jsonable import JSONable
from studygroup.study.results import ModelInfo, model_info
from studygroup.formats import percent, quote
from studygroup.study.text_ids import checked_ids
from studygroup.study.window import members_in

#: Positions shown with all_positions: every member up to this many, else the last this many.
DEFAULT_POSITIONS = 64
#: Rows put through the unembedding at once (a chunk's logits: CHUNK × vocab floats): as many as the
#: faster multiply of few rows takes (`linear.ONEDNN_MAX_ROWS`).
CHUNK = ONEDNN_MAX_ROWS


@dataclass
class LensWord(JSONable):
    """A word the lens reads: readable token, id, probability."""

    token: str
    id: int
    prob: float


@dataclass
class LensCell(JSONable):
    """After one layer, at one member: its top words, and where the member's final word stands."""

    top: list[LensWord]
    final_prob: float  # probability of the member's final word after this layer
    final_rank: int  # its rank after this layer (1: top)


@dataclass
class Lens(JSONable):
    """The logit lens of a text. See docs/json.md."""

    model: ModelInfo
    tokens: list[str]  # every member
    positions: list[int]  # the members shown, in order
    final: list[LensWord]  # each shown member's final word: the model's own top-1 there
    layers: list[list[LensCell]]  # [layer][shown position]: after that layer
    first_top: int | None  # at the last member: the first layer after which its final word is top-1
    top_from: int  # at the last member: the first layer from which the final word stays top-1
    story: list[str]


def lens(model, text, *, top: int = 3, positions: slice | None = None, all_positions: bool = False) -> Lens:
    """The logit lens of `text`: after every layer, each shown member's top words and its final
    word's probability and rank. positions: the members shown (a slice); all_positions: every
    member up to 64, else the last 64; neither: the last member alone (L rows through the
    unembedding, where the grid takes L × P: each cell's probability needs its logsumexp over the
    whole vocabulary, so a cell costs one row of the unembedding whatever it keeps).

    >>> e = lens(model, "Cash or credit card? I have a lot")
    >>> e.final[-1].token, e.layers[-1][-1].top[0].token, e.layers[-1][-1].final_rank
    ('␣of', '␣of', 1)
    """
    ids = checked_ids(model, text)
    shown = _positions(len(ids), positions, all_positions)
    last_only = shown == [len(ids) - 1]  # the pass keeps only the last member's stream
    run = model.run(ids, record=Record(steps=("resid_post",), rows="last" if last_only else "all"))
    L, P = model.config.n_layers, len(shown)
    at = [-1] if last_only else shown
    streams = torch.stack([run["resid_post", l][at] for l in range(L)]).flatten(0, 1)  # (L·P, d_model)
    own = shown[-1] == len(ids) - 1  # the last member after the last layer: the model's own conclusion, as it is
    last = _readings(_logits(model, streams[-P:len(streams) - own]), None, top)  # the last layer first: it names the final words
    if own:
        last = [torch.cat([a, b]) for a, b in zip(last, _readings(run.last_logits.double()[None], None, top))]
    final_ids = last[0][:, 0]  # (P,): the model's own top-1 at each shown member
    earlier = _readings(_logits(model, streams[:-P]), final_ids.repeat(L - 1), top) if L > 1 else None
    read = [torch.cat([a, b]) for a, b in zip(earlier, last)] if earlier else last
    top_ids, top_lp, final_lp, rank = (t.view(L, P, *t.shape[1:]) for t in read)
    cells = [[LensCell([_word(model, i, v) for i, v in zip(top_ids[l, p].tolist(), top_lp[l, p].tolist())],
                       float(final_lp[l, p].exp()), int(rank[l, p])) for p in range(P)] for l in range(L)]
    final = [_word(model, int(i), float(final_lp[-1, p])) for p, i in enumerate(final_ids)]
    first_top, top_from = _when_top([row[-1] for row in cells])
    result = Lens(model_info(model), run.tokens, shown, final, cells, first_top, top_from, [])
    result.story = story(result)
    return result


def _positions(T: int, chosen: slice | None, every: bool) -> list[int]:
    """The members shown: a slice of range(T) (WindowError, as a head's window, where it is empty or
    reversed, or an end leaves the text), the last DEFAULT_POSITIONS (every), or the last member."""
    if chosen is not None:
        return list(members_in(T, chosen, "rows"))
    return list(range(max(0, T - DEFAULT_POSITIONS) if every else T - 1, T))


@torch.inference_mode()
def _logits(model, x: torch.Tensor) -> torch.Tensor:
    """The model's final norm and unembedding of each row, CHUNK rows at a time: (N, d_model) -> (N, vocab)."""
    return torch.cat([model.final_logits(x[i:i + CHUNK]) for i in range(0, x.shape[0], CHUNK)] or
                     [model.final_logits(x)])  # no row: (0, vocab)


def _readings(logits: torch.Tensor, final: torch.Tensor | None, top: int) -> list[torch.Tensor]:
    """What the lens reads from each row of logits (N, vocab): the top ids (N, k), their log-probabilities
    (N, k) float64, the final word's log-probability (N,) float64 and its rank (N,). final: (N,) ids,
    or None where each row's final word is its own top-1 (rank 1). The normaliser log Σ exp is taken
    in the logits' dtype from each row's largest logit (the top-1's, as logsumexp takes it), then
    every log-probability in float64."""
    best = logits.topk(min(top, logits.shape[-1]))
    m = best.values[:, :1]  # (N, 1): each row's largest logit
    lse = (m + torch.sub(logits, m).exp_().sum(-1, keepdim=True).log_()).double()  # (N, 1)
    if final is None:
        return [best.indices, best.values.double() - lse, (m.double() - lse)[:, 0], torch.ones(len(logits), dtype=torch.long, device=logits.device)]
    f = logits.gather(1, final[:, None])  # (N, 1)
    return [best.indices, best.values.double() - lse, (f.double() - lse)[:, 0], (logits > f).sum(-1) + 1]


def _word(model, i: int, lp: float) -> LensWord:
    return LensWord(model.tokenizer.readable(i), i, math.exp(lp))


def _when_top(column: list[LensCell]) -> tuple[int | None, int]:
    """(the first layer whose cell has the final word top-1, the first from which it stays top-1)."""
    ranks = [cell.final_rank for cell in column]
    first = next((l for l, r in enumerate(ranks) if r == 1), None)
    stays = len(ranks) - 1
    while stays > 0 and ranks[stays - 1] == 1:
        stays -= 1
    return first, stays


def story(e: Lens) -> list[str]:
    """A few sentences on the last member's column: when its final word first leads, and how its
    probability rises."""
    column, word, L = [row[-1] for row in e.layers], e.final[-1], len(e.layers)
    said = [f"The logit lens reads the residual stream after each layer through the model's final norm and "
            f"unembedding, as if the layers above were not there; after the last layer it is the model's own "
            f"conclusion: {quote(word.token)} ({percent(word.prob)}) after {quote(e.tokens[e.positions[-1]])}."]
    if e.first_top == e.top_from:
        said.append(f"{quote(word.token)} first leads after layer {e.top_from} of {L} (0-{L - 1}) and stays ahead from there.")
    else:
        said.append(f"{quote(word.token)} first leads after layer {e.first_top}, and stays ahead from layer {e.top_from} "
                    f"of {L} (0-{L - 1}) on.")
    marks = sorted({0, L // 4, L // 2, (3 * L) // 4, L - 1})
    said.append("Its probability after layers " + ", ".join(f"{l}: {percent(column[l].final_prob)}" for l in marks) + ".")
    said.append("Early layers' streams were not trained to be read by the unembedding: a low probability there means "
                "the word is not yet written in that basis, not that the group has ruled it out.")
    return said
