"""Joining a pending multicast of the same image (``multicast-join``; issue 16, HPDC'08 VM-MULT).

Haizea 1.1 with ``transfer-mechanism = multicast`` and ``avoid-redundant-transfers``
(``ImageTransferPreparationScheduler.find_earliest_starting_times`` and ``__schedule_asap``):
a best-effort lease's earliest start on *every* node is the end of the earliest-ending transfer
of its image that has not started yet, when that is earlier than a transfer of its own (the
next FIFO slot) and the node has no usable copy sooner. When the lease is placed, each such node
is added to that transfer (``piggyback``): the multicast sends the image to one more node at no
extra link time, and the lease gets no transfer of its own. When a lease leaves a transfer
(unscheduled, preempted before it started), it is removed from it, and a transfer nobody rides
on any more is cancelled (Haizea's ``__remove_transfers``).

"Not started" is Haizea's order of events within one instant: reservations due at ``now`` start
before the queue is processed, so a transfer is joinable if it starts after ``now``, or at
``now`` when it was created in this instant's queue pass (it has not been started yet).

Differences from Haizea 1.1, kept deliberately:

* only best-effort transfers are joined: vgrid sends AR images over their own link by default
  (``imagetransfer-link = separate``, seed 000's assumption) and EDF/EDF-JIT may move an AR
  transfer up to its deadline, while Haizea's one link keeps AR and best-effort transfers in
  one list and lets a best-effort lease ride on an AR's transfer;
* a joined node is recorded in the transfer's ``dest`` and, with ``diskimage-reuse =
  image-caches``, the image's arrival may evict unpinned images from that node's pool
  (``ImagePools.add``), as a transfer of its own would.

Times in seconds, sizes in MB. The functions take the site's :class:`~.staging.Staging`.
"""
from __future__ import annotations

import itertools


from .model import Lease
from .slottable import INF, Reservation, ResKind, ResState, SlotTable


class PendingMulticasts:
    """Best-effort transfers by image, with the instant each was created (s), so that the
    earliest-ending joinable one is found without scanning the slot table. Registrations are
    undone by a rollback; each image has a version that changes whenever its set of joinable
    transfers may have changed (a cache key for ``ready``)."""

    def __init__(self, st: SlotTable) -> None:
        self.st = st
        self._by_image: dict = {}      # image_id -> [(transfer, created_s)]
        self._version: dict = {}       # image_id -> number (fresh on every change and undo)
        self._counter = itertools.count(1)

    def _touch(self, image_id: str) -> None:
        self._version[image_id] = next(self._counter)

    def images(self) -> list:
        """The images with a registered best-effort transfer (joinable or not)."""
        return list(self._by_image)

    def version(self, image_id: str) -> int:
        return self._version.get(image_id, 0)

    def register(self, res: Reservation, now: float) -> None:
        """A new best-effort transfer created at ``now`` (undone by a rollback)."""
        entries = self._by_image.setdefault(res.image_id, [])
        item = (res, now)
        entries.append(item)
        self._touch(res.image_id)

        def undo() -> None:
            if item in entries:
                entries.remove(item)
            self._touch(res.image_id)
        self.st.on_rollback(undo)

    def changed(self, image_id: str) -> None:
        """A transfer of ``image_id`` was removed or left: cached answers are stale."""
        self._touch(image_id)
        self.st.on_rollback(lambda: self._touch(image_id))

    def best(self, image_id: str, now: float) -> Reservation | None:
        """The joinable transfer of ``image_id`` that ends first (ties: the older), or None.
        Transfers that ended by ``now`` are dropped for good (no rollback brings them back:
        a transfer removed in an open transaction had not started)."""
        entries = self._by_image.get(image_id)
        if not entries:
            return None
        best = None
        stale = False
        for res, created in entries:
            if res.end <= now:
                stale = True
                continue
            if (res.state is ResState.SCHEDULED and res in self.st
                    and (res.start > now or (res.start == now and created == now))
                    and (best is None or (res.end, res.id) < (best.end, best.id))):
                best = res
        if stale:
            entries[:] = [item for item in entries if item[0].end > now]
        return best


def _candidate(stg, image_id: str, mb: float, now: float) -> tuple:
    """(transfer of ``image_id`` to join or None, end s of a transfer of the lease's own of
    ``mb`` MB): join only if the pending transfer ends strictly earlier (Haizea's ``start <
    earliest[n].time``)."""
    own_end = stg.fifo_end(mb, now)
    best = stg.pending.best(image_id, now)
    if best is not None and best.end < own_end:
        return best, own_end
    return None, own_end


