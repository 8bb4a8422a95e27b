"""The local web app: `studygroup serve`. Thin: parse and validate, call the library, return JSON.

One model in memory. Computations run one at a time (a lock); up to `max_waiting` requests
wait their turn and the rest are answered 503 at once, so a burst never exhausts memory.
Finished answers are kept in a small LRU cache (bounded in entries and bytes), and a cached
answer is served without waiting. Every bad request gets a 4xx and `{"error": "..."}`; a body
over `max_body` bytes gets 413. Nothing is loaded from another host: the page, its script and
its style come from this package, and /docs and /redoc (which load from a CDN) are off.
The endpoints are documented in docs/web-api.md.
"""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace as with_fields

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from studygroup.model.interventions import Interventions
from studygroup.views import compact_json
from studygroup.views import payloads
from studygroup.study import DEFAULT_TEXT
from studygroup.study import lesson_sections
from studygroup.study import lens as study_lens
from studygroup.study import patching as study_patching
from studygroup.study import overview as study_overview
from studygroup.study import why as study_why
from studygroup.study.window import WEB, WindowError
from studygroup.views import assets
from studygroup import progress
from studygroup.errors import InputError, StudyGroupError
from studygroup.web import generation
from studygroup.web.guard import (LRU, UNREADABLE_BODY, BodyLimit, Busy, Gate, HostCheck, SecurityHeaders,
                                  error_response)
from studygroup.web.bodies import (DEPRECATED, MAX_TOP, CompareBody, ConclusionBody, ExplainBody, GenerateBody,
                                   HeadBody, JobBody, LensBody, LessonBody, ModelViewBody, OverviewBody, PatchBody,
                                   PatchTexts, WhyBody)
from studygroup.web.jobs import Jobs, TooManyJobs, watched
from studygroup.web.passes import InFlight

#: What /static/ serves: the style, and the script joined from its files (views/assets.py).
STATIC_FILES = {"page.css": "text/css; charset=utf-8", "page.js": "text/javascript; charset=utf-8"}


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


# ---- the app -------------------------------------------------------------------------------------
def _dumps(data) -> bytes:
    """An answer's body: compact JSON of data, or data itself where it is that already (bytes)."""
    return data if isinstance(data, bytes) else compact_json.compact(data)


EXAMPLE_BODIES = {"/api/compare": '{"text_a": "I have a lot", "text_b": "Cash or credit card? I have a lot"}',
                  "/api/head": '{"text": "I have a lot", "layer": 24, "head": 6}',
                  "/api/patch": '{"clean": "The cat sat on the", "corrupted": "The dog sat on the"}',
                  "/api/patch_cost": '{"clean": "The cat sat on the", "corrupted": "The dog sat on the"}'}


def _example(path: str) -> str:
    """A body the endpoint at `path` takes, for messages about a body it cannot use."""
    return EXAMPLE_BODIES.get(path, '{"text": "I have a lot"}')


def _is_json(content_type: str) -> bool:
    """application/json or application/…+json, as FastAPI reads bodies."""
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _validation_message(exc: RequestValidationError, content_type: str, example: str) -> str:
    """One line that says what to fix: the body as a whole first (none, not JSON, not an object),
    then up to three fields."""
    first = next(iter(exc.errors()), {})
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        at = f" (error at character {loc[1]})" if len(loc) > 1 else ""
        return f"the body is not valid JSON{at}: send an object such as {example}"
    if loc == ("body",) and first.get("type") == "missing":
        return f"the request has no body: send a JSON object such as {example}"
    if loc == ("body",) and not _is_json(content_type):
        got = f"got {content_type!r}" if content_type else "it has none"
        return f"send the body as JSON, with Content-Type: application/json ({got})"
    if loc == ("body",):
        return f"the body must be a JSON object such as {example}"
    parts = []
    for e in exc.errors()[:3]:
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        parts.append(f"{where}: {e.get('msg', 'invalid')}" if where else e.get("msg", "invalid"))
    return "invalid request: " + "; ".join(parts)


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
                    return _dumps(compute())
                watch.check()
                watch.state = "running"
                with progress.watching(watch):
                    return _dumps(compute())
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
        from studygroup.study.survey.survey import check_surveyed, file_sha256, model_file

        if self._model_sha256 is None:
            self._model_sha256 = file_sha256(model_file(self.model))
        check_surveyed(self.survey, self._model_sha256, model_file(self.model).name)
        return self.survey.marks()

    def warm(self) -> None:
        """Compute the default text's views, so that the first visit finds them ready."""
        e, none = self.explanation(DEFAULT_TEXT, 10), Interventions()
        for key, fn in ((ExplainBody(text=DEFAULT_TEXT).cache_key(none), lambda: e.to_dict()),
                        (ConclusionBody(text=DEFAULT_TEXT).cache_key(none),
                         lambda: payloads.conclusion(self.model, DEFAULT_TEXT, 10, base=self.run(DEFAULT_TEXT))),
                        (ModelViewBody(text=DEFAULT_TEXT, packed=True).cache_key(none, True),
                         lambda: payloads.model_view_json(self.model, DEFAULT_TEXT, e, run=self.run(DEFAULT_TEXT), packed=True))):
            if self.answers.get(key) is None:
                body = _dumps(fn())
                self.answers.put(key, body, len(body))


