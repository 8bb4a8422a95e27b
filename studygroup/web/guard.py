"""What stands between a request and the model: admission (one computation at a time, a bounded
queue), a cache of finished answers, and the HTTP guards (body size, Host, security headers).

Plain ASGI and asyncio, no model knowledge: `studygroup.web.app` puts them in front of the app.
"""
from __future__ import annotations

import asyncio
import codecs
import re
import threading
from collections import OrderedDict

import anyio
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    """Every refusal's shape: {"error": message}."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class Busy(Exception):
    """Too many requests already wait for the model."""


class Gate:
    """Runs blocking computations one at a time in a worker thread; refuses past max_waiting."""

    def __init__(self, max_waiting: int, wait_timeout: float):
        self.max_waiting, self.wait_timeout = max_waiting, wait_timeout
        self.pending = 0  # running + waiting (touched only on the event loop's thread)
        self.queued = 0  # waiting for their first turn (a computation that passed its turn is not counted)
        self._lock: asyncio.Lock | None = None

    async def run(self, fn):
        if self.pending > self.max_waiting:  # one running and max_waiting waiting
            raise Busy(f"the model is busy: {self.max_waiting} requests are already waiting; try again shortly")
        self._lock = self._lock or asyncio.Lock()
        self.pending += 1
        self.queued += 1
        try:
            with anyio.fail_after(self.wait_timeout):
                await self._lock.acquire()
        except TimeoutError:
            self.pending -= 1
            raise Busy(f"the model stayed busy for {self.wait_timeout:.0f} s; try again shortly") from None
        finally:
            self.queued -= 1
        try:
            return await anyio.to_thread.run_sync(fn)
        finally:
            self._lock.release()
            self.pending -= 1

    def turn_passer(self):
        """For a long computation: a function its worker thread calls between layers, which lets
        every request waiting then for its first turn take it first (the lock is fair: they queued
        before it). A computation paused so is not waited for: the one whose turn it is runs on,
        rather than passing every layer back and forth."""
        def pass_turn():
            if self.queued > 0 and self._lock is not None:
                anyio.from_thread.run(self._pass_turn)
        return pass_turn

    async def _pass_turn(self):
        self._lock.release()
        await self._lock.acquire()

    def wait_outside(self, wait) -> None:
        """From a computation's worker thread: gives the model up while `wait()` blocks (another
        computation, paused between its layers, is making what this one needs), then queues for it again."""
        anyio.from_thread.run(self._wait_outside, wait)

    async def _wait_outside(self, wait):
        self._lock.release()
        try:
            await anyio.to_thread.run_sync(wait)
        finally:
            await self._lock.acquire()


class LRU:
    """Finished answers (bytes) by key, bounded in entries and in bytes. Safe to share between the
    event loop and the worker thread (the model's computations put what they made)."""

    def __init__(self, entries: int, max_bytes: int):
        self.entries, self.max_bytes, self.size = entries, max_bytes, 0
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key][0]
            return None

    def put(self, key, value, size: int) -> None:
        with self._lock:
            if key in self._d:
                self.size -= self._d.pop(key)[1]
            self._d[key] = (value, size)
            self.size += size
            while self._d and (len(self._d) > self.entries or self.size > self.max_bytes):
                self.size -= self._d.popitem(last=False)[1][1]


#: FastAPI's words for a body it cannot decode; the app answers them with 422 and an example.
UNREADABLE_BODY = "There was an error parsing the body"


class BodyLimit:
    """Refuses request bodies over max_body bytes with 413, by Content-Length or as they stream in,
    and bodies that stop arriving for `stall_s` seconds with 408 (a client that sends half a body
    would otherwise hold its connection open for ever)."""

    def __init__(self, app, max_body: int, stall_s: float = 30.0):
        self.app, self.max_body, self.stall_s = app, max_body, stall_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return await error_response(413, self._message())(scope, receive, send)
        seen, complete, utf8 = 0, False, codecs.getincrementaldecoder("utf-8")()

        async def limited():
            nonlocal seen, complete
            if complete:  # after the body: waiting for a disconnect is not a stall
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.stall_s)
            except TimeoutError:
                raise HTTPException(408, f"the request body stopped arriving for {self.stall_s:.0f} s") from None
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            seen += len(message.get("body", b""))
            if seen > self.max_body:
                raise HTTPException(413, self._message())
            if not _utf8_json_so_far(utf8, message.get("body", b""), complete):
                raise HTTPException(400, UNREADABLE_BODY)
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        return f"the request body is larger than {self.max_body // 1024} KiB"


def _utf8_json_so_far(decoder, chunk: bytes, final: bool) -> bool:
    """Whether a body's bytes so far can be UTF-8 JSON. json.loads would also read UTF-16 and
    UTF-32 (it detects them); only UTF-8 is taken. Their NUL bytes give them away even where
    they happen to be valid UTF-8: JSON text never holds a raw NUL."""
    if b"\x00" in chunk:
        return False
    try:
        decoder.decode(chunk, final=final)
    except UnicodeDecodeError:
        return False
    return True


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


def host_parts(host: str) -> tuple[str, str | None]:
    """A Host header's name and port, as written (None: no port).

    >>> host_parts("[::1]:8000"), host_parts("[::1]"), host_parts("localhost:evil")
    (('[::1]', '8000'), ('[::1]', None), ('localhost', 'evil'))
    """
    if host.endswith("]"):
        return host, None
    name, colon, port = host.rpartition(":")
    return (name, port) if colon else (host, None)


class HostCheck:
    """Answers 400 to a Host header outside `hosts`, or whose port is not a number (a page elsewhere
    cannot reach a loopback app through DNS rebinding). Any port is taken: a forwarded one differs
    from the server's own."""

    def __init__(self, app, hosts):
        self.app, self.hosts = app, frozenset(hosts)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            name, port = host_parts(host)
            if name not in self.hosts or not (port is None or re.fullmatch(r"[0-9]{1,5}", port)):
                return await error_response(400, f"unexpected Host header {host!r}: open the address the server printed")(
                    scope, receive, send)
        await self.app(scope, receive, send)
