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
import json
from collections import OrderedDict
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Literal

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from studygroup import page_data
from studygroup.errors import InputError, StudyGroupError

DEFAULT_TEXT = "Cash or credit card? I have a lot"
MAX_TEXT_CHARS = 4000
MAX_TOP = 50
MAX_SILENCED = 512
STATIC_FILES = {"page.css": "text/css; charset=utf-8", "page.js": "text/javascript; charset=utf-8"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}


@dataclass(frozen=True)
class Limits:
    """What the server accepts and how much it holds."""

    max_tokens: int = 256  # longest text, in tokens (also never past the model's context)
    max_body: int = 64 * 1024  # bytes of a request body
    max_waiting: int = 8  # requests waiting for the model before 503
    wait_timeout: float = 300.0  # seconds a request may wait for the model before 503
    cache_entries: int = 128
    cache_bytes: int = 64 * 1024 * 1024


# ---- request bodies ----------------------------------------------------------------------------
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
Top = Annotated[int, Field(ge=1, le=MAX_TOP)]
Index = Annotated[int, Field(ge=0)]
Pair = Annotated[list[Index], Field(min_length=2, max_length=2)]


class TextBody(_Body):
    text: Text
    top: Top = 10


class ConclusionBody(TextBody):
    silence_members: Annotated[list[Index], Field(max_length=MAX_SILENCED)] = []
    silence_heads: Annotated[list[Pair], Field(max_length=MAX_SILENCED)] = []


class CompareBody(_Body):
    text_a: Text
    text_b: Text
    top: Top = 10


class ModelViewBody(_Body):
    text: Text


class HeadBody(_Body):
    text: Text
    layer: Index
    head: Index
    notation: Literal["paper", "columns"] = "paper"
    rows: Literal["auto", "all", "last"] = "auto"


# ---- the model's turn: one at a time, a bounded queue --------------------------------------------
class Busy(Exception):
    """Too many requests already wait for the model."""


class Gate:
    """Runs blocking computations one at a time in a worker thread; refuses past max_waiting."""

    def __init__(self, max_waiting: int, wait_timeout: float):
        self.max_waiting, self.wait_timeout = max_waiting, wait_timeout
        self.pending = 0  # running + waiting (touched only on the event loop's thread)
        self._lock: asyncio.Lock | None = None

    async def run(self, fn):
        if self.pending > self.max_waiting:  # one running and max_waiting waiting
            raise Busy(f"the model is busy: {self.max_waiting} requests are already waiting; try again shortly")
        self._lock = self._lock or asyncio.Lock()
        self.pending += 1
        try:
            with anyio.fail_after(self.wait_timeout):
                await self._lock.acquire()
        except TimeoutError:
            self.pending -= 1
            raise Busy(f"the model stayed busy for {self.wait_timeout:.0f} s; try again shortly") from None
        try:
            return await anyio.to_thread.run_sync(fn)
        finally:
            self._lock.release()
            self.pending -= 1


class LRU:
    """Finished answers (bytes) by key, bounded in entries and in bytes."""

    def __init__(self, entries: int, max_bytes: int):
        self.entries, self.max_bytes, self.size = entries, max_bytes, 0
        self._d: OrderedDict = OrderedDict()

    def get(self, key):
        if key in self._d:
            self._d.move_to_end(key)
            return self._d[key][0]
        return None

    def put(self, key, value, size: int) -> None:
        if key in self._d:
            self.size -= self._d.pop(key)[1]
        self._d[key] = (value, size)
        self.size += size
        while self._d and (len(self._d) > self.entries or self.size > self.max_bytes):
            self.size -= self._d.popitem(last=False)[1][1]


# ---- the app -------------------------------------------------------------------------------------
def _dumps(data) -> bytes:
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for e in exc.errors()[:3]:
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        parts.append(f"{where}: {e.get('msg', 'invalid')}" if where else e.get("msg", "invalid"))
    return "invalid request: " + "; ".join(parts)