def _static(name: str) -> bytes:
    """A file of the page (views/static/), or the joined script for page.js."""
    return (assets.page_script() if name == "page.js" else assets.static_text(name)).encode("utf-8")


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def create_app(model, limits: Limits = Limits(), warm: bool = False, hosts=None, survey=None) -> FastAPI:
    """The web app over one loaded model. warm: compute the default text's views at start.
    hosts: the Host names it answers (None: any; `serve` passes LOOPBACK_HOSTS on a loopback address).
    survey: a finished survey (`load_survey`) whose heads' corpus roles GET /api/survey gives.

    >>> from fastapi.testclient import TestClient
    >>> client = TestClient(create_app(model))
    >>> client.post("/api/conclusion", json={"text": "I have a lot"}).json()["top"][0]["token"]
    '␣of'
    """
    service = Service(model, limits, survey)

    @asynccontextmanager
    async def lifespan(app):
        task = asyncio.create_task(service.gate.run(service.warm)) if warm else None
        yield
        if task is not None:
            task.cancel()

    app = FastAPI(title="studygroup", docs_url=None, redoc_url=None, openapi_url="/api/openapi.json",
                  lifespan=lifespan)
    app.state.service = service
    _handlers(app)
    _routes(app, service)
    app.add_middleware(BodyLimit, max_body=limits.max_body, stall_s=limits.body_stall_s)
    app.add_middleware(SecurityHeaders)
    if hosts is not None:
        app.add_middleware(HostCheck, hosts=hosts)
    return app


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(WindowError)
    async def _window(request: Request, exc: WindowError):  # named as this API spells them
        return error_response(400, exc.spelled(WEB))

    @app.exception_handler(progress.Cancelled)
    async def _cancelled(request: Request, exc: progress.Cancelled):
        return error_response(409, f"the computation was {exc}")

    @app.exception_handler(StudyGroupError)
    async def _input(request: Request, exc: StudyGroupError):
        return error_response(400, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        return error_response(422, _validation_message(exc, request.headers.get("content-type", ""), _example(request.url.path)))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException):
        messages = {404: "not found", 405: "method not allowed"}
        if exc.status_code == 400 and exc.detail == UNREADABLE_BODY:  # FastAPI's words for bytes that are not UTF-8 JSON
            return error_response(422, f"the body is not valid JSON (UTF-8 text): send an object such as {_example(request.url.path)}")
        detail = exc.detail if isinstance(exc.detail, str) and exc.status_code not in messages else None
        return error_response(exc.status_code, detail or messages.get(exc.status_code, "bad request"), exc.headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):  # a bug: logged by the server, one line for the client
        return error_response(500, f"internal error ({type(exc).__name__}); the server's log has the details")

    @app.exception_handler(Busy)
    async def _busy(request: Request, exc: Busy):
        return error_response(503, str(exc), {"Retry-After": "5"})

    @app.exception_handler(TooManyJobs)
    async def _too_many_jobs(request: Request, exc: TooManyJobs):
        return error_response(429, str(exc), {"Retry-After": "5"})


