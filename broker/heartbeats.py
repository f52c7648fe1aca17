"""CE heartbeats at the broker and the Stalled state (contracts 5 and 8, docs/architecture.md).

A CE agent posts ``POST /heartbeats`` every ``interval_s`` seconds::

    {"ce": ce_id, "url": <CE agent URL>, "interval_s": float, "time": t,
     "jobs": [{"key": <dispatch key>, "state": "Scheduled"|"Running", "node": url|null,
               "vwn": id|null, "silent_s": float|null}]}

:func:`receive` stores the CE's interval and last-heard time (table ``ce_heartbeats``), marks
each listed job of that CE as heard ``silent_s`` seconds ago (now when null: it has no VWN yet)
and answers the dispatch keys that are not the current attempt of a live job at that CE
(``unknown``: the CE agent cancels them). Entries naming a job dispatched to another CE are not
applied. :func:`scan` (the matcher loop, broker clock) moves a Scheduled/Running job not heard
of for 3 x its CE's interval to Stalled, a Stalled job heard again back to the state it came
from, and a job Stalled for ``stalled_resubmit_s`` to resubmission or Aborted (outcome
``stalled``) after asking its CE to cancel the old attempt (best effort). That resubmission is
*deep* even when the job was Scheduled: its VWN may have started after the CE went silent, and
only a failure known to precede the start may be shallow (a shallow resubmission must never run
a job twice, gLite's guarantee).
"""
from __future__ import annotations

import logging
import math
from typing import Any

from vgrid_runtime.job_states import AT_CE, JobState
from vgrid_runtime.outcomes import Outcome

from .db import StaleState, job_key_of
from .transfers import BrokerError

log = logging.getLogger("vgrid.broker.heartbeats")

#: A job is Stalled after this many heartbeat intervals of its CE without news (contract 8).
MISSED_INTERVALS = 3


def parse(body: Any) -> tuple[str, str, float, list[dict]]:
    """``(ce, url, interval_s, jobs)`` of a heartbeat body; BrokerError 400 naming the field
    for a malformed one (``interval_s`` must be a finite number > 0)."""
    if not isinstance(body, dict):
        raise BrokerError("heartbeat body must be a JSON object", field="body")
    ce, url, interval = body.get("ce"), body.get("url"), body.get("interval_s")
    if not isinstance(ce, str) or not ce:
        raise BrokerError("heartbeat field 'ce' must be a non-empty string", field="ce")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise BrokerError("heartbeat field 'url' must be an http(s) URL", field="url")
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) \
            or not math.isfinite(interval) or interval <= 0:
        raise BrokerError("heartbeat field 'interval_s' must be a number > 0", field="interval_s")
    jobs = body.get("jobs") or []
    if not isinstance(jobs, list):
        raise BrokerError("heartbeat field 'jobs' must be a list", field="jobs")
    for e in jobs:
        if not isinstance(e, dict) or not isinstance(e.get("key"), str) or not e["key"]:
            raise BrokerError("every heartbeat job needs a string 'key'", field="jobs")
        silent = e.get("silent_s")
        if silent is not None and (isinstance(silent, bool) or not isinstance(silent, (int, float))
                                   or not math.isfinite(silent)):
            raise BrokerError("heartbeat job field 'silent_s' must be a number or null", field="jobs")
    return ce, url.rstrip("/"), float(interval), jobs


