"""compare: what a longer context does to the group's conclusion, and who accounts for the shift.

Both texts are explained (`studygroup.study.explain`). The word followed is the longer context's
predicted word w. Then:

- shift: the probabilities of the top words of either text, before (a) and after (b);
- heads: the change of each head's direct contribution to w's logit from a to b; and, since a
  probability depends on the gaps between logits, to the gap between w and its rival (the
  other top word whose probability changed most);
- members: the longer text's members by the effect of silencing each on log p(w);
- prefix: when one text ends with the other, the extra members at the front of the longer one
  are silenced together, in every head, to see whether its prediction moves back toward the
  shorter text's. Silenced, they stay in the text (positions do not move); nobody hears them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from studygroup.errors import InputError
from studygroup.model.interventions import Interventions
from studygroup.study import attribution
from studygroup.study import effects
from studygroup.study.jsonable import JSONable
from studygroup.study.explain import analyse
from studygroup.study.ranking import heads_largest_first
from studygroup.study.results import Explanation, MemberEffect
from studygroup.formats import brief, clipped, percent, quote, signed

#: How many heads `heads` lists, by |change|.
CHANGED_HEADS_SHOWN = 10


@dataclass
class Shift(JSONable):
    """One word's probability after text a, after text b, and in the longer text with its prefix silenced."""

    token: str
    id: int
    prob_a: float
    prob_b: float
    change: float  # prob_b - prob_a
    prob_prefix_silenced: float | None  # None when neither text ends with the other


@dataclass
class HeadShift(JSONable):
    """How one head's direct contribution to w's logit changes from text a to text b."""

    layer: int
    head: int
    contribution_a: float
    contribution_b: float
    change: float  # contribution_b - contribution_a


@dataclass
class LogitShift(JSONable):
    """w's logit in each text, and the change split into direct shares (b - a)."""

    logit_a: float
    logit_b: float
    embed: float
    heads: float
    mlps: float
    position: float = 0.0  # change of the position embedding's share (GPT-2)
    biases: float = 0.0  # change of the biases' share (GPT-2)


@dataclass
class PrefixSilencing(JSONable):
    """The longer text with the members in front of the shorter text silenced in every head."""

    longer: str  # "a" or "b"
    text: str  # the prefix
    members: list[int]
    tokens: list[str]
    prob_word: float  # p(w) in the longer text with them silenced
    distance_before: float  # total variation between the two texts' next-word distributions
    distance_silenced: float  # the same, with the prefix silenced in the longer text
    toward_shorter: bool  # distance_silenced < distance_before


@dataclass
class Comparison(JSONable):
    """Text a against text b. See docs/json.md."""

    a: Explanation
    b: Explanation
    longer: str  # "a" or "b": the text whose members are studied
    word: str  # w, readable: the longer text's predicted word
    word_id: int
    rival: str | None  # the other top word whose probability changed most, readable
    rival_id: int | None
    shift: list[Shift]
    logit: LogitShift
    gap: LogitShift | None  # the same for logit(w) - logit(rival)
    heads: list[HeadShift]  # largest |change| first
    heads_by_gap: list[HeadShift]  # direct contributions to logit(w) - logit(rival), largest |change| first
    members: list[MemberEffect]  # the longer text's silenced members, largest |effect| first
    prefix: PrefixSilencing | None
    story: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        """<Comparison of “I have a lot” with “Cash or …”: “␣of” 87% → 96%; head most changed …>"""
        texts = " with ".join(clipped(e.text, 30) if e.text is not None else f"{len(e.tokens)} tokens" for e in (self.a, self.b))
        found = quote(self.word)
        w = next((s for s in self.shift if s.id == self.word_id), None)
        if w is not None:
            found += f" {percent(w.prob_a)} → {percent(w.prob_b)}"
        if self.heads:
            h = self.heads[0]
            found += f"; head most changed: head {h.head} of layer {h.layer} ({signed(h.change, 2)} to its logit)"
        return brief(self, f"of {texts}: {found}", ".story, .shift, .heads, .members, .a, .b, .to_dict()")


def compare(model, text_a, text_b, *, top: int = 10, measure_heads: int | str | None = None,
            measure_members: int | str | None = None, interventions: Interventions = Interventions()) -> Comparison:
    """Compare the conclusions on two texts (e.g. "I have a lot" and "Cash or credit card? I have a lot").

    measure_heads, measure_members: how many heads and members each text's explanation measures.
    interventions: compare the runs with its members and heads silenced in both texts (member J of
    each text, in every head; each head at every position), as explain does.

    >>> c = compare(model, "I have a lot", "Cash or credit card? I have a lot")
    >>> c.word, c.shift[0].prob_a < c.shift[0].prob_b
    ('␣of', True)
    """
    from studygroup.study import story

    options = dict(top=top, measure_heads=measure_heads, measure_members=measure_members, interventions=interventions)
    A, B = (_analysed(model, name, text, options) for name, text in (("text a", text_a), ("text b", text_b)))
    longer = _longer(text_a, text_b, A.run.T, B.run.T)
    L = B if longer == "b" else A
    w = L.explanation.predicted.id
    lp_a, lp_b = effects.log_probs(A.run.last_logits), effects.log_probs(B.run.last_logits)  # (vocab,)
    prefix, lp_silenced = _prefix(model, text_a, text_b, longer, L.run, lp_a, lp_b, w, L.run.interventions)
    shift = _shift(model, A.explanation, B.explanation, lp_a, lp_b, lp_silenced)
    rival = max((s for s in shift if s.id != w), key=lambda s: abs(s.change), default=None)
    parts = lambda t: (attribution.direct_contributions(A.run, t), attribution.direct_contributions(B.run, t))  # noqa: E731
    (wa, wb), gap = parts(w), None
    if rival is not None:
        (ra, rb) = parts(rival.id)
        gap = (attribution.gap(wa, ra), attribution.gap(wb, rb))
    c = Comparison(a=A.explanation, b=B.explanation, longer=longer, word=L.explanation.predicted.token, word_id=w,
                   rival=rival and rival.token, rival_id=rival and rival.id, shift=shift,
                   logit=_logit_shift(wa, wb), gap=gap and _logit_shift(*gap),
                   heads=_head_shifts(wa.heads, wb.heads), heads_by_gap=gap and _head_shifts(gap[0].heads, gap[1].heads) or [],
                   members=_ranked_members(L.explanation), prefix=prefix)
    c.story = story.compare_story(c)
    return c


