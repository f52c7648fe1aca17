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

    #: Keys kept in the change log before it restarts (readers then re-read every count).
    LOG_LIMIT = 4096

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self.version = 0              # grows at every change
        self._log: list[str] = []     # keys changed from version _log_base on, in order
        self._log_base = 0
        self._lowered_at = 0          # version of the last reset/subtract (counts may have fallen)

    def _changed(self, ce_id: str | None) -> None:
        """Record a change (of one key, or None: of any) -- called with the lock held."""
        self.version += 1
        if ce_id is None:
            self._lowered_at = self.version
        if ce_id is None or len(self._log) >= self.LOG_LIMIT:
            self._log, self._log_base = [], self.version
        else:
            self._log.append(ce_id)

    def increment(self, ce_id: str, n: int = 1) -> int:
        """Add ``n`` (default 1) dispatched jobs to ``ce_id``; returns the new count."""
        with self._lock:
            v = self._counts.get(ce_id, 0) + n
            self._counts[ce_id] = v
            self._changed(ce_id)
            return v

    def changed_since(self, version: int) -> list[str] | None:
        """Keys whose count may have changed since ``version`` (an earlier ``.version``), or
        None when that is no longer known (a reset, or too many changes): re-read them all."""
        with self._lock:
            if version < self._log_base:
                return None
            return self._log[version - self._log_base:]

    def grown_only_since(self, version: int) -> bool:
        """Whether every count is at least what it was at ``version`` (an earlier ``.version``):
        only increments happened since, no reset or subtract. Unlike :meth:`changed_since` it
        stays True when the change log restarts, so a reader whose stored counts are lower
        bounds (the task queues' SFETE order) need not re-read every count then."""
        return version >= self._lowered_at

    def get(self, ce_id: str) -> int:
        """Jobs dispatched to ``ce_id`` since the last reset (0 if none)."""
        return self._counts.get(ce_id, 0)

    def counts(self, ce_ids) -> list[int]:
        """The counts of ``ce_ids`` in that order (0 for a key never incremented)."""
        get = self._counts.get
        return [get(k, 0) for k in ce_ids]

    def reset(self) -> None:
        """Forget all counts (called by the ISM when a new snapshot is taken)."""
        with self._lock:
            self._counts = {}
            self._changed(None)

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
            self._changed(None)

    def snapshot(self) -> dict[str, int]:
        """A copy of all non-zero counts."""
        with self._lock:
            return dict(self._counts)
