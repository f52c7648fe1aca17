"""Suspension, resumption and migration of best-effort leases, and the preemption policy.

Seed 000 Figure 6.1 (bottom): best-effort VMs are suspended before an advance reservation that
needs their resources and resumed after it. One VM takes ceil(memory_MB / rate) seconds to
suspend (``suspend-rate``) or resume (``resume-rate``). With ``suspendresume-exclusion =
local`` the VMs of one node are handled one after another and nodes work in parallel; with
``global`` (shared storage) one VM at a time on the whole site. All VMs of a lease stop running
together when the suspension starts and start together once every VM has resumed, so a
lease's suspension takes S = the longest per-node (local) or the total (global) time; one
``SUSPEND``/``RESUME`` reservation holds all the lease's nodes for S (a node with fewer VMs may
finish earlier; its resources are released with the others).

A running lease that cannot finish its suspension before the reservation that preempts it
(the reservation starts now) is paused at once and suspended while the reservation runs, its
SUSPEND reservation holding only the VMs' memory (``memory_only``).

The preemption policy (``policy-preemption``) scores candidate leases (higher = preempt first,
None = never); the AR scheduler sorts. ``scheduling_threshold`` is Haizea's minimum run before
a suspension.
"""
from __future__ import annotations

import math

from .candidatepolicy import POLICIES as SET_POLICIES
from .config import ConfigError, LeaseConfig
from .mapper import vm_use
from .model import MEM, Lease, LeaseType
from .overhead import OverheadModel, vm_copy_time
from .requesttypes import RequestType
from .slottable import Reservation, ResKind


def op_time(memory_mb: float, rate_mbs: float, override_s: float = -1.0, enactment_s: float = 0.0) -> float:
    """Seconds to suspend or resume one VM: ceil(memory / rate) -- or ``override_s`` when it is
    >= 0 (Haizea 1.1's ``override-suspend-time`` / ``override-resume-time``) -- plus
    ``enactment_s`` (``enactment-overhead``, Haizea 1.1 ``__compute_susprem_times``)."""
    if override_s >= 0:
        return override_s + enactment_s
    return (float(math.ceil(memory_mb / rate_mbs)) if memory_mb > 0 else 0.0) + enactment_s


def lease_op_estimate(lease: Lease, rate_mbs: float, override_s: float, enactment_s: float) -> float:
    """Haizea 1.1's estimate (s) of a whole lease's suspension or resumption before its mapping
    is known (``Lease.estimate_suspend_time``): the override itself when set (>= 0), else the
    sum over its VMs of ceil(memory / rate) + ``enactment_s``."""
    if override_s >= 0:
        return override_s
    return op_time(lease.per_vm[MEM], rate_mbs, -1.0, enactment_s) * lease.n_vms


def per_node_times(lease: Lease, mapping: tuple, rate: float, exclusion: str, override_s: float = -1.0,
                   enactment_s: float = 0.0) -> tuple[dict, float]:
    """({node: seconds busy}, total seconds S) for suspending/resuming ``lease`` on ``mapping``
    (one VM: ``op_time(memory, rate, override_s, enactment_s)``)."""
    one = op_time(lease.per_vm[MEM], rate, override_s, enactment_s)
    counts: dict = {}
    for node in mapping:
        counts[node] = counts.get(node, 0) + 1
    if exclusion == "global":
        total = one * len(mapping)
        return {node: total for node in counts}, total
    times = {node: one * k for node, k in counts.items()}
    return times, max(times.values(), default=0.0)


def seed002_timing(cfg: LeaseConfig) -> bool:
    """Whether suspensions and resumptions are timed by seed 002 eq. (5)-(6) (the seed 002
    policies ``nop``, ``mov``, ``mlip``, ``moml``) rather than by Haizea's per-VM ceil."""
    return cfg.policy_preemption in SET_POLICIES