def _routes(app: FastAPI, s: Service) -> None:
    model = s.model

    async def followed(request: Request, b, key: tuple, compute) -> Response:
        """s.answer(key, compute) under a Watch named by the body's `job` (jobs.py): its progress
        followed, cancelled by /api/cancel or when its client leaves, and its turn passed between
        layers; a Deprecation header where the body uses deprecated fields."""
        watch = s.jobs.start(getattr(b, "job", None))
        return _deprecation(b, await watched(request, watch, s.answer(key, compute, watch)))

    @app.head("/", include_in_schema=False)  # HEAD wherever GET works (uvicorn sends no body)
    @app.get("/", include_in_schema=False)
    async def page():
        return Response(_static("page.html"), media_type="text/html; charset=utf-8")

    @app.head("/static/{name}", include_in_schema=False)
    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str):
        if name not in STATIC_FILES:
            raise HTTPException(404)
        return Response(_static(name), media_type=STATIC_FILES[name])

    @app.head("/api/info", include_in_schema=False)
    @app.get("/api/info")
    async def info():
        limits = {"max_tokens": s.max_tokens, "context_length": model.config.context_length, "max_top": MAX_TOP,
                  "max_body_bytes": s.limits.max_body, "max_waiting": s.limits.max_waiting}
        return {**payloads.info(model, limits), "default_text": DEFAULT_TEXT}

    @app.get("/api/survey")
    async def survey_marks():
        if s.survey is None:
            return error_response(404, "this server shows no survey: start it with `studygroup serve --survey DIR`")
        return await asyncio.to_thread(s.survey_marks)

    @app.post("/api/conclusion")
    async def conclusion(b: ConclusionBody, request: Request):
        _, i = s.checked(b)
        silencing = bool(i.silenced_members or i.silenced_heads)
        return await followed(request, b, b.cache_key(i), lambda: payloads.conclusion(
            model, b.text, b.top, i, base=s.run(b.text), after=s.run(b.text, i) if silencing else None))

    @app.post("/api/explain")
    async def explain(b: ExplainBody, request: Request):
        if b.chat or b.system is not None:  # the chat's ids, explained as they are (never the text's own explanation)
            ids, i = s.checked(b, generation.prompt(s, b))
            return await followed(request, b, b.cache_key(i), lambda: payloads.explanation(
                model, ids, b.top, i, b.measure_heads).to_dict())
        _, i = s.checked(b)
        if i != Interventions() or b.measure_heads is not None:  # not the text's own default explanation: not remembered
            return await followed(request, b, b.cache_key(i), lambda: payloads.explanation(
                model, b.text, b.top, i, b.measure_heads).to_dict())
        return await followed(request, b, b.cache_key(i), lambda: s.explanation(b.text, b.top).to_dict())

    @app.post("/api/progress")
    async def job_progress(b: JobBody):
        return {"job": b.job, **s.jobs.get(b.job).as_dict()}

    @app.post("/api/cancel")
    async def cancel(b: JobBody):
        w = s.jobs.get(b.job)
        if w.state in ("waiting", "running"):
            w.cancel()
        return {"job": b.job, **w.as_dict()}

    @app.post("/api/compare")
    async def compare(b: CompareBody, request: Request):
        _, i = s.checked(b)

        def work():
            c = payloads.comparison(model, b.text_a, b.text_b, b.top, i)
            if i == Interventions():  # the texts' own explanations
                s.remember(b.text_a, b.top, c.a), s.remember(b.text_b, b.top, c.b)
            return c.to_dict()

        return await followed(request, b, b.cache_key(i), work)

    @app.post("/api/model_view")
    async def model_view(b: ModelViewBody, request: Request):
        _, i = s.checked(b)
        e = s.explanations.get((b.text, None))  # its decisive heads rank the view's heads
        return await followed(request, b, b.cache_key(i, e is not None), lambda: payloads.model_view_json(
            model, b.text, e, i, run=s.run(b.text, i), packed=b.packed))

    @app.post("/api/head")
    async def head(b: HeadBody, request: Request):
        ids, i = s.checked(b)
        model.check_head(b.layer, b.head)
        rows, keys = (tuple(x) if isinstance(x, list) else x for x in (b.rows, b.keys))
        # the kept run: its recorded vectors (short texts) or the layer's vectors it keeps (long ones)
        return await followed(request, b, b.cache_key(i), lambda: payloads.head(
            model, b.text, b.layer, b.head, b.notation, rows, keys, i, run=s.head_run(b.text, len(ids), i), packed=b.packed))

    @app.post("/api/overview")
    async def overview(b: OverviewBody, request: Request):
        ids, i = s.checked(b)
        model.check_head(b.layer, b.head)
        rows, keys = (slice(*x) if isinstance(x, list) else None for x in (b.rows, b.keys))
        return await followed(request, b, b.cache_key(i), lambda: study_overview.overview(
            s.head_run(b.text, len(ids), i), b.layer, b.head, rows, keys, b.side).to_dict())

    @app.post("/api/lesson")
    async def lesson(b: LessonBody, request: Request):
        _, i = s.checked(b)
        if (b.layer is None) != (b.head is None):
            raise InputError("give both layer and head, or neither (the most decisive head not resting on a sink)")
        if b.layer is not None:
            model.check_head(b.layer, b.head)

        def work():  # no head given: explain's order (kept for the page's other views), then the sink rule
            layer, head = (b.layer, b.head) if b.layer is not None else lesson_sections.default_head(
                model, b.text, [(e.layer, e.head) for e in s.explanation(b.text, 10).heads])
            return lesson_sections.lesson_sections(model, b.text, layer, head, b.query, b.key, i).to_dict() | i.ablation_field()

        return await followed(request, b, b.cache_key(i), work)

    @app.post("/api/why")
    async def why(b: WhyBody, request: Request):
        _, i = s.checked(b)
        model.check_head(b.layer, b.head)
        return await followed(request, b, b.cache_key(i), lambda: study_why.why(
            model, b.text, b.layer, b.head, b.query, b.key, i).to_dict())

    @app.post("/api/lens")
    async def lens(b: LensBody, request: Request):
        rows = _lens_rows(b.rows, s.check_text(b.text))
        if rows is not None and b.all_positions:
            raise InputError("give rows or all_positions, not both: rows are the members shown")
        return await followed(request, b, ("lens", b.text, b.top, rows, b.all_positions),
                              lambda: study_lens.lens(model, b.text, top=b.top, positions=rows and slice(*rows),
                                                      all_positions=b.all_positions).to_dict())

    @app.post("/api/patch_cost")
    async def patch_cost(b: PatchTexts):
        T = _patch_checked(s, b)
        return {"members": T, "layer_passes": study_patching.passes(model, T), "cost": study_patching.cost(model, T)}

    @app.post("/api/patch")
    async def patch(b: PatchBody, request: Request):
        _patch_checked(s, b)
        return await followed(request, b, ("patch", b.clean, b.corrupted, b.answer, b.wrong),
                              lambda: study_patching.patch(model, b.clean, b.corrupted, answer=b.answer, wrong=b.wrong).to_dict())

    @app.post("/api/generate")
    async def generate(b: GenerateBody):
        ids, i = s.checked(b, generation.prompt(s, b))
        T = len(ids)
        if (b.layer is None) != (b.head is None):
            raise InputError("give both layer and head (what each word's question heard there), or neither")
        head = None if b.layer is None else model.check_head(b.layer, b.head)
        kw = generation.settings(b, i)
        if T + len(b.words) + b.n > s.max_tokens:
            raise InputError(f"the text ({T} tokens), the {len(b.words)} words so far and {b.n} more exceed "
                             f"the {s.max_tokens} members this app takes")
        payloads.checked_ids(model, ids + list(b.words))  # the words are ids of the vocabulary
        key = (tuple(ids), kw["sampling"], b.ignore_eos, b.candidates, i)  # the generation to go on from
        return _deprecation(b, await generation.stream(s, b, ids, key, kw, head))


