"""Preempting external leases for a local request (seed 002 Sections 2, 5 and 6).

``preempt_for_local(sched, request, t_s, t_e, now, score, requeue)`` runs inside the AR
scheduler's slot-table transaction when a local request does not fit over [t_s, t_e):

1. the candidates are the external, preemptable leases (``Lease.preemptable``) whose running
   VMs or waiting reservations overlap [t_s, t_e), each with its overhead h(L) (``overhead``);
2. the candidate sets (``candidates``, eq. (1)-(2)) cover ``need`` = v(R) minus the VMs of R
   that fit already;
3. the policy (``candidatepolicy``) scores the sets; they are tried in score order, each in a
   nested transaction: its leases are preempted and the request is mapped; the first set
   after which the request fits is kept (at most ``MAX_TRIES`` sets are tried);
4. each preempted lease is handled by its type: a reservation that has not started is
   unscheduled and queued again; a running Best-Effort-Cancellable lease is stopped at t_s
   and ends Cancelled; a running suspendable or migratable lease is suspended (s(L), eq. (5)):
   if its suspension can end by t_s it runs until t_s - s(L) and the suspension holds its
   resources (Haizea); otherwise (a request that starts now) its VMs are paused now and the
   suspension [now, now + s(L)) holds only their memory, so the request starts on time. Where
   leases cannot be suspended (``suspension = none``, or an enactment without suspend such as
   the live node agents) it is stopped at t_s and requeued to restart from scratch.
   Suspended leases go back to the queue and their remainder is rescheduled by the queue's
   backfilling (conservative in seed 002 Section 7.2), resumed in r(L) (eq. (6)).

Only local requests preempt (seed 002 Section 4.2); each preemption adds 1 to the lease's
``preemptions`` and h(L) to its ``overhead_s``, and ``sched.preemption_log`` records
(time s, request id, preempted ids, h(C) s, policy name).
"""
from __future__ import annotations

from . import frozenhold
from .candidates import Candidate, enumerate_candidate_sets
from .model import MEM
from .overhead import OverheadModel
from .preemption import suspend_reservations
from .requesttypes import RequestType
from .slottable import ResKind, ResState

#: At most this many candidate sets are tried (in score order) before the request is rejected.
MAX_TRIES = 64


def free_vms(sched, need: tuple, t_s: float, t_e: float) -> int:
    """VMs of ``need`` that fit over [t_s, t_e) without preemption (all nodes)."""
    return sum(sched.st.vms_fit(n, need, t_s, t_e) for n in range(len(sched.nodes)))


def collect_candidates(sched, t_s: float, t_e: float, model: OverheadModel) -> list[Candidate]:
    """The preemptable leases holding resources in [t_s, t_e), with h(L) (see module doc)."""
    found = {}
    for res in sched.st.reservations():
        lease = res.lease
        if lease is None or not res.use or lease.done or not lease.preemptable:
            continue
        if res.start < t_e and res.end > t_s:
            found[lease.id] = lease
    out = []
    for lease in found.values():
        vm = sched.vm_reservation(lease)
        if vm is None:
            continue
        resv = frozenhold.plan(sched.st, lease)
        started = vm.state is ResState.ACTIVE
        if not started and any(r.state is not ResState.SCHEDULED for r in resv):
            continue  # resuming or migrating right now
        out.append(Candidate(lease, lease.n_vms, model.lease_overhead(lease, started), started,
                             float(lease.n_vms * lease.per_vm[MEM])))
    return out


def preempt_for_local(sched, request, t_s: float, t_e: float, now: float, score, requeue: list):
    """The request's mapping after preempting the policy's candidate set, or None (nothing
    changed). Must run inside an open slot-table transaction (see module doc)."""
    policy = sched.set_policy
    if policy is None or not policy.preempts or not request.local:
        return None
    cfg, st = sched.cfg, sched.st
    model = OverheadModel.from_config(cfg)
    need = request.n_vms - free_vms(sched, request.per_vm, t_s, t_e)
    cands = collect_candidates(sched, t_s, t_e, model)
    sets, _complete = enumerate_candidate_sets(cands, need, cfg.max_candidate_sets, cfg.max_candidate_leases)
    scored = sorted(((s, c) for s, c in zip(policy.scores(sets), sets) if s is not None), key=lambda x: x[0])
    for _s, cset in scored[:MAX_TRIES]:
        tx = st.begin()
        mark = len(requeue)
        if all(_preempt(sched, c, t_s, now, model, requeue) for c in cset.members):
            mapping = sched.mapper.map_interval(request.per_vm, request.n_vms, t_s, t_e, score)
            if mapping is not None:
                st.commit(tx)
                _record_batch(sched, [c.lease for c in cset.members if c.started
                                      and c.lease.request_type is not RequestType.BEST_EFFORT_CANCELLABLE])
                log = sched.preemption_log
                log.append((now, request.id, cset.ids, cset.overhead_s, policy.name))
                st.on_rollback(log.pop)
                return mapping
        st.rollback(tx)
        del requeue[mark:]
    return None


def _record_batch(sched, leases: list) -> None:
    """Suspended leases of one decision are requeued together (``LeaseScheduler._end_suspend``)."""
    if len(leases) < 2:
        return
    batch = frozenset(l.id for l in leases)
    for l in leases:
        sched.suspend_batches[l.id] = batch

    def undo() -> None:
        for l in leases:
            sched.suspend_batches.pop(l.id, None)
    sched.st.on_rollback(undo)


def _preempt(sched, cand: Candidate, t: float, now: float, model: OverheadModel, requeue: list) -> bool:
    """Free ``cand.lease``'s resources from ``t`` on by its request type (module doc, step 4)."""
    st, lease = sched.st, cand.lease
    vm = sched.vm_reservation(lease)
    if vm is None:
        return False
    if not lease.terminate_at_end:  # a cancellable lease already due to stop: stopped earlier, once
        st.set(lease, "preemptions", lease.preemptions + 1)
        st.set(lease, "overhead_s", lease.overhead_s + cand.overhead_s)
    if not cand.started:
        sched.unschedule(lease, now)
        requeue.append(lease)
        return True
    later = [r for r in st.of_lease(lease)
             if r is not vm and r.kind is not ResKind.TRANSFER and r.state is ResState.SCHEDULED]
    planned = [r for r in later if r.kind is ResKind.SUSPEND and abs(r.start - vm.end) < 1e-9]
    if planned and vm.end <= t:  # already suspended before t (Haizea's planned suspension): drop
        for r in later:          # only what follows it; the lease is requeued after it
            if r not in planned:
                st.remove(r)
        return True
    for r in later:
        st.remove(r)
    if lease.request_type is RequestType.BEST_EFFORT_CANCELLABLE:
        st.move(vm, vm.start, min(vm.end, max(t, now, vm.start)))
        st.set(lease, "terminate_at_end", True)
        return True
    if not sched.enactment_supports_suspend or sched.cfg.suspension == "none":
        st.move(vm, vm.start, min(vm.end, max(t, now, vm.start)))  # no suspension here: it is
        st.set(lease, "cancel_at_end", True)                       # stopped and restarts from scratch
        return True
    s = model.suspension(lease)
    paused = not (t - s >= now and t - s > vm.start)
    end = max(now, vm.start) if paused else min(t - s, vm.end)  # paused: images written while R runs
    st.move(vm, vm.start, end)
    for r in suspend_reservations(lease, vm.mapping, end, sched.cfg, memory_only=paused):
        st.add(r)
        frozenhold.planned(sched, lease, vm.mapping, r.end, strict=False)   # frozen: memory kept
    return True
