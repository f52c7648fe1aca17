"""Memory held by a lease suspended *in place* (its VMs frozen on their nodes, not written out).

Seed 002 Section 5 and Haizea suspend a VM by writing its memory image to disk: once the
suspension ends, the lease holds nothing (``LeaseScheduler._end_suspend``). A live VWN suspended
through the cgroup freezer (docs/vwn.md, "Suspend and resume") keeps its processes -- and their
memory -- on its node until it is resumed or deleted. Counting that memory free would let the
engine place another lease into RAM the frozen one still uses.

So when the enactment suspends in place (``suspends_in_place``, ``vwn_agents.node_enactment.
NodeAgentEnactment`` with ``suspend_vwns``), a preemption that suspends a lease also adds a
``ResKind.HOLD`` reservation on the lease's nodes (``planned``): memory only (mem per VM x its
VMs there, MB), from the end of its suspension to inf, state active. The request that preempts
it must then fit beside that memory: an advance reservation that needs the memory too makes
the engine stop the lease instead (its VWN deleted, restarted later: ``ar._with_preemption``
falls back to cancel-and-requeue), and a best-effort lease takes no slot that would end in a
planned suspension (``besteffort``). At the suspension's end the hold stays if the VMs really
were frozen (``holds_memory(lease)``), else it is dropped (``hold``). It ends

* where the lease's resumption starts (``place``: while the resumption is searched the hold is
  lifted -- the lease's own memory must not block its own resumption on the same nodes -- then
  put back over [suspended, first resume/VM reservation start); if the resumption is unscheduled
  again it goes back to inf, ``extend``);
* when the lease is cancelled or finishes (``drop``; ``_finish`` removes every reservation).

The hold is not a VM: policies and candidate sets never count it as a running or scheduled
reservation (``plan`` leaves it out).
"""
from __future__ import annotations

from .model import MEM, LeaseState, Segment
from .slottable import INF, Reservation, ResKind, ResState

#: Reservation kinds that are not part of a lease's plan (transfers, frozen memory).
NOT_PLAN = (ResKind.TRANSFER, ResKind.HOLD, ResKind.COPY)


def plan(st, lease) -> list:
    """The lease's VM, suspension, resumption and migration reservations (no transfer, no hold)."""
    return [r for r in st.of_lease(lease) if r.kind not in NOT_PLAN]


def of(st, lease) -> Reservation | None:
    """The lease's hold, or None."""
    return next((r for r in st.of_lease(lease) if r.kind is ResKind.HOLD), None)


def _current(sched, lease, t: float) -> Reservation | None:
    """The lease's hold at ``t`` (s), or None; a hold that ended by ``t`` (a past suspension's,
    whose end at the resumption is not an event of the slot table: the hold was never started
    by ``process``) is removed first, inside the caller's transaction."""
    held = of(sched.st, lease)
    if held is not None and held.end != INF and held.end <= t:
        sched.st.remove(held)
        return None
    return held


def in_place(sched) -> bool:
    """Whether the enactment suspends VMs in place (``suspends_in_place``: frozen, memory kept)."""
    return bool(getattr(sched.enactment, "suspends_in_place", False))


def _memory_use(lease, mapping: tuple) -> dict:
    use: dict = {}
    for node in mapping:
        vec = use.get(node, (0, 0, 0, 0))
        use[node] = tuple(v + (lease.per_vm[MEM] if i == MEM else 0) for i, v in enumerate(vec))
    return use


