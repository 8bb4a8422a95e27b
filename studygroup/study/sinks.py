"""Attention sinks: members a head puts attention on that it does not need.

A head's softmax must give each question's row a total weight of 1. Many heads, when nothing in
the text fits their question, put that weight on one member (most often the first) whose answer
they write on every text alike: an *attention sink*. A large weight on a sink says nothing about
what the question asks.

Member j is a sink for head h when it takes >= SINK_WEIGHT of the weight of >= SINK_SHARE of the
questions scored (the last min(T, MAX_QUESTIONS)): the first member too (the BOS, where the model
adds one), which is a sink only where the head puts real weight on it. A head *rests on a sink* for a question when its sinks take >= REST_WEIGHT
of that question's weight.
"""
from __future__ import annotations

import torch

from studygroup.model.record import Record

#: A member is a sink when it takes at least SINK_WEIGHT of the weight of SINK_SHARE of the questions.
SINK_WEIGHT, SINK_SHARE = 0.3, 0.8
#: A head rests on a sink for a question when its sinks take at least REST_WEIGHT of that row.
REST_WEIGHT = 0.5
#: The questions scored: the last this many (long texts).
MAX_QUESTIONS = 512

#: A sentence calls a member a head rests on its attention sink only where removing the member from
#: that head alone (effect_in_head) changes log p(t) by less than this share of the head's own
#: silence effect: a sink is found by its weights, and whether the head needs it is measured.
QUIET_SHARE = 0.25

#: The plain explanation given the first time a sink is named.
MEANING = ("a member on which a head puts attention it does not need, and whose answer "
           "it writes on every text alike, so that weight says nothing about what the question asks")


def quiet_sinks(head) -> list[int]:
    """The sinks of a HeadEffect whose effect_in_head is measured and smaller than QUIET_SHARE of
    the head's own effect (shown_effect): those a sentence may call its attention sinks.

    >>> from types import SimpleNamespace as N
    >>> h = N(sinks=[0, 3], shown_effect=-0.4, listened=[N(index=0, effect_in_head=0.17), N(index=3, effect_in_head=0.01)])
    >>> quiet_sinks(h)
    [3]
    """
    effect = {x.index: x.effect_in_head for x in head.listened if x.effect_in_head is not None}
    size = abs(head.shown_effect or 0.0)
    return [j for j in head.sinks if j in effect and abs(effect[j]) < QUIET_SHARE * size]


def sinks(weights: torch.Tensor) -> list[int]:
    """The members taking >= SINK_WEIGHT of the weight of >= SINK_SHARE of these rows.

    weights: (R, T), the rows of the questions scored.

    >>> sinks(torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.4, 0.4]]))
    [1]
    """
    return sink_mask(weights).nonzero()[:, 0].tolist()


def sink_mask(weights: torch.Tensor) -> torch.Tensor:
    """`sinks` of every head at once, as a mask: weights (…, R, T) -> (…, T) bool, True at a sink.

    >>> sink_mask(torch.tensor([[[0.5, 0.5, 0.0], [0.2, 0.4, 0.4]]]))
    tensor([[False,  True, False]])
    """
    return (weights >= SINK_WEIGHT).double().mean(-2) >= SINK_SHARE  # (…, T)


def head_sinks_of(rows: torch.Tensor) -> list[int]:
    """A head's sinks from its last R questions' rows (R, T), question 0 left out when present (it
    hears only itself, so it says nothing of the rule).

    >>> head_sinks_of(torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.4, 0.4]]))
    [1]
    """
    R, T = rows.shape
    asked = rows[1:] if R == T else rows
    return sinks(asked) if len(asked) else [0]


def sink_weight(row: torch.Tensor, members: list[int]) -> float:
    """The weight one question's row gives the sinks `members`. row: (T,).

    >>> sink_weight(torch.tensor([0.5, 0.25, 0.25]), [0, 2])
    0.75
    """
    return float(row[members].double().sum())


def rests_on_sink(weight: float | None) -> bool:
    """Whether a question whose sinks take `weight` rests on them (None: not known).

    >>> rests_on_sink(0.99), rests_on_sink(0.2), rests_on_sink(None)
    (True, False, False)
    """
    return weight is not None and weight >= REST_WEIGHT


def first_not_resting(heads) -> list[int] | None:
    """[layer, head] of the first of `heads` (most decisive first; each with .layer, .head and
    .sink_weight, its last question's weight on its sinks) whose last question does not rest on a
    sink: the head whose weights teach; the first of them where every one rests; None for none.

    >>> from types import SimpleNamespace as H
    >>> first_not_resting([H(layer=24, head=6, sink_weight=0.99), H(layer=1, head=0, sink_weight=0.01)])
    [1, 0]
    """
    chosen = next((h for h in heads if not rests_on_sink(h.sink_weight)), heads[0] if heads else None)
    return None if chosen is None else [chosen.layer, chosen.head]


def last_rows(model, ids: list[int], on_layer=None):
    """Every head's weights for the last min(T, MAX_QUESTIONS) questions, layer by layer: yields
    (layer, (n_heads, R, T) float32). One pass keeping every member's k and the last R members' q
    (at 8,191 members 190 MiB instead of 750); each layer's rows computed when reached.
    on_layer: called after each layer of the pass and after each layer's rows (2 · n_layers calls).

    >>> layer, rows = next(last_rows(model, model.ids("I have a lot")))
    >>> layer, tuple(rows.shape)
    (0, (9, 4, 4))
    """
    R = min(len(ids), MAX_QUESTIONS)
    run = model.run(ids, record=Record(steps=("weights",), maps="on_demand", last_rows=R), on_layer=on_layer)
    for layer in range(model.config.n_layers):
        rows = run.map(layer, "weights", last=R).float()  # (n_heads, R, T)
        if on_layer is not None:
            on_layer()
        yield layer, rows
