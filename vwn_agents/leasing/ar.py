"""Advance reservations: seed 000 Algorithm 1 with preemption of best-effort leases.

All VMs start together at the requested start t_s and run until t_e = t_s + duration.
Candidate nodes have room for at least one VM over [t_s, t_e); they are ordered by image reuse
(the image is in the node's pool or already scheduled to arrive by t_s), then by how many VMs
they can host, and the VMs are packed onto them. If they do not fit and the preemption policy
allows it, best-effort leases holding resources in [t_s, t_e) are preempted one at a time in
policy order: a lease that has not started is unscheduled and requeued; a running one is
suspended so that its suspension ends by t_s -- or, when there is no time for that, paused at
once and suspended while the AR runs (``preemption.suspend_reservations(memory_only=True)``) --
or, with ``suspension = none``, cancelled at t_s and requeued. Finally every needed image
must be transferable by t_s (``Staging.stage_ar``, EDF or EDF/JIT). The whole attempt is one slot-table transaction: commit or roll back.
With a seed 002 policy (``nop``, ``mov``, ``mlip``, ``moml``) only local requests preempt, a
whole candidate set at a time (``localpreemption``).
"""
from __future__ import annotations

from . import compat, frozenhold
from .localpreemption import preempt_for_local
from .mapper import vm_use
from .model import LeaseState
from .preemption import can_suspend, suspend_reservations, suspend_time
from .slottable import Reservation, ResKind, ResState


def schedule_ar(sched, lease, now: float) -> bool:
    """Accept (reservations committed, state SCHEDULED) or reject (state REJECTED) an AR."""
    st = sched.st
    t_s = lease.requested_start_s
    t_e = t_s + lease.duration_s
    if sched.cfg.policy_admission == "no-ARs":     # Haizea 1.1's admission policy, before scheduling
        return _reject(sched, lease, "not admitted: policy-admission = no-ARs")
    if t_s < now:
        return _reject(sched, lease, f"requested start {t_s:g} s is in the past (now {now:g} s)")
    tx = st.begin()
    score = compat.host_scorer(sched, lease, t_s) if compat.haizea(sched.cfg) else sched.host_score(lease, t_s)
    mapping = sched.mapper.map_interval(lease.per_vm, lease.n_vms, t_s, t_e, score)
    requeue: list = []
    if mapping is None and sched.set_policy is not None:  # seed 002: local requests only
        mapping = preempt_for_local(sched, lease, t_s, t_e, now, score, requeue)
    elif mapping is None:  # the preemption policy says which leases may make room (maybe none)
        mapping = _with_preemption(sched, lease, t_s, t_e, now, score, requeue)
    if mapping is None:
        st.rollback(tx)
        return _reject(sched, lease, "not enough resources over the requested interval")
    if not sched.staging.stage_ar(lease, mapping, t_s, t_e, now):
        st.rollback(tx)
        return _reject(sched, lease, "image transfers cannot complete by the requested start")
    hosts = sched.decisions.hosts(sched, lease, mapping, t_s, t_e) if sched.decisions is not None else None
    st.add(Reservation(ResKind.VM, lease, t_s, t_e, use=vm_use(mapping, lease.per_vm), mapping=mapping))
    st.set(lease, "mapping", mapping)
    st.set(lease, "state", lease.checked(LeaseState.SCHEDULED))
    st.commit(tx)
    if sched.decisions is not None:
        sched.decisions.accepted(sched, lease, now, mapping, t_s, t_e, hosts)
    for other in requeue:
        sched.requeue(other)
    return True


def _reject(sched, lease, reason: str) -> bool:
    lease.to(LeaseState.REJECTED)
    lease.reject_reason = reason
    return False


