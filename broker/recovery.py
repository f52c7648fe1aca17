"""The broker after a restart: requeue what was not confirmed, resynchronise jobs at CEs.

:func:`recover` runs once before the matcher loop starts: sandboxes of submissions that were
never stored are removed and a job whose input sandbox is incomplete is Aborted
(``broker.sandbox_store``); Submitted jobs (not blocked DAG nodes)
go to Waiting, Ready jobs (a dispatch that was not confirmed) claimed by this broker instance
(``Broker.instance``, derived from its state directory's secret; not those of another broker
sharing a PostgreSQL database) back to Waiting, and every job at
a CE (Scheduled, Running, Stalled) is resynchronised with :func:`resync`, which asks the CE
agent for the job's *current attempt* (its dispatch key, contract 7) and applies the events
the broker missed; a CE that no longer knows that attempt (404) ends it like a lost job
(a deep resubmission when its counts allow, else Aborted; outcome ``stalled``).
"""
from __future__ import annotations

import logging

from vwn_agents.ce_client import CEAgentError
from vgrid_runtime.job_states import AT_CE, IllegalTransition, JobState
from vgrid_runtime.outcomes import Outcome

from .db import Job, StaleState
from .resubmission import PastAttempt

log = logging.getLogger("vgrid.broker")

#: The events that bring a broker job to the CE's state of it.
_EVENTS = {"running": ["running"], "done": ["running", "done"], "aborted": ["aborted"]}


def recover(broker) -> None:
    """Before requests are served: remove sandboxes of submissions that were not stored, abort
    jobs whose input sandbox is missing (outcome ``sandbox-lost``, never dispatched), requeue
    jobs whose dispatch was not confirmed; resync jobs at CEs."""
    now = broker.clock.now()
    broker.sandboxes.remove_orphans(lambda keys: {j.key for j in broker.store.list(keys=keys, history=False)})
    for job, missing in broker.sandboxes.lost_inputs(broker.store.list(
            states=[JobState.SUBMITTED, JobState.WAITING, JobState.READY], history=False)):
        broker.move(job, JobState.ABORTED, now, outcome=Outcome.SANDBOX_LOST,
                    reason=f"input sandbox file(s) missing after a broker restart: {', '.join(missing)}")
    for job in broker.store.list(states=[JobState.SUBMITTED]):
        if not job.depends_on:  # blocked DAG nodes stay Submitted until released
            broker.move(job, JobState.WAITING, now, reason="recovered after a broker restart")
    mine = broker.store.ready_claimed_by(broker.instance)   # not the Ready jobs of other brokers
    for job in broker.store.list(keys=mine, history=False) if mine else []:
        try:
            broker.move(job, JobState.WAITING, now, reason="dispatch not confirmed before a broker restart")
        except StaleState:      # dispatched or cancelled meanwhile
            pass
    for job in broker.store.list(states=AT_CE):
        resync(broker, job)


def resync(broker, job: Job) -> None:
    """Ask ``job``'s CE agent for its current attempt and apply what was missed (logged, not
    raised, when the CE cannot be asked)."""
    if not job.ce_url:
        return
    try:
        info = broker.ce_client(job.ce_url).job(job.dispatch_key)
    except CEAgentError as exc:
        if exc.status != 404:
            log.warning("resync of %s failed: %s", job.dispatch_key, exc)
            return
        try:        # deep: it may have started before its CE forgot it (as a Stalled job)
            broker.resubmit_or_abort(job, Outcome.STALLED, f"CE {job.ce_id} no longer knows attempt "
                                     f"{job.attempt} ({job.dispatch_key})", broker.clock.now(), True)
        except StaleState:
            pass
        return
    for kind in _EVENTS.get(str(info.get("state", "")).lower(), []):
        try:
            broker.handle_event(job.key, {**info, "event": kind, "key": job.dispatch_key})
        except (IllegalTransition, PastAttempt):   # moved on meanwhile
            pass
