"""The web app's request bodies: what each endpoint takes, checked by pydantic before the app sees it.

Strict types (a string is not a number, a float not an index), no unknown fields; a text's length is
checked in tokens by the app. docs/web-api.md documents each body.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from studygroup.errors import InputError
from studygroup.model.ablation import Ablation
from studygroup.model.interventions import Interventions
from studygroup.views.payloads import OVERVIEW_SIDE
from studygroup.web.jobs import JOB_ID

MAX_TOP = 50
MAX_SILENCED = 512
MAX_REFERENCE = 16  # reference texts a mean ablation takes at most
#: Fields a body's cache key leaves out: the job that follows it, and its interventions (keyed as one checked value).
UNKEYED = ("job", "silence", "ablation", "silence_members", "silence_heads")
#: Request fields kept for one release, and what replaces them (the answer's Deprecation header says so).
DEPRECATED = {"silence_members": "silence.members", "silence_heads": "silence.heads"}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    def cache_key(self, interventions: Interventions | None = None, *extra) -> tuple:
        """The cache key of this body's answer: its kind, every field but UNKEYED (lists as tuples),
        its interventions (checked: members sorted, heads a set), and what else the answer depends on."""
        fields = tuple((name, _frozen(value)) for name, value in self if name not in UNKEYED)
        return (type(self).__name__, fields, interventions, *extra)


def _frozen(value):
    """A field's value as a hashable key: lists as tuples, all the way down."""
    return tuple(map(_frozen, value)) if isinstance(value, list) else value


Text = Annotated[str, Field(min_length=1)]  # its length is checked in tokens (Service.check_text)
Top = Annotated[int, Field(ge=1, le=MAX_TOP)]
Index = Annotated[int, Field(ge=0)]
Pair = Annotated[list[Index], Field(min_length=2, max_length=2)]


JobId = Annotated[str, Field(pattern=JOB_ID)]


class TextBody(_Body):
    text: Text
    top: Top = 10


Members = Annotated[list[Index], Field(max_length=MAX_SILENCED)]
Heads = Annotated[list[Pair], Field(max_length=MAX_SILENCED)]


class Silence(_Body):
    """What is silenced: members (in every head) and [layer, head] pairs."""
    members: Members = []
    heads: Heads = []


class AblationBody(_Body):
    """How the silenced are taken out (studygroup.model.ablation): zero, mean over `reference` texts
    (none: the text's own members), or resample from the text `from` (of as many tokens)."""
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    kind: Literal["zero", "mean", "resample"] = "zero"
    reference: Annotated[list[Text], Field(max_length=MAX_REFERENCE)] = []
    source: Text | None = Field(default=None, alias="from")


class _Silenced(_Body):
    """A body with interventions: {"silence": {"members", "heads"}, "ablation": {"kind", "reference",
    "from"}}; silence_members and silence_heads are the deprecated spelling of silence."""
    silence: Silence = Silence()
    ablation: AblationBody = AblationBody()
    silence_members: Members | None = None  # deprecated: silence.members
    silence_heads: Heads | None = None  # deprecated: silence.heads

    def interventions(self) -> Interventions:
        """The body's Interventions, unchecked (Interventions.checked against its text); InputError
        where a field and its deprecated spelling are both given."""
        for old, new in DEPRECATED.items():
            if getattr(self, old) is not None and getattr(self.silence, new.split(".")[1]):
                raise InputError(f"give {new} or the deprecated {old}, not both")
        members = self.silence.members if self.silence_members is None else self.silence_members
        heads = self.silence.heads if self.silence_heads is None else self.silence_heads
        a = self.ablation
        return Interventions(tuple(members), None, frozenset(tuple(p) for p in heads),
                             ablation=Ablation(a.kind, tuple(a.reference), a.source))

    def texts(self) -> list[tuple[str, str]]:
        """(field name, text) of each text the interventions apply to; the name opens an error about it."""
        return [("", self.text)]

    def deprecated(self) -> list[str]:
        """The deprecated fields this body uses."""
        return [old for old in DEPRECATED if getattr(self, old) is not None]


