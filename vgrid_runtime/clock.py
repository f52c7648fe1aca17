"""Clocks passed into every piece of scheduling and bookkeeping code.

Scheduling code never calls ``time.time()``; it receives a clock. ``WallClock`` is what the live
services use; ``SimulatedClock`` is advanced explicitly by a simulator or a test.
Times are seconds since the Unix epoch (live) or since the start of a simulation (simulated).
"""
from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Anything with ``now() -> float`` (seconds)."""

    def now(self) -> float: ...


class WallClock:
    """The real time: ``time.time()`` in seconds since the epoch."""

    def now(self) -> float:
        return time.time()


class SimulatedClock:
    """A clock that only moves when told to.

    ``advance_to(t)`` raises ValueError if ``t`` is earlier than the current time.
    Thread-safe.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._t

    def advance_to(self, t: float) -> None:
        with self._lock:
            if t < self._t:
                raise ValueError(f"simulated clock cannot go back from {self._t} to {t}")
            self._t = float(t)

    def advance(self, dt: float) -> None:
        if dt < 0:
            raise ValueError(f"simulated clock cannot advance by a negative {dt} s")
        self.advance_to(self._t + dt)
