"""What every endpoint calls: the model, its turn (the gate), the answer cache, the kept passes and
generations, and the checks every request starts with (a text's ids, a body's interventions).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace as with_fields
from typing import Annotated

from fastapi import Depends, Request
from fastapi.responses import Response

from studygroup import progress
from studygroup.errors import InputError
from studygroup.model.interventions import Interventions
from studygroup.views import compact_json
from studygroup.views import payloads
from studygroup.web import generation
from studygroup.web.bodies import DEPRECATED, ConclusionBody, ExplainBody, ModelViewBody
from studygroup.web.guard import LRU, Gate
from studygroup.web.jobs import Jobs, watched
from studygroup.web.passes import InFlight


@dataclass(frozen=True)
class Limits:
    """What the server accepts and how much it holds."""

    max_tokens: int | None = None  # longest text, in tokens (None: the model's context; never past it)
    max_body: int = 1024 * 1024  # bytes of a request body (a text of the whole context fits)
    body_stall_s: float = 30.0  # seconds a body may stop arriving before 408
    max_waiting: int = 8  # requests waiting for the model before 503
    wait_timeout: float = 300.0  # seconds a request may wait for the model before 503
    cache_entries: int = 128
    cache_bytes: int = 64 * 1024 * 1024
    runs_kept: int = 4  # passes kept by (text, interventions), each serving the conclusion, the model view and the heads (0: none)
    generations_kept: int = 4  # generations kept to go on from, by (text, settings, silencing)
    generation_bytes: int = 256 * 1024 * 1024  # bytes of key/value cache those generations hold at most


def dumps(data) -> bytes:
    """An answer's body: compact JSON of data, or data itself where it is that already (bytes)."""
    return data if isinstance(data, bytes) else compact_json.compact(data)


