"""Temporal placement of best-effort and immediate leases (FCFS queue with backfilling).

``place_besteffort`` finds the earliest start for a queued lease (Haizea's "schedule ASAP"):
with its image staged (FIFO transfers, reuse, piggybacking), resumed (and migrated) if it was
suspended, and -- if the lease may be suspended -- possibly for less than its remaining time, in
which case a suspension is scheduled at the end of the slot (seed 000 Figure 6.1, bottom), but
only if it runs for at least the scheduling threshold. ``allow_future`` says whether the lease
may take a *future* reservation (backfilling: aggressive = at most one such lease,
conservative = all); without it only "now" (and the nodes' staging-ready times) is tried.
"""
from __future__ import annotations

from .mapper import StartScore, vm_use
from .model import LeaseState, MEM
from . import compat, compat_staging, frozenhold
from .queuescan import QueueScan
from .preemption import (can_suspend, lease_op_estimate, migration_estimate, migration_time, resume_reservations,
                         scheduling_threshold,
                         seed002_timing, suspend_reservations, suspend_time, resume_time)
from .slottable import INF, Reservation, ResKind


def _estimates(sched, lease, resuming: bool):
    """Upper bounds (s) of resume, suspend and migration overheads before a mapping is known
    (Haizea's estimate: number of VMs x one VM's time; seed 002 policies: r(L), s(L) of eq.
    (5)-(6) and every memory image copied over ``migration-bandwidth``, eq. (8))."""
    cfg = sched.cfg
    n = lease.n_vms
    mem = lease.per_vm[MEM]
    migrating = resuming and cfg.migration == "yes"
    if seed002_timing(cfg):  # eq. (5)-(6) do not depend on the mapping
        r_est = resume_time(lease, (), cfg) if resuming else 0.0
        return r_est, suspend_time(lease, (), cfg), (n * mem / cfg.migration_bandwidth if migrating else 0.0)
    r_est = lease_op_estimate(lease, sched.resume_rate, cfg.override_resume_time, cfg.enactment_overhead) \
        if resuming else 0.0
    s_est = lease_op_estimate(lease, sched.suspend_rate, cfg.override_suspend_time, cfg.enactment_overhead)
    m_est = migration_estimate(lease, cfg) if migrating else 0.0
    return r_est, s_est, m_est


def place_besteffort(sched, lease, now: float, allow_future: bool, immediate: bool = False) -> bool:
    """Schedule ``lease`` (queued best-effort, or immediate) in the slot table; False if it
    cannot start now (and may not take a future reservation). See module doc. A lease
    suspended in place is placed with its memory hold lifted (``frozenhold.place``)."""
    if lease.state is LeaseState.SUSPENDED:
        return frozenhold.place(sched, lease, lambda: _place(sched, lease, now, allow_future, immediate))
    return _place(sched, lease, now, allow_future, immediate)


def _place(sched, lease, now: float, allow_future: bool, immediate: bool) -> bool:
    cfg = sched.cfg
    resuming = lease.state is LeaseState.SUSPENDED
    remaining = lease.remaining_s
    suspendable = (not immediate) and can_suspend(lease, cfg) and not frozenhold.in_place(sched)
    r_est, s_est, m_est = _estimates(sched, lease, resuming)
    min_dur = None
    if suspendable:
        min_dur = scheduling_threshold(s_est + compat.threshold_resume_s(sched, r_est), sched.threshold_factor,
                                       cfg.force_scheduling_threshold)
    need, n = lease.per_vm, lease.n_vms
    base = r_est + remaining
    ready = None if resuming else sched.staging.be_ready(lease, now, len(sched.nodes))
    if ready is None and not resuming:
        # Fast rejection: not enough VM slots free from now for the shortest acceptable slot.
        length = base if min_dur is None else min(base, min_dur)
        if not allow_future and (sched.mapper.count_now_upper(need, now, length) < n
                                 or sched.mapper.count_now(need, now, length) < n):
            return False
    score = sched.host_score(lease)
    found = None
    if compat_staging.haizea_migration(sched, resuming):   # Haizea 1.1: no node is spared the estimate
        ready = [compat_staging.migration_ready(lease, cfg, now)] * len(sched.nodes)   # not future there
        found = sched.mapper.earliest(need, n, base, now, min_dur, ready, None, allow_future, score)
    elif resuming:
        found = _earliest_same_nodes(sched, lease, base, now, min_dur, allow_future)
        if cfg.migration != "no":
            extra = m_est
            other = sched.mapper.earliest(need, n, base + extra, now, None if min_dur is None else min_dur + extra,
                                          None, None, allow_future, score)
            if other is not None and (found is None or other[0] < found[0]):
                found = other
    else:
        found = compat_staging.earliest(sched, need, n, base, now, min_dur, ready, allow_future, score)
    explained = None
    for _attempt in range(cfg.besteffort_staging_attempts or len(sched.nodes) + 1):
        if found is None:
            return False
        s, e, mapping = found
        vnodes = score.vnodes(s, mapping) if isinstance(score, StartScore) else ()   # compat: rule 18
        if sched.decisions is not None:      # the per-decision log (decisionlog), off by default
            explained = sched.decisions.explain(sched, lease, now, found, base if min_dur is None else
                                                min(base, min_dur), ready, allow_future)
        tx = sched.st.begin()
        ok, retry_at = _commit_plan(sched, lease, s, e, mapping, now, resuming, remaining, vnodes)
        if ok and lease.deadline_s is not None and _planned_end(sched, lease) > lease.deadline_s + 1e-9:
            sched.st.rollback(tx)  # seed 002: a deadline-constrained lease ends by its deadline
            return False
        if ok:
            sched.st.commit(tx)
            in_future = s > now and (ready is None or s > max(ready[m] for m in mapping))
            if not resuming and ready is not None:
                in_future = compat_staging.future_pass(sched, in_future)
            if in_future:
                sched.st.set(sched, "future", sched.future | {lease.id})
            if explained is not None:
                sched.decisions.placed(sched, lease, now, s, e, mapping, explained, resuming, min_dur, allow_future)
            return True
        sched.st.rollback(tx)
        if retry_at is None or retry_at == INF:
            return False
        ready = list(ready) if ready is not None else [now] * len(sched.nodes)
        for m in mapping:
            ready[m] = max(ready[m], retry_at)
        found = compat_staging.earliest(sched, need, n, base, now, min_dur, ready, allow_future, score)
    return False


