"""Cached job records for ``GET /jobs/<key>`` (issue 12, "Reads that scale": 100 clients
reading job status).

A status read used to load the job's row and history, build a :class:`broker.db.Job`, render
it as JSON and hash the JSON for the ETag on every request. :class:`RecordCache` keeps the
rendered answer (body bytes and strong ETag) per job and revalidates it against the database
with one indexed statement per read (:data:`_CHECK`): the job's whole row plus the number of
its history rows. The cached answer is reused only when both are equal to what it was rendered
from; anything else renders it again.

Why that is correct across processes (several broker front ends, matcher workers and the CE
agents' events writing the same database): the database row is the truth and is read on every
request, so a change committed by any process is seen by the next read; the history only
grows (the one deletion, of a claim's Ready row when the claim is put back unmatched,
``JobStore.transition_many(quiet=True)``, comes with a new ``state`` and ``updated_at`` in the
row), so every state change shows in the row or in the history's row count, whatever order
concurrent transactions commit their ids in. No writer
needs to know the cache exists, and nothing has to be invalidated. A record's JSON depends only
on the row, the history and the broker's URL (``id``, ``parent``, ``depends_on``), which is one
per broker process.

Authorization is decided on the row of the same statement (its ``owner_dn``), never on the
cache. :meth:`RecordCache.read` raises :class:`broker.db.UnknownJob` for a missing job; the
API answers a job that the caller may not see with the very same 404 (body and headers), so
neither the status nor an ETag tells another user that the job exists (docs/security.md).
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Callable, NamedTuple

from sqlalchemy import bindparam, func, select

from .db import Job, JobStore, UnknownJob

_JOBS, _HIST = JobStore.Row.__table__, JobStore.History.__table__
#: the job's row and its history row count (parameter ``k``: the key): the validator
_CHECK = (select(_JOBS, select(func.count()).where(_HIST.c.key == _JOBS.c.key)
                 .scalar_subquery().label("history_rows"))
          .where(_JOBS.c.key == bindparam("k")))


class Record(NamedTuple):
    """A rendered job record: ``body`` (the JSON bytes ``GET /jobs/<key>`` answers), ``etag``
    (strong, 32 hex characters of the body's SHA-256) and ``owner_dn`` (None: no owner)."""

    body: bytes
    etag: str
    owner_dn: str | None


class RecordCache:
    """Rendered records of at most ``size`` jobs (least recently used dropped), revalidated
    against ``store``'s database on every :meth:`read`.

    ``render(job) -> bytes``: the JSON body of a :class:`broker.db.Job` (the API's record).
    Thread-safe. ``hits`` and ``renders`` count reads answered from the cache and reads that
    rendered (for tests and the benchmark)."""

    def __init__(self, store: JobStore, render: Callable[[Job], bytes], size: int = 10_000) -> None:
        self.store, self.render, self.size = store, render, max(0, size)
        self._entries: OrderedDict[str, tuple[Any, Record]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.renders = 0
        self._compiled: tuple[str, bool] | None = None

    def read(self, key: str) -> Record:
        """The current record of job ``key``; UnknownJob when there is none."""
        check, positional = self._check()
        conn = self.store.engine.raw_connection()   # the pool's DBAPI connection and its cursor:
        try:                                        # no SQLAlchemy Connection or result on the hot path
            cursor = conn.cursor()
            try:
                cursor.execute(check, (key,) if positional else {"k": key})
                seen = cursor.fetchone()
            finally:
                cursor.close()
        finally:
            conn.close()                            # back to the pool (its reset ends the transaction)
        if seen is None:
            raise UnknownJob(key)
        seen = tuple(seen)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] == seen:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry[1]
        job = self.store.get(key)                # typed row and history; if the job changed
        body = self.render(job)                  # since the check, the next read renders again
        record = Record(body, hashlib.sha256(body).hexdigest()[:32], job.owner_dn)
        with self._lock:
            self.renders += 1
            if self.size:
                self._entries[key] = (seen, record)
                self._entries.move_to_end(key)
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
        return record

    def _check(self) -> tuple[str, bool]:
        """:data:`_CHECK` compiled once for the store's database driver: (SQL, positional)."""
        if self._compiled is None:
            compiled = _CHECK.compile(dialect=self.store.engine.dialect)
            self._compiled = (str(compiled), bool(compiled.positional))
        return self._compiled
