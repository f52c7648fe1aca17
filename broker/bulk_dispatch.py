"""Bulk dispatch: every job a matcher pass chose for one CE goes in one POST (issue 12).

:meth:`BulkDispatcher.dispatch` is the one dispatch step: it takes a :class:`Target` (a CE:
its GLUE id and agent URL; a peer gateway can stand there too) and the list of ``(job, parsed
JDL)`` chosen for it, sends them as ``POST <url>/jobs/bulk`` (``vwn_agents.ce_bulk``; at most
:data:`MAX_PER_POST` per request) and answers one :class:`Result` per job: accepted, or not
with the words for people (``error``) and the typed cause (``outcome``: ``refused`` for a job
the CE refused; ``exc``: the typed error of a request that failed as a whole).
:meth:`BulkDispatcher.record` then applies the results with bulk transitions
(:mod:`broker.bulk_store`): the accepted jobs of the target Ready -> Scheduled in one UPDATE,
the failed ones back to Waiting (or Aborted with ``dispatch-failed`` after
``max_dispatch_attempts``) grouped by reason, and blacklists the CE when the failure is its
own (:mod:`broker.blacklist`).

Idempotency: each job is posted under the dispatch key of its current attempt (contract 7);
the CE agent creates nothing twice for a key it holds, so re-posting a batch whose answer was
lost is safe. A CE agent without the bulk endpoint (HTTP 404/405) gets the same jobs one POST
/jobs each (remembered per URL), so the single-job API keeps working.
"""
from __future__ import annotations

import logging
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from vwn_agents.ce_client import CEAgentError
from vgrid_runtime.job_states import JobState
from vgrid_runtime.outcomes import Outcome

from .blacklist import blacklist_ce
from .bulk_store import chunks

log = logging.getLogger("vgrid.broker")

#: The most jobs one POST /jobs/bulk carries (a larger group is split).
MAX_PER_POST = 1000


@dataclass(frozen=True)
class Target:
    """Where a group of jobs is dispatched: ``ce_id`` (GlueCEUniqueID) and its agent ``url``
    (None when the CE publishes no HTTP GlueCEInfoContactString)."""

    ce_id: str
    url: str | None


@dataclass
class Result:
    """The dispatch of one job: ``accepted``, else ``error`` (prose), ``outcome`` (Outcome
    ``refused`` when the CE refused this job) and ``exc`` (the CEAgentError of a request that
    failed as a whole: it decides the blacklist)."""

    job: Any                        # broker.db.Job
    accepted: bool
    error: str | None = None
    outcome: Outcome | None = None
    exc: CEAgentError | None = None