def _planned_end(sched, lease) -> float:
    """End (s) of the lease's last VM reservation in the slot table."""
    return max((r.end for r in sched.st.of_lease(lease) if r.kind is ResKind.VM), default=INF)


def admit_with_deadline(sched, lease, now: float) -> bool:
    """Seed 002 Section 4.2: a best-effort-type request with a deadline is admitted only if it
    can be placed now to end by ``deadline_s`` -- it then holds that (possibly future)
    reservation, outside the backfilling limits -- else it stays Pending (the caller rejects)."""
    return place_besteffort(sched, lease, now, allow_future=True)


def drop_missed_deadlines(sched, now: float) -> list:
    """Queued leases whose deadline can no longer be met (now + remaining time > deadline) are
    Cancelled with a reason (a preempted Deadline-Constraint-Migratable lease would be migrated
    to another site: not modelled). Returns them; they leave the queue."""
    missed = [l for l in sched.queue if l.deadline_s is not None and now + l.remaining_s > l.deadline_s + 1e-9]
    for lease in missed:
        sched.queue.remove(lease)
        lease.to(LeaseState.CANCELLED)
        lease.end_s = now
        lease.reject_reason = "its deadline can no longer be met on this site"
    return missed


def _earliest_same_nodes(sched, lease, duration, now, min_duration, allow_future):
    """Earliest (start, end, mapping) to resume ``lease`` with every VM on the node it was
    suspended on (no migration), or None."""
    st = sched.st
    counts: dict = {}
    for node in lease.mapping:
        counts[node] = counts.get(node, 0) + 1
    if all(k == 1 for k in counts.values()):
        found = sched.mapper.earliest(lease.per_vm, lease.n_vms, duration, now, min_duration, None,
                                      tuple(counts), allow_future, None)
        if found is None or sorted(found[2]) == sorted(lease.mapping):
            return found
    times = [now]
    if allow_future:
        times += sorted({r.end for n in counts for r in st.on_node(n) if r.end > now})
    for s in times:
        if all(st.vms_fit(n, lease.per_vm, s, s + duration) >= k for n, k in counts.items()):
            return s, s + duration, lease.mapping
        if min_duration is not None:
            end = min(st.free_until(n, tuple(x * k for x in lease.per_vm), s) for n, k in counts.items())
            if end - s >= min_duration:
                return s, end, lease.mapping
    return None


