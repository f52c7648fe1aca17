"""The matcher as its own worker: claim Waiting jobs in batches, choose, dispatch per CE (issue 12).

A matcher worker is a thread beside the broker's HTTP server with **its own database
connection** (its own :class:`broker.db.JobStore`, i.e. engine and pool, on the broker's
database URL), woken by every submission (:class:`Wakeup`) and every ``match_interval_s``.
``BrokerSettings.matcher_workers`` of them run (config ``matcher_workers``); several brokers
may also share one PostgreSQL database. One pass (:func:`match_pass`) repeats, until no
Waiting job is left behind its cursor:

1. **claim** a batch of at most ``match_batch`` Waiting jobs, oldest first, in one UPDATE
   (:meth:`broker.bulk_store.BulkTransitions.claim`: Waiting -> Ready, guarded by the state,
   ``FOR UPDATE SKIP LOCKED`` on PostgreSQL): two workers never hold the same job;
2. **choose** a CE for each (:class:`broker.taskqueues.TaskQueues`: a class is matched once per
   ISM snapshot, per job only the selection; the feedback counter of the chosen CE is
   incremented, seed 004 Section 4.2), grouping the jobs by CE; jobs without a match go back
   to Waiting in one UPDATE (or end Aborted, ``no-resources``, after ``match_expiry_s``);
3. **dispatch** each group in one POST and record the results in one UPDATE per outcome
   (:class:`broker.bulk_dispatch.BulkDispatcher`).

Why a worker of its own: the HTTP threads' submissions then never hold the matcher's
connection or its transactions, and the matcher's store work is a few statements per batch
instead of two transactions per job, so a submission burst no longer starves dispatch
(``tests/test_matcher_worker.py``). Python threads share one interpreter lock: the workers
gain from overlapping waits (HTTP, database), not from a second core.

Crash safety: a job claimed (Ready) but not yet recorded Scheduled when the broker dies goes
back to Waiting at the next start (:mod:`broker.recovery`) and is posted again under the same
dispatch key, which the CE agent accepts once only.
"""
from __future__ import annotations

import gc
import logging
import threading
from collections import defaultdict
from typing import NamedTuple

import jdl as jdlmod
from vgrid_runtime.job_states import JobState
from vgrid_runtime.outcomes import Outcome
from vgrid_runtime.storage import log_failure

from .bulk_dispatch import Target
from .db import JobStore
from .matchmaker import CE_ID
from .taskqueues import class_aware

log = logging.getLogger("vgrid.broker")

NO_MATCH = "no compatible resources"
_NONE: frozenset = frozenset()   # the exclusions of a job that failed on no CE (most): not made per job


class Wakeup:
    """The broker's wake-up: ``set()`` wakes its own loop and every matcher worker; ``wait``
    and ``clear`` are those of the loop's own ``threading.Event``."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.events: list[threading.Event] = []

    def set(self) -> None:
        self._event.set()
        for e in list(self.events):
            e.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()


def match_pass(broker, store, stop: threading.Event | None = None) -> int:
    """One FCFS pass over the Waiting jobs through ``store`` (a JobStore on the broker's
    database): batches of ``broker.settings.match_batch`` claimed, chosen, dispatched and
    recorded, until a claim finds nothing behind the pass's cursor (jobs put back to Waiting
    in this pass are behind it). Returns how many jobs were Scheduled or ended."""
    if broker.ism.last_refresh is None:
        return 0   # the ISM has never been filled: wait rather than abort everything
    done, after = 0, None
    limit = max(1, broker.settings.match_batch)
    while stop is None or not stop.is_set():
        jobs = store.claim(broker.clock.now(), limit, after=after, owner=broker.instance)
        if not jobs:
            break
        after = (jobs[-1].submitted_at, jobs[-1].key)
        done += match_batch(broker, store, jobs)
        if len(jobs) < limit:
            break
    return done


class Sandbox(NamedTuple):
    """What dispatch reads of a job's JDL (``BulkDispatcher.body``), from its stored columns."""

    input_sandbox: list[str]


