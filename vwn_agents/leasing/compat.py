"""Haizea 1.1 compatibility mode (``[general] compat = "haizea-1.1"``).

"Haizea 1.1" is the ``1.1`` branch of Haizea's repository (github.com/borjasotomayor/haizea,
2011); its 2009 ``master`` differs (e.g. it estimates a suspension as n x ceil(n x memory /
rate) for n VMs), and is not what this mode follows.

vgrid's lease engine deliberately differs from Haizea 1.1 in a few places where its own
behaviour is better or simpler; a Haizea user who brings an experiment unchanged wants Haizea's
numbers instead. This module holds Haizea's behaviour for each of those places, selected by the
one option ``compat`` (on by default for Haizea INI files read by ``vgrid simulate --config``,
off for vgrid TOML). vgrid's defaults stay where they are. Each policy returns scores or plans;
the scheduler and the AR code call them at a few marked points.

The places (docs/leasing.md, "Haizea-compatible mode", gives each one's measured effect):

1. Re-evaluation after a premature end (Haizea ``LeaseScheduler.reevaluate_schedule``): every
   best-effort lease holding a *future* reservation (backfilling) is unscheduled and placed
   again at once, before the queue -- even when it cannot start earlier, so the greedy mapper
   may pick other nodes. vgrid re-places only leases that can start earlier, via the queue.
2. AR victim order and aging (Haizea ``ARPreemptsEverythingPolicy`` with
   ``PreemptabilityPolicy._get_aging_factor`` and ``GreedyMapper.map``): a best-effort lease
   submitted at ``submit_s`` has, for an AR starting at ``t``, the score
   (31 d - (t - submit_s)) / 31 d, and none (never preempted) when t - submit_s >= 7 d; the
   mapper takes leases from the *least* preemptable end of that list, i.e. the oldest first.
   vgrid: not-started leases first, then the most recently started; no horizon.
3. Preempting a lease whose VM reservation has not started but starts before the AR
   (Haizea 1.1 ``LeaseScheduler.__preempt_lease``): it is planned to suspend before the AR, like a
   running one, when the time from max(its start, now) to the AR reaches the scheduling
   threshold (``can_suspend_at``); otherwise -- for a running lease too, and with ``suspension
   = none`` -- it is cancelled *now* and queued again from scratch (its start is the start of
   the new run).
   vgrid unschedules every lease that has not started, and lets a cancelled lease run until
   the AR starts.
4. AR node order (Haizea ``GreedyPolicy.get_host_score`` in ``GreedyMapper.map``): the hosts
   are scored on the schedule before preemption, so nodes that held a preempted lease come
   after free ones; vgrid maps by node index on the schedule after preemption.
5. Simultaneous premature ends (Haizea ``get_prematurely_ending_res``): handled by scheduled
   end, ties in slot-table order, each with its re-evaluation (:func:`premature_order`).
6. The time step (Haizea's simulated clock): due starts before the queue pass, so a started
   backfilled lease frees the future slot at once (:func:`starts_before_queue`).
7. A re-evaluated suspended lease's threshold has no resume time (Haizea
   ``__compute_scheduling_threshold`` in state SUSPENDED_PENDING; :func:`threshold_resume_s`).
8. A lease resumed before and suspended again is re-evaluated too (:func:`live_plan`).
Places 5-8 were found in session 7 by comparing placements (time and nodes) with Haizea 1.1's.
"""
from __future__ import annotations

from . import compat_staging, frozenhold
from .config import haizea  # noqa: F401 - compat.haizea is the callers' name (defined in config)
from .model import MEM
from .preemption import can_suspend, op_time, scheduling_threshold, suspend_reservations, suspend_time
from .slottable import ResKind, ResState

#: Haizea 1.1's aging horizon: a lease submitted this long (s) before the AR's start is never
#: preempted by it (policy.py ``_get_aging_factor``: ``DateTimeDelta(7)``).
AGING_HORIZON_S = 7 * 86400.0
#: The scale of Haizea's aging factor (s): ``DateTimeDelta(31)``.
AGING_SCALE_S = 31 * 86400.0


def aging_score(submit_s: float, t_s: float) -> float | None:
    """Haizea 1.1's preemptability of a best-effort lease submitted at ``submit_s`` (s) by an
    AR starting at ``t_s`` (s): (31 d - age) / 31 d in (0, 1], or None (never preempted) when
    the lease is 7 days old or more at ``t_s``. Source: Haizea 1.1 ``_get_aging_factor``."""
    if submit_s <= t_s - AGING_HORIZON_S:
        return None
    return (AGING_SCALE_S - (t_s - submit_s)) / AGING_SCALE_S


