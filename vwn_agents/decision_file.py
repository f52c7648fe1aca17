"""The live CE agent's per-decision log (``decision_log`` option): a bounded JSON-lines file.

The lease engine behind a CE agent (``scheduler = "leases"``) is the same ``LeaseScheduler`` as
in ``vgrid simulate``, so its per-decision debug log (``leasing.decisionlog``: one JSON object
per placement, acceptance, preemption or rejection, saying why a lease went where it did) works
live too. Here every record also names the job (``"job"``: its key) and ``t`` is the CE clock's
time (epoch seconds); nodes are the node agents' URLs.

The file is bounded: when a line would take it past ``max_mb`` MB it is renamed to
``PATH.1`` (replacing the previous one) and a new ``PATH`` is started, so the log holds at most
about 2 x ``max_mb`` MB on disk. Each line is written whole and flushed (a reader -- ``tail -f``,
``jq`` -- sees complete lines). The file is created mode 0640: it names the site's jobs and
nodes, and is for the site operator, as the CE agent's other local state. Thread-safe.
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from .leasing.decisionlog import DecisionLog

log = logging.getLogger(__name__)


class BoundedLines:
    """A text sink for ``DecisionLog``: ``write(text)`` appends, rotating to ``PATH.1`` past
    ``max_mb`` MB (see module doc). Raises OSError when ``path`` cannot be opened."""

    def __init__(self, path: str | Path, max_mb: float = 10.0) -> None:
        if max_mb <= 0:
            raise ValueError(f"max_mb must be > 0, got {max_mb}")
        self.path = Path(path)
        self.max_bytes = int(max_mb * 1_000_000)
        self.rotations = 0
        self._lock = threading.Lock()
        self._file = self._open()

    def _open(self):
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        return os.fdopen(fd, "a", encoding="utf-8")

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        with self._lock:
            if self._file is None:
                return
            try:
                size = self._file.tell()
                if size and size + len(data) > self.max_bytes:
                    self._file.close()
                    os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                    self._file = self._open()
                    self.rotations += 1
                self._file.write(text)
                self._file.flush()
            except OSError as exc:      # a full disk must not stop scheduling: log once, stop writing
                log.error("decision log %s: %s; no more decisions are logged", self.path, exc)
                self._close()

    def _close(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            self._close()


class JobDecisionLog(DecisionLog):
    """``DecisionLog`` whose records also carry ``"job"``: ``job_of(lease id)`` (the job key)."""

    def __init__(self, out, nodes, job_of) -> None:
        super().__init__(out, nodes)
        self.job_of = job_of

    def write(self, t: float, lease, decision: str, **fields) -> None:
        super().write(t, lease, decision, job=self.job_of(lease.id), **fields)


def attach(engine, path: str, max_mb: float) -> BoundedLines:
    """Log every decision of ``engine`` (a ``lease_engine.LeaseEngine``) to ``path``; returns
    the sink (close it at shutdown). OSError when the file cannot be opened."""
    sink = BoundedLines(path, max_mb)
    engine.scheduler.decisions = JobDecisionLog(sink, engine.scheduler.nodes, engine.job_key)
    return sink