def planned(sched, lease, mapping: tuple, t: float, strict: bool = True) -> Reservation | bool | None:
    """When a preemption plans ``lease``'s suspension ending at ``t`` (s) and the enactment
    suspends in place: the hold of its memory from ``t`` on (scheduled with the plan, so the
    request that preempts it is placed only where that memory is not needed). None otherwise;
    False when reservations already planned on those nodes need that memory (the caller must
    not freeze the lease: stop it instead); ``strict=False`` keeps the hold anyway (seed 002's
    candidate sets, ``localpreemption``, decide on their own)."""
    if not in_place(sched):
        return None
    held = _current(sched, lease, t)
    if held is not None:             # planned already: a later preemption may suspend it earlier
        if t < held.start:
            sched.st.move(held, t, held.end)
        return None
    held = sched.st.add(Reservation(ResKind.HOLD, lease, t, INF, use=_memory_use(lease, mapping),
                                    mapping=mapping, state=ResState.ACTIVE))
    if strict and any(sched.st.free(node, t, INF)[MEM] < 0 for node in held.use):
        sched.st.remove(held)        # what is already planned there needs that memory
        return False
    return held


def hold(sched, lease, t: float) -> Reservation | None:
    """At the end of ``lease``'s suspension (``t``, s): its memory stays held when the
    enactment really kept its VMs (``holds_memory(lease)``: frozen), else its planned hold is
    dropped (they were stopped: memory free). The hold, or None."""
    keeps = getattr(sched.enactment, "holds_memory", None)
    held = _current(sched, lease, t)
    if keeps is None or not lease.mapping or not keeps(lease):
        if held is not None:
            drop(sched, lease)
        return None
    if held is not None:
        return held
    return sched.st.add(Reservation(ResKind.HOLD, lease, t, INF, use=_memory_use(lease, lease.mapping),
                                    mapping=lease.mapping, state=ResState.ACTIVE))


def place(sched, lease, place_fn) -> bool:
    """Run ``place_fn()`` (the placement of the resumption of a suspended ``lease``) with its
    hold lifted, then put the hold back up to where the resumption starts (inf if not placed).
    Returns what ``place_fn`` returned."""
    held = of(sched.st, lease)
    if held is None:
        return place_fn()
    sched.st.remove(held)
    ok = place_fn()
    starts = [r.start for r in plan(sched.st, lease)]
    end = min(starts) if ok and starts else INF
    sched.st.add(Reservation(ResKind.HOLD, lease, held.start, max(end, held.start), use=held.use,
                             mapping=held.mapping, state=ResState.ACTIVE))
    return ok


def extend(sched, lease) -> None:
    """The lease's resumption was unscheduled: its hold lasts until it is placed again."""
    held = of(sched.st, lease)
    if held is not None and held.end != INF:
        sched.st.move(held, held.start, INF)


def drop(sched, lease) -> None:
    """The lease was cancelled or ended: its frozen VMs are gone, so is the hold."""
    held = of(sched.st, lease)
    if held is not None:
        sched.st.remove(held)
        held.state = ResState.DONE


def ended(sched, res: Reservation, t: float) -> None:
    """Handler of a hold's end (its lease's resumption starts): remove it."""
    sched.st.remove(res)
    res.state = ResState.DONE


def adopt_suspended(sched, lease, mapping: tuple, start_s: float, ran_s: float, now: float):
    """Record a lease whose VMs are frozen on ``mapping`` (a live service restarted while it was
    suspended in place): it started at ``start_s`` and ran ``ran_s`` seconds (clamped to
    [0, duration)), it is Suspended with its memory held (``hold``; the enactment must already
    report ``holds_memory``) and queued, so the next ``process`` schedules its resumption as any
    suspended lease's. ValueError for a lease id already known. Returns the lease."""
    if lease.id in sched.leases:
        raise ValueError(f"lease {lease.id} was already submitted")
    ran = min(max(0.0, ran_s), max(0.0, lease.duration_s - 1e-3))
    sched.leases[lease.id] = lease
    lease.mapping, lease.start_s, lease.time_run = mapping, start_s, ran
    lease.segments.append(Segment(start_s, start_s + ran, mapping))
    for state in (LeaseState.SCHEDULED, LeaseState.ACTIVE, LeaseState.SUSPENDING, LeaseState.SUSPENDED):
        lease.to(state)
    lease.suspensions += 1
    hold(sched, lease, now)
    sched.requeue(lease)
    return lease