class Service:
    """The model, its gate and its caches: what every endpoint calls."""

    def __init__(self, model, limits: Limits, survey=None):
        self.model, self.limits, self.survey = model, limits, survey
        self.gate = Gate(limits.max_waiting, limits.wait_timeout)
        self.answers = LRU(limits.cache_entries, limits.cache_bytes)
        self.explanations = LRU(16, 16)  # Explanation objects by text, for the model view's ranks
        self.runs = LRU(limits.runs_kept, limits.runs_kept)  # payloads.page_run by (text, interventions)
        self.passes = InFlight()  # the keys of self.runs whose pass is being made
        self.generations = generation.Generations(limits.generations_kept, limits.generation_bytes)
        self.jobs = Jobs(self.gate)
        context = model.config.context_length
        self.max_tokens = context if limits.max_tokens is None else min(limits.max_tokens, context)
        self._model_sha256: str | None = None  # the model file's, read when a survey is first asked for

    def check_text(self, text: str, name: str = "") -> int:
        """Token count of text, or InputError (empty, only whitespace, unknown bytes, too long).
        name: the field it came from, to open the message with where a request has two texts."""
        return len(self.check_ids(text, name))

    def check_ids(self, text: str, name: str = "") -> list[int]:
        """The token ids of text, checked as check_text says."""
        try:
            return self._ids(text)
        except InputError as e:
            raise InputError(f"{name}: {e}" if name else str(e)) from None

    def _ids(self, text: str) -> list[int]:
        """The text tokenized once; this app's limit checked before the model's own checks (its
        context limit would name the model's context, not the app's)."""
        if not text.strip():
            payloads.checked_ids(self.model, text)  # refuses it: only whitespace
        ids = self.model.tokenize(text)
        if len(ids) > self.max_tokens:
            context = self.model.config.context_length
            why = (f"the model's context holds {context}" if self.max_tokens == context else
                   f"this app takes at most {self.max_tokens} (start it with --max-tokens to change that)")
            raise InputError(f"the text is {len(ids)} tokens long: {why}")
        return payloads.checked_ids(self.model, ids)  # the vocabulary

    def checked(self, b, ids: list[int] | None = None) -> tuple[list[int], Interventions]:
        """What every endpoint with interventions starts from: the body's checked token ids (its
        text's; compare: the shorter text's; ids: a chat's prompt, checked already) and its
        Interventions checked against them, its ablation's texts within this app's limit (InputError)."""
        if ids is None:
            ids = min((self.check_ids(text, name) for name, text in b.texts()), key=len)
        for n, text in enumerate(b.ablation.reference):
            self.check_text(text, f"ablation.reference[{n}]")
        if b.ablation.source is not None:
            self.check_text(b.ablation.source, "ablation.from")
        return ids, b.interventions().checked(self.model, len(ids))

    async def answer(self, key: tuple, compute, watch: progress.Watch | None = None) -> Response:
        """The cached answer for key, or compute() -> JSON-able, in the model's turn, then cached.
        watch: follows a long computation (its progress; cancelled: it stops at its next layer)."""
        body = self.answers.get(key)
        if body is None:
            def work():
                cached = self.answers.get(key)  # computed while this request waited
                if cached is not None:
                    return cached
                if watch is None:
                    return dumps(compute())
                watch.check()
                watch.state = "running"
                with progress.watching(watch):
                    return dumps(compute())
            try:
                body = await self.gate.run(work)
            except BaseException as e:  # a request cancelled from outside too: its job never stays live
                if watch is not None:
                    watch.cancel()
                    watch.state = "cancelled" if isinstance(e, progress.Cancelled | asyncio.CancelledError) else "failed"
                raise
            self.answers.put(key, body, len(body))
        if watch is not None:
            watch.state = "done"
        return Response(body, media_type="application/json")

    async def followed(self, request: Request, b, key: tuple, compute) -> Response:
        """self.answer(key, compute) under a Watch named by the body's `job` (jobs.py): its progress
        followed, cancelled by /api/cancel or when its client leaves, and its turn passed between
        layers; a Deprecation header where the body uses deprecated fields."""
        watch = self.jobs.start(getattr(b, "job", None))
        return deprecation(b, await watched(request, watch, self.answer(key, compute, watch)))

    def run(self, text: str, interventions: Interventions = Interventions()):
        """The pass of text with these interventions that the conclusion, the model view and every
        head read (one silencing redrawn: one pass, not three); kept for the next request. In the model's turn."""
        key = (text, interventions)
        # from a kept run without the heads (its layers before the first one) or without the
        # members (its rows before the first one), as they are
        bases = dict.fromkeys(k for k in ((text, with_fields(interventions, silenced_heads=frozenset())),
                                          (text, with_fields(interventions, silenced_members=()))) if k != key)
        while (run := self.runs.get(key)) is None and (end := self.passes.end_of((key, *bases))) is not None:
            self.gate.wait_outside(end.wait)  # made by a computation that passed its turn: not made twice
        if run is None:
            base = next((b for b in map(self.runs.get, bases) if b is not None), None)
            with self.passes.computing(key):
                run = payloads.page_run(self.model, text, interventions, base=base)
                if self.limits.runs_kept:
                    self.runs.put(key, run, 1)
        return run

    def head_run(self, text: str, T: int, interventions: Interventions = Interventions()):
        """The run a head's views of a T-member text read: the page's pass (its recorded vectors
        up to FULL_MAPS_MAX_T members, or, kept, the layer's vectors it keeps for the next window),
        or, for a long text when no pass is kept, one made only as far as the head's layer."""
        if self.limits.runs_kept or T <= payloads.FULL_MAPS_MAX_T:
            return self.run(text, interventions)
        return self.model.before_pass(text, interventions)

    def explanation(self, text: str, top: int):
        e = self.explanations.get((text, top))
        if e is None:
            e = payloads.explanation(self.model, text, top)
            self.remember(text, top, e)
        return e

    def remember(self, text: str, top: int, e) -> None:
        self.explanations.put((text, top), e, 1)
        self.explanations.put((text, None), e, 1)  # any top will do for ranks

    def survey_marks(self) -> dict:
        """The survey's marks for the page, once its model is checked to be this one (the file's
        SHA-256 read once); InputError where it is another model's."""
        if self._model_sha256 is None:
            self._model_sha256 = payloads.model_sha256(self.model)
        return payloads.survey_marks(self.survey, self.model, self._model_sha256)

    def warm(self) -> None:
        """Compute the default text's views, so that the first visit finds them ready."""
        text, none = payloads.DEFAULT_TEXT, Interventions()
        e = self.explanation(text, 10)
        for key, fn in ((ExplainBody(text=text).cache_key(none), lambda: e.to_dict()),
                        (ConclusionBody(text=text).cache_key(none),
                         lambda: payloads.conclusion(self.model, text, 10, base=self.run(text))),
                        (ModelViewBody(text=text, packed=True).cache_key(none, True),
                         lambda: payloads.model_view_json(self.model, text, e, run=self.run(text), packed=True))):
            if self.answers.get(key) is None:
                body = dumps(fn())
                self.answers.put(key, body, len(body))


def deprecation(b, response: Response) -> Response:
    """The response with a Deprecation header naming the deprecated fields b uses, and their
    replacements (bodies.DEPRECATED), where it uses any."""
    used = b.deprecated() if hasattr(b, "deprecated") else []
    if used:
        response.headers["Deprecation"] = "; ".join(f"{old}: use {DEPRECATED[old]}" for old in used)
    return response


def service(request: Request) -> Service:
    """The app's Service (create_app keeps it in app.state), for an endpoint's `s: Served`."""
    return request.app.state.service


#: An endpoint's parameter that is the app's Service.
Served = Annotated[Service, Depends(service)]
