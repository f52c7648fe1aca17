"""Orchestration: the lease scheduler (one code path for simulated and live time).

``LeaseScheduler(nodes, config, clock, enactment)`` accepts leases (``submit``), keeps the
best-effort FCFS queue, and turns reservation starts and ends in the slot table into
enactment calls (``process(now)``). A simulator advances a ``SimulatedClock`` to
``next_event_time()``; a live service calls ``process(clock.now())`` periodically (the CE agent
adapter in ``vwn_agents.lease_engine``). Handlers are registered per reservation type.

Life cycle: AR -> SCHEDULED or REJECTED at submission (``ar.schedule_ar``); IMMEDIATE ->
SCHEDULED now or REJECTED; BEST_EFFORT -> QUEUED -> SCHEDULED -> ACTIVE [-> SUSPENDING ->
SUSPENDED -> QUEUED ...] -> DONE. A lease that ends before its reservation (premature end)
frees its reservations, and best-effort leases that had not started are rescheduled so they can
move earlier.
"""
from __future__ import annotations

import bisect
import dataclasses
import itertools

from .ar import schedule_ar
from . import compat, frozenhold
from .besteffort import admit_with_deadline, min_slot_length, place_besteffort, schedule_queue
from .config import LeaseConfig
from .imagepool import ImagePools
from .mapper import Mapper, vm_use
from .model import Lease, LeaseState, LeaseType, Node, Segment, vms_in
from .hostselection import host_selection_policy
from .candidatepolicy import POLICIES as SET_POLICIES, candidate_set_policy
from .preemption import preemption_policy
from .slottable import INF, Reservation, ResKind, ResState, SlotTable
from .staging import Staging

EPS = 1e-6


def _fcfs_key(lease: Lease) -> tuple:
    """The queue order: submission time (s), then id."""
    return (lease.submit_s, lease.id)


