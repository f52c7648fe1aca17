"""Per-node image pools (seed 000 Section 6.3, Algorithm 4) and disk usage over time.

Each node keeps image templates; a VM uses a template by copy-on-write or through a full
local copy. An entry has an expiration ``expire`` = the latest end of the VMs using it: it is
pinned until then. After expiring an entry stays cached (and reusable) until it is evicted to
make room for another image (``diskimage-cache-size``), or is removed at once when
``diskimage-cache-expire`` is set (strict Algorithm 4). Without reuse (``diskimage-reuse =
none``) every lease gets a private entry that is deleted when the lease ends.

All changes go through the slot table's undo log, so a tentative schedule that is rolled back
leaves the pools as they were. Disk usage is recorded as ``(time_s, node, delta_mb)`` events
when images really arrive and leave.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from .slottable import Reservation, SlotTable


@dataclass(eq=False)
class PoolEntry:
    """An image on (or on its way to) a node.

    ``transfer`` is the reservation bringing it (None once arrived); ``expire`` in seconds;
    ``users`` maps the ids of the leases pinning it to the end (s) of their VMs, so ``expire``
    = the latest of them; ``lease_id`` is set for private (no-reuse) entries.
    """
    image_id: str
    mb: float
    transfer: Reservation | None
    expire: float
    users: dict = field(default_factory=dict)
    lease_id: int | None = None
    arrived: bool = False
    last_use: float = 0.0
    key: object = None
    evicted_by: Reservation | None = None  # the transfer whose arrival evicts this image
    available_from: float = -math.inf

    def ready_by(self) -> float:
        """Time from which the image is guaranteed on the node (s): the deadline of an AR
        transfer (EDF/JIT may move it, never past its deadline), the end of a best-effort
        transfer, -inf for an image that was already there. Decisions rely only on this
        guarantee, so EDF and EDF/JIT take the same decisions."""
        return self.available_from


class ImagePools:
    """The image pools of all nodes of a site (see module doc)."""

    def __init__(self, n_nodes: int, st: SlotTable, reuse: bool = True, capacity_mb: float = 0.0,
                 remove_on_expire: bool = False) -> None:
        self.st = st
        self.reuse = reuse
        self.capacity_mb = capacity_mb
        self.remove_on_expire = remove_on_expire
        self.pools: list[dict] = [dict() for _ in range(n_nodes)]
        self._keys = itertools.count(1)
        self.disk_events: list[tuple] = []

    # ------------------------------------------------------------ queries
    def usable(self, node: int, image_id: str, lease_id: int, t_start: float,
               use_at: float | None = None) -> PoolEntry | None:
        """The entry for ``image_id`` on ``node`` guaranteed there earliest, if by ``t_start``
        (reuse, or piggybacking on a scheduled transfer whose deadline <= t_start), else None.
        Without reuse only the lease's own entries count. With strict expiry
        (``diskimage-cache-expire``) an entry is only reused by a VM starting at ``use_at`` <=
        its expiration (Algorithm 4's test)."""
        best = None
        for e in self.pools[node].values():
            if e.image_id != image_id or e.evicted_by is not None:
                continue
            if self.remove_on_expire and use_at is not None and use_at > e.expire:
                continue
            if not self.reuse and e.lease_id != lease_id:
                continue
            if e.ready_by() <= t_start and (best is None or e.ready_by() < best.ready_by()):
                best = e
        return best

    def used_mb(self, node: int) -> float:
        """MB the pool will hold (images flagged for eviction excluded)."""
        return sum(e.mb for e in self.pools[node].values() if e.evicted_by is None)

    # ------------------------------------------------------------ changes (undoable)
    def pin(self, entry: PoolEntry, lease_id: int, t_end: float) -> None:
        """Algorithm 4, reuse branch: add the VM's lease and extend the expiration."""
        st = self.st
        if entry.users.get(lease_id, -math.inf) < t_end:
            users = dict(entry.users)
            users[lease_id] = t_end
            st.set(entry, "users", users)
        if t_end > entry.expire:
            st.set(entry, "expire", t_end)

    def add(self, node: int, image_id: str, mb: float, transfer: Reservation | None, lease_id: int,
            t_end: float, arrival: float) -> PoolEntry | None:
        """Algorithm 4, transfer branch: a new entry arriving at ``arrival`` and pinned until
        ``t_end``. Evicts images unpinned by ``arrival`` if the pool is full (they leave when
        ``transfer`` ends, which is then kept from ending before they expire: its
        ``not_before``); None if there is no room."""
        pool = self.pools[node]
        key = next(self._keys)
        if self.capacity_mb > 0:
            need = self.used_mb(node) + mb - self.capacity_mb
            if need > 0:
                victims = sorted((e for e in pool.values() if e.evicted_by is None and e.expire <= arrival),
                                 key=lambda e: (e.last_use, e.expire))
                freed, chosen = 0.0, []
                for v in victims:
                    if freed >= need:
                        break
                    chosen.append(v)
                    freed += v.mb
                if freed < need:
                    return None
                for v in chosen:
                    if transfer is None:
                        self._drop(node, v, arrival)
                    else:
                        self.st.set(v, "evicted_by", transfer)
                if transfer is not None:
                    # The victims go when the transfer really ends, and an AR transfer may be
                    # laid out (EDF) to end before ``arrival`` (its deadline): it must not end
                    # while a victim is still pinned.
                    pinned_until = max((v.expire for v in chosen), default=-math.inf)
                    if pinned_until > transfer.not_before:
                        self.st.set(transfer, "not_before", pinned_until)
        entry = PoolEntry(image_id, mb, transfer, t_end, {lease_id: t_end}, None if self.reuse else lease_id,
                          arrived=transfer is None, last_use=t_end, key=key,
                          available_from=-math.inf if transfer is None else arrival)
        pool[key] = entry
        self.st.on_rollback(lambda: pool.pop(key, None))
        return entry

    def has_arrived(self, node: int, image_id: str, lease_id: int) -> bool:
        """Whether a copy of ``image_id`` pinned by the lease is on the node now."""
        return any(e.arrived and e.image_id == image_id and lease_id in e.users for e in self.pools[node].values())

    def _drop(self, node: int, entry: PoolEntry, when: float) -> None:
        pool = self.pools[node]
        if pool.get(entry.key) is entry:
            del pool[entry.key]
            self.st.on_rollback(lambda: pool.__setitem__(entry.key, entry))
            if entry.arrived:
                self.disk_events.append((when, node, -entry.mb))

    def release(self, entry: PoolEntry, lease_id: int, now: float) -> None:
        """A lease no longer needs ``entry`` (unscheduled): its pin goes, and the expiration
        falls back to the latest end of the remaining users (now if none)."""
        if lease_id in entry.users:
            users = {k: v for k, v in entry.users.items() if k != lease_id}
            self.st.set(entry, "users", users)
            self.st.set(entry, "expire", max(users.values(), default=min(entry.expire, now)))

    # ------------------------------------------------------------ real events (not undone)
    def arrived(self, transfer: Reservation, now: float) -> None:
        """A transfer finished: its image is now on its destination nodes."""
        for node in transfer.dest:
            pool = self.pools[node]
            for key, e in list(pool.items()):
                if e.evicted_by is transfer:
                    del pool[key]
                    if e.arrived:
                        self.disk_events.append((now, node, -e.mb))
            for e in pool.values():
                if e.transfer is transfer:
                    e.arrived = True
                    e.transfer = None
                    self.disk_events.append((now, node, e.mb))

    def lease_ended(self, lease_id: int, nodes, now: float) -> None:
        """Drop private entries of a finished lease and, with strict expiry, expired images."""
        for node in set(nodes):
            pool = self.pools[node]
            for key, e in list(pool.items()):
                if lease_id in e.users:
                    e.users = {k: v for k, v in e.users.items() if k != lease_id}
                    e.expire = max(e.users.values(), default=min(e.expire, now))
                    e.last_use = now
                if e.arrived and not e.users and (not self.reuse or (self.remove_on_expire and e.expire <= now)):
                    del pool[key]
                    self.disk_events.append((now, node, -e.mb))

    def forget_transfer(self, transfer: Reservation) -> None:
        """A scheduled transfer was removed: drop the entries it would have brought."""
        for node in transfer.dest:
            pool = self.pools[node]
            for key, e in list(pool.items()):
                if e.transfer is transfer:
                    del pool[key]
                    self.st.on_rollback(lambda p=pool, k=key, v=e: p.__setitem__(k, v))
                elif e.evicted_by is transfer:
                    self.st.set(e, "evicted_by", None)