def suspend_time(lease: Lease, mapping: tuple, cfg: LeaseConfig) -> float:
    """Seconds a suspension of ``lease`` on ``mapping`` takes: s(L) of seed 002 eq. (5) with
    a seed 002 policy, else Haizea's (``per_node_times``)."""
    if seed002_timing(cfg):
        return OverheadModel.from_config(cfg).suspension(lease)
    return per_node_times(lease, mapping, cfg.suspend_rate, cfg.suspendresume_exclusion,
                          cfg.override_suspend_time, cfg.enactment_overhead)[1]


def resume_time(lease: Lease, mapping: tuple, cfg: LeaseConfig) -> float:
    """Seconds a resumption takes: r(L) of seed 002 eq. (6) with a seed 002 policy, else
    Haizea's (``per_node_times``)."""
    if seed002_timing(cfg):
        return OverheadModel.from_config(cfg).resumption(lease)
    return per_node_times(lease, mapping, cfg.resume_rate, cfg.suspendresume_exclusion,
                          cfg.override_resume_time, cfg.enactment_overhead)[1]


def can_suspend(lease: Lease, cfg: LeaseConfig) -> bool:
    """Whether a best-effort lease may be suspended under ``suspension`` (Haizea's planned
    suspensions). Seed 002: never a Best-Effort-Cancellable lease (preempting it terminates it)
    nor a deadline-constrained one (it runs in one piece by its deadline; a local request may
    still preempt a migratable one, ``localpreemption``)."""
    if not lease.preemptible or lease.type is not LeaseType.BEST_EFFORT:
        return False
    if lease.request_type is RequestType.BEST_EFFORT_CANCELLABLE or not lease.request_type.best_effort:
        return False
    mode = cfg._values["suspension"]
    return mode == "all" or (mode == "serial-only" and lease.n_vms == 1)


def scheduling_threshold(overhead_s: float, factor: float, forced_s: float = -1.0) -> float:
    """Haizea's scheduling threshold: the shortest time (s) a lease that will be suspended
    must run before its suspension, max(overhead_s x (1 + factor), overhead_s + 1 s).

    ``overhead_s``: its suspend (+ resume, when it is being resumed) time in seconds, >= 0;
    ``factor``: ``scheduling-threshold-factor`` (>= 0). Source: Haizea 1.1's
    ``scheduling-threshold-factor`` (not in seed 000); the extra second keeps a zero overhead
    from allowing zero-length slots. The one implementation, used by best-effort placement.
    ``forced_s`` >= 0 (``force-scheduling-threshold``, Haizea 1.1) replaces the computed value,
    but never below ``overhead_s`` + 1 s (a shorter slot could not hold its own suspension).
    """
    if forced_s >= 0:
        return max(forced_s, overhead_s + 1.0)
    return max(overhead_s * (1.0 + factor), overhead_s + 1.0)


def migration_time(lease: Lease, old: tuple, new: tuple, cfg: LeaseConfig) -> float:
    """Seconds to move a suspended lease's state from ``old`` to ``new`` nodes: memory plus disk
    image of every VM that changes node, over the best-effort link (``migration = yes``); with
    a seed 002 policy the memory image only, over ``migration-bandwidth`` (t_copy, eq. (8))."""
    if cfg.migration != "yes" or sorted(old) == sorted(new):
        return 0.0
    moved = sum(1 for a, b in zip(sorted(old), sorted(new)) if a != b)
    if seed002_timing(cfg):  # seed 002 eq. (8): the memory images over b; the disk image is there
        return sum(vm_copy_time(lease.per_vm[MEM], cfg.migration_bandwidth) for _ in range(moved))
    if cfg.migration_transfer == "node-to-node":
        return migration_rounds(old, new) * (lease.per_vm[MEM] + lease.image_mb) / cfg.migration_bandwidth
    mb = moved * (lease.per_vm[MEM] + lease.image_mb)
    return mb / cfg.link_bandwidth_mbs("be")


