"""A progress bar on stderr for long work (only when stderr is a terminal; silent otherwise)."""
from __future__ import annotations

import sys
import time


_shown = True  # off in a process whose console is a log (the web server's)


def hide() -> None:
    """From now on, no announcements and no bars in this process (`studygroup serve` calls it)."""
    global _shown
    _shown = False


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