def match_batch(broker, store, jobs: list) -> int:
    """Choose, dispatch and record one batch of claimed (Ready) ``jobs``; how many were
    Scheduled or ended.

    A job whose class id and input sandbox were stored at submission is not parsed when its
    class has a representative already (:class:`broker.taskqueues.TaskQueues`); older rows are
    parsed, their class computed once and written back (:meth:`JobStore.store_classes`)."""
    now = broker.clock.now()
    ads = broker.ism.candidates()                      # one ISM snapshot for the batch
    feedback = broker.matchmaker.feedback
    queues = broker.queues
    aware = class_aware(queues)
    groups: dict[Target, list] = defaultdict(list)
    targets: dict[str, Target] = {}                    # feedback key -> its Target, once a batch
    retry, done, backfill = [], 0, []
    parsed: dict[tuple[str, str], object] = {}         # equal JDL texts are parsed once a batch
    for job in jobs:
        klass, desc = job.match_class, None
        if aware and job.input_sandbox is not None:
            desc = queues.representative(klass)
        if desc is not None:
            payload = Sandbox(job.input_sandbox)
        else:
            try:
                desc = parsed.get((job.jdl, job.filename))
                if desc is None:
                    desc = parsed[(job.jdl, job.filename)] = jdlmod.parse_jdl(job.jdl, job.filename,
                                                                             local_files=False)
            except jdlmod.JDLError as exc:   # validated at submission: only a corrupted row
                done += _end(broker, store, job, now, f"stored JDL does not parse: {exc}", Outcome.DISPATCH_FAILED)
                continue
            payload = desc
            if aware:
                if klass is None or job.input_sandbox is None:
                    klass = queues.class_of(desc)
                    backfill.append((job.key, klass, desc.input_sandbox))
                queues.remember(klass, desc)
        kw = {"klass": klass} if aware else {}
        chosen = queues.choose(desc, ads, now=now, vo=job.owner_vo, fqans=tuple(job.owner_fqans),
                               exclude=frozenset(job.failed_ces) if job.failed_ces else _NONE, **kw)
        if chosen is None:
            if now - (job.waiting_since or job.submitted_at) >= broker.settings.match_expiry_s:
                tried = (f" (not on the CEs it failed on: {', '.join(job.failed_ces)}); last failure: "
                         f"{job.last_failure}" if job.failed_ces else "")
                done += _end(broker, store, job, now, NO_MATCH + tried, Outcome.NO_RESOURCES)
            else:
                retry.append(job)
            continue
        feedback.increment(chosen.ce_id)
        target = targets.get(chosen.ce_id)
        if target is None:
            target = targets[chosen.ce_id] = Target(str(chosen.ad.get(CE_ID, chosen.ce_id)), broker._ce_url(chosen.ad))
        groups[target].append((job, payload))
    if backfill:
        store.store_classes(backfill)
    if retry:
        moved = store.transition_many([j.key for j in retry], JobState.WAITING, now, expect=JobState.READY,
                                      reason=f"{NO_MATCH} yet; retrying", quiet=True)
        broker.dispatcher._refresh_parents(retry, moved, now)
    dispatched = broker.dispatcher.dispatch_all(groups)   # POSTs in flight at once (dispatch_senders)
    done += broker.dispatcher.record_all(store, dispatched, broker.clock.now())
    return done


def _end(broker, store, job, now: float, reason: str, outcome: Outcome) -> int:
    moved = store.transition_many([job.key], JobState.ABORTED, now, expect=JobState.READY,
                                  reason=reason, outcome=outcome)
    broker.dispatcher._refresh_parents([job], moved, now)
    if moved and job.parent_key:
        broker.wake()    # DAG nodes depending on it may be released (aborted)
    return len(moved)


class MatcherWorker(threading.Thread):
    """One matcher worker of ``broker``: its own JobStore on ``url`` (the broker's database),
    passes on every wake-up and every ``match_interval_s``; stops with the broker."""

    def __init__(self, broker, index: int, url: str) -> None:
        super().__init__(name=f"vgrid-matcher-{index}", daemon=True)
        self.broker = broker
        self.store = JobStore(url, broker.store.pool)   # the broker's pool and busy-timeout settings
        self.wake = threading.Event()
        self.passes = 0

    def run(self) -> None:
        b = self.broker
        try:
            while not b._stop.is_set():
                self.wake.clear()
                try:
                    match_pass(b, self.store, b._stop)
                except Exception as exc:   # keep matching whatever one batch did
                    log_failure(log, f"{self.name}: matcher pass failed", exc)
                self.passes += 1
                self.wake.wait(b.settings.match_interval_s)
        finally:
            self.store.close()


def tune_gc(settings) -> None:
    """Set the youngest-generation threshold of Python's cyclic garbage collector to
    ``settings.gc_threshold0`` allocations (0: leave Python's default, 700), process-wide.

    Why: a matcher pass allocates ~30 container objects per job (its Job, lists, POST bodies,
    answers), so at 700 a pass of 10,000 jobs triggers ~400 collections, and the older
    generations -- which hold the ISM's ads and the classes' candidates -- are traversed again
    and again: ~15 % of the pass's CPU (docs/benchmarks.md, issue 12 session 6). Garbage
    without cycles is still freed at once by reference counting; only cyclic garbage waits
    for a collection a little longer.

    The first call in a process (with ``gc_threshold0`` > 0) also moves every object alive
    then -- modules, configuration, the ISM's first snapshot -- to the collector's permanent
    generation (``gc.freeze``), so no full collection traverses them again: the first pass
    after a start otherwise ran one full collection over the whole heap, ~0.11 s of CPU at
    1,000 CEs (11 µs per job of a 10,000-job pass; issue 12, session 7). Frozen objects are
    still freed by reference counting; only cyclic garbage among them would stay (bounded by
    what existed at the first call)."""
    global _frozen
    if settings.gc_threshold0 > 0:
        _, g1, g2 = gc.get_threshold()
        gc.set_threshold(settings.gc_threshold0, g1, g2)
        if not _frozen:
            gc.freeze()
            _frozen = True


_frozen = False   # tune_gc froze the objects alive at its first call


def start_workers(broker) -> list[MatcherWorker]:
    """Start ``broker.settings.matcher_workers`` workers, each with its own connection to the
    broker's database, registered with the broker's :class:`Wakeup`; :func:`tune_gc` first."""
    tune_gc(broker.settings)
    url = broker.store.engine.url.render_as_string(hide_password=False)
    workers = [MatcherWorker(broker, i, url) for i in range(max(1, broker.settings.matcher_workers))]
    for w in workers:
        broker._wake.events.append(w.wake)
        w.start()
    return workers


def stop_workers(workers: list[MatcherWorker], timeout_s: float = 10.0) -> None:
    """Join the workers of a stopping broker (its ``_stop`` is set and it was woken)."""
    for w in workers:
        w.wake.set()
        w.join(timeout=timeout_s)
    if workers:
        workers[0].broker.dispatcher.close()