def ar_victims(leases, t_s: float) -> list:
    """The best-effort leases an AR starting at ``t_s`` may preempt, in the order Haizea 1.1's
    greedy mapper preempts them: the list sorted by decreasing :func:`aging_score` is consumed
    from its end, so the lowest score (the oldest submission) goes first; ties by lease id.
    Leases without a score are left out."""
    scored = [(aging_score(l.submit_s, t_s), l.id, l) for l in leases]
    scored = [x for x in scored if x[0] is not None]
    scored.sort(key=lambda x: (x[0], x[1]))
    return [x[2] for x in scored]


def threshold_s(sched, lease) -> float:
    """Haizea 1.1's scheduling threshold of ``lease`` at a preemption (s): its estimated suspend
    time, n VMs x ceil(memory / rate), x (1 + factor) (``can_suspend_at``)."""
    return scheduling_threshold(op_time(lease.per_vm[MEM], sched.suspend_rate) * lease.n_vms,
                                sched.threshold_factor)


def preempt(sched, lease, t: float, now: float, requeue: list) -> bool:
    """Haizea 1.1's ``__preempt_lease`` for an AR starting at ``t`` (inside the caller's
    transaction): unschedule a reservation that starts at or after ``t``; plan a suspension
    that ends by ``t`` when the lease may be suspended and the time from max(its start, now)
    to ``t`` reaches the threshold (Haizea 1.1 ``can_suspend_at``); otherwise cancel it now (``restart_at_end``: stopped at ``now`` and queued again from
    scratch). False when the lease cannot be preempted now (resuming or migrating)."""
    st, cfg = sched.st, sched.cfg
    vm = sched.vm_reservation(lease)
    if vm is None:
        return False
    resv = list(st.of_lease(lease))
    if vm.state is ResState.SCHEDULED and vm.start >= t and all(r.state is ResState.SCHEDULED for r in resv):
        sched.unschedule(lease, now)
        compat_staging.forget_copies(sched, lease, now)   # rule 26
        requeue.append(lease)
        return True
    if any(r.state is ResState.ACTIVE and r is not vm and r.kind not in (ResKind.TRANSFER, ResKind.COPY) for r in resv):
        return False          # resuming or migrating right now (an image on its way: rule 16)
    s_time = suspend_time(lease, vm.mapping, cfg)
    if (can_suspend(lease, cfg) and sched.enactment_supports_suspend
            and t - max(vm.start, now) >= threshold_s(sched, lease) and t - s_time > max(vm.start, now)):
        for r in resv:
            if r is not vm and r.state is ResState.SCHEDULED and r.start >= vm.end - 1e-9:
                st.remove(r)   # a suspension planned after the VM
        st.move(vm, vm.start, min(t - s_time, vm.end))
        for r in suspend_reservations(lease, vm.mapping, vm.end, cfg):
            st.add(r)
        st.set(lease, "preemptions", lease.preemptions + 1)
        return True
    if vm.state is ResState.SCHEDULED:   # not started: cancelled and queued again
        sched.unschedule(lease, now)
        compat_staging.cancel_transfers(sched, lease)
        compat_staging.forget_copies(sched, lease, now)   # rule 26
        requeue.append(lease)
        return True
    for r in resv:
        if r is not vm and r.state is ResState.SCHEDULED:
            st.remove(r)
    st.move(vm, vm.start, max(now, vm.start))
    st.set(lease, "cancel_at_end", True)
    st.set(lease, "restart_at_end", True)
    st.set(lease, "preemptions", lease.preemptions + 1)
    return True


def reevaluate(sched, now: float, place) -> None:
    """Haizea 1.1's ``reevaluate_schedule`` after a premature end at ``now`` (s): every
    best-effort lease holding a future reservation that has not started is unscheduled and
    placed again at once (in submission order) with ``place`` (``besteffort.place_besteffort``),
    before the queue is processed."""
    for lid in sorted(sched.future, key=lambda i: (sched.leases[i].submit_s, i)):
        lease = sched.leases[lid]
        resv = live_plan(sched, lease, now)
        if not resv or any(r.state is not ResState.SCHEDULED for r in resv):
            continue
        if not compat_staging.reevaluable(sched, lease):
            continue
        sched.unschedule(lease, now)
        compat_staging.forget_copies(sched, lease, now)
        allow = len(sched.future) < sched.cfg.max_future_reservations
        sched.reevaluating = True
        try:
            placed = place(sched, lease, now, allow_future=allow)
        finally:
            sched.reevaluating = False
        if not placed:
            sched.requeue(lease)


