"""What unfinished connections may take from the server: a deadline for a request's headers, a cap
on connections below the process's file limit, and a log that says a repeated error once.

uvicorn alone bounds none of this: it has no deadline for the headers, its keep-alive timeout
restarts on every byte, and `limit_concurrency` acts only once headers have arrived. A local
process holding a thousand connections that never finish their headers would otherwise use up the
file descriptors, and every refused accept would log a traceback.
"""
from __future__ import annotations

import logging
import re
import resource
import time
from collections import OrderedDict

from uvicorn.protocols.http.h11_impl import H11Protocol

#: Seconds a connection may take to send a request's headers (from its opening, or from the end
#: of its previous response): a slow sender is closed then, however often it sends a byte.
HEADERS_DEADLINE_S = 10.0
#: Connections taken from the listening queue at one go (uvicorn's `backlog`): they hold file
#: descriptors before the cap can act on them, so SPARE_FDS leaves room for a whole batch.
BACKLOG = 128
#: File descriptors kept free of connections (one accept batch, the model, logs, pipes): the cap
#: is the file limit less these.
SPARE_FDS = 2 * BACKLOG
#: A repeated log message is said once, then counted; the count is said at most this often.
REPEAT_WINDOW_S = 60.0


def connection_cap() -> int:
    """The most connections the server keeps open: the process's soft file limit less SPARE_FDS.

    >>> connection_cap() >= 16
    True
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, soft - SPARE_FDS) if soft != resource.RLIM_INFINITY else 1 << 16


class BoundedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's headers and a connection cap
    that closes the connection waiting longest for its headers to admit a new one
    (`uvicorn.Config(http=BoundedH11)`)."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._seen, self._deadline = None, None
        self._await_headers()
        waiting = _waiting(self.server_state)
        if len(self.connections) > connection_cap():
            oldest = next((c for c in waiting if c is not self), None)
            if oldest is not None:
                oldest._close("the connection cap was reached")

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._note_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._note_request() and not self.transport.is_closing():
            self._await_headers()  # keep-alive: the next request's headers have a deadline too

    def connection_lost(self, exc) -> None:
        super().connection_lost(exc)
        self._stop_waiting()

    def _note_request(self) -> bool:
        """Whether a new request's headers have arrived since last asked (then its deadline ends)."""
        if self.cycle is None or self.cycle is self._seen:
            return False
        self._seen = self.cycle
        self._stop_waiting()
        return True

    def _await_headers(self) -> None:
        self._stop_waiting()
        self._deadline = self.loop.call_later(HEADERS_DEADLINE_S, self._close, "its headers took too long")
        _waiting(self.server_state)[self] = time.monotonic()

    def _stop_waiting(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        _waiting(self.server_state).pop(self, None)

    def _close(self, why: str) -> None:
        self._stop_waiting()
        if not self.transport.is_closing():
            self.logger.warning("closed a connection that had sent no complete request: %s", why)
            self.transport.close()


def _waiting(server_state) -> OrderedDict:
    """The server's connections waiting for headers, longest first (kept on its shared state)."""
    if not hasattr(server_state, "waiting_for_headers"):
        server_state.waiting_for_headers = OrderedDict()
    return server_state.waiting_for_headers


class SayOnce(logging.Filter):
    """Lets a message through the first time; its repeats are counted, and the count is said with
    the next one let through, at most once every REPEAT_WINDOW_S seconds (a flood of one error
    becomes a line a minute, without its traceback)."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S):
        super().__init__()
        self.window_s = window_s
        self.seen: dict[tuple[str, str], list] = {}  # (logger, message) -> [last said, repeats since]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, re.sub(r"\d+", "#", str(record.msg).split("\n", 1)[0]))  # its first line, any numbers
        now = time.monotonic()
        said = self.seen.get(key)
        if said is None:
            self.seen[key] = [now, 0]
            return True
        said[1] += 1
        if now - said[0] < self.window_s:
            return False
        record.msg = f"{record.msg} (repeated {said[1]} times in {now - said[0]:.0f} s)"
        record.exc_info = record.exc_text = None
        said[:] = [now, 0]
        return True


def quiet_repeats(names=("uvicorn.error", "asyncio")) -> SayOnce:
    """Put one SayOnce filter on these loggers (the server's, and asyncio's for failed accepts)."""
    f = SayOnce()
    for name in names:
        logging.getLogger(name).addFilter(f)
    return f
