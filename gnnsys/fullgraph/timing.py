"""Per-epoch wall-clock accounting of the full-graph step (all on the calling thread)."""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager


class EpochTimers:
    """Named seconds accumulated over one epoch."""

    def __init__(self):
        self._seconds = defaultdict(float)

    @contextmanager
    def measure(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self._seconds[name] += seconds

    def pop(self) -> dict:
        """The totals so far (seconds), and start from zero."""
        totals, self._seconds = dict(self._seconds), defaultdict(float)
        return totals