def _longer(text_a, text_b, T_a: int, T_b: int) -> str:
    if isinstance(text_a, str) and isinstance(text_b, str):
        if text_b.endswith(text_a) and text_b != text_a:
            return "b"
        if text_a.endswith(text_b) and text_a != text_b:
            return "a"
    return "a" if T_a > T_b else "b"


def _shift(model, a: Explanation, b: Explanation, lp_a, lp_b, lp_silenced) -> list[Shift]:
    ids = list(dict.fromkeys([w.id for w in a.top] + [w.id for w in b.top]))
    ids.sort(key=lambda i: -max(float(lp_a[i]), float(lp_b[i])))
    tok = model.tokenizer
    out = []
    for i in ids:
        pa, pb = float(lp_a[i].exp()), float(lp_b[i].exp())
        ps = None if lp_silenced is None else float(lp_silenced[i].exp())
        out.append(Shift(tok.readable(i), i, pa, pb, pb - pa, ps))
    return out


def _logit_shift(pa: attribution.LogitParts, pb: attribution.LogitParts) -> LogitShift:
    d = lambda x, y: float(y.double().sum() - x.double().sum())  # noqa: E731
    return LogitShift(pa.logit, pb.logit, pb.embed - pa.embed, d(pa.heads, pb.heads), d(pa.mlps, pb.mlps),
                      pb.position - pa.position, pb.biases - pa.biases)


def _head_shifts(heads_a: torch.Tensor, heads_b: torch.Tensor) -> list[HeadShift]:
    """heads_a, heads_b: (n_layers, n_heads) direct contributions -> the largest |changes|."""
    change = heads_b - heads_a  # (L, H)
    return [HeadShift(l, h, float(heads_a[l, h]), float(heads_b[l, h]), float(change[l, h]))
            for l, h in heads_largest_first(change)[:CHANGED_HEADS_SHOWN]]


def _analysed(model, name: str, text, options: dict):
    """analyse(text), an error naming the text it is about."""
    try:
        return analyse(model, text, **options)
    except InputError as e:
        raise InputError(f"{name}: {e}") from None


def _ranked_members(e: Explanation) -> list[MemberEffect]:
    return sorted((m for m in e.members if m.rank is not None), key=lambda m: m.rank)


def _prefix(model, text_a, text_b, longer: str, run, lp_a, lp_b, w: int, chosen: Interventions):
    """Silence the longer text's extra members together (beside what `chosen` silences); None when
    neither text ends with the other."""
    long_text, short_text = (text_b, text_a) if longer == "b" else (text_a, text_b)
    if not (isinstance(long_text, str) and isinstance(short_text, str) and long_text.endswith(short_text)):
        return None, None
    prefix = long_text[: len(long_text) - len(short_text)]
    members = prefix_members(model, run.token_ids, len(prefix.encode("utf-8")))
    if not members:
        return None, None
    both = Interventions.make(model, run.T, {*members, *chosen.silenced_members}, heads=chosen.silenced_heads)
    silenced = model.run(run.token_ids, record="none", interventions=both)
    lp_s = effects.log_probs(silenced.last_logits)  # (vocab,)
    lp_long, lp_short = (lp_b, lp_a) if longer == "b" else (lp_a, lp_b)
    before, after = total_variation(lp_long, lp_short), total_variation(lp_s, lp_short)
    tokens = run.tokens
    return PrefixSilencing(longer, prefix, members, [tokens[j] for j in members], float(lp_s[w].exp()),
                           before, after, after < before), lp_s


def prefix_members(model, ids: list[int], n_bytes: int) -> list[int]:
    """Members whose bytes lie wholly within the first n_bytes of the text (a leading BOS and a
    SentencePiece space prefix excluded)."""
    tok, end, out = model.tokenizer, 0, []
    if getattr(tok, "add_space_prefix", False):
        n_bytes += 1  # the space SentencePiece puts in front of the text
    skip_bos = bool(getattr(tok, "add_bos", False)) and ids and ids[0] == tok.bos_id
    for j, i in enumerate(ids):
        if skip_bos and j == 0:
            continue
        end += len(tok.token_bytes(i))
        if end > n_bytes:
            break
        out.append(j)
    return out


def total_variation(lp_p: torch.Tensor, lp_q: torch.Tensor) -> float:
    """½ Σ |p - q| over the vocabulary, from log-probabilities (vocab,) each.

    >>> total_variation(torch.tensor([0.5, 0.5]).log(), torch.tensor([1.0, 0.0]).log())
    0.5
    """
    return float(0.5 * (lp_p.exp() - lp_q.exp()).abs().sum())
