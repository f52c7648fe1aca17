"""Orphaned claims: Ready jobs whose matcher worker died are matched again (issue 12).

A matcher worker claims Waiting jobs (Waiting -> Ready, ``claimed_by`` = its broker) and, within
the same pass, records them Scheduled or puts them back. A broker restarted after ``kill -9``
requeues its own Ready jobs (:mod:`broker.recovery`), but a worker that dies for good (its
broker never comes back, or a thread killed by a bug) would hold its claims for ever while
other brokers share the database. Claims are therefore **leases** (gLite/Condor lease idea: a
holder must finish in time or lose the resource): a Ready job whose claim is older than
``claim_lease_s`` (its ``updated_at``, set by the claim) goes back to Waiting, with a history
row saying so, and any worker of any broker may claim it again.

Safety: the sweep is one guarded UPDATE (``state = 'Ready' AND updated_at < cutoff``), so a
job that its worker recorded meanwhile is not touched. A worker that was merely slow past the
lease may still post the job to its CE after the sweep: the job is then matched again under
the same dispatch key; if a second CE also gets it, the first CE's next heartbeat reports a key
the broker knows at another CE and is told it is unknown (contract 7), so only one copy runs.
The lease (default 600 s) is orders of magnitude longer than a pass (seconds).
"""
from __future__ import annotations

import logging

log = logging.getLogger("vgrid.broker")


class ClaimSweeper:
    """Sweeps one broker's database for expired claims at most every ``min(lease/4, 60)`` s
    of the broker's clock (``lease_s`` <= 0: never)."""

    def __init__(self, broker, lease_s: float) -> None:
        self.broker = broker
        self.lease_s = lease_s
        self.every_s = min(lease_s / 4, 60.0) if lease_s > 0 else 0.0
        self._last: float | None = None
        self.requeued = 0          # jobs put back to Waiting since start

    def maybe(self, now: float) -> int:
        """Sweep if it is time (see the class doc); how many jobs were requeued."""
        if self.lease_s <= 0 or (self._last is not None and 0 <= now - self._last < self.every_s):
            return 0
        self._last = now
        return self.sweep(now)

    def sweep(self, now: float) -> int:
        """Move every Ready job claimed before ``now - lease_s`` back to Waiting (one
        transaction, history reason naming the lease); refresh compound parents; wake the
        matcher. Returns how many moved."""
        b = self.broker
        cutoff = now - self.lease_s
        reason = f"claim lease expired ({self.lease_s:g} s): its matcher worker stopped; requeued"
        jobs = b.store.requeue_expired_claims(cutoff, now, reason)
        if jobs:
            log.warning("%d Ready job(s) claimed before %.0f requeued (%s, ...): claim lease of %g s",
                        len(jobs), cutoff, jobs[0].key, self.lease_s)
            b.dispatcher._refresh_parents(jobs, [j.key for j in jobs], now)
            self.requeued += len(jobs)
            b.wake()
        return len(jobs)

