"""Long computations followed and stopped: the page names one with a job id, polls its progress
(POST /api/progress) and may cancel it (POST /api/cancel); a computation whose client leaves is
cancelled too. It stops at its next layer (studygroup.progress.Watch), and between layers lets
the requests waiting for the model take their turn (Gate.turn_passer), so a long explain never
holds a short request back for more than one layer's work.
"""
from __future__ import annotations

import asyncio

from studygroup.errors import InputError
from studygroup.progress import Watch
from studygroup.web.guard import LRU, Gate

#: A job id: letters, digits, _ and -, 1 to 64 of them (the page makes one per computation).
JOB_ID = r"^[A-Za-z0-9_-]{1,64}$"
#: Seconds between two looks at whether a computation's client is still there.
CLIENT_CHECK_S = 0.2
LIVE = ("waiting", "running")


class TooManyJobs(Exception):
    """As many named computations wait or run as the server follows at once (answered 429)."""


class Jobs:
    """The computations named by a job id: every one that waits or runs (at most `live`: a new one
    past them is refused, none is ever dropped) and the last `kept` that ended, to be read."""

    def __init__(self, gate: Gate, kept: int = 64, live: int = 64):
        self.gate, self.kept, self.live = gate, kept, live
        self._live: dict[str, Watch] = {}
        self._ended = LRU(kept, kept)

    def start(self, job: str | None) -> Watch:
        """A Watch for a new computation, registered under `job` (None: followed by nobody but its client)."""
        w = Watch(self.gate.turn_passer())
        if job is None:
            return w
        self._sweep()
        old = self._live.get(job)
        if old is not None:
            raise InputError(f"job {job!r} is still {old.state}: give each computation its own id")
        if len(self._live) >= self.live:
            raise TooManyJobs(f"{self.live} computations with a job id already wait or run, the most this server "
                              "follows: try again once one has ended, or cancel one (/api/cancel)")
        self._live[job] = w
        return w

    def get(self, job: str) -> Watch:
        self._sweep()
        w = self._live.get(job) or self._ended.get(job)
        if w is None:
            raise InputError(f"no computation has the job id {job!r} (the server keeps every one that waits or "
                             f"runs, and the last {self.kept} that ended)")
        return w

    def _sweep(self) -> None:
        """The computations that ended, moved from the live ones to the last that ended."""
        for job, w in list(self._live.items()):
            if w.state not in LIVE:
                del self._live[job]
                self._ended.put(job, w, 1)


async def watched(request, watch: Watch, work):
    """Awaits `work` (a coroutine that computes under `watch`), cancelling the watch as soon as
    the request's client has gone: the computation then stops at its next layer."""
    task = asyncio.ensure_future(work)
    while not task.done():
        await asyncio.wait({task}, timeout=CLIENT_CHECK_S)
        if not task.done() and not watch.cancelled and await request.is_disconnected():
            watch.cancel()
    return task.result()