class BulkDispatcher:
    """The dispatch step of one broker (``broker``: a :class:`broker.service.Broker`).
    Thread-safe: several matcher workers share it."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.no_bulk: set[str] = set()    # CE agent URLs that answered 404/405 to /jobs/bulk
        self._lock = threading.Lock()
        self._senders: ThreadPoolExecutor | None = None

    def dispatch_all(self, groups: dict[Target, list[tuple[Any, Any]]]) -> list[tuple[Target, list[Result]]]:
        """:meth:`dispatch` of every group of a batch (``{target: [(job, jdl)]}``), by up to
        ``settings.dispatch_senders`` sender threads at once (1: one after another in the calling
        thread); ``[(target, results)]`` in the groups' order, once **every** POST has answered
        or failed -- only then are the results recorded (Scheduled only after the CE
        acknowledged). Why: a POST waits for its CE (~0.5-1 ms on loopback, a WAN round trip in
        production); several in flight keep the broker's CPU busy meanwhile (issue 12,
        session 7). An unexpected error of one dispatch is raised here after all have ended
        (the posted jobs stay Ready: re-posted under the same keys after a restart or the claim
        lease, contract 7)."""
        items = list(groups.items())
        senders = max(1, self.broker.settings.dispatch_senders)
        if senders == 1 or len(items) <= 1:
            return [(target, self.dispatch(target, batch)) for target, batch in items]
        with self._lock:
            if self._senders is None:
                self._senders = ThreadPoolExecutor(senders, thread_name_prefix="vgrid-dispatch")
            pool = self._senders
        futures = [pool.submit(self.dispatch, target, batch) for target, batch in items]
        failure = None
        out = []
        for (target, _), f in zip(items, futures):
            try:
                out.append((target, f.result()))
            except Exception as exc:   # noqa: BLE001 - re-raised once every POST has ended
                failure = failure or exc
        if failure is not None:
            raise failure
        return out

    def close(self) -> None:
        """Stop the sender threads (a stopping broker; waits for POSTs in flight)."""
        with self._lock:
            pool, self._senders = self._senders, None
        if pool is not None:
            pool.shutdown(wait=True)

    def body(self, job, desc) -> dict:
        """The POST /jobs body of ``job`` (its current attempt): contract 2/7."""
        b = self.broker
        base = b.settings.base_url
        body = {"job_id": b.job_id(job.key), "key": job.dispatch_key, "jdl": job.jdl,
                "filename": job.filename, "callback_url": f"{base}/jobs/{job.key}/events",
                "heartbeat_url": f"{base}/heartbeats", "input_sandbox": b._input_urls(job, desc),
                "output_upload_url": f"{b._sandbox_url(job)}/output"}
        if job.owner_dn:
            body["owner"] = {"dn": job.owner_dn, "vo": job.owner_vo, "fqans": job.owner_fqans}
        return body

    def dispatch(self, target: Target, batch: list[tuple[Any, Any]]) -> list[Result]:
        """Send ``batch`` (``[(Job, jdl.JobDescription)]``, all chosen for ``target``) to the
        target; one Result per job, in order. Never raises for a CE failure (it is a Result)."""
        if target.url is None:
            why = f"CE {target.ce_id} publishes no HTTP GlueCEInfoContactString"
            return [Result(job, False, why) for job, _ in batch]
        client = self.broker.ce_client(target.url)
        out: list[Result] = []
        for part in chunks(batch, MAX_PER_POST):
            bodies = [self.body(job, desc) for job, desc in part]
            jobs = [job for job, _ in part]
            if target.url in self.no_bulk or not hasattr(client, "submit_many"):   # a peer's forwarder
                out.extend(self._one_by_one(client, target, jobs, bodies))
                continue
            try:
                answers = client.submit_many(bodies)
            except CEAgentError as exc:
                if exc.status in (404, 405):    # a CE agent without POST /jobs/bulk
                    with self._lock:
                        self.no_bulk.add(target.url)
                    out.extend(self._one_by_one(client, target, jobs, bodies))
                else:
                    why = self._failure(target, exc)
                    out.extend(Result(job, False, why, exc=exc) for job in jobs)
                continue
            for job, body, answer in zip(jobs, bodies, answers):
                if answer.get("key") != body["key"]:
                    out.append(Result(job, False, f"CE {target.ce_id} answered for key "
                                      f"{answer.get('key')!r} instead of {body['key']!r}"))
                elif answer.get("accepted") is True:
                    out.append(Result(job, True))
                else:
                    msg = (answer.get("error") or {}).get("message") if isinstance(answer.get("error"), dict) else None
                    out.append(Result(job, False, f"CE {target.ce_id} refused the job: HTTP "
                                      f"{answer.get('status')} {msg or 'refused'}",
                                      Outcome.parse(answer.get("outcome")) or Outcome.REFUSED))
        return out

    def _one_by_one(self, client, target: Target, jobs, bodies) -> list[Result]:
        out = []
        for job, body in zip(jobs, bodies):
            try:
                client.submit(body)
                out.append(Result(job, True))
            except CEAgentError as exc:
                out.append(Result(job, False, self._failure(target, exc), exc=exc))
        return out

    @staticmethod
    def _failure(target: Target, exc: CEAgentError) -> str:
        return (f"CE {target.ce_id} refused the job: {exc}" if exc.status is not None
                else f"CE {target.ce_id} unreachable: {exc.brief()}")

    def record(self, store, target: Target, results: list[Result], now: float) -> int:
        """:meth:`record_all` of one dispatch."""
        return self.record_all(store, [(target, results)], now)

    def record_all(self, store, dispatched: list[tuple[Target, list[Result]]], now: float) -> int:
        """Apply the results of a pass's dispatches (``[(target, results)]``) through ``store``
        (the worker's own JobStore): accepted -> Scheduled with their target's ``ce_id`` and
        ``ce_url``, ``last_heard`` = ``now``, ``dispatch_attempts`` + 1 (one UPDATE per
        target, one transaction for all); failed -> Waiting, or Aborted (``dispatch-failed``)
        once ``max_dispatch_attempts`` are used (one UPDATE per target and reason), the
        target blacklisted when the failure is its own. Returns how many jobs were Scheduled
        or ended; jobs changed meanwhile (cancelled) are left alone."""
        accepted = [(t, [r.job for r in results if r.accepted]) for t, results in dispatched]
        accepted = [(t, jobs) for t, jobs in accepted if jobs]
        moved = store.transition_sets([([j.key for j in jobs], {"ce_id": t.ce_id, "ce_url": t.url,
                                                                 "last_heard": now})
                                       for t, jobs in accepted], JobState.SCHEDULED, now,
                                      expect=JobState.READY, increment=("dispatch_attempts",))
        count = sum(len(m) for m in moved)
        self._refresh_parents([j for _, jobs in accepted for j in jobs], [k for m in moved for k in m], now)
        for target, results in dispatched:
            failed = [r for r in results if not r.accepted]
            if failed:
                count += self._failed(store, target, failed, now)
        return count

    def _failed(self, store, target: Target, failed: list[Result], now: float) -> int:
        b, count = self.broker, 0
        for r in failed:
            if r.exc is not None and blacklist_ce(b.ism, target.ce_id, r.exc, now, b.settings.blacklist_s):
                break
        groups: dict[tuple[str, bool], list] = defaultdict(list)
        for r in failed:
            groups[(r.error or "dispatch failed", r.job.dispatch_attempts + 1 >= b.settings.max_dispatch_attempts)].append(r.job)
        for (error, abort), jobs in groups.items():
            log.warning("dispatch of %d job(s) (%s...) failed: %s", len(jobs), jobs[0].key, error)
            if abort:
                moved = store.transition_many([j.key for j in jobs], JobState.ABORTED, now,
                                              expect=JobState.READY, reason=f"dispatch failed: {error}",
                                              increment=("dispatch_attempts",),
                                              outcome=Outcome.DISPATCH_FAILED)
                count += len(moved)
                if moved and any(j.parent_key for j in jobs):
                    b.wake()            # DAG nodes depending on them may be released (aborted)
            else:
                moved = store.transition_many([j.key for j in jobs], JobState.WAITING, now,
                                              expect=JobState.READY, reason=error,
                                              increment=("dispatch_attempts",))
            self._refresh_parents(jobs, moved, now)
        return count

    def _refresh_parents(self, jobs, moved: list[str], now: float) -> None:
        """Keep each compound parent of the ``moved`` jobs in step (once per parent)."""
        done = set(moved)
        for parent in dict.fromkeys(j.parent_key for j in jobs if j.parent_key and j.key in done):
            self.broker._refresh_parent(parent, now)
