"""Per-epoch wall-clock accounting shared by the main and the communication thread."""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager


class EpochTimers:
    """Named seconds accumulated over one epoch; safe to add to from several threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._seconds = defaultdict(float)

    @contextmanager
    def measure(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self._seconds[name] += seconds

    def pop(self) -> dict:
        """The totals so far (seconds), and start from zero."""
        with self._lock:
            totals, self._seconds = dict(self._seconds), defaultdict(float)
        return totals
