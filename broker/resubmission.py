"""gLite resubmission: when a failed attempt is run again elsewhere (deep or shallow).

Semantics of the gLite WMS workload manager (glite-wms-manager, ``submission_utils.cpp``:
``check_deep_count``, ``check_shallow_count``, ``shallow_resubmission_is_enabled``; JDL
Attributes Specification EGEE-JRA1-TEC-590869, RetryCount / ShallowRetryCount), as vgrid applies
them (docs/jdl.md, "Resubmission"):

* an attempt *really started* when its executable started: the job wrapper's ``running`` line,
  i.e. the broker saw the ``running`` event of that attempt (gLite's ReallyRunning token);
* a failure after that is *deep*: allowed while ``deep_count < max(0, min(RetryCount,
  max_retry_count))``; a failure before it is *shallow*: allowed while ``shallow_count <
  max(0, min(ShallowRetryCount, max_shallow_retry_count))``;
* ``ShallowRetryCount = -1`` disables shallow resubmission: every resubmission is then deep
  (counted against RetryCount), as in gLite; ``RetryCount = -1`` counts as 0;
* an absent attribute takes the broker's ``default_retry_count`` / ``default_shallow_retry_count``
  (gLite's WMProxy filled them from its configuration);
* only failures of the middleware are resubmitted (:data:`RESUBMITTABLE`); a non-zero exit code
  is Done, and the job's own limits (memory, disk quota, wall-clock) are not retried;
* a resubmitted job is matched again without the CEs it failed on (gLite's previous matches),
  under a new dispatch key ``<key>.<attempt>`` (contract 7).

:func:`decide` is the pure decision; :func:`apply` carries it out on a job through the broker
(:meth:`broker.service.Broker.resubmit_or_abort`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import jdl as jdlmod
from vgrid_runtime.job_states import JobState
from vgrid_runtime.outcomes import Outcome

from .db import dispatch_key_of

log = logging.getLogger("vgrid.broker.resubmission")

#: Outcome codes of failures that are the middleware's, not the job's: resubmitted when the
#: counts allow. ("requeue-impossible" is accepted for a CE agent that reports it.)
RESUBMITTABLE: frozenset[str] = frozenset({
    Outcome.NODE_LOST.value, Outcome.NODE_SHUTDOWN.value, Outcome.WRAPPER_ERROR.value,
    Outcome.NOT_STARTED.value, Outcome.NOT_PLACED.value, Outcome.LEASE_REJECTED.value,
    Outcome.PREEMPTED.value, Outcome.STALLED.value, "requeue-impossible"})


@dataclass(frozen=True)
class RetryLimits:
    """The broker's side of resubmission (gLite WorkloadManager MaxRetryCount /
    MaxShallowRetryCount, and the defaults of an absent JDL attribute)."""

    max_retry_count: int = 10
    max_shallow_retry_count: int = 10
    default_retry_count: int = 0
    default_shallow_retry_count: int = 3


@dataclass(frozen=True)
class Decision:
    """``kind``: "deep", "shallow" or None (no resubmission); ``used``/``limit``: the count of
    that kind before this one and its effective limit; ``why``: when None, the reason that
    names what stopped it (e.g. ``RetryCount = 2 exhausted (2 deep resubmissions used)``)."""

    kind: str | None
    used: int
    limit: int
    why: str | None = None


def resubmittable(outcome) -> bool:
    """Whether a failure with this outcome code (an Outcome, its value, or None) may be
    resubmitted at all."""
    return outcome is not None and str(getattr(outcome, "value", outcome)) in RESUBMITTABLE


def decide(retry_count: int | None, shallow_retry_count: int | None, deep_used: int,
           shallow_used: int, started: bool, limits: RetryLimits) -> Decision:
    """Deep or shallow resubmission of a failed attempt, or None with the exhausted count.

    ``retry_count``/``shallow_retry_count``: the JDL's RetryCount/ShallowRetryCount (None when
    absent); ``deep_used``/``shallow_used``: resubmissions of each kind done so far;
    ``started``: the attempt's executable had started (deep failure)."""
    retry = limits.default_retry_count if retry_count is None else retry_count
    shallow = limits.default_shallow_retry_count if shallow_retry_count is None else shallow_retry_count
    if started or shallow == -1:
        limit = max(0, min(retry, limits.max_retry_count))
        if deep_used < limit:
            return Decision("deep", deep_used, limit)
        if retry <= limits.max_retry_count:
            name = "RetryCount" + (" (absent: the broker's default_retry_count)" if retry_count is None else "")
            why = f"{name} = {retry} exhausted"
        else:
            why = f"the broker's MaxRetryCount = {limits.max_retry_count} exhausted (RetryCount = {retry})"
        if not started:
            why += "; shallow resubmission disabled (ShallowRetryCount = -1)"
        return Decision(None, deep_used, limit, f"{why} ({deep_used} deep resubmissions used)")
    limit = max(0, min(shallow, max(0, limits.max_shallow_retry_count)))
    if shallow_used < limit:
        return Decision("shallow", shallow_used, limit)
    if shallow <= limits.max_shallow_retry_count:
        name = "ShallowRetryCount" + (" (absent: the broker's default_shallow_retry_count)"
                                      if shallow_retry_count is None else "")
        why = f"{name} = {shallow} exhausted"
    else:
        why = (f"the broker's MaxShallowRetryCount = {limits.max_shallow_retry_count} exhausted "
               f"(ShallowRetryCount = {shallow})")
    return Decision(None, shallow_used, limit, f"{why} ({shallow_used} shallow resubmissions used)")