def receive(broker, body: Any) -> list[str]:
    """Apply one CE heartbeat (already authorized for its ``url``); the ``unknown`` dispatch
    keys. BrokerError 400 for a malformed body."""
    ce, url, interval, entries = parse(body)
    now = broker.clock.now()
    broker.store.record_ce_heartbeat(url, ce, interval, now)
    keys = {job_key_of(e["key"]) for e in entries}
    jobs = {j.key: j for j in broker.store.list(keys=keys, history=False)} if keys else {}
    unknown: list[str] = []
    times: dict[str, float] = {}
    for e in entries:
        dk = e["key"]
        job = jobs.get(job_key_of(dk))
        if job is not None and dk == job.dispatch_key and job.state is JobState.READY:
            continue                      # its dispatch to this CE is in flight
        if job is None or job.ended or dk != job.dispatch_key or job.state not in AT_CE \
                or (job.ce_url or "").rstrip("/") != url:
            unknown.append(dk)
            continue
        silent = e.get("silent_s")
        times[job.key] = now if silent is None else now - max(0.0, float(silent))
    broker.store.heard(times)
    for key, t in times.items():
        if jobs[key].state is JobState.STALLED and now - t < MISSED_INTERVALS * interval:
            with broker.lock:
                job = broker.store.get(key)
                if job.state is JobState.STALLED and job.dispatch_key == jobs[key].dispatch_key:
                    recover(broker, job, now, f"heard again in a heartbeat of CE {ce}")
    return unknown


def recover(broker, job, now: float, why: str):
    """A Stalled ``job`` heard again: back to the state it came from (Running or Scheduled);
    the job (unchanged if it changed meanwhile)."""
    back = JobState.RUNNING if job.stalled_from == JobState.RUNNING.value else JobState.SCHEDULED
    try:
        return broker.move(job, back, now, reason=why, stalled_from=None, stalled_at=None,
                           last_heard=now)
    except StaleState:
        return broker.store.get(job.key)


def scan(broker, now: float) -> int:
    """One pass: Scheduled/Running jobs silent for 3 intervals -> Stalled; jobs Stalled for
    ``stalled_resubmit_s`` -> resubmitted or Aborted. Returns how many changed state."""
    settings = broker.settings
    ces = broker.store.ce_heartbeats()
    changed = 0
    def silence(job) -> tuple[float, float]:
        """(seconds not heard of, the CE's interval or 0 when unknown)."""
        beat = ces.get((job.ce_url or "").rstrip("/"))
        interval = beat["interval_s"] if beat else settings.default_ce_interval_s
        heard = job.last_heard if job.last_heard is not None else job.updated_at
        if broker.started_at is not None:    # not Stalled for the broker's own downtime
            heard = max(heard, broker.started_at)
        return now - heard, interval

    for job in broker.store.list(states=[JobState.SCHEDULED, JobState.RUNNING], history=False):
        silent, interval = silence(job)
        if not interval or interval <= 0 or silent <= MISSED_INTERVALS * interval:
            continue
        with broker.lock:        # re-read under the lock: an event applied meanwhile wins
            job = broker.store.get(job.key)
            silent, interval = silence(job)
            if job.state not in (JobState.SCHEDULED, JobState.RUNNING) \
                    or silent <= MISSED_INTERVALS * interval:
                continue
            try:
                broker.move(job, JobState.STALLED, now, stalled_from=job.state.value, stalled_at=now,
                            reason=f"not heard of for {silent:.0f} s at CE {job.ce_id} "
                                   f"({MISSED_INTERVALS} x its heartbeat interval {interval:g} s)")
                log.warning("job %s Stalled: not heard of for %.0f s at CE %s", job.key, silent, job.ce_id)
                changed += 1
            except StaleState:
                pass
    for job in broker.store.list(states=[JobState.STALLED], history=False):
        since = job.stalled_at if job.stalled_at is not None else job.updated_at
        if now - since < settings.stalled_resubmit_s:
            continue
        broker.cancel_at_ce(job)                 # network: outside the lock
        heard = job.last_heard if job.last_heard is not None else since
        why = (f"Stalled: not heard of for {now - heard:.0f} s at CE {job.ce_id} "
               f"(attempt {job.attempt}, {job.stalled_from or 'Scheduled'} when it went silent; "
               f"it may have started meanwhile)")
        with broker.lock:
            if broker.store.get(job.key).state is not JobState.STALLED:
                continue                         # heard again or cancelled meanwhile
            try:
                broker.resubmit_or_abort(job, Outcome.STALLED, why, now,
                                         started=True)
                changed += 1
            except StaleState:
                pass                             # heard again or cancelled meanwhile
    return changed
