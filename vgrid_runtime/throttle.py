"""At most one log line per key per interval: for loops that retry a failing call every beat
(heartbeats to an unreachable service, a matcher pass on a full disk) and must say so without
filling the log."""
from __future__ import annotations

import threading
import time


class Throttle:
    """``due(key)`` is True at most once every ``every_s`` seconds (monotonic) per ``key``.
    Thread-safe."""

    def __init__(self, every_s: float = 60.0) -> None:
        self.every_s = every_s
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def due(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            if now < self._next.get(key, float("-inf")):
                return False
            self._next[key] = now + self.every_s
            return True
