"""What explain finds, as plain dataclasses that serialise to JSON (see docs/json.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from studygroup.study import byte_pieces
from studygroup.study.jsonable import JSONable
from studygroup.study.roles import RoleScores
from studygroup.study.sinks import rests_on_sink
from studygroup.formats import brief, clipped, percent, quote, signed


@dataclass
class Word(JSONable):
    """A candidate next word: readable token, id, probability (softmax in float64) and logit, and
    what its bytes stand for where they are not whole characters (study.byte_pieces; '' otherwise)."""

    token: str
    id: int
    prob: float
    logit: float
    reads_as: str = ""


def top_words(run, lp: torch.Tensor, k: int) -> list[Word]:
    """The k most likely next words: lp (vocab,) log-probabilities -> [Word], most likely first."""
    return [next_word(run, lp, i) for i in lp.topk(min(k, lp.shape[-1])).indices.tolist()]


def next_word(run, lp: torch.Tensor, i: int) -> Word:
    """Next word i as a Word: lp (vocab,) log-probabilities."""
    tok = run.model.tokenizer
    before = b"".join(tok.token_bytes(j) for j in run.token_ids[-3:])  # enough for an unfinished character
    return Word(tok.readable(i), i, float(lp[i].exp()), float(run.last_logits[i]),
                byte_pieces.reads_as(before, tok.token_bytes(i)))


@dataclass
class Listened(JSONable):
    """What member `index`'s answer brought to the last member's question in one head."""

    index: int
    token: str
    weight: float  # w_{T-1, j}: the share of attention the question gives this member
    answer_size: float  # ‖v_j · W_O[h]‖: the size of its answer as the head writes it
    contribution: float  # weight × answer_size
    logit_share: float  # w_{T-1, j} (v_j · W_O[h]) · direction: its part of the head's direct contribution
    effect_in_head: float | None = None  # change in log p(t) with this member silenced in this head only; None if not measured
    is_sink: bool = False  # an attention sink of this head (studygroup.study.sinks)


@dataclass
class HeadEffect(JSONable):
    """One head's part in the conclusion, and whom its last question listened to."""

    layer: int
    head: int
    kv_head: int
    logit_contribution: float  # direct share of the predicted word's logit
    silence_effect: float | None  # change in log p(t) with the head's write zeroed at every position; None if not measured
    silence_effect_last_position: float | None  # … zeroed at the last position only; None if not measured
    silence_estimate: float | None  # first-order estimate of silence_effect (one gradient); None for long texts
    prob_silenced: float | None  # p(t) with the head's write zeroed at every position (with silence_effect)
    rank_by_contribution: int  # 1 = largest |logit_contribution| of all heads
    question_norm: float  # ‖q_{T-1}‖ of this head
    listened: list[Listened] = field(default_factory=list)  # largest |effect_in_head| first, then largest contribution
    sinks: list[int] = field(default_factory=list)  # this head's attention sinks (studygroup.study.sinks)
    sink_weight: float | None = None  # the last question's weight on the sinks
    roles: RoleScores | None = None  # role scores (studygroup.study.roles), up to 512 members

    @property
    def rests_on_sink(self) -> bool:
        """Whether the last question rests on a sink (its sinks take >= REST_WEIGHT of its weight)."""
        return rests_on_sink(self.sink_weight)

    @property
    def shown_effect(self) -> float | None:
        """silence_effect where measured, else silence_effect_last_position: the measure heads are ranked by."""
        return self.silence_effect if self.silence_effect is not None else self.silence_effect_last_position


@dataclass
class MemberEffect(JSONable):
    """What silencing one member does to the conclusion, measured two ways."""

    index: int
    token: str
    effect: float | None  # change in log p(t), the member silenced in every head for every question; None if not measured
    effect_last_question: float | None  # … silenced for the last member's question only; None if not measured
    prob_silenced: float | None  # p(t) with the member silenced for every question (with effect)
    direct_share: float  # its answers' direct share of the logit, summed over every head's last question
    rank: int | None  # 1 = largest |effect| (|effect_last_question| where effect is not measured)

    @property
    def shown_effect(self) -> float | None:
        """effect where measured, else effect_last_question: the measure the member's rank follows."""
        return self.effect if self.effect is not None else self.effect_last_question


@dataclass
class LogitSum(JSONable):
    """The predicted word's logit and the direct shares it adds up from."""

    logit: float
    embed: float
    heads: float  # Σ over every head
    mlps: float  # Σ over every MLP
    total: float  # embed + heads + mlps + position + biases: equals logit up to float error
    position: float = 0.0  # the learned position embedding's share (GPT-2; 0 for RoPE families)
    biases: float = 0.0  # the biases no head or MLP writes (GPT-2's attention output bias, final norm bias)