def migration_rounds(old: tuple, new: tuple) -> int:
    """Rounds of node-to-node copies that move VMs from ``old`` to ``new`` (node per VM):
    VMs whose node does not change stay; the others are paired source -> destination in node
    order, and each round copies, in parallel, pairs that share no node (a node's NIC does one
    copy at a time), greedily in that order. Source: Haizea 1.1's ``schedule_migration``
    (HPDC'08 configuration: 100 Mb/s in and out per node)."""
    left, gone, came = list(new), [], []
    for node in old:
        if node in left:
            left.remove(node)
        else:
            gone.append(node)
    came = sorted(left)
    pairs = list(zip(sorted(gone), came))
    rounds = 0
    while pairs:
        used, rest = set(), []
        for a, b in pairs:
            if a in used or b in used:
                rest.append((a, b))
            else:
                used.update((a, b))
        pairs, rounds = rest, rounds + 1
    return rounds


def migration_estimate(lease: Lease, cfg: LeaseConfig) -> float:
    """Upper bound (s) of ``migration_time`` before the new nodes are known (``migration =
    yes``): every VM moved -- over the image link one after another (``link``), or, node to
    node, the node holding most of the lease's VMs sends them one per round."""
    mb = lease.per_vm[MEM] + lease.image_mb
    if cfg.migration_transfer == "node-to-node":
        counts: dict = {}
        for node in lease.mapping:
            counts[node] = counts.get(node, 0) + 1
        return max(counts.values(), default=1) * mb / cfg.migration_bandwidth
    return lease.n_vms * mb / cfg.link_bandwidth_mbs("be")


def suspend_reservations(lease: Lease, mapping: tuple, start: float, cfg: LeaseConfig,
                         memory_only: bool = False) -> list[Reservation]:
    """The SUSPEND reservation of a suspension starting at ``start``: it holds all the lease's
    nodes for S seconds (the longest node under local exclusion, the total under global;
    ``suspend_time``). ``memory_only``: the VMs are paused (seed 002 Section 5) and hold only
    their memory while the images are written, so a reservation starting at ``start`` can use
    their CPUs -- the suspension of a preemption for a request that starts now."""
    s_total = suspend_time(lease, mapping, cfg)
    use = vm_use(mapping, lease.per_vm)
    if memory_only:
        use = {node: (0, vec[MEM], 0, 0) for node, vec in use.items()}
    return [Reservation(ResKind.SUSPEND, lease, start, start + s_total, use=use, mapping=mapping)]


def resume_reservations(lease: Lease, mapping: tuple, start: float, total: float,
                        cfg: LeaseConfig) -> list[Reservation]:
    """The RESUME reservation [start, start + total) on all the lease's nodes."""
    return [Reservation(ResKind.RESUME, lease, start, start + total, use=vm_use(mapping, lease.per_vm),
                        mapping=mapping)]


class PreemptionPolicy:
    """``ar-preempts-everything``: any preemptible best-effort lease may be preempted by an AR.

    ``score(lease, vm_res, now)``: leases that have not started yet score highest (nothing is
    lost by unscheduling them), then the most recently started (least progress at stake);
    None means "never preempt this lease". The AR scheduler (``ar.py``) preempts the leases
    with a score, highest first.
    """

    name = "ar-preempts-everything"

    def score(self, lease: Lease, vm_res: Reservation, now: float) -> tuple | None:
        started = vm_res.start <= now
        return (0 if started else 1, vm_res.start)


class NoPreemption(PreemptionPolicy):
    """``no-preemption``: no lease is ever preempted (every score is None), so an AR that does
    not fit beside the best-effort leases is rejected."""

    name = "no-preemption"

    def score(self, lease: Lease, vm_res: Reservation, now: float) -> None:
        return None


POLICIES = {"ar-preempts-everything": PreemptionPolicy, "no-preemption": NoPreemption}


def preemption_policy(name: str) -> PreemptionPolicy:
    """The policy ``policy-preemption = name``; ConfigError naming the option and the choices
    for an unknown name."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise ConfigError(f"[scheduling] policy-preemption = {name!r}; expected one of "
                          f"{', '.join(POLICIES)}") from None