def copy_step(sched, res, t: float) -> None:
    """A start or end of one of Haizea 1.1's migration rounds (``ResKind.COPY``,
    ``compat_staging.migration_rounds``): a time step at which Haizea processes its queue;
    the round leaves the slot table at its end, and a disk-image round's lease stops pinning
    the pool images of the nodes it left (rule 22)."""
    sched._dirty = True
    if res.state is ResState.ACTIVE and t >= res.end:
        if res.origins and res.lease is not None:          # rule 22: the images left these nodes
            sched.pools.lease_ended(res.lease.id, res.origins, t)
        if res.moves and res.lease is not None:            # rule 24: and are now at their destinations
            compat_staging.copied(sched.st, res.lease, res)
        sched.st.remove(res)


def live_plan(sched, lease, now: float) -> list:
    """The reservations of ``lease`` that :func:`reevaluate` looks at: those ending after
    ``now`` (s). vgrid keeps a finished resumption in the slot table (state ACTIVE) until the
    lease's VM reservation ends; Haizea 1.1 re-places a lease suspended again after a resumption
    (state SUSPENDED_SCHEDULED) like any other, so the past resumption must not hide it."""
    return [r for r in frozenhold.plan(sched.st, lease) if r.end > now]


def starts_before_queue(cfg) -> bool:
    """Whether the reservations due at a time step start before the queue pass (Haizea 1.1's
    simulated clock: ``process_starting_reservations`` before ``process_requests``), so that a
    future (backfilled) lease starting now frees its future slot for the queue at once, and a
    lease leaving the future set marks the queue for another pass. vgrid: the queue first."""
    return haizea(cfg)


def threshold_resume_s(sched, resume_s: float) -> float:
    """The resumption time (s) counted in a suspended lease's scheduling threshold: all of it
    (vgrid, and Haizea 1.1 for a lease placed from the queue), but none while
    :func:`reevaluate` re-places it: Haizea 1.1's ``__compute_scheduling_threshold`` adds the
    resume estimate only in state SUSPENDED_QUEUED, and ``reevaluate_schedule`` re-places a
    lease in state SUSPENDED_PENDING, so there the threshold is suspend x (1 + factor)."""
    return 0.0 if sched.reevaluating else resume_s


def host_scorer(sched, lease, t_s: float):
    """Haizea 1.1's ``greedy`` host score for an AR starting at ``t_s`` (s), taken on the slot
    table *before* any preemption (its ``GreedyMapper`` sorts the hosts first, then maps with
    the victims' resources counted free): 0.5 x (4 - leases on the node at t_s, at most 4) / 4
    + 0.25 + 0.25 x min(1, time until the node's use or lease set next changes / requested
    duration). Nodes that held a victim thus come after free nodes (place 4 of the module
    doc). Returns ``score(node, hostable) -> (score,)`` for ``Mapper.map_interval``."""
    horizon = 4
    scores = {}
    for node in range(len(sched.st.nodes)):
        res = [r for r in sched.st.on_node(node) if r.end > r.start and r.end > t_s]
        def state(t, res=res, node=node):
            on = [r for r in res if r.start <= t < r.end]
            use = tuple(sum(r.use.get(node, (0, 0, 0, 0))[i] for r in on) for i in range(4))
            return use, frozenset(id(r.lease) for r in on)
        now = state(t_s)
        k = min(len(now[1]), horizon)
        dur = None
        for b in sorted({x for r in res for x in (r.start, r.end) if x > t_s}):
            if state(b) != now:
                dur = b - t_s
                break
        d_score = 1.0 if dur is None or dur >= lease.duration_s else dur / lease.duration_s
        scores[node] = 0.5 * (horizon - k) / horizon + 0.25 + 0.25 * d_score
    return lambda node, hostable: (scores[node],)


def premature_order(sched, events: list) -> list:
    """The order in which premature ends due at one time are handled: vgrid's (time, lease
    id); Haizea 1.1 walks its slot table's reservations sorted by their scheduled end, ties in
    the order they entered the table (``get_prematurely_ending_res``), and re-evaluates after
    each one, so with ``compat = haizea-1.1`` the events are sorted by (time, the VM
    reservation's scheduled end, its slot-table id)."""
    if not haizea(sched.cfg) or len(events) < 2:
        return events
    def key(ev):
        vm = sched.vm_reservation(sched.leases[ev[1]])
        return (ev[0], vm.end, vm.id) if vm is not None else (ev[0], float("inf"), 0)
    return sorted(events, key=key)