class BodyLimit:
    """Refuses request bodies over max_body bytes with 413, by Content-Length or as they stream in."""

    def __init__(self, app, max_body: int):
        self.app, self.max_body = app, max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return await _error(413, self._message())(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body:
                raise HTTPException(413, self._message())
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        return f"the request body is larger than {self.max_body // 1024} KiB"


class SecurityHeaders:
    """Adds the Content-Security-Policy and friends to every response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async def with_headers(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + [
                    (k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
            await send(message)

        await self.app(scope, receive, with_headers if scope["type"] == "http" else send)


class HostCheck:
    """Answers 400 to a Host header outside `hosts` (a page elsewhere cannot reach a loopback app
    through DNS rebinding)."""

    def __init__(self, app, hosts):
        self.app, self.hosts = app, frozenset(hosts)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            name = host if host.endswith("]") else host.rsplit(":", 1)[0]
            if name not in self.hosts:
                return await _error(400, f"unexpected Host header {host!r}: open the address the server printed")(
                    scope, receive, send)
        await self.app(scope, receive, send)


class Service:
    """The model, its gate and its caches: what every endpoint calls."""

    def __init__(self, model, limits: Limits):
        self.model, self.limits = model, limits
        self.gate = Gate(limits.max_waiting, limits.wait_timeout)
        self.answers = LRU(limits.cache_entries, limits.cache_bytes)
        self.explanations = LRU(16, 16)  # Explanation objects by text, for the model view's ranks
        self.max_tokens = min(limits.max_tokens, model.config.context_length)

    def check_text(self, text: str) -> int:
        """Token count of text, or InputError (empty, only whitespace, unknown bytes, too long)."""
        T = len(page_data.checked_ids(self.model, text))
        if T > self.max_tokens:
            context = self.model.config.context_length
            why = (f"the model's context holds {context}" if self.max_tokens == context else
                   f"this app takes at most {self.max_tokens} (start it with --max-tokens to change that)")
            raise InputError(f"the text is {T} tokens long: {why}")
        return T

    async def answer(self, key: tuple, compute) -> Response:
        """The cached answer for key, or compute() -> JSON-able, in the model's turn, then cached."""
        body = self.answers.get(key)
        if body is None:
            def work():
                cached = self.answers.get(key)  # computed while this request waited
                return cached if cached is not None else _dumps(compute())
            body = await self.gate.run(work)
            self.answers.put(key, body, len(body))
        return Response(body, media_type="application/json")

    def explanation(self, text: str, top: int):
        e = self.explanations.get((text, top))
        if e is None:
            e = page_data.explanation(self.model, text, top)
            self.remember(text, top, e)
        return e

    def remember(self, text: str, top: int, e) -> None:
        self.explanations.put((text, top), e, 1)
        self.explanations.put((text, None), e, 1)  # any top will do for ranks

    def warm(self) -> None:
        """Compute the default text's views, so that the first visit finds them ready."""
        e = self.explanation(DEFAULT_TEXT, 10)
        for key, fn in ((("explain", DEFAULT_TEXT, 10), lambda: e.to_dict()),
                        (("conclusion", DEFAULT_TEXT, 10, (), ()), lambda: page_data.conclusion(self.model, DEFAULT_TEXT, 10)),
                        (("model_view", DEFAULT_TEXT, True), lambda: page_data.model_view(self.model, DEFAULT_TEXT, e))):
            if self.answers.get(key) is None:
                body = _dumps(fn())
                self.answers.put(key, body, len(body))


def _static(name: str) -> bytes:
    return resources.files("studygroup").joinpath("static", name).read_bytes()


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def create_app(model, limits: Limits = Limits(), warm: bool = False, hosts=None) -> FastAPI:
    """The web app over one loaded model. warm: compute the default text's views at start.
    hosts: the Host names it answers (None: any; `serve` passes LOOPBACK_HOSTS on a loopback address).

    >>> from fastapi.testclient import TestClient                                   # doctest: +SKIP
    >>> client = TestClient(create_app(studygroup.load()))                          # doctest: +SKIP
    >>> client.post("/api/conclusion", json={"text": "I have a lot"}).json()["top"][0]["token"]  # doctest: +SKIP
    '␣of'
    """
    service = Service(model, limits)

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
    app.add_middleware(BodyLimit, max_body=limits.max_body)
    app.add_middleware(SecurityHeaders)
    if hosts is not None:
        app.add_middleware(HostCheck, hosts=hosts)
    return app


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(StudyGroupError)
    async def _input(request: Request, exc: StudyGroupError):
        return _error(400, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        return _error(422, _validation_message(exc))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException):
        messages = {404: "not found", 405: "method not allowed"}
        detail = exc.detail if isinstance(exc.detail, str) and exc.status_code not in messages else None
        return _error(exc.status_code, detail or messages.get(exc.status_code, "bad request"), exc.headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):  # a bug: logged by the server, one line for the client
        return _error(500, f"internal error ({type(exc).__name__}); the server's log has the details")

    @app.exception_handler(Busy)
    async def _busy(request: Request, exc: Busy):
        return _error(503, str(exc), {"Retry-After": "5"})


def _routes(app: FastAPI, s: Service) -> None:
    model = s.model

    @app.get("/", include_in_schema=False)
    async def page():
        return Response(_static("page.html"), media_type="text/html; charset=utf-8")

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str):
        if name not in STATIC_FILES:
            raise HTTPException(404)
        return Response(_static(name), media_type=STATIC_FILES[name])

    @app.get("/api/info")
    async def info():
        limits = {"max_text_chars": MAX_TEXT_CHARS, "max_tokens": s.max_tokens, "max_top": MAX_TOP,
                  "max_body_bytes": s.limits.max_body, "max_waiting": s.limits.max_waiting}
        return {**page_data.info(model, limits), "default_text": DEFAULT_TEXT}

    @app.post("/api/conclusion")
    async def conclusion(b: ConclusionBody):
        T = s.check_text(b.text)
        for j in b.silence_members:
            model.check_member(j, T)
        for l, h in b.silence_heads:
            model.check_head(l, h)
        members = tuple(sorted(set(b.silence_members)))
        heads = tuple(sorted({(l, h) for l, h in b.silence_heads}))
        return await s.answer(("conclusion", b.text, b.top, members, heads),
                              lambda: page_data.conclusion(model, b.text, b.top, members, heads))

    @app.post("/api/explain")
    async def explain(b: TextBody):
        s.check_text(b.text)
        return await s.answer(("explain", b.text, b.top), lambda: s.explanation(b.text, b.top).to_dict())

    @app.post("/api/compare")
    async def compare(b: CompareBody):
        s.check_text(b.text_a)
        s.check_text(b.text_b)

        def work():
            c = page_data.comparison(model, b.text_a, b.text_b, b.top)
            s.remember(b.text_a, b.top, c.a), s.remember(b.text_b, b.top, c.b)
            return c.to_dict()

        return await s.answer(("compare", b.text_a, b.text_b, b.top), work)

    @app.post("/api/model_view")
    async def model_view(b: ModelViewBody):
        s.check_text(b.text)
        e = s.explanations.get((b.text, None))  # its decisive heads rank the view's heads
        return await s.answer(("model_view", b.text, e is not None), lambda: page_data.model_view(model, b.text, e))

    @app.post("/api/head")
    async def head(b: HeadBody):
        s.check_text(b.text)
        model.check_head(b.layer, b.head)
        return await s.answer(("head", b.text, b.layer, b.head, b.notation, b.rows),
                              lambda: page_data.head(model, b.text, b.layer, b.head, b.notation, b.rows))
