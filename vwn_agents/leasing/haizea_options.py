"""Haizea 1.1 options that act outside the scheduler's placement code (issue 16).

Source: Haizea 1.1 (``core/frontends/tracefile.py``, ``core/leases.py``, ``core/manager.py``'s
``SimulatedClock``); docs/leasing.md, "Haizea configuration files". The options that change
suspension, resumption, the scheduling threshold and image transfers are applied where those
times are computed (``preemption.op_time``, ``preemption.scheduling_threshold``,
``staging.Staging.transfer_time``); ``policy-admission`` in ``ar.schedule_ar``.

* ``frontend(leases, cfg)``: what Haizea's tracefile frontend and lease model do to requests
  before scheduling, on copies of the leases: ``add-overhead`` (``tracefile.apply_overheads``),
  then ``override-memory`` (every VM gets that many MB), then the shutdown time
  (``shutdown-time`` + ``enactment-overhead`` x VMs, Haizea's ``estimate_shutdown_time``) added
  to every lease's *requested* duration. Haizea reserves the shutdown after the VMs' time and
  drops it when a lease ends before its reservation (a simulated lease with a known real
  duration always does); here the real duration stays as the trace gives it, so a lease whose
  real duration is known ends at it, and one without runs its requested time plus the
  shutdown -- the same ends as Haizea's.
* ``StopRule``: Haizea's ``stop-when`` (``all-leases-done``, ``besteffort-done``,
  ``besteffort-submitted``, ``exact`` with ``stop-when-time`` s after the trace's start), tested
  after each simulated time step, as Haizea's ``SimulatedClock.__get_next_time``.
* ``StatusTicker``: ``status-message-interval`` (minutes of simulated time): calls ``status(now,
  counts)`` when that much simulated time has passed since the last message (Haizea's
  ``print_status``); ``counts`` maps a lease state's name to the number of leases in it.
"""
from __future__ import annotations

import dataclasses

from .config import ConfigError, LeaseConfig
from .model import MEM, Lease
from .tracefile import apply_overheads

STOP_RULES = ("all-leases-done", "besteffort-done", "besteffort-submitted", "exact")


def shutdown_s(lease: Lease, cfg: LeaseConfig) -> float:
    """Seconds reserved to shut ``lease``'s VMs down: ``shutdown-time`` + ``enactment-overhead``
    x its VMs (Haizea 1.1 ``Lease.estimate_shutdown_time``)."""
    return cfg.shutdown_time + cfg.enactment_overhead * lease.n_vms


def frontend(leases: list[Lease], cfg: LeaseConfig) -> list[Lease]:
    """The leases as Haizea's tracefile frontend hands them to the scheduler (see module doc);
    new objects where something changes, the input is not modified. ConfigError when the
    shutdown time pushes a lease's duration past its (seed 002) deadline."""
    leases = apply_overheads(leases, cfg)
    mem = cfg.override_memory
    shut = cfg.shutdown_time > 0 or cfg.enactment_overhead > 0
    if mem < 0 and not shut:
        return leases
    out = []
    for lease in leases:
        changes: dict = {}
        if mem >= 0:
            vec = list(lease.per_vm)
            vec[MEM] = mem
            changes["per_vm"] = tuple(vec)
        extra = shutdown_s(lease, cfg) if shut else 0.0
        if extra > 0:
            changes["duration_s"] = lease.duration_s + extra
        try:
            out.append(dataclasses.replace(lease, **changes) if changes else lease)
        except ValueError as exc:    # a seed 002 deadline the longer reservation cannot meet
            raise ConfigError(f"[scheduling] shutdown-time / enactment-overhead: {exc}") from None
    return out


class StopRule:
    """``stop-when`` (see module doc). ``done(sched, submitted_all, pending_be)`` after a step:
    ``submitted_all`` whether every request was submitted, ``pending_be`` best-effort requests
    not yet submitted. ConfigError for ``exact`` without ``stop-when-time``."""

    def __init__(self, cfg: LeaseConfig, leases: list[Lease]) -> None:
        self.rule = cfg.stop_when
        self.until = cfg.stop_when_time
        if self.rule == "exact" and self.until < 0:
            raise ConfigError("[simulation] stop-when = 'exact' needs stop-when-time (seconds)")
        self.be_total = sum(1 for lease in leases if lease.is_be)

    def done(self, sched, now: float, submitted_all: bool, pending_be: int) -> bool:
        if self.rule == "besteffort-done":
            return (submitted_all and not sched.queue and self.be_total > 0
                    and all(l.done for l in sched.leases.values() if l.is_be))
        if self.rule == "besteffort-submitted":
            return pending_be == 0
        if self.rule == "exact":
            return now >= self.until
        return False


class StatusTicker:
    """``status-message-interval`` (see module doc); a no-op when the interval is 0 or no
    ``status`` callable is given."""

    def __init__(self, cfg: LeaseConfig, status) -> None:
        self.every_s = cfg.status_message_interval * 60.0
        self.status = status if self.every_s > 0 else None
        self.last = 0.0

    def tick(self, sched, now: float) -> None:
        if self.status is None or now - self.last < self.every_s:
            return
        self.last = now
        counts: dict = {}
        for lease in sched.leases.values():
            counts[lease.state.value] = counts.get(lease.state.value, 0) + 1
        self.status(now, counts)
