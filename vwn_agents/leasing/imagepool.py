"""Per-node image pools (seed 000 Section 6.3, Algorithm 4) and disk usage over time.

Each node keeps image templates; a VM uses a template by copy-on-write or through a full
local copy. An entry has an expiration ``expire`` = the latest end of the VMs using it: it is
pinned until then. After expiring an entry stays cached (and reusable) until it is evicted to
make room for another image (``diskimage-cache-size``), or is removed at once when
``diskimage-cache-expire`` is set (strict Algorithm 4). Without reuse (``diskimage-reuse =
none``) every lease gets a private entry that is deleted when the lease ends.

A full pool (``diskimage-cache-full``, issue 16): when an image finds no room even after every
unpinned image is evicted, ``fail`` (the default) refuses the placement (``add`` returns None),
while ``uncached`` gives the lease an *uncached* private copy instead, as Haizea 1.1's
``_add_diskimages`` does when ``purge_downto`` fails: the copy is not part of the pool (its MB
do not count against ``diskimage-cache-size``, nothing is evicted for it, no other lease -- not
even the same lease placed again -- reuses it) and it is deleted when the lease ends or leaves it.

All changes go through the slot table's undo log, so a tentative schedule that is rolled back
leaves the pools as they were. Disk usage is recorded as ``(time_s, node, delta_mb)`` events
when images really arrive and leave.

Indexes (issue 16: the image-transfer configurations of HPDC'08 ask for every queued lease's
per-node ready times at every queue pass): entries are found by image (and, without reuse, by
the owning lease) -> node -> entries, by lease -> the entries it pins, and by transfer -> the
entries it brings or evicts; each node's pool size (MB, evicted entries excluded) is kept as a
sum. Every pool change goes through ``_put``/``_pop``/``_set_evicted``, which keep the indexes
and register their own undo, so lookups cost O(entries of that image) instead of O(nodes x
pool). ``scan_usable``/``scan_used_mb`` are the unindexed definitions the indexes must equal
(tested with hypothesis in tests/test_imagepool_index.py).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from . import compat_pools
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
    node: int | None = None   # the node whose pool holds it (ImagePools' indexes)
    uncached: bool = False    # a private copy outside the pool (``diskimage-cache-full = uncached``)
    timeout: float = -math.inf  # Haizea 1.1's victim order (``purge_on_arrival``, compat_pools.py)
    seq: int = 0              # arrival order (the same)

    def ready_by(self) -> float:
        """Time from which the image is guaranteed on the node (s): the deadline of an AR
        transfer (EDF/JIT may move it, never past its deadline), the end of a best-effort
        transfer, -inf for an image that was already there. Decisions rely only on this
        guarantee, so EDF and EDF/JIT take the same decisions."""
        return self.available_from


class ImagePools:
    """The image pools of all nodes of a site (see module doc)."""

    def __init__(self, n_nodes: int, st: SlotTable, reuse: bool = True, capacity_mb: float = 0.0,
                 remove_on_expire: bool = False, when_full: str = "fail", purge_on_arrival: bool = False) -> None:
        if when_full not in ("fail", "uncached"):
            raise ValueError(f"when_full must be 'fail' or 'uncached', got {when_full!r}")
        self.st = st
        self.when_full = when_full
        self.reuse = reuse
        self.capacity_mb = capacity_mb
        self.remove_on_expire = remove_on_expire
        # Haizea 1.1 (compat mode): room is made when an image arrives, not when its transfer
        # is planned (compat_pools.py)
        self.purge_on_arrival = purge_on_arrival
        self.arrivals = itertools.count(1)
        self.pools: list[dict] = [dict() for _ in range(n_nodes)]  # read-only outside this class
        self._keys = itertools.count(1)
        self.disk_events: list[tuple] = []
        self._by_image: dict = {}        # (image_id, owner lease or None) -> {node: {key: entry}}
        self._by_lease: dict = {}        # lease id -> {(node, key)} (superset: filtered on use)
        self._by_transfer: dict = {}     # transfer -> {(node, key)} brought or evicted by it
        self._mb = [0.0] * n_nodes       # per node: MB of entries not flagged for eviction
        self.version = 0                 # bumped by every change (and undo): cache key of callers
        self._iversion: dict = {}        # (image_id, owner) -> self.version at its last change
        self._sversion: dict = {}        # the same, for changes ``usable`` can see (not pins)

    def _bump(self) -> None:
        self.version += 1

    def _touch(self, e: PoolEntry, structural: bool = True) -> None:
        """Bump the version, and that of ``e``'s image (its entries changed); ``structural``:
        the change may alter what ``usable`` returns (an entry added, removed, flagged for
        eviction, arrived), not only its users and expiration (a pin or release)."""
        self.version += 1
        key = (e.image_id, e.lease_id)
        self._iversion[key] = self.version
        if structural:
            self._sversion[key] = self.version

    def image_version(self, image_id: str, lease_id: int) -> int:
        """A number that changes whenever an entry of ``image_id`` that the lease may use
        changes (added, removed, flagged, pinned, released, arrived; also when undone): the
        cache key of per-image answers (``Staging._ready``; issue 16, session 6)."""
        return self._iversion.get((image_id, None if self.reuse else lease_id), 0)

    def copies_version(self, image_id: str, lease_id: int) -> int:
        """``image_version`` without the pins and releases, which change no answer of ``usable``
        unless expired entries are removed (``diskimage-cache-expire``: ``usable`` then reads
        the expiration): the cache key of ``Staging._copies`` (issue 16, session 7: with reuse
        every placement pins copies and made every queued lease of that image recompute)."""
        table = self._iversion if self.remove_on_expire else self._sversion
        return table.get((image_id, None if self.reuse else lease_id), 0)

    # ------------------------------------------------------------ index maintenance
    def _ikey(self, e: PoolEntry) -> tuple:
        return (e.image_id, e.lease_id)

    def _put(self, node: int, e: PoolEntry) -> None:
        """Insert ``e`` into ``node``'s pool and every index (undone by a rollback)."""
        self._put_raw(node, e)
        self.st.on_rollback(lambda: self._pop_raw(node, e))

    def _pop(self, node: int, e: PoolEntry) -> None:
        """Remove ``e`` from ``node``'s pool and the indexes (undone by a rollback)."""
        if self._pop_raw(node, e):
            self.st.on_rollback(lambda: self._put_raw(node, e))

    def _put_raw(self, node: int, e: PoolEntry) -> None:
        self._touch(e)
        self.pools[node][e.key] = e
        self._by_image.setdefault(self._ikey(e), {}).setdefault(node, {})[e.key] = e
        for lid in e.users:
            self._by_lease.setdefault(lid, set()).add((node, e.key))
        for tr in (e.transfer, e.evicted_by):
            if tr is not None:
                self._by_transfer.setdefault(tr, set()).add((node, e.key))
        if e.evicted_by is None and not e.uncached:
            self._mb[node] += e.mb

    def _pop_raw(self, node: int, e: PoolEntry) -> bool:
        if self.pools[node].get(e.key) is not e:
            return False
        self._touch(e)
        del self.pools[node][e.key]
        per_node = self._by_image.get(self._ikey(e), {})
        entries = per_node.get(node)
        if entries is not None:
            entries.pop(e.key, None)
            if not entries:
                del per_node[node]
                if not per_node:
                    self._by_image.pop(self._ikey(e), None)
        if e.evicted_by is None and not e.uncached:
            self._mb[node] -= e.mb
        return True

    def _set_evicted(self, node: int, e: PoolEntry, transfer: Reservation | None) -> None:
        """Flag ``e`` as leaving when ``transfer`` arrives (None: not any more); undoable."""
        present = self.pools[node].get(e.key) is e
        self._touch(e)
        self.st.on_rollback(lambda: self._touch(e))
        delta = (e.mb if e.evicted_by is not None else 0.0) - (e.mb if transfer is not None else 0.0)
        self.st.set(e, "evicted_by", transfer)
        if transfer is not None:
            self._by_transfer.setdefault(transfer, set()).add((node, e.key))
        if present and delta:
            self._mb[node] += delta
            self.st.on_rollback(lambda: self._mb.__setitem__(node, self._mb[node] - delta))

    def _pin_index(self, node: int, e: PoolEntry, lease_id: int) -> None:
        self._by_lease.setdefault(lease_id, set()).add((node, e.key))

    def _entries_of_transfer(self, transfer: Reservation) -> list[tuple]:
        """(node, entry) brought or evicted by ``transfer`` (candidates; callers filter)."""
        out = []
        for node, key in self._by_transfer.get(transfer, ()):
            e = self.pools[node].get(key)
            if e is not None:
                out.append((node, e))
        return out

    def entries_pinned_by(self, lease_id: int) -> list[tuple]:
        """(node, entry) of the entries the lease pins now."""
        out = []
        keys = self._by_lease.get(lease_id, ())
        gone = 0
        for node, key in keys:
            e = self.pools[node].get(key)
            if e is not None and lease_id in e.users:
                out.append((node, e))
            elif e is None:
                gone += 1
        if gone > 64 and gone > len(keys) - gone:   # prune keys of removed entries (a lease
            live = {(n, k) for n, k in keys if self.pools[n].get(k) is not None}   # re-placed often)
            self._by_lease[lease_id] = live
            self.st.on_rollback(lambda: self._by_lease.__setitem__(lease_id, keys))
        return out

    def entry_keys(self):
        """The keys (image id, owning lease id without reuse / None with reuse) under which
        some node holds (or is about to hold) an entry, as a read-only view supporting ``in``:
        for a key not in it, ``nodes_with`` is empty (``queuescan``)."""
        return self._by_image.keys()

    def nodes_with(self, image_id: str, lease_id: int) -> list[int]:
        """Nodes holding (or about to hold) an entry of ``image_id`` the lease may use: any
        lease's with reuse, its own without."""
        return list(self._by_image.get((image_id, None if self.reuse else lease_id), ()))

    # ------------------------------------------------------------ queries
    def usable(self, node: int, image_id: str, lease_id: int, t_start: float,
               use_at: float | None = None) -> PoolEntry | None:
        """The entry for ``image_id`` on ``node`` guaranteed there earliest, if by ``t_start``
        (reuse, or piggybacking on a scheduled transfer whose deadline <= t_start), else None.
        Without reuse only the lease's own entries count. With strict expiry
        (``diskimage-cache-expire``) an entry is only reused by a VM starting at ``use_at`` <=
        its expiration (Algorithm 4's test)."""
        entries = self._by_image.get((image_id, None if self.reuse else lease_id), {}).get(node)
        return self._best(entries.values(), image_id, lease_id, t_start, use_at) if entries else None

    def _best(self, entries, image_id: str, lease_id: int, t_start: float, use_at: float | None):
        best = None
        for e in entries:
            if e.image_id != image_id or e.evicted_by is not None:
                continue
            if self.remove_on_expire and use_at is not None and use_at > e.expire:
                continue
            if not self.reuse and e.lease_id != lease_id:
                continue
            if e.ready_by() <= t_start and (best is None or e.ready_by() < best.ready_by()):
                best = e
        return best

    def scan_usable(self, node: int, image_id: str, lease_id: int, t_start: float,
                    use_at: float | None = None) -> PoolEntry | None:
        """``usable`` by scanning the node's whole pool (the definition; tests compare)."""
        return self._best(self.pools[node].values(), image_id, lease_id, t_start, use_at)

    def used_mb(self, node: int) -> float:
        """MB the pool will hold (images flagged for eviction excluded); O(1), indexed."""
        return self._mb[node]

    def scan_used_mb(self, node: int) -> float:
        """``used_mb`` by scanning the pool (the definition; tests compare)."""
        return sum(e.mb for e in self.pools[node].values() if e.evicted_by is None and not e.uncached)

    # ------------------------------------------------------------ changes (undoable)
    def pin(self, entry: PoolEntry, lease_id: int, t_end: float, timeout: float | None = None) -> None:
        """Algorithm 4, reuse branch: add the VM's lease and extend the expiration. With
        ``purge_on_arrival`` the entry's Haizea ``timeout`` is raised to ``timeout`` (s; default
        ``t_end``; an AR passes its start, as Haizea 1.1 does)."""
        st = self.st
        if self.purge_on_arrival:
            t = t_end if timeout is None else timeout
            if t > entry.timeout:
                st.set(entry, "timeout", t)
        self._touch(entry, structural=False)
        st.on_rollback(lambda: self._touch(entry, structural=False))
        if entry.users.get(lease_id, -math.inf) < t_end:
            users = dict(entry.users)
            users[lease_id] = t_end
            st.set(entry, "users", users)
            node = self._node_of(entry)
            if node is not None:
                self._pin_index(node, entry, lease_id)
        if t_end > entry.expire:
            st.set(entry, "expire", t_end)

    def add(self, node: int, image_id: str, mb: float, transfer: Reservation | None, lease_id: int,
            t_end: float, arrival: float) -> PoolEntry | None:
        """Algorithm 4, transfer branch: a new entry arriving at ``arrival`` and pinned until
        ``t_end``. Evicts images unpinned by ``arrival`` if the pool is full (they leave when
        ``transfer`` ends, which is then kept from ending before they expire: its
        ``not_before``). If there is no room: None (``when_full = "fail"``), or an uncached
        private copy for the lease that evicts nothing (``"uncached"``, see module doc)."""
        pool = self.pools[node]
        key = next(self._keys)
        uncached = False
        if self.capacity_mb > 0 and not self.purge_on_arrival:   # else: at arrival (compat_pools)
            need = self.used_mb(node) + mb - self.capacity_mb
            if need > 0:
                victims = sorted((e for e in pool.values()
                                  if e.evicted_by is None and not e.uncached and e.expire <= arrival),
                                 key=lambda e: (e.last_use, e.expire))
                freed, chosen = 0.0, []
                for v in victims:
                    if freed >= need:
                        break
                    chosen.append(v)
                    freed += v.mb
                if freed < need:
                    if self.when_full != "uncached":
                        return None
                    uncached, chosen = True, []
                for v in chosen:
                    if transfer is None:
                        self._drop(node, v, arrival)
                    else:
                        self._set_evicted(node, v, transfer)
                if transfer is not None:
                    # The victims go when the transfer really ends, and an AR transfer may be
                    # laid out (EDF) to end before ``arrival`` (its deadline): it must not end
                    # while a victim is still pinned.
                    pinned_until = max((v.expire for v in chosen), default=-math.inf)
                    if pinned_until > transfer.not_before:
                        self.st.set(transfer, "not_before", pinned_until)
        entry = PoolEntry(image_id, mb, transfer, t_end, {lease_id: t_end},
                          lease_id if uncached or not self.reuse else None,
                          arrived=transfer is None, last_use=t_end, key=key,
                          available_from=-math.inf if transfer is None else arrival, uncached=uncached,
                          timeout=t_end)
        entry.node = node
        self._put(node, entry)
        return entry

    def has_arrived(self, node: int, image_id: str, lease_id: int) -> bool:
        """Whether a copy of ``image_id`` pinned by the lease is on the node now."""
        return any(n == node and e.arrived and e.image_id == image_id for n, e in self.entries_pinned_by(lease_id))

    def _node_of(self, entry: PoolEntry) -> int | None:
        node = entry.node
        return node if node is not None and self.pools[node].get(entry.key) is entry else None

    def _drop(self, node: int, entry: PoolEntry, when: float) -> None:
        if self.pools[node].get(entry.key) is entry:
            self._pop(node, entry)
            if entry.arrived:
                self.disk_events.append((when, node, -entry.mb))

    def release(self, entry: PoolEntry, lease_id: int, now: float) -> None:
        """A lease no longer needs ``entry`` (unscheduled): its pin goes, and the expiration
        falls back to the latest end of the remaining users (now if none)."""
        if lease_id in entry.users:
            self._touch(entry, structural=False)
            self.st.on_rollback(lambda: self._touch(entry, structural=False))
            users = {k: v for k, v in entry.users.items() if k != lease_id}
            self.st.set(entry, "users", users)
            self.st.set(entry, "expire", max(users.values(), default=min(entry.expire, now)))
            node = self._node_of(entry)
            if entry.uncached and not users and node is not None:
                self._pop(node, entry)          # an uncached copy lives only for its lease
                if entry.arrived:
                    event = (now, node, -entry.mb)
                    self.disk_events.append(event)
                    self.st.on_rollback(lambda: self.disk_events.remove(event))

    def drop_private(self, image_id: str, lease_id: int, now: float) -> int:
        """Delete the lease's private copies of ``image_id`` (no reuse) that no lease pins,
        arrived or not, as Haizea 1.1's ``__remove_files`` does when it re-places a lease
        (``compat_staging.forget_copies``); returns how many went. Undone by a rollback."""
        if self.reuse:
            return 0
        gone = 0
        for node, entries in sorted(self._by_image.get((image_id, lease_id), {}).items()):
            for e in sorted(entries.values(), key=lambda x: x.key):
                if e.users:
                    continue
                self._pop(node, e)
                gone += 1
                keys = self._by_lease.get(lease_id)
                if keys is not None and (node, e.key) in keys:   # keep the index small (undone too)
                    keys.discard((node, e.key))
                    self.st.on_rollback(lambda k=keys, nk=(node, e.key): k.add(nk))
                if e.arrived:
                    event = (now, node, -e.mb)
                    self.disk_events.append(event)
                    self.st.on_rollback(lambda ev=event: self.disk_events.remove(ev))
        return gone

    # ------------------------------------------------------------ real events (not undone)
    def arrived(self, transfer: Reservation, now: float) -> None:
        """A transfer finished: its image is now on its destination nodes."""
        self._bump()
        touched = sorted(self._entries_of_transfer(transfer), key=lambda ne: (ne[0], ne[1].key))
        self._by_transfer.pop(transfer, None)
        for node, e in touched:
            if e.evicted_by is transfer:
                self._pop_raw(node, e)
                if e.arrived:
                    self.disk_events.append((now, node, -e.mb))
        for node, e in touched:
            if e.transfer is transfer and self.pools[node].get(e.key) is e:
                if self.purge_on_arrival and self.reuse and not e.uncached and not compat_pools.arrive(self, node, e, now):
                    continue    # merged into the copy already there (Haizea 1.1)
                self._touch(e)
                e.arrived = True
                e.transfer = None
                self.disk_events.append((now, node, e.mb))

    def lease_ended(self, lease_id: int, nodes, now: float) -> None:
        """Drop private entries of a finished lease and, with strict expiry, expired images."""
        self._bump()
        nodes = set(nodes)
        pinned = self.entries_pinned_by(lease_id)
        for node, e in pinned:
            if node in nodes:
                self._touch(e, structural=False)
                e.users = {k: v for k, v in e.users.items() if k != lease_id}
                e.expire = max(e.users.values(), default=min(e.expire, now))
                e.last_use = now
        for node, e in sorted(pinned, key=lambda ne: (ne[0], ne[1].key)):
            if node in nodes and e.uncached and not e.users:
                self._pop_raw(node, e)       # an uncached copy ends with its lease
                if e.arrived:
                    self.disk_events.append((now, node, -e.mb))
        self._by_lease[lease_id] = {(n, e.key) for n, e in pinned if n not in nodes}
        if not self._by_lease[lease_id]:
            del self._by_lease[lease_id]
        if self.reuse and not self.remove_on_expire:
            return          # arrived images stay cached until evicted
        for node in sorted(nodes):
            for e in list(self.pools[node].values()):
                if e.arrived and not e.users and (not self.reuse or e.expire <= now):
                    self._pop_raw(node, e)
                    self.disk_events.append((now, node, -e.mb))

    def forget_transfer(self, transfer: Reservation) -> None:
        """A scheduled transfer was removed: drop the entries it would have brought."""
        for node, e in sorted(self._entries_of_transfer(transfer), key=lambda ne: (ne[0], ne[1].key)):
            if e.transfer is transfer:
                self._pop(node, e)
            elif e.evicted_by is transfer:
                self._set_evicted(node, e, None)

    def discard_pending(self, node: int, entry: PoolEntry) -> None:
        """Drop an entry that has not arrived (a private copy no lease needs any more, its
        transfer still scheduled: ``multicastjoin.unstage``); undoable."""
        if not entry.arrived:
            self._pop(node, entry)