def first_ready(stg, image_id: str, mb: float, now: float) -> float:
    """The ready time (s) ``ready`` gives every node without a copy of the image (``mb`` MB):
    the joinable transfer's end, else the own FIFO transfer's, plus the copy time; the same
    float operations (``Staging.fifo_ready``, ``queuescan``)."""
    join, own_end = _candidate(stg, image_id, mb, now)
    first = join.end if join is not None else own_end
    return first + stg.copy_time_mb(mb)


def ready(stg, lease: Lease, now: float, n_nodes: int) -> tuple:
    """``Staging._ready`` with joining: per node min(own FIFO transfer's end, the joinable
    transfer's end, the node's usable copy) + the copy time. Same value shape and the same
    caching, keyed also by the image's pending-transfer version."""
    rows = stg._copy_rows(lease, now)
    if rows[0]:
        key = ("join", lease.image_id, None if stg.pools.reuse else lease.id, lease.image_mb, now)
        valid = (stg.pools.image_version(lease.image_id, lease.id), stg.be_tail,
                 stg.st.version if stg._versioned else None, stg.pending.version(lease.image_id))
    else:
        key = ("join", lease.image_id, lease.image_mb, now)
        valid = (stg.be_tail, stg.st.version if stg._versioned else None, stg.pending.version(lease.image_id))
    hit = stg._ready_cache.get(key)
    if hit is not None and hit[0] == valid:
        return hit[1]
    join, own_end = _candidate(stg, lease.image_id, lease.image_mb, now)
    first = join.end if join is not None else own_end
    return stg._ready_value(key, valid, first, rows, now, first if join is not None else None,
                            stg.copy_time(lease), n_nodes)


def stage(stg, lease: Lease, mapping: tuple, start: float, end: float, now: float) -> float:
    """``Staging.stage_be`` with joining: each node of ``mapping`` uses its copy if that is
    there no later than the joinable transfer, else joins that transfer, else (no joinable
    transfer) gets the lease's own multicast at the FIFO tail. Returns when every node is
    ready (s); ``inf`` if an image pool has no room."""
    st, pools = stg.st, stg.pools
    copy = stg.copy_time(lease)
    join, _own_end = _candidate(stg, lease.image_id, lease.image_mb, now)
    ready_t = now
    joined, missing = [], []
    for node in sorted(set(mapping)):
        e = stg._usable(node, lease, INF, start)
        if e is not None and (join is None or e.ready_by() <= join.end):
            pools.pin(e, lease.id, end)
            if e.transfer is not None and lease.id not in e.transfer.users:
                st.set(e.transfer, "users", e.transfer.users + [lease.id])
            ready_t = max(ready_t, e.ready_by() + copy)
        elif join is not None:
            joined.append(node)
        else:
            missing.append(node)
    if joined:
        new_dest = tuple(sorted(set(join.dest) | set(joined)))
        if new_dest != join.dest:
            st.set(join, "dest", new_dest)
        if lease.id not in join.users:
            st.set(join, "users", join.users + [lease.id])
        for node in joined:
            if pools.add(node, lease.image_id, lease.image_mb, join, lease.id, end, join.end) is None:
                return INF
        ready_t = max(ready_t, join.end + copy)
    if missing:
        t0 = stg._be_start(now, stg.transfer_time(lease.image_mb, "be"))
        res = stg._new_transfer(lease, "be", t0, tuple(missing), None)
        stg.pending.register(res, now)
        st.set(stg, "be_tail", res.end)
        for node in missing:
            if pools.add(node, lease.image_id, lease.image_mb, res, lease.id, end, res.end) is None:
                return INF
        ready_t = max(ready_t, res.end + copy)
    return ready_t


def unstage(stg, lease: Lease, now: float) -> None:
    """``Staging.unstage`` with joining (Haizea's ``__remove_transfers``): release the lease's
    pins, drop its private copies still on their way, leave every transfer that has not started
    (its own or joined), and cancel those nobody rides on any more."""
    st, pools = stg.st, stg.pools
    pinned = sorted(pools.entries_pinned_by(lease.id), key=lambda ne: (ne[0], ne[1].key))
    for _node, e in pinned:
        pools.release(e, lease.id, now)
    left = {}
    for node, e in pinned:
        t = e.transfer
        if t is None or t.state is not ResState.SCHEDULED or t not in st:
            continue
        left[t.id] = t
        if e.lease_id == lease.id and not e.users:
            pools.discard_pending(node, e)
    for res in st.of_lease(lease):
        if res.kind is ResKind.TRANSFER and res.state is ResState.SCHEDULED:
            left[res.id] = res
    for _id, res in sorted(left.items()):
        others = [u for u in res.users if u != lease.id]
        if others:
            if others != res.users:
                st.set(res, "users", others)
        else:
            st.remove(res)
            pools.forget_transfer(res)
            if res in stg.naive:
                stg.naive.remove(res)
        stg.pending.changed(res.image_id)