class PastAttempt(Exception):
    """An event of a past attempt of a job (nothing applied); ``key``: the event's dispatch key,
    ``current``: the job's current one."""

    def __init__(self, key: str, current: str) -> None:
        super().__init__(f"event of past attempt {key} (current: {current})")
        self.key, self.current = key, current


def past_attempt(job, event: dict) -> bool:
    """Whether ``event`` names a dispatch key other than ``job``'s current one (contract 7);
    an event without a ``key`` is taken as the current attempt's."""
    dk = event.get("key")
    return isinstance(dk, str) and dk != job.dispatch_key


def apply(broker, job, outcome, reason: str, now: float, started: bool, fields: dict):
    """End ``job``'s failed attempt through ``broker``: Waiting under attempt n+1 (history:
    attempt, CE, reason, "deep"/"shallow" resubmission i/limit), or Aborted with ``reason`` and,
    when a count stopped it, what was exhausted. ``fields``: event fields to keep (node,
    vwn_ended_at, ...). Returns the job; StaleState if it moved meanwhile."""
    code = Outcome.parse(outcome)
    decision = None
    if resubmittable(outcome):
        desc = jdlmod.parse_jdl(job.jdl, job.filename, local_files=False)
        decision = decide(desc.retry_count, desc.shallow_retry_count, job.deep_count,
                          job.shallow_count, started, broker.settings.limits)
    if decision is None or decision.kind is None:
        why = f"{reason}; not resubmitted: {decision.why}" if decision is not None else reason
        return broker.move(job, JobState.ABORTED, now, reason=why, outcome=code, **fields)
    attempt = job.attempt + 1
    failed = list(job.failed_ces) + ([job.ce_id] if job.ce_id and job.ce_id not in job.failed_ces else [])
    counts = ({"deep_count": job.deep_count + 1} if decision.kind == "deep"
              else {"shallow_count": job.shallow_count + 1})
    code_text = code.value if code else str(outcome)
    history = (f"attempt {job.attempt} at CE {job.ce_id} failed ({code_text}): {reason}; "
               f"{decision.kind} resubmission {decision.used + 1}/{decision.limit} as attempt {attempt}")
    keep = {k: v for k, v in fields.items() if k in ("last_heard",)}
    done = broker.move(job, JobState.WAITING, now, reason=history, attempt=attempt,
                       dispatch_key=dispatch_key_of(job.key, attempt), failed_ces=failed, waiting_since=now,
                       node=None, vwn=None, node_url=None, vwn_ended_at=None, exit_code=None,
                       outcome=None, cpu_caps=[], cpu_capped=None, cap_reason=None,
                       last_failure=f"attempt {job.attempt} at CE {job.ce_id} ({code_text}): {reason}",
                       stalled_from=None, stalled_at=None, dispatch_attempts=0, **counts, **keep)
    log.info("job %s: %s", job.key, history)
    broker.discard_output(job.key)
    broker.wake()
    return done