def _commit_plan(sched, lease, s, e, mapping, now, resuming, remaining, vnodes=()):
    """Add the reservations of one placement. Returns (ok, retry_at): retry_at is the time at
    which the nodes would really be ready when image staging makes ``s`` too early. ``vnodes``:
    compat mode, the nodes in the mapper's order (``compat_staging`` rule 18)."""
    cfg, st = sched.cfg, sched.st
    mig = migration_time(lease, lease.mapping, mapping, cfg) if resuming else 0.0
    if compat_staging.haizea_migration(sched, resuming):
        mig = 0.0     # Haizea 1.1: the copies use no CPU; the resumption starts at the estimate
    res_t = resume_time(lease, mapping, cfg) if resuming else 0.0
    vm_start = s + mig + res_t
    if e >= vm_start + remaining - 1e-9:
        vm_end, suspend = vm_start + remaining, False
    else:
        vm_end, suspend = e - suspend_time(lease, mapping, cfg), True
        if vm_end <= vm_start:
            return False, None
    if not resuming:
        ready_t = sched.staging.stage_be(lease, mapping, s, vm_end, now)
        if ready_t > s + 1e-9:
            return False, ready_t
    use = vm_use(mapping, lease.per_vm)
    if mig > 0:
        st.add(Reservation(ResKind.MIGRATE, lease, s, s + mig, use=dict(use), mapping=mapping))
    if resuming and res_t > 0:
        for r in resume_reservations(lease, mapping, s + mig, res_t, cfg):
            st.add(r)
    st.add(Reservation(ResKind.VM, lease, vm_start, vm_end, use=use, mapping=mapping, vnodes=vnodes))
    if suspend:
        for r in suspend_reservations(lease, mapping, vm_end, cfg):
            st.add(r)
    if compat_staging.haizea_migration(sched, resuming):
        for r in compat_staging.migration_rounds(lease, mapping, cfg, now, vnodes):
            st.add(r)
    st.set(lease, "mapping", mapping)
    st.set(lease, "state", lease.checked(LeaseState.SCHEDULED))
    return True, None


def min_slot_length(sched, lease) -> float:
    """A lower bound (s) of the time a placement of ``lease`` must hold its VM slots: its
    remaining time, or the suspension threshold if it may be suspended."""
    cached = sched.slot_length_cache.get(lease.id)
    if cached is not None and cached[0] == lease.time_run:
        return cached[1]
    length = lease.remaining_s
    if can_suspend(lease, sched.cfg):
        s_est = (suspend_time(lease, (), sched.cfg) if seed002_timing(sched.cfg)
                 else lease_op_estimate(lease, sched.suspend_rate, sched.cfg.override_suspend_time,
                                        sched.cfg.enactment_overhead))
        length = min(length, scheduling_threshold(s_est, sched.threshold_factor,
                                                  sched.cfg.force_scheduling_threshold))
    sched.slot_length_cache[lease.id] = (lease.time_run, length)
    return length


def schedule_queue(sched, now: float) -> None:
    """One pass over the FCFS queue (Haizea's queue processing with backfilling).

    Leases that cannot take a future reservation are first checked against an upper bound of
    the VM slots free from now (``Mapper.count_now_upper``), which is cheap and exact enough
    to skip most of a long queue when the site is full.
    """
    cfg = sched.cfg
    drop_missed_deadlines(sched, now)
    max_future = cfg.max_future_reservations
    off = cfg.backfilling == "off"
    quick = not sched.staging.enabled
    mapper = sched.mapper
    keep = []
    blocked = False
    max_free: dict = {}
    # runs of leases that may not start are answered at once (queuescan; issue 16, session 7)
    scan = None if quick else QueueScan(sched, sched.queue, now, _may_start, min_slot_length)
    held = frozenhold.in_place(sched)   # holds are lifted for a resumption: no bound from the slots
    for i, lease in enumerate(sched.queue):
        if blocked:
            keep.append(lease)
            continue
        allow_future = max_future > 0 and len(sched.future) < max_future
        if not allow_future and compat_staging.skip_queue(sched, now):   # Haizea 1.1: the rest waits
            blocked = True
            keep.append(lease)
            continue
        if quick and not allow_future:
            free_now = max_free.get(lease.per_vm)
            if free_now is None:  # slots free at this instant: an upper bound for the whole pass
                free_now = max_free[lease.per_vm] = mapper.count_now_upper(lease.per_vm, now, 0.0)
            if (lease.n_vms > free_now
                    or mapper.count_now_upper(lease.per_vm, now, min_slot_length(sched, lease)) < lease.n_vms):
                keep.append(lease)
                if off:
                    blocked = True
                continue
        elif not quick and not allow_future and lease.state is LeaseState.QUEUED and not scan.allows(i):
            keep.append(lease)
            if off:
                blocked = True
            continue
        elif not quick and not allow_future and lease.state is LeaseState.SUSPENDED and not held \
                and not _may_resume(sched, lease, now):
            keep.append(lease)
            if off:
                blocked = True
            continue
        if not place_besteffort(sched, lease, now, allow_future):
            keep.append(lease)
            if off:
                blocked = True
    sched.queue = keep


