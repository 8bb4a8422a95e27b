"""The page's passes being computed, by their key in Service.runs: a computation that needs a pass
another one is making (the other passed its turn between layers) waits for it, without holding
the model, instead of making it a second time.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager


class InFlight:
    """The passes being computed: each key with an Event set once its pass ended (made or stopped)."""

    def __init__(self):
        self._ends: dict = {}
        self._lock = threading.Lock()

    def end_of(self, keys) -> threading.Event | None:
        """The end of the first pass of `keys` being computed, or None if none is."""
        with self._lock:
            return next((self._ends[k] for k in keys if k in self._ends), None)

    @contextmanager
    def computing(self, key):
        """Within the block, the pass of `key` is being computed; its end is set on leaving (also
        when it was cancelled or failed: a waiting computation then makes it itself)."""
        end = threading.Event()
        with self._lock:
            self._ends[key] = end
        try:
            yield
        finally:
            with self._lock:
                del self._ends[key]
            end.set()