class LeaseScheduler:
    """The site lease scheduler (see module doc). ``leases`` maps id -> Lease."""

    def __init__(self, nodes: list[Node], config: LeaseConfig, clock, enactment) -> None:
        self.nodes = nodes
        self.cfg = config
        self.clock = clock
        self.enactment = enactment
        self.st = SlotTable(nodes)
        self.mapper = Mapper(self.st)
        self.pools = ImagePools(len(nodes), self.st, reuse=config.diskimage_reuse == "image-caches",
                                capacity_mb=config.diskimage_cache_size,
                                remove_on_expire=config.diskimage_cache_expire,
                                when_full=config.diskimage_cache_full, purge_on_arrival=compat.haizea(config))
        self.staging = Staging(self.st, self.pools, config)
        if config.policy_preemption in SET_POLICIES:  # seed 002: local requests preempt candidate sets
            self.policy, self.set_policy = None, candidate_set_policy(config.policy_preemption)
        else:
            self.policy, self.set_policy = preemption_policy(config.policy_preemption), None
        self.suspend_batches: dict[int, frozenset] = {}  # lease id -> ids suspended for one local request
        self.preemption_log: list[tuple] = []  # (s, local request id, preempted ids, h(C) s, policy)
        self._decisions = None
        self.host_selection = host_selection_policy(config.policy_host_selection, self.pools,
                                                    self.staging)
        self.enactment_supports_suspend = getattr(enactment, "supports_suspend", True)
        self.queue: list[Lease] = []
        self.leases: dict[int, Lease] = {}
        self.future: frozenset = frozenset()
        self.reevaluating = False   # compat: a re-evaluation is placing a lease (compat.threshold_resume_s)
        self.children: dict[int, list[Lease]] = {}  # serial best-effort: parent id -> one-VM leases
        self._sub_ids = itertools.count(10**12)
        self._slots_cache: dict = {}
        self.slot_length_cache: dict = {}
        self.transfer_log: list[tuple] = []  # (lease id, image, dest nodes, start s, end s) as started
        self.transfer_log_res: list[Reservation] = []
        self._dirty = False
        self.suspend_rate = config.suspend_rate
        self.resume_rate = config.resume_rate
        self.threshold_factor = config.scheduling_threshold_factor
        self._handlers = {
            ResKind.TRANSFER: (self._start_transfer, self._end_transfer),
            ResKind.MIGRATE: (self._start_migrate, self._noop),
            ResKind.RESUME: (self._start_resume, self._noop),
            ResKind.VM: (self._start_vm, self._end_vm),
            ResKind.SUSPEND: (self._start_suspend, self._end_suspend),
            ResKind.HOLD: (self._noop, lambda res, t: frozenhold.ended(self, res, t)),
            ResKind.COPY: (lambda res, t: compat.copy_step(self, res, t),) * 2,   # compat_staging rule 17
        }

    @property
    def decisions(self):
        """The per-decision log (a ``decisionlog.DecisionLog``: why each lease went where it
        did), None: off. Setting it binds the log to this slot table, so that only committed
        decisions are written (``SlotTable.after_commit``)."""
        return self._decisions

    @decisions.setter
    def decisions(self, log) -> None:
        if log is not None:
            log.st = self.st
        self._decisions = log

    # ------------------------------------------------------------ requests

    def submit(self, lease: Lease) -> Lease:
        """Accept a lease request at ``clock.now()``. ARs and immediate leases are decided at
        once (state SCHEDULED or REJECTED); best-effort leases are queued. Returns the lease."""
        now = self.clock.now()
        if lease.id in self.leases:
            raise ValueError(f"lease {lease.id} was already submitted")
        self.leases[lease.id] = lease
        if self._site_slots(lease.per_vm) < lease.n_vms:
            lease.to(LeaseState.REJECTED)
            lease.reject_reason = "the site cannot host that many VMs even when empty"
            if self.decisions is not None:
                self.decisions.rejected(lease, now)
            return lease
        if lease.type is LeaseType.ADVANCE_RESERVATION:
            schedule_ar(self, lease, now)
        elif lease.type is LeaseType.IMMEDIATE:
            if not place_besteffort(self, lease, now, allow_future=False, immediate=True):
                lease.to(LeaseState.REJECTED)
                lease.reject_reason = "cannot start now"
        elif lease.deadline_s is not None:  # seed 002: deadline-constrained, admitted or rejected now
            if not admit_with_deadline(self, lease, now):
                lease.to(LeaseState.REJECTED)
                lease.reject_reason = f"cannot end by its deadline ({lease.deadline_s:g} s)"
        elif self.cfg.besteffort_mode == "serial" and lease.n_vms > 1:
            self._submit_serial(lease)
        else:
            lease.to(LeaseState.QUEUED)
            self.requeue(lease)
        if self.decisions is not None and lease.state is LeaseState.REJECTED:
            self.decisions.rejected(lease, now)
        self._dirty = self._dirty or compat.haizea(self.cfg)   # Haizea 1.1: an arrival is a step (rule 19)
        return lease

    def adopt(self, lease: Lease, mapping: tuple, start_s: float) -> Lease:
        """Record a lease whose VMs already run on ``mapping`` (node index per VM) since
        ``start_s``: a live service restarted and re-learning its state. The lease gets an
        active VM reservation [start_s, start_s + duration_s) -- not checked against the free
        capacity: the VMs exist -- and is Active; its end is handled as any other's (``process``).
        ValueError for a lease id already known."""
        if lease.id in self.leases:
            raise ValueError(f"lease {lease.id} was already submitted")
        self.leases[lease.id] = lease
        res = Reservation(ResKind.VM, lease, start_s, start_s + lease.duration_s,
                          use=vm_use(mapping, lease.per_vm), mapping=mapping, state=ResState.ACTIVE)
        self.st.add(res)
        lease.mapping, lease.start_s = mapping, start_s
        lease.to(LeaseState.SCHEDULED)
        lease.to(LeaseState.ACTIVE)
        self._dirty = True
        return lease

    def _site_slots(self, need: tuple) -> int:
        """VMs of ``need`` the empty site can host (cached per vector)."""
        k = self._slots_cache.get(need)
        if k is None:
            k = self._slots_cache[need] = sum(vms_in(node.capacity, need) for node in self.nodes)
        return k

    def _submit_serial(self, lease: Lease) -> None:
        """Seeds 000/001 serial requests: each VM becomes a one-VM lease scheduled on its own;
        the parent lease is reported with their first start and last end."""
        lease.to(LeaseState.QUEUED)
        subs = []
        for _ in range(lease.n_vms):
            sub = dataclasses.replace(lease, id=next(self._sub_ids), n_vms=1, parent_id=lease.id,
                                      segments=[], state=LeaseState.QUEUED)
            self.leases[sub.id] = sub
            subs.append(sub)
            self.requeue(sub)
        self.children[lease.id] = subs

    def _child_finished(self, child: Lease) -> None:
        parent = self.leases.get(child.parent_id)
        subs = self.children.get(child.parent_id, [])
        if parent is None or not all(s.done for s in subs):
            if parent is not None and parent.start_s is None and parent.state is LeaseState.QUEUED:
                parent.to(LeaseState.ACTIVE)
            return
        if not parent.done:     # a cancelled parent stays Cancelled
            parent.to(LeaseState.DONE)
        starts = [s.start_s for s in subs if s.start_s is not None]
        parent.start_s = min(starts) if starts else None
        parent.end_s = max(s.end_s for s in subs)
        parent.segments = [seg for s in subs for seg in s.segments]
        parent.suspensions = sum(s.suspensions for s in subs)
        parent.transfers = sum(s.transfers for s in subs)
        parent.mb_transferred = sum(s.mb_transferred for s in subs)
        parent.time_run = max(s.time_run for s in subs)

    def cancel(self, lease_id: int) -> Lease:
        """Cancel a lease: stop its VMs, drop its reservations, and let the best-effort leases
        that have not started move earlier (as after a premature end, :meth:`reevaluate`).
        KeyError if unknown."""
        lease = self.leases[lease_id]
        now = self.clock.now()
        if lease.done:
            return lease
        if lease.state in (LeaseState.ACTIVE, LeaseState.SUSPENDING):
            self._close_running(lease, now)
            self.enactment.stop_vms(lease, now)
            for r in self.st.of_lease(lease):  # a suspension under way stops too
                if r.kind is ResKind.SUSPEND and r.state is ResState.ACTIVE:
                    self.st.remove(r)
        self.unschedule(lease, now)
        frozenhold.drop(self, lease)
        if lease in self.queue:
            self.queue.remove(lease)
        lease.to(LeaseState.CANCELLED)
        lease.end_s = now
        self._dirty = True
        self._requeue_batch(lease_id)
        self.reevaluate(now)     # what it held is free: later best-effort leases may move earlier
        return lease

    def requeue(self, lease: Lease) -> None:
        """Put a best-effort lease back in the FCFS queue (ordered by submission)."""
        if lease.state not in (LeaseState.SUSPENDED, LeaseState.QUEUED):
            lease.to(LeaseState.QUEUED)
        self.queue.insert(bisect.bisect(self.queue, (lease.submit_s, lease.id), key=_fcfs_key), lease)
        self._dirty = True

    # ------------------------------------------------------------ helpers used by policies
    def host_score(self, lease: Lease, t_start: float = INF):
        """The host-selection policy's node score for ``lease`` starting at ``t_start``
        (``policy-host-selection``, :mod:`.hostselection`), or None for the mapper's order."""
        return self.host_selection.scorer(lease, t_start)

    def vm_reservation(self, lease: Lease) -> Reservation | None:
        for r in self.st.of_lease(lease):
            if r.kind is ResKind.VM:
                return r
        return None

    def unschedule(self, lease: Lease, now: float) -> None:
        """Remove a lease's reservations that have not started (and its staging)."""
        for r in self.st.of_lease(lease):
            if r.kind is not ResKind.TRANSFER and (r.state is ResState.SCHEDULED or r.kind is ResKind.COPY):
                self.st.remove(r)
        self.staging.unstage(lease, now)
        if lease.id in self.future:
            self.st.set(self, "future", self.future - {lease.id})
        if lease.state is LeaseState.SCHEDULED:
            self.st.set(lease, "state",
                        lease.checked(LeaseState.SUSPENDED if lease.time_run > 0 else LeaseState.QUEUED))
        frozenhold.extend(self, lease)

    # ------------------------------------------------------------ time
    def next_event_time(self) -> float:
        return min(self.st.next_change_point(), self.enactment.next_event_time())

    def process(self, now: float | None = None, ends_only: bool = False) -> None:
        """Handle everything due at ``now``: premature ends, reservation ends, the queue, and
        reservation starts, until nothing more is due."""
        now = self.clock.now() if now is None else now
        failed: dict = {}  # reservations whose start failed in this call: retried on the next one
        once, passed = compat.haizea(self.cfg), False   # Haizea 1.1: one queue pass per step (rule 20)
        for _ in range(100_000):
            handled = False
            for t, lease_id in compat.premature_order(self, self.enactment.pop_events(now)):
                self._premature_end(self.leases[lease_id], t)
                handled = True
            due = self.st.pop_due(now)
            for t, is_start, res in due:
                if not is_start and res in self.st and res.state is ResState.ACTIVE:
                    self._handlers[res.kind][1](res, t)
                    handled = True
            if ends_only:
                for t, is_start, res in due:
                    if is_start:
                        self.st.repush(res)
                break
            if compat.starts_before_queue(self.cfg):   # Haizea 1.1: due starts, then the queue
                handled = self._run_starts(due, now, failed) or handled
            if once and handled:   # Haizea 1.1: every time step processes the queue (compat rule 25)
                self._dirty = True
            if self._dirty and self.queue and not passed:
                self._dirty = False
                schedule_queue(self, now)
                passed = once
            self._dirty = False
            handled = self._run_starts(due + self.st.pop_due(now), now, failed) or handled
            if not handled:
                break
        for res in failed:
            if res in self.st:
                self.st.repush(res)
        if failed:  # the others were started; the first error goes to the caller
            raise next(iter(failed.values()))

    def _run_starts(self, due: list, now: float, failed: dict) -> bool:
        """Start the reservations in ``due`` (``(t, is_start, res)``) that are still to start;
        a start whose enactment fails goes to ``failed``. True if any started."""
        handled = False
        for t, is_start, res in due:
            if is_start and res in self.st and res.state is ResState.SCHEDULED and res.start <= now:
                if res in failed:
                    continue
                res.state = ResState.ACTIVE
                self.st.repush(res)
                try:
                    self._handlers[res.kind][0](res, t)
                except Exception as exc:  # enactment failed (a node agent is down): retry later
                    res.state = ResState.SCHEDULED
                    failed[res] = exc
                    continue
                handled = True
        return handled

    # ------------------------------------------------------------ node availability
    def set_node_down(self, node: int, down: bool, now: float) -> list[Lease]:
        """Mark site node ``node`` down (the mapper offers it to no new reservation) or up
        again. Going down, the best-effort and immediate leases whose VM reservation on it has
        not started are unscheduled and requeued (the next ``process`` maps them onto the
        other nodes); running leases and advance reservations keep their reservations. Going
        up, the queue is scheduled again. Returns the requeued leases."""
        if not self.st.set_down(node, down):
            return []
        self._dirty = True
        moved = []
        if down:
            for res in self.st.on_node(node):
                lease = res.lease
                if (res.kind is ResKind.VM and res.state is ResState.SCHEDULED and not lease.is_ar
                        and lease.state is LeaseState.SCHEDULED and lease not in moved):
                    moved.append(lease)
            for lease in moved:
                self.unschedule(lease, now)
                self.requeue(lease)
        else:
            self.reevaluate(now)
        return moved

    # ------------------------------------------------------------ handlers
    def _noop(self, res: Reservation, t: float) -> None:
        pass

    def _start_transfer(self, res: Reservation, t: float) -> None:
        self.transfer_log.append((res.lease.id, res.image_id, res.dest, res.start, res.end))
        self.transfer_log_res.append(res)
        self.enactment.start_transfer(res, t)
        self._dirty = self._dirty or compat.haizea(self.cfg)   # Haizea 1.1: the queue at every step

    def _end_transfer(self, res: Reservation, t: float) -> None:
        self.st.remove(res)
        res.state = ResState.DONE
        self.pools.arrived(res, t)
        self._dirty = self._dirty or compat.haizea(self.cfg)

    def _start_migrate(self, res: Reservation, t: float) -> None:
        """A migration reservation starts: an enactment that moves VMs (``migrate_vms``, the
        live one's cold migration) moves them now; others move nothing (simulation)."""
        move = getattr(self.enactment, "migrate_vms", None)
        if move is not None:
            move(res.lease, res.mapping, t, res.end - res.start)

    def _start_resume(self, res: Reservation, t: float) -> None:
        lease = res.lease
        if lease.state is not LeaseState.PREPARING:
            lease.to(LeaseState.PREPARING)
            self.enactment.resume_vms(lease, res.mapping, t)

    def _start_vm(self, res: Reservation, t: float) -> None:
        lease = res.lease
        if lease.is_ar:
            lease.ar_on_time = (t == lease.requested_start_s and self._images_present(lease, res.mapping))
        before = (lease.state, lease.start_s)
        if lease.start_s is None:
            lease.start_s = t
        if lease.state is not LeaseState.ACTIVE:
            lease.to(LeaseState.ACTIVE)
        try:
            self.enactment.start_vms(lease, res.mapping, t, res.end)
        except Exception:  # not started: the lease is as it was (its reservation is retried)
            lease.state, lease.start_s = before     # an undo, not a transition
            raise
        if lease.id in self.future:
            self.future = self.future - {lease.id}
            self._dirty = self._dirty or compat.starts_before_queue(self.cfg)   # its slot is free

    def _images_present(self, lease: Lease, mapping: tuple) -> bool:
        if not self.staging.enabled:
            return True
        return all(self.pools.has_arrived(node, lease.image_id, lease.id) for node in set(mapping))

    def _end_vm(self, res: Reservation, t: float) -> None:
        lease = res.lease
        self.st.remove(res)
        res.state = ResState.DONE
        lease.time_run += t - res.start
        lease.segments.append(Segment(res.start, t, res.mapping, res.vnodes))
        self._dirty = True
        if lease.remaining_s <= EPS:
            self._finish(lease, t)
        elif lease.terminate_at_end:  # seed 002: a preempted Best-Effort-Cancellable lease
            self.enactment.stop_vms(lease, t)
            self.unschedule(lease, t)
            lease.to(LeaseState.CANCELLED)
            lease.end_s = t
            lease.reject_reason = "preempted by a local request (Best-Effort-Cancellable)"
        elif lease.cancel_at_end:
            self.enactment.stop_vms(lease, t)
            lease.cancel_at_end = False
            lease.time_run = 0.0
            if lease.restart_at_end:     # compat haizea-1.1: the next run is a new start
                lease.restart_at_end, lease.start_s = False, None
            self.unschedule(lease, t)
            lease.to(LeaseState.QUEUED)
            self.requeue(lease)
        elif any(r.kind is ResKind.SUSPEND for r in self.st.of_lease(lease)):
            lease.to(LeaseState.SUSPENDING)
            self.enactment.vms_paused(lease, t)
        else:  # nothing follows: requeue what is left
            self.enactment.stop_vms(lease, t)
            lease.to(LeaseState.SUSPENDED)
            self.requeue(lease)

    def _start_suspend(self, res: Reservation, t: float) -> None:
        if res.lease.state is not LeaseState.SUSPENDING:
            res.lease.to(LeaseState.SUSPENDING)

    def _end_suspend(self, res: Reservation, t: float) -> None:
        lease = res.lease
        self.st.remove(res)
        res.state = ResState.DONE
        self._dirty = True
        if any(r.kind is ResKind.SUSPEND for r in self.st.of_lease(lease)):
            return
        lease.suspensions += 1
        lease.to(LeaseState.SUSPENDED)
        self.enactment.suspended(lease, t)
        frozenhold.hold(self, lease, t)     # frozen in place: its memory stays in use
        if lease.id not in self.suspend_batches:
            self.requeue(lease)
            return
        self._requeue_batch(lease.id)

    def _requeue_batch(self, lease_id: int) -> None:
        """Seed 002: the leases one local request preempted are rescheduled together, in
        submission order, once none of them is still running or suspending (FCFS, not the order
        their suspensions end)."""
        batch = self.suspend_batches.get(lease_id)
        if batch is None or any(self.leases[i].state in (LeaseState.ACTIVE, LeaseState.SUSPENDING) for i in batch):
            return
        for i in sorted(batch):
            self.suspend_batches.pop(i, None)
            other = self.leases[i]
            if other.state is LeaseState.SUSPENDED and other not in self.queue:
                self.requeue(other)

    def _finish(self, lease: Lease, t: float) -> None:
        for r in self.st.of_lease(lease):
            if r.kind is not ResKind.TRANSFER:
                self.st.remove(r)
        lease.to(LeaseState.DONE)
        lease.end_s = t
        self.enactment.stop_vms(lease, t)
        nodes = {n for seg in lease.segments for n in seg.nodes}
        self.pools.lease_ended(lease.id, nodes, t)
        if lease.parent_id is not None:
            self._child_finished(lease)

    def _close_running(self, lease: Lease, t: float) -> None:
        vm = self.vm_reservation(lease)
        if vm is not None and vm.state is ResState.ACTIVE:
            self.st.remove(vm)
            lease.time_run += t - vm.start
            lease.segments.append(Segment(vm.start, t, vm.mapping, vm.vnodes))

    def _premature_end(self, lease: Lease, t: float) -> None:
        """The lease's VMs finished before their reservation ended: free everything and let
        best-effort leases that have not started move earlier."""
        if lease.done:
            return
        self._close_running(lease, t)
        self._finish(lease, t)
        self._dirty = True
        self.reevaluate(t)

    def reevaluate(self, now: float) -> None:
        """Unschedule best-effort leases whose reservations have not started and queue them
        again (in submission order), so the next queue pass can move them earlier
        (``compat = haizea-1.1``: all of them, re-placed at once, ``compat.reevaluate``)."""
        if compat.haizea(self.cfg):
            return compat.reevaluate(self, now, place_besteffort)
        movable = []
        for lid in list(self.future):
            lease = self.leases[lid]
            resv = frozenhold.plan(self.st, lease)
            if not resv or any(r.state is not ResState.SCHEDULED for r in resv):
                continue
            start = min(r.start for r in resv)
            length = min_slot_length(self, lease)
            if self.mapper.could_start_before(lease.per_vm, lease.n_vms, length, now, start):
                movable.append(lease)
        for lease in movable:
            self.unschedule(lease, now)
            self.requeue(lease)