def _deprecation(b, response: Response) -> Response:
    """The response with a Deprecation header naming the deprecated fields b uses, and their
    replacements (bodies.DEPRECATED), where it uses any."""
    used = b.deprecated() if hasattr(b, "deprecated") else []
    if used:
        response.headers["Deprecation"] = "; ".join(f"{old}: use {DEPRECATED[old]}" for old in used)
    return response


def _lens_rows(rows: list | None, T: int) -> tuple | None:
    """The lens's rows [A, B] (a slice of a T-member text) as a key, checked: InputError where they
    hold no member, or more than the lens shows at once."""
    if rows is None:
        return None
    n = len(range(T)[slice(*rows)])
    if n == 0:
        raise InputError(f"rows {rows} hold no member of this {T}-member text (a Python slice: members A to B-1)")
    if n > study_lens.DEFAULT_POSITIONS:
        raise InputError(f"rows {rows} hold {n} members: the lens shows at most {study_lens.DEFAULT_POSITIONS} at "
                         "once; give a narrower [A, B]")
    return tuple(rows)


def _patch_checked(s: Service, b: PatchTexts) -> int:
    """The members of each of the two texts, checked before any pass (the app's limit, then
    patching's own checks: the same length, metric words of one token)."""
    s.check_text(b.clean, "clean"), s.check_text(b.corrupted, "corrupted")
    return len(study_patching.checked(s.model, b.clean, b.corrupted, b.answer, b.wrong)[0])
