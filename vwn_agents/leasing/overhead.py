"""The overhead of preempting a VM-based lease: seed 002 Section 5, eq. (3)-(8) (worst case).

Times in seconds, memory in MB, rates in MB/s. For a lease L with v(L) VMs whose memories are
mem_1..mem_v:

* eq. (3), (4): one VM's suspension t_s^j = mem_j / B and resumption t_r^j = mem_j / r;
* eq. (5): s(L) = v(L) t_p + sum_j t_s^j + delta  (pause, write the images one VM after the
  other to the shared storage, reschedule);
* eq. (6): r(L) = v(L) t_p + sum_j t_r^j  (read the images, unpause);
* eq. (7): a suspendable lease costs h(L) = s(L) + r(L) = 2 v(L) t_p + delta + sum_j (t_s^j + t_r^j);
* eq. (8): a migratable lease costs h(L) = sum_j t_copy^j + t_s^1 + sum_{j=2..v} max(t_s^j,
  t_r^(j-1)) + t_r^v + 2 v(L) t_p + delta, with t_copy^j = mem_j / b: suspending VM j overlaps
  resuming VM j-1 at the destination (the paper writes the middle sum from j = 1 to v - 1 with
  t_r^0; it has v - 1 terms either way, the pipeline's first one pairs t_s^2 with t_r^1);
* a cancellable lease costs the time to stop its VMs (``cancel-time``, negligible in Section 5);
* a reservation that has not started costs only its rescheduling, delta (seed 002 Figure 2:
  reservations waiting in the queue are candidates too).

The constants come from the lease configuration: t_p = ``pause-time``, B = ``suspend-rate``,
r = ``resume-rate``, delta = ``rescheduling-time``, b = ``migration-bandwidth``, stop =
``cancel-time`` (docs/leasing.md). Each formula is implemented once, here.
"""
from __future__ import annotations

from dataclasses import dataclass

from .model import MEM
from .requesttypes import RequestType


def vm_suspend_time(mem_mb: float, suspend_rate: float) -> float:
    """t_s^j = mem_j / B (seed 002 eq. (3)); mem in MB, B in MB/s (> 0), result in s."""
    return mem_mb / suspend_rate


def vm_resume_time(mem_mb: float, resume_rate: float) -> float:
    """t_r^j = mem_j / r (seed 002 eq. (4)); mem in MB, r in MB/s (> 0), result in s."""
    return mem_mb / resume_rate


def vm_copy_time(mem_mb: float, bandwidth: float) -> float:
    """t_copy^j = mem_j / b (seed 002 Section 5, eq. (8)); b in MB/s (> 0), result in s."""
    return mem_mb / bandwidth


@dataclass(frozen=True)
class OverheadModel:
    """Seed 002's overhead model with its constants (see module doc). ``pause_s`` t_p (s),
    ``suspend_rate`` B and ``resume_rate`` r (MB/s), ``rescheduling_s`` delta (s),
    ``migration_bandwidth`` b (MB/s), ``cancel_s`` (s). Rates must be > 0 (ZeroDivisionError)."""

    pause_s: float = 0.005
    suspend_rate: float = 6.36
    resume_rate: float = 8.12
    rescheduling_s: float = 2.3
    migration_bandwidth: float = 12.5
    cancel_s: float = 0.0

    @classmethod
    def from_config(cls, cfg) -> "OverheadModel":
        """The model with a ``LeaseConfig``'s constants."""
        return cls(cfg.pause_time, cfg.suspend_rate, cfg.resume_rate, cfg.rescheduling_time,
                   cfg.migration_bandwidth, cfg.cancel_time)

    @staticmethod
    def memories(lease) -> list[float]:
        """mem_1..mem_v(L) in MB (every VM of a lease has the lease's per-VM memory)."""
        return [float(lease.per_vm[MEM])] * lease.n_vms

    def suspension(self, lease) -> float:
        """s(L), seed 002 eq. (5), in s."""
        mems = self.memories(lease)
        return len(mems) * self.pause_s + sum(vm_suspend_time(m, self.suspend_rate) for m in mems) \
            + self.rescheduling_s

    def resumption(self, lease) -> float:
        """r(L), seed 002 eq. (6), in s."""
        mems = self.memories(lease)
        return len(mems) * self.pause_s + sum(vm_resume_time(m, self.resume_rate) for m in mems)

    def suspendable(self, lease) -> float:
        """h(L) of a suspended lease, seed 002 eq. (7) (= s(L) + r(L)), in s."""
        mems = self.memories(lease)
        return (2 * len(mems) * self.pause_s + self.rescheduling_s
                + sum(vm_suspend_time(m, self.suspend_rate) + vm_resume_time(m, self.resume_rate)
                      for m in mems))

    def migratable(self, lease) -> float:
        """h(L) of a migrated lease, seed 002 eq. (8), in s (see module doc for the overlap)."""
        mems = self.memories(lease)
        ts = [vm_suspend_time(m, self.suspend_rate) for m in mems]
        tr = [vm_resume_time(m, self.resume_rate) for m in mems]
        overlap = sum(max(ts[j], tr[j - 1]) for j in range(1, len(mems)))
        return (sum(vm_copy_time(m, self.migration_bandwidth) for m in mems) + ts[0] + overlap + tr[-1]
                + 2 * len(mems) * self.pause_s + self.rescheduling_s)

    def cancellable(self, lease) -> float:
        """h(L) of a cancelled lease: the stop time (seed 002 Section 5), in s."""
        return self.cancel_s

    def lease_overhead(self, lease, started: bool = True) -> float:
        """h(L) by the lease's request type; a lease whose VMs have not started costs delta.
        ValueError for a non-preemptable lease (it is never in a candidate set)."""
        rtype = lease.request_type
        if not rtype.preemptable:
            raise ValueError(f"lease {lease.id} is {rtype.paper_name}: it has no preemption overhead")
        if not started:
            return self.rescheduling_s
        if rtype is RequestType.BEST_EFFORT_CANCELLABLE:
            return self.cancellable(lease)
        if rtype is RequestType.DEADLINE_CONSTRAINT_MIGRATABLE:
            return self.migratable(lease)
        return self.suspendable(lease)
