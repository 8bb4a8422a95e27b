"""A progress bar on stderr for long work (only when stderr is a terminal; silent otherwise), and
a Watch that a caller sets on its thread to follow the same work from elsewhere and stop it.

Every long computation advances a Progress after each layer of each pass (a pass that no bar
follows advances one of its own, `layer_advance`, while a Watch is set); a Watch set with
`watching(w)` on the computing thread sees every advance (its stage, done and total, and a count
of steps that only grows), raises Cancelled at the next advance once `w.cancel()` was called, and
calls `w.between_layers` there (the web server lets waiting requests take their turn).
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

from studygroup.errors import StudyGroupError


_shown = True  # off in a process whose console is a log (the web server's)


@contextmanager
def hidden():
    """`with hidden(): ...`: no announcements and no bars in this process meanwhile (`studygroup serve`
    while it serves); as they were after."""
    global _shown
    before, _shown = _shown, False
    try:
        yield
    finally:
        _shown = before


def shown() -> bool:
    """Whether `say` prints (work that only feeds a message can be skipped where it does not)."""
    return _shown


def say(message: str, stream=None) -> None:
    """One line on stderr about long work ahead (what it will need), unless hidden."""
    if _shown:
        print(message, file=stream or sys.stderr)


def note(message: str, stream=None) -> None:
    """One line on stderr, only at a terminal (a person waiting), unless hidden."""
    stream = stream or sys.stderr
    if _shown and getattr(stream, "isatty", lambda: False)():
        print(message, file=stream, flush=True)


class Progress:
    """`with Progress(30, "layers") as p: ... p.advance()` draws `layers [#####.....] 15/30 2.1 s`."""

    def __init__(self, total: int, label: str, stream=None, force: bool = False, show: bool = True):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.enabled = show and _shown and (force or getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()

    def advance(self, n: int = 1) -> None:
        self.done += n
        w = getattr(_local, "watch", None)
        if w is not None:
            w.saw(self)
        if self.enabled:
            width = 30
            filled = round(width * self.done / max(1, self.total))
            elapsed = time.perf_counter() - self.start
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                              f"{self.done}/{self.total} {elapsed:.1f} s")
            self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


class Cancelled(StudyGroupError):
    """The computation was cancelled (its client asked so, or left) before it ended."""


_local = threading.local()


class Watch:
    """One computation followed from another thread: what it is doing, and a way to stop it.

    >>> w = Watch()
    >>> with watching(w):
    ...     with Progress(30, "layers", show=False) as bar:
    ...         bar.advance(); bar.advance()
    >>> w.stage, w.done, w.total, w.steps
    ('layers', 2, 30, 2)
    """

    def __init__(self, between_layers=None):
        self.between_layers = between_layers  # called at every advance, on the computing thread
        self.stage, self.done, self.total, self.steps = "", 0, 0, 0
        self.state = "waiting"  # then "running", and "done", "cancelled" or "failed" (set by whoever runs it)
        self.cancelled = False
        self.started = time.monotonic()

    def cancel(self) -> None:
        """Stop the computation at its next advance (after the layer it is in)."""
        self.cancelled = True

    def check(self) -> None:
        """Cancelled if the computation was cancelled."""
        if self.cancelled:
            raise Cancelled("cancelled before it started")

    def as_dict(self) -> dict:
        return {"state": self.state, "stage": self.stage, "done": self.done, "total": self.total, "steps": self.steps,
                "elapsed_s": round(time.monotonic() - self.started, 3)}

    def saw(self, bar: Progress) -> None:
        self.stage, self.done, self.total = bar.label, bar.done, max(bar.total, bar.done)
        self.steps += 1
        if self.cancelled:
            raise Cancelled(f"cancelled during {bar.label} ({bar.done}/{max(bar.total, bar.done)})")
        if self.between_layers is not None:
            self.between_layers()


def layer_advance(total: int, label: str):
    """For a pass of `total` layers that no bar follows: the advance of a silent Progress when a
    Watch is set on this thread (the watch then sees each layer, stops the pass there once
    cancelled, and passes its turn), else None (nobody follows it)."""
    if getattr(_local, "watch", None) is None:
        return None
    return Progress(total, label, show=False).advance


@contextmanager
def watching(watch: Watch):
    """Within the block, every Progress advanced on this thread reports to `watch`."""
    before = getattr(_local, "watch", None)
    _local.watch = watch
    try:
        yield watch
    finally:
        _local.watch = before


class ShardProgress:
    """`survey [#####.....] 12/40 shards, 3.1 sequences/s, 0:42 left` on stderr (at a terminal).
    The rate counts the sequences scored since the bar began (a resumed survey's finished shards
    are in `done` and not in the rate)."""

    def __init__(self, total: int, done: int, sequences_left: int, stream=None):
        self.total, self.done, self.left, self.scored = total, done, sequences_left, 0
        self.stream = stream or sys.stderr
        self.enabled = _shown and getattr(self.stream, "isatty", lambda: False)()
        self.start = time.perf_counter()
        self._draw()

    def advance(self, sequences: int) -> None:
        self.done, self.scored, self.left = self.done + 1, self.scored + sequences, self.left - sequences
        self._draw()

    def _draw(self) -> None:
        if not self.enabled:
            return
        rate = self.scored / max(1e-9, time.perf_counter() - self.start)
        left = f"{int(self.left / rate) // 60}:{int(self.left / rate) % 60:02d} left" if rate else "time left: after a shard"
        filled = round(30 * self.done / max(1, self.total))
        self.stream.write(f"\rsurvey [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} shards, "
                          f"{rate:.1f} sequences/s, {left}  ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
