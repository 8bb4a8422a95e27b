"""Generation: the group keeps talking, one word at a time, each new word a member of the group.

The prompt is passed once and its keys and values kept (the key/value cache); each step passes the
one new word, whose question is asked of every member so far (the cache plus its own key), and
appends its key and value. Per word the result keeps what the questions that chose it listened to
(the last member's before it: for word k, the prompt and the k − 1 words before it): each head's
16 largest weights, the members they fall on and the weight on the first member (the sink),
27 KB a word for the default model. The questions themselves (L × H × d float32, 69 KB a word:
570 MB over the 8,192-member window) are not kept: `Generation.questions(k)` recomputes them from
the key/value cache on request (one row's pass, exact), and `Generation.row` the whole row from them.
Silenced members and heads are taken out at every word: by zero ablation through the pass's masks
and gates, by a mean or resample ablation through the values `generation_ablation` fixes for each
member as it is passed.

Shapes: L layers, H query heads, H_kv key/value heads, d = d_head, P members before the step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from studygroup.errors import InputError
from studygroup.model.arguments import whole_number
from studygroup.model.ablation import ZERO, Ablation
from studygroup.model.generation_ablation import GenerationAblation
from studygroup.model.interventions import Interventions
from studygroup.model.kv_cache import Cache
from studygroup.model.record import Record, step_name
from studygroup.model.sampling import Sampling
from studygroup.model.step import LeanStep

#: Largest weights kept per head and word.
KEPT_WEIGHTS = 16

#: What a pass keeps: every member's keys and values, and the last member's weights.
_KEPT = Record(steps=("k", "v", "weights"), rows="last")

#: What a question's recomputation keeps: the last member's question in every layer.
_QUESTION = Record(steps=("q",), rows="last")


@dataclass
class Word:
    """One generated word and what the questions that chose it listened to (the last member's).

    members, weights (L, H, 16): the members each head listened to most (int16 where the context
    allows, else int32) and their weights (float32), largest first; sink (L, H): the weight on
    member 0. top: the most likely words at this step, (id, prob, logit), most likely first.
    """

    id: int
    prob: float
    logit: float
    top: list[tuple[int, float, float]]
    members: torch.Tensor
    weights: torch.Tensor
    sink: torch.Tensor
    stop: str | None = None


@dataclass
class Generation:
    """The prompt's ids, the generated words, and the key cache they were asked of. `more(n)` goes on
    from the last word (the cache kept)."""

    model: "Model"
    prompt_ids: list[int]
    interventions: Interventions
    words: list[Word] = field(default_factory=list)
    keys: dict[int, torch.Tensor] = field(default_factory=dict)  # {layer: (H_kv, T, d)} after RoPE
    _talk: "_Talk | None" = field(default=None, repr=False)

    @property
    def ids(self) -> list[int]:
        """The generated ids (the prompt's not included)."""
        return [w.id for w in self.words]

    @property
    def stop(self) -> str | None:
        """"eos" when the last word is an end-of-generation token, else None."""
        return self.words[-1].stop if self.words else None

    @property
    def text(self) -> str:
        return self.model.tokenizer.decode(self.ids)

    @property
    def nbytes(self) -> int:
        """Bytes of the key/value cache it keeps to go on and of its words' records."""
        records = [t for w in self.words for t in (w.members, w.weights, w.sink)]
        ablation = 0 if self._talk.ablation is None else self._talk.ablation.nbytes
        return self._talk.cache.nbytes + ablation + sum(t.numel() * t.element_size() for t in records)

    def word_json(self, k: int, head: tuple[int, int] | None = None) -> dict:
        """Word k (from 1): {token, id, prob, logit, top: [{token, id, prob, logit}], stop?}; with a
        (layer, head), also "listened": what the question that chose it heard there, {layer, head,
        members, weights (the 16 largest, largest first), sink (the weight on member 0)}."""
        tok, w = self.model.tokenizer, self.words[k - 1]
        word = lambda i, p, z: {"token": tok.readable(i), "id": i, "prob": p, "logit": z}
        out = {**word(w.id, w.prob, w.logit), "top": [word(*t) for t in w.top], **({"stop": w.stop} if w.stop else {})}
        if head is not None:
            l, h = self.model.check_head(*head)
            out["listened"] = {"layer": l, "head": h, "members": w.members[l, h].tolist(),
                               "weights": w.weights[l, h].tolist(), "sink": float(w.sink[l, h])}
        return out

    def to_json(self) -> dict:
        """{"prompt": {"tokens", "token_ids"}, "words": [{token, id, prob, logit, top, stop?}], "stop",
        "ablation"?}: "ablation" ({"kind", "reference", "from"}) where something silenced is taken out
        by a mean or resample ablation."""
        tok, i = self.model.tokenizer, self.interventions
        return {"prompt": {"tokens": [tok.readable(t) for t in self.prompt_ids], "token_ids": list(self.prompt_ids)},
                "words": [self.word_json(k) for k in range(1, len(self.words) + 1)], "stop": self.stop,
                **(i.ablation_field() if i.silenced_members or i.silenced_heads else {})}

    @torch.inference_mode()
    def more(self, n: int, on_word=None) -> "Generation":
        """Up to n more words after the last (none after an end-of-generation token); on_word(word)
        is called as each comes. Returns self."""
        n = whole_number(n, "the number of words")
        if n < 1:
            raise InputError(f"the number of words must be at least 1, not {n}")
        P, W, context = len(self.prompt_ids), len(self.words), self.model.config.context_length
        if P + W + n > context:
            so_far = f" and the {counted(W, 'word')} so far" if W else ""
            raise InputError(f"the prompt ({counted(P, 'token')}){so_far} and {counted(n, 'word')} exceed the model's context of {context}")
        talk = self._talk
        talk.reserve(P + W + n)
        for _ in range(n):
            if self.stop:
                break
            if talk.logits is None:  # the last word has not been passed yet
                talk.step(self.words[-1].id)
            self.words.append(talk.choose())
            if on_word is not None:
                on_word(self.words[-1])
        self.keys = talk.cache.keys()
        return self

    @torch.inference_mode()
    def questions(self, k: int) -> torch.Tensor:
        """(L, H, d) the questions (after RoPE) that chose word k (from 1): those of the last of the
        P members before it, recomputed by passing that member again over the cache's P - 1 before
        it, with the generation's silencing (and its ablation's values)."""
        P = self._members_before(k)
        member = (self.prompt_ids + self.ids)[P - 1]
        _, steps = _row_pass(self.model, self._talk.at(P - 1), self._talk.cache.past(P - 1), member, _QUESTION)
        return torch.stack([steps[step_name("q", l)][0, :, -1] for l in range(self.model.config.n_layers)])

    def row(self, k: int, layer: int, head: int, q: torch.Tensor | None = None) -> torch.Tensor:
        """(P,) the whole attention row, in this head, of the question that chose word k (from 1):
        the last of the P members before word k, over them; recomputed from its question (q, the
        (L, H, d) of `questions(k)`, recomputed when not given) and the key cache."""
        m, c = self.model, self.model.config
        m.check_head(layer, head)
        P = self._members_before(k)
        q = (self.questions(k) if q is None else q)[layer, head]  # (d,)
        K = self.keys[layer][c.kv_head_of(head), :P]  # (P, d)
        scores = K @ q / math.sqrt(c.d_head)  # (P,)
        visible = _row_mask(m, self.interventions, layer, head, P - 1)  # (P,) bool
        return torch.softmax(scores.masked_fill(~visible, float("-inf")), -1)

    def _members_before(self, k: int) -> int:
        """P, the members before word k (from 1), checked."""
        k = whole_number(k, "a word")
        if not 1 <= k <= len(self.words):
            raise InputError(f"word {k} does not exist: {len(self.words)} words were generated (1-{len(self.words)})")
        return len(self.prompt_ids) + k - 1


def _row_mask(model, interventions: Interventions, layer: int, head: int, P: int) -> torch.Tensor:
    """(P + 1,) bool: the members the question at position P can hear in this head."""
    visible = interventions.mask(layer, head, P + 1)[-1].to(model.device)  # (P + 1,)
    window = model.config.window_of(layer)
    if window is not None:
        visible = visible & (torch.arange(P + 1, device=model.device) > P - window)
    return visible


def generate(model, text_or_ids, n: int, sampling: Sampling = Sampling(), ignore_eos: bool = False,
             candidates: int = 5, silence_members=(), silence_heads=(), on_word=None, ablation: Ablation = ZERO) -> Generation:
    """Generate up to n words after the prompt. on_word(word) is called as each word comes.
    ablation: how the silenced are taken out (`studygroup.model.generation_ablation`)."""
    n = whole_number(n, "the number of words")
    if n < 1:
        raise InputError(f"the number of words must be at least 1, not {n}")
    ids = model.ids(text_or_ids)
    if len(ids) + n > model.config.context_length:  # refused before the prompt's pass
        raise InputError(f"the prompt ({counted(len(ids), 'token')}) and {counted(n, 'word')} exceed the model's context of "
                         f"{model.config.context_length}")
    return start(model, ids, sampling, ignore_eos, candidates, silence_members, silence_heads, n, ablation).more(n, on_word)


@torch.inference_mode()
def start(model, text_or_ids, sampling: Sampling = Sampling(), ignore_eos: bool = False, candidates: int = 5,
          silence_members=(), silence_heads=(), capacity: int = 1, ablation: Ablation = ZERO) -> Generation:
    """A generation with no words yet: the prompt passed, its keys and values in a cache with room
    for `capacity` words (more grows it); `more(n)` generates. ablation: how the silenced are taken
    out (zero: silenced; mean or resample: `studygroup.model.generation_ablation`)."""
    ids = model.ids(text_or_ids)
    candidates = whole_number(candidates, "candidates")
    interventions = Interventions.make(model, len(ids), silence_members, None, silence_heads, ablation=ablation)
    talk = _Talk(model, interventions, sampling, candidates, set() if ignore_eos else end_ids(model))
    size = min(len(ids) + capacity, model.config.context_length)
    talk.cache = Cache(model.config, size, model.device, model.dtype)
    if not interventions.zero and (interventions.silenced_members or interventions.silenced_heads):
        talk.ablation = GenerationAblation(model, interventions, ids, size)
    prompt = interventions if talk.ablation is None else talk.ablation.prompt
    logits, steps = model.forward(torch.tensor(ids, device=model.device), prompt.plan(model, len(ids), _KEPT))
    talk.cache.append(steps)
    talk.logits, talk.w = logits, _last_row(steps, model.config)
    return Generation(model, ids, interventions, _talk=talk)


class _Talk:
    """What a generation needs to go on: the cache, the next word's logits (None once chosen, until
    that word's pass) and the last row's weights, the sampling and its generator."""

    def __init__(self, model, interventions: Interventions, sampling: Sampling, candidates: int, stops: set[int]):
        self.model, self.interventions, self.sampling, self.candidates, self.stops = (
            model, interventions, sampling, candidates, stops)
        self.generator = sampling.generator()
        # silenced, or a family the lean step does not compute: every word through the general pass
        self.general = bool(interventions.silenced_members or interventions.silenced_heads) or not LeanStep.takes(model)
        self.cache, self.lean, self.logits, self.w = None, None, None, None
        self.ablation: GenerationAblation | None = None  # a mean or resample ablation's values

    def at(self, p: int) -> Interventions:
        """The interventions of member p's pass alone (its ablation's values at p)."""
        return self.interventions if self.ablation is None else self.ablation.at(p)

    def reserve(self, capacity: int) -> None:
        """Room in the cache for `capacity` members; the lean step is made for its size."""
        if self.ablation is not None:
            self.ablation.reserve(capacity)
        if self.cache.reserve(capacity) or (self.lean is None and not self.general):
            self.lean = None if self.general else LeanStep(self.model, self.cache)

    def choose(self) -> Word:
        """The next word from the logits, with its record; the logits are used up."""
        z = self.logits.reshape(-1, self.logits.shape[-1])[-1].float()  # (V,)
        word_id = self.sampling.choose(z, self.generator)
        word = _word(z, word_id, self.candidates, self.w, self.model.config.context_length)
        word.stop = "eos" if word_id in self.stops else None
        self.logits = None
        return word

    def step(self, word_id: int) -> None:
        """The pass of the chosen word: its logits and row."""
        if self.lean is not None:
            self.logits, self.w = self.lean(word_id)  # (V,), (L, H, P)
        else:
            if self.ablation is not None:
                self.ablation.add(word_id)  # resample: the source passes the word first
            self.logits, steps = _row_pass(self.model, self.at(self.cache.T), self.cache.past(), word_id, _KEPT)
            self.cache.append(steps)
            self.w = _last_row(steps, self.model.config)


def _row_pass(model, interventions: Interventions, past: dict, member_id: int, record: Record):
    """One member's pass at position P over the P members before it (`past`: their keys and values,
    (1, H_kv, P, d) per layer), with the silencing's masks for its row: logits (1, 1, V), record."""
    P = past[0][0].shape[-2]
    plan = interventions.plan(model, P + 1, record)
    plan.masks = {l: m[..., -1:, :] for l, m in plan.masks.items()}  # (1, 1|H, 1, P + 1): the new row's
    plan.past = past if P else {}
    return model.forward(torch.tensor([member_id], device=model.device), plan)


def _last_row(steps, c) -> torch.Tensor:
    """The last member's weights (L, H, P) from a general pass's record."""
    return torch.stack([steps[step_name("weights", l)][0, :, -1] for l in range(c.n_layers)])  # (L, H, P)


def _word(z: torch.Tensor, word_id: int, candidates: int, w: torch.Tensor, context: int) -> Word:
    """The chosen word with its probability and the top candidates, and what the questions of the
    pass that chose it heard: w (L, H, P), its last row's weights."""
    lp = torch.log_softmax(z.double(), -1)  # (V,)
    values, top = lp.topk(min(candidates, lp.numel()))
    ranked = [(i, float(v.exp()), float(z[i])) for v, i in zip(values, top.tolist())]
    weights, members = w.topk(min(KEPT_WEIGHTS, w.shape[-1]), -1)  # (L, H, 16)
    index = torch.int16 if context <= torch.iinfo(torch.int16).max else torch.int32  # 2 bytes a member index
    sink = w[..., 0].float().clone()  # (L, H)
    return Word(word_id, float(lp[word_id].exp()), float(z[word_id]), ranked, members.to(index),
                weights.float(), sink)


def end_ids(model) -> set[int]:
    """The model's end-of-generation token ids (its GGUF's eos)."""
    eos = model.tokenizer.eos_id
    return set() if eos is None else {eos}


def counted(n: int, noun: str) -> str:
    """n and the noun, plural but for one.

    >>> counted(1, "token"), counted(3, "word")
    ('1 token', '3 words')
    """
    return f"{n} {noun}" + ("" if n == 1 else "s")