def _may_resume(sched, lease, now: float) -> bool:
    """False when a suspended lease certainly cannot be resumed now (without a future
    reservation). ``_place`` then tries two placements, both starting now: on the lease's own
    nodes (``_earliest_same_nodes``: n slots on those nodes free for min(base, threshold) s) and,
    with migration, anywhere for that length plus the migration estimate (``Mapper.earliest``
    with ``allow_future`` off counts exactly those slots at ``now``). Fewer than n slots for the
    migration (``Mapper.count_now_upper``) and a node of its own without a slot for the shorter
    length (``Mapper.each_node_free_upper``; both over arrays from before this pass's
    placements) mean both fail. True when two of its VMs were on one node
    (``_earliest_same_nodes`` then asks the nodes directly), and where ``compat_staging`` rule 4
    places a resumption that may migrate at Haizea's migration estimate, later than now
    (compat mode, ``migration = yes``, image transfers). Issue 16: at rho = 30 % the resumptions
    tried in every queue pass were 46-60 % of a run (session 8: one bound for both paths, from
    the minimum slot length); session 9: each path's own length, three quarters of the
    remaining tries failed."""
    if compat_staging.haizea_migration(sched, True):   # placed at Haizea's migration estimate,
        return True                                     # not only now: the bound does not hold
    same, moved = _resume_lengths(sched, lease)
    need, n = lease.per_vm, lease.n_vms
    if moved is not None and sched.mapper.count_now_upper(need, now, moved) >= n:
        return True
    if len(set(lease.mapping)) < len(lease.mapping):
        return True
    return sched.mapper.each_node_free_upper(need, now, same, lease.mapping)


def _resume_lengths(sched, lease) -> tuple:
    """(length s on its own nodes, length s elsewhere or None without migration): the
    ``need_len`` of the two ``Mapper.earliest`` calls ``_place`` makes for a resumption that is
    not suspended in place, with the same float operations. Kept per lease while its time run,
    its nodes and ``sched.reevaluating`` (compat) stay as they are."""
    key = (lease.time_run, lease.mapping, getattr(sched, "reevaluating", False))
    cache = sched.__dict__.setdefault("_resume_length_cache", {})
    hit = cache.get(lease.id)
    if hit is not None and hit[0] == key:
        return hit[1]
    if len(cache) > 65536:
        cache.clear()
    cfg = sched.cfg
    r_est, s_est, m_est = _estimates(sched, lease, True)
    base = r_est + lease.remaining_s
    min_dur = None
    if can_suspend(lease, cfg):
        min_dur = scheduling_threshold(s_est + compat.threshold_resume_s(sched, r_est), sched.threshold_factor,
                                       cfg.force_scheduling_threshold)
    same = base if min_dur is None else min(base, min_dur)
    if cfg.migration == "no":
        moved = None
    else:
        dur = base + m_est
        moved = dur if min_dur is None else min(dur, min_dur + m_est)
    cache[lease.id] = (key, (same, moved))
    return same, moved


def _may_start(sched, lease, now: float) -> bool:
    """Whether a queued lease with image staging can be placed without a future reservation:
    the test ``Mapper.earliest`` makes (enough VM slots, on nodes whose image is ready, free
    for the minimum slot length from ``now`` or from one of the nodes' ready times), done on
    cached ready times (``Staging._ready``) and without building candidate matrices. Skips
    most of a long queue behind a saturated image link (issue 16: HPDC'08 VM-MULT / VM-REUSE)."""
    _, ready, times, memo = sched.staging._ready(lease, now, len(sched.nodes))
    length = min_slot_length(sched, lease)
    if memo.get("version") != sched.st.version:    # answers hold for these ready times and slots
        memo.clear()
        memo["version"] = sched.st.version
    key = (lease.per_vm, lease.n_vms, length)
    if key not in memo:
        memo[key] = _count_allows(sched, lease.per_vm, lease.n_vms, length, ready, times, now)
    return memo[key]


def _count_allows(sched, need, n, length, ready, times, now) -> bool:
    """Whether n VM slots of ``need`` are free for ``length`` s on ready nodes at ``now`` or at
    one of the ready times (``_may_start``)."""
    mapper = sched.mapper
    last = max(times)
    for t in sorted({t for t in times if now < t < INF} | ({now} if min(times) <= now else set())):
        # every node's free slots bound the ready nodes' (one bisect, shared by all images);
        # from the last ready time on, every node is ready and the bound is the count; a bound
        # of that bound from before this pass's placements answers most noes (session 7)
        if mapper.count_free_upper(need, t, length) < n:
            continue
        free = mapper.count_free_at(need, t, length)
        if free >= n and (t >= last or mapper.count_ready_at(need, t, length, ready) >= n):
            return True
    return False