def _candidates(sched, t_s: float, t_e: float, now: float, protected: list | None = None):
    """Preemptible best-effort leases holding resources in [t_s, t_e) that the preemption
    policy scores (None: never preempted), highest score first -- or earliest submitted first
    with ``preemption-order = oldest-submission``; with ``preemption-horizon`` H > 0, leases
    submitted at or before t_s - H are left out (Haizea 1.1's 7-day aging; appended to
    ``protected`` when it is a list)."""
    found = {}
    for res in sched.st.reservations():
        lease = res.lease
        if lease is None or not lease.is_be or not lease.preemptible or not res.use:
            continue
        if res.start < t_e and res.end > t_s:
            found[lease.id] = lease
    if compat.haizea(sched.cfg):        # Haizea 1.1: oldest first, 7-day aging
        return compat.ar_victims(found.values(), t_s)
    horizon = sched.cfg.preemption_horizon
    scored = []
    for lease in found.values():
        if horizon > 0 and lease.submit_s <= t_s - horizon:
            if protected is not None:
                protected.append(lease)
            continue            # Haizea 1.1's aging: too old to be preempted by this AR
        vm = sched.vm_reservation(lease)
        score = sched.policy.score(lease, vm, now) if vm is not None else None
        if score is not None:
            scored.append((score, lease.id, lease))
    if sched.cfg.preemption_order == "oldest-submission":
        scored.sort(key=lambda x: (x[2].submit_s, x[1]))
    else:
        scored.sort(key=lambda x: (x[0], x[1]), reverse=True)
    return [x[2] for x in scored]


def _with_preemption(sched, lease, t_s, t_e, now, score, requeue):
    """Preempt candidates until the AR fits; when suspending in place (frozen VMs keep their
    memory, ``frozenhold``) cannot make room, again with every victim stopped and requeued."""
    for freeze in ((True, False) if frozenhold.in_place(sched) else (True,)):
        tx = sched.st.begin()
        mark = len(requeue)
        protected: list = []
        cands = _candidates(sched, t_s, t_e, now, protected)
        chosen = []
        for victim in cands:
            if preempt(sched, victim, t_s, now, requeue, freeze):
                chosen.append(victim)
                mapping = sched.mapper.map_interval(lease.per_vm, lease.n_vms, t_s, t_e, score)
                if mapping is not None:
                    sched.st.commit(tx)
                    if sched.decisions is not None:
                        sched.decisions.preempted(sched, lease, now, cands, chosen, protected)
                    return mapping
        sched.st.rollback(tx)
        del requeue[mark:]
    return None


def preempt(sched, lease, t: float, now: float, requeue: list, freeze: bool = True) -> bool:
    """Free ``lease``'s resources from time ``t`` on (inside the caller's transaction);
    ``freeze=False``: stop and requeue it even where it could be suspended."""
    st, cfg = sched.st, sched.cfg
    if compat.haizea(cfg):
        return compat.preempt(sched, lease, t, now, requeue)
    resv = frozenhold.plan(st, lease)
    vm = sched.vm_reservation(lease)
    if vm is None:
        return False
    if all(r.state is ResState.SCHEDULED for r in resv):
        sched.unschedule(lease, now)
        requeue.append(lease)
        return True
    if vm.state is not ResState.ACTIVE:
        return False  # resuming or migrating right now
    later = [r for r in resv if r is not vm and r.state is ResState.SCHEDULED]
    if freeze and can_suspend(lease, cfg) and sched.enactment_supports_suspend:
        # never later than an earlier preemption already ends it: a second AR must not undo
        # the suspension planned for the first (found by hypothesis, test_leasing_frozen_memory)
        new_end = min(t - suspend_time(lease, vm.mapping, cfg), vm.end)
        paused = new_end < now or new_end <= vm.start
        if paused:  # no time to suspend before t: pause now, suspend while the AR runs
            if vm.start >= now:
                return False
            new_end = now
        tx = st.begin()
        for r in later:
            st.remove(r)
        st.move(vm, vm.start, new_end)
        for r in suspend_reservations(lease, vm.mapping, new_end, cfg, memory_only=paused):
            st.add(r)
            if frozenhold.planned(sched, lease, vm.mapping, r.end) is False:
                st.rollback(tx)          # its frozen memory would not fit: not this victim
                return False
        st.commit(tx)
        st.set(lease, "preemptions", lease.preemptions + 1)
        return True
    # cancel-and-requeue: the lease runs until t (or an earlier planned end), then is killed and
    # queued again from scratch; a hold planned for an earlier suspension goes (nothing frozen)
    for r in later:
        st.remove(r)
    held = frozenhold.of(st, lease)
    if held is not None:
        st.remove(held)
    st.move(vm, vm.start, min(vm.end, max(t, now)))
    st.set(lease, "cancel_at_end", True)
    st.set(lease, "preemptions", lease.preemptions + 1)
    return True