@dataclass
class ModelInfo(JSONable):
    """The model as the page and the report name it. See docs/json.md."""

    name: str  # general.basename and general.size_label ("smollm2 135M"), else general.name
    path: str | None
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    quantization: str = ""  # "Q4_1": general.file_type's name, else the commonest tensor type
    file_size: int = 0  # bytes of the file
    label: str = ""  # "smollm2 135M · Q4_1 · 98.4 MB": name, quantization and file size (Config.label)
    note: str = ""  # what of the file is not read ("" when all of it is)


def model_info(model) -> ModelInfo:
    """The model's facts as a result carries them."""
    c = model.config
    return ModelInfo(c.name or "model", None if model.path is None else str(model.path),
                     c.n_layers, c.n_heads, c.n_kv_heads, c.d_head, c.quantization, c.file_size, c.label, c.note)


@dataclass
class LastSentence(JSONable):
    """The group's conclusion on the text's last sentence alone (studygroup.study.last_sentence)."""

    start: int  # the index of the last sentence's first member in the text
    text: str  # the last sentence
    token_ids: list[int]  # the ids run: the last sentence's as a text of its own (after the BOS where the model adds one)
    predicted: Word  # the conclusion on the last sentence alone
    prob_of_predicted: float  # the probability it gives the full text's predicted word


@dataclass
class Explanation(JSONable):
    """The group's conclusion on one text, and who decided it. See docs/json.md."""

    text: str | None
    tokens: list[str]
    token_ids: list[int]
    predicted: Word
    top: list[Word]
    heads: list[HeadEffect]  # every head measured exactly, most decisive first
    heads_silenced: str  # which heads were measured, how, and what is known of the rest, in words
    members: list[MemberEffect]  # every member, in reading order
    members_silenced: str
    heads_measured: int  # how many heads have silence_effect (or, past LONG_T, silence_effect_last_position)
    members_measured: int  # how many members have effect (or, past LONG_T, effect_last_question)
    estimate_missed_by: float | None  # the largest |silence_estimate - silence_effect| over the heads measured
    logit_parts: LogitSum
    contributions: list[list[float]]  # (n_layers, n_heads) direct contribution of every head
    mlp_contributions: list[float]  # (n_layers,) direct contribution of every layer's MLP
    silence_estimates: list[list[float]]  # (n_layers, n_heads) first-order silence effect of every head
    model: ModelInfo
    story: list[str] = field(default_factory=list)
    story_parts: list[list[dict]] = field(default_factory=list)  # per sentence: {text}, {member, text}, {value, field, text}
    scope: str = "in every head"  # where a silenced member is removed (long texts: the last questions only)
    silenced_members: list[int] = field(default_factory=list)  # members nobody hears in the run explained
    silenced_heads: list[list[int]] = field(default_factory=list)  # [layer, head] pairs writing nothing in it
    last_sentence: LastSentence | None = None  # the conclusion without the earlier sentences (one sentence: None)
    generated_from: int | None = None  # the first generated member (explain --generate N --word K); None: a text
    runner_up: Word | None = None  # the most likely word other than the predicted one
    logit_gap: LogitSum | None = None  # the predicted word's logit minus the runner-up's, and its direct shares
    ablation: str = "zero"  # how each head measured was taken out: zero (write zeroed), mean or resample (output replaced)
    first_head: list[int] | None = None  # [layer, head] shown first: the most decisive not resting on a sink (sinks.first_not_resting)

    def __repr__(self) -> str:
        """<Explanation of “I have a lot” (4 members): next word “␣of” (87%); most decisive head …>"""
        of = f"of {clipped(self.text)} ({len(self.tokens)} members)" if self.text is not None else f"of {len(self.tokens)} members"
        found = f"next word {quote(self.predicted.token)} ({percent(self.predicted.prob)})"
        if self.heads and self.heads[0].shown_effect is not None:
            h = self.heads[0]
            found += f"; most decisive head {h.head} of layer {h.layer} (silenced: log p {signed(h.shown_effect, 3)})"
        return brief(self, f"{of}: {found}", ".story, .top, .heads, .members, .to_dict()")


@dataclass
class Analysis:
    """An Explanation with the run behind it (for compare and model_view)."""

    explanation: Explanation
    run: object  # studygroup.model.run.Run, recorded as `recording(T)` says
