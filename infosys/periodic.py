"""A task repeated every interval in a daemon thread: the ISM refresh and the BDII update loop.

``Periodic(fn, interval_s, clock, name)``: ``start()`` runs ``fn()`` now and then every
``interval_s`` seconds (measured from the start of each run, on the clock passed in) until
``stop()``. An exception in ``fn`` is logged and the next run happens as planned, so one failed
refresh never ends the loop.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)


class Periodic:
    def __init__(self, fn: Callable[[], object], interval_s: float, clock, name: str) -> None:
        self.fn, self.interval_s, self.clock, self.name = fn, interval_s, clock, name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the loop (no-op if it runs already)."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop; waits up to ``timeout`` s for a run in progress."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self.clock.now()
            try:
                self.fn()
            except Exception:  # keep going: the next run may succeed
                log.exception("%s failed", self.name)
            self._stop.wait(max(0.0, started + self.interval_s - self.clock.now()))
