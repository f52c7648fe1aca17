"""Feedback counters: jobs dispatched to each CE since the last ISM refresh.

Seed 004, Section 4.2: the information system is refreshed periodically, so between two
refreshes the published number of jobs N_j of a CE is stale. The broker keeps a local counter
per CE (or per VO view, keyed ``<GlueCEUniqueID>/<GlueVOViewLocalID>``), incremented every time
it assigns a job there; SFETE uses published N_j + counter; at every ISM refresh the counters
restart from zero because the newly published values include those jobs.
"""
from __future__ import annotations

import threading


class FeedbackCounters:
    """Per-key counts of jobs dispatched since the last refresh. Thread-safe: concurrent
    ``increment`` calls from matchmaking threads never lose an update."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def increment(self, ce_id: str, n: int = 1) -> int:
        """Add ``n`` (default 1) dispatched jobs to ``ce_id``; returns the new count."""
        with self._lock:
            v = self._counts.get(ce_id, 0) + n
            self._counts[ce_id] = v
            return v

    def get(self, ce_id: str) -> int:
        """Jobs dispatched to ``ce_id`` since the last reset (0 if none)."""
        return self._counts.get(ce_id, 0)

    def reset(self) -> None:
        """Forget all counts (called by the ISM when a new snapshot is taken)."""
        with self._lock:
            self._counts = {}

    def subtract(self, mark: dict[str, int]) -> None:
        """Remove the counts in ``mark`` (a ``snapshot()`` taken when an ISM refresh started):
        jobs dispatched while the refresh was fetching stay counted, since the information
        just fetched may not include them yet. Counts never go below zero."""
        with self._lock:
            for k, n in mark.items():
                v = self._counts.get(k, 0) - n
                if v > 0:
                    self._counts[k] = v
                else:
                    self._counts.pop(k, None)

    def snapshot(self) -> dict[str, int]:
        """A copy of all non-zero counts."""
        with self._lock:
            return dict(self._counts)