class _Followed(_Silenced):
    """A computation on a text with these interventions, followed as a job when it names one
    (/api/progress, /api/cancel)."""
    job: JobId | None = None


class ConclusionBody(TextBody, _Followed):
    pass


#: How many heads explain measures exactly: a number, "all", or null (explain's default: all where affordable).
MeasureHeads = Annotated[int, Field(ge=0)] | Literal["all"] | None


class ExplainBody(TextBody, _Followed):
    measure_heads: MeasureHeads = None  # as the CLI's --measure-heads
    chat: bool = False  # the text as the user's turn in the model's own chat template
    system: Text | None = None  # with chat: a system turn before the user's


class JobBody(_Body):
    job: JobId


class CompareBody(_Followed):
    text_a: Text
    text_b: Text
    top: Top = 10

    def texts(self) -> list[tuple[str, str]]:
        return [("text_a", self.text_a), ("text_b", self.text_b)]


class ModelViewBody(_Followed):
    text: Text
    packed: bool = False  # the thumbnails as packed_weights (compact_json.packed_thumbnails), not lists


#: A window's ends [A, B]: members A to B-1, as a Python slice (null leaves an end open, negatives count from the end).
Ends = Annotated[list[int | None], Field(min_length=2, max_length=2)]


class HeadBody(_Followed):
    text: Text
    layer: Index
    head: Index
    notation: Literal["paper", "columns"] = "paper"
    rows: Literal["auto", "all", "last"] | Ends = "auto"
    keys: Literal["all"] | Ends = "all"
    packed: bool = False  # the vectors as packed_vectors (compact_json.packed_vectors), not lists


#: Top words each cell of the logit lens keeps at most (a cell per layer and member).
LENS_MAX_TOP = 10


class LensBody(_Body):
    text: Text
    top: Annotated[int, Field(ge=1, le=LENS_MAX_TOP)] = 3
    rows: Ends | None = None  # the members shown (null: the last member, or with all_positions every member up to 64, else the last 64)
    all_positions: bool = False
    job: JobId | None = None


class PatchTexts(_Body):
    """Two texts of the same length, and the metric's words (each one token; null: the runs' top words)."""
    clean: Text
    corrupted: Text
    answer: Text | None = None
    wrong: Text | None = None


class PatchBody(PatchTexts):
    job: JobId | None = None


class OverviewBody(_Followed):
    text: Text
    layer: Index
    head: Index
    rows: Literal["all"] | Ends = "all"
    keys: Literal["all"] | Ends = "all"
    side: Annotated[int, Field(ge=1, le=OVERVIEW_SIDE)] = OVERVIEW_SIDE  # most blocks on a side


class LessonBody(_Followed):
    text: Text
    layer: Index | None = None  # with head; None: the most decisive head not resting on a sink
    head: Index | None = None
    query: Index | None = None
    key: Index | None = None


class WhyBody(_Followed):
    text: Text
    layer: Index
    head: Index
    query: Index
    key: Index


MAX_WORDS = 256  # words one /api/generate request streams at most


class GenerateBody(_Silenced):
    text: Text
    n: Annotated[int, Field(ge=1, le=MAX_WORDS)] = 8
    words: Annotated[list[Index], Field(max_length=1 << 20)] = []  # the ids streamed so far, to go on after
    # the sampling's ranges are the library's (model.sampling.Sampling): refused there, 400
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    chat: bool = False  # the text as the user's turn in the model's own chat template
    system: Text | None = None  # with chat: a system turn before the user's
    candidates: Annotated[int, Field(ge=1, le=MAX_TOP)] = 5
    layer: Index | None = None  # with head: what each word's question heard in that head
    head: Index | None = None

    def continuation_key(self, ids: list[int], sampling, interventions: Interventions) -> tuple:
        """The key of the kept generation this request goes on from: the prompt's ids (its text's or
        its chat's), the sampling (model.sampling.Sampling, checked), ignore_eos, candidates and the
        interventions; not the words so far, how many more, or the head whose listening is shown."""
        return (tuple(ids), sampling, self.ignore_eos, self.candidates, interventions)
