"""The broker's Prometheus metrics (``GET /metrics``; plumbing in :mod:`vgrid_runtime.metrics`).

Read at scrape time from the job store and the ISM (nothing added to the broker's logic):

* ``vgrid_jobs{state}`` (gauge): jobs (plain, compound parents and their nodes) by gLite state,
  every state present (0 when empty);
* ``vgrid_submissions_total`` (counter): jobs ever submitted (``Submitted`` entries of the
  job history, which is never deleted, so the count survives a restart);
* ``vgrid_dispatches_total`` (counter): dispatches a CE agent accepted (``Scheduled`` entries;
  both counted incrementally, :class:`HistoryCounts`);
* ``vgrid_ism_refresh_duration_seconds`` (summary: ``_count`` refreshes, ``_sum`` seconds) and
  ``vgrid_ism_last_refresh_duration_seconds`` (gauge); ``vgrid_ism_snapshot_age_seconds``
  (gauge: seconds since the oldest data of the snapshot was fetched, ``Snapshot.age``; absent
  before the first refresh), ``vgrid_ism_snapshot_stale`` (0/1: a source failed), ``vgrid_ism_ces``
  (CE ads in the snapshot);
* ``vgrid_ces_blacklisted`` (gauge): CEs blacklisted now (``ISM.blacklist_entries``).

Kept in memory (a match leaves no trace of its own in the store): ``vgrid_matches_total{result}``
(``matched``: a CE was chosen; ``no-match``) and ``vgrid_match_duration_seconds`` (histogram of
the seconds one job's matchmaking took, ``TaskQueues.choose``: requirements, rank and the
selection policy of seed 004 Section 4.2), measured by wrapping the broker's task queues.
"""
from __future__ import annotations

import threading
import time

from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from sqlalchemy import func, select

from vgrid_runtime.job_states import JobState
from vgrid_runtime.metrics import MetricsOptions, gauge_by, install_metrics, may_scrape

from .db import HistoryRow, JobRow
from .taskqueues import class_aware

#: Buckets of the match duration histogram (seconds): matching is milliseconds per job.
MATCH_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class _TimedQueues:
    """The broker's ``TaskQueues`` with ``choose`` timed and counted (everything else passes
    through unchanged)."""

    def __init__(self, queues, duration: Histogram, matches: Counter) -> None:
        self._queues, self._duration, self._matches = queues, duration, matches

    def choose(self, *args, **kwargs):
        began = time.perf_counter()
        chosen = self._queues.choose(*args, **kwargs)
        self._duration.observe(time.perf_counter() - began)
        self._matches.labels("matched" if chosen is not None else "no-match").inc()
        return chosen

    def class_aware(self) -> bool:   # broker.taskqueues.class_aware: as the wrapped chooser
        return class_aware(self._queues)

    def __getattr__(self, name: str):
        return getattr(self._queues, name)


class HistoryCounts:
    """Submitted and Scheduled entries of the job history, counted incrementally: the history is
    append-only (rows are never deleted while the broker serves), so each scrape reads only the
    rows past the last id it saw (a primary-key range) instead of the whole table."""

    STATES = (JobState.SUBMITTED.value, JobState.SCHEDULED.value)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last_id = 0
        self.counts = {s: 0 for s in self.STATES}

    def read(self, conn) -> dict[str, int]:
        with self._lock:
            top = conn.execute(select(func.max(HistoryRow.id))).scalar() or 0
            if top > self.last_id:
                rows = conn.execute(select(HistoryRow.state, func.count())
                                    .where(HistoryRow.id > self.last_id, HistoryRow.id <= top,
                                           HistoryRow.state.in_(self.STATES))
                                    .group_by(HistoryRow.state)).all()
                for state, n in rows:
                    self.counts[state] += n
                self.last_id = top
            return dict(self.counts)


def _store_families(broker, history: HistoryCounts):
    with broker.store.engine.connect() as c:
        states = dict(c.execute(select(JobRow.state, func.count()).group_by(JobRow.state)).all())
        counts = history.read(c)
    yield gauge_by("vgrid_jobs", "jobs by gLite state", "state", states, [s.value for s in JobState])
    yield CounterMetricFamily("vgrid_submissions", "jobs submitted (job history)",
                              value=counts[JobState.SUBMITTED.value])
    yield CounterMetricFamily("vgrid_dispatches", "dispatches accepted by a CE agent (job history)",
                              value=counts[JobState.SCHEDULED.value])


def _ism_families(broker):
    ism, now = broker.ism, broker.clock.now()
    count, total, last = ism.refresh_seconds
    yield SummaryMetricFamily("vgrid_ism_refresh_duration_seconds", "ISM refreshes and the seconds "
                              "they took (fetching every source and building the snapshot)",
                              count_value=count, sum_value=total)
    if last is not None:
        yield GaugeMetricFamily("vgrid_ism_last_refresh_duration_seconds",
                                "seconds the last ISM refresh took", value=last)
    snap = ism.snapshot()
    if ism.last_refresh is not None:
        yield GaugeMetricFamily("vgrid_ism_snapshot_age_seconds", "seconds since the oldest data "
                                "of the ISM snapshot was fetched", value=snap.age(now))
    yield GaugeMetricFamily("vgrid_ism_snapshot_stale", "1 when a source failed at the last "
                            "refresh (its previous ads are kept)", value=int(snap.stale))
    yield GaugeMetricFamily("vgrid_ism_ces", "CE ads in the ISM snapshot", value=len(snap.ads))
    yield GaugeMetricFamily("vgrid_ces_blacklisted", "CEs blacklisted now",
                            value=len(ism.blacklist_entries(now)))


def install_broker_metrics(app, broker, monitors=(), admins=()) -> None:
    """``GET /metrics`` on the broker's ``app`` (see module doc). Scrapers: ``monitors``
    (``metrics_dns``), ``admins``, the broker's own host certificate; anyone in plain HTTP."""
    history = HistoryCounts()
    registry = install_metrics(
        app, lambda: [*_store_families(broker, history), *_ism_families(broker)],
        lambda who: may_scrape(who, monitors, admins, app.config.get("VGRID_URL")))
    duration = Histogram("vgrid_match_duration_seconds", "seconds the matchmaking of one job took",
                         buckets=MATCH_BUCKETS_S, registry=registry)
    matches = Counter("vgrid_matches", "matchmaking results", ["result"], registry=registry)
    broker.queues = _TimedQueues(broker.queues, duration, matches)


__all__ = ["MetricsOptions", "install_broker_metrics"]
