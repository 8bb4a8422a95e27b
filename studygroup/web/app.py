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

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from studygroup import progress
from studygroup.errors import StudyGroupError, WindowError
from studygroup.web.guard import UNREADABLE_BODY, BodyLimit, Busy, HostCheck, SecurityHeaders, error_response
from studygroup.web.jobs import TooManyJobs
from studygroup.web.routes import generation, jobs, page, views
from studygroup.web.service import Limits, Service

#: How the web API spells a head's window, for a WindowError's message.
WINDOW_NAMES = {"rows": '"rows": [A, B]', "keys": '"keys": [C, D]'}

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
    for routes in (page, views, jobs, generation):
        app.include_router(routes.router)
    app.add_middleware(BodyLimit, max_body=limits.max_body, stall_s=limits.body_stall_s)
    app.add_middleware(SecurityHeaders)
    if hosts is not None:
        app.add_middleware(HostCheck, hosts=hosts)
    return app


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(WindowError)
    async def _window(request: Request, exc: WindowError):  # named as this API spells them
        return error_response(400, exc.spelled(WINDOW_NAMES))

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
