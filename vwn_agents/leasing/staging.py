"""Preparation: image staging from the image repository (seed 000 Sections 6.2-6.3).

* AR transfers: EDF (seed 000 Algorithm 2) -- insert, sort the transfers that have not started
  by deadline, lay them out back to back from when the link is free, reject if any misses its
  deadline -- and EDF/JIT (Algorithm 3) -- then push each as late as possible, latest deadline
  first. Transfers that have not started may move; started ones never do. Algorithm 3 starts
  its backward pass at ``sched[last]``'s end, which would never push the last transfer; we
  start it at +infinity so every transfer ends at min(deadline, next start) ("as close as
  possible to the deadline", Figure 6.2).
* The naive strategies of seed 000 Section 8.1 for comparison (no admission test): job-style
  (start at the lease start), JIT (start = start - size/B, ignoring contention) and aggressive
  (start at acceptance). Concurrent naive transfers share the link (processor sharing, see
  ``processor_sharing_ends``), so images may arrive late.
* Best-effort transfers: a FIFO queue on their own link; a VM's earliest start on a node is the
  end of its transfer.
* Reuse and piggybacking through ``ImagePools`` (Algorithm 4, Section 6.3.1).

AR and best-effort transfers use separate links (seed 000's assumption) whose bandwidths are
``imagetransfer-bandwidth-ar``/``-be`` (Mb/s), or one shared link (``imagetransfer-link =
shared``): best-effort transfers then go into gaps between AR transfers, and EDF/JIT lay AR
transfers out around the best-effort transfers already scheduled (which do not move). Sizes in
MB, times in s.
"""
from __future__ import annotations

import math

import numpy as np

from . import compat_staging, multicastjoin
from .config import LeaseConfig, haizea as compat_haizea
from .imagepool import ImagePools, PoolEntry
from .model import Lease
from .slottable import INF, Reservation, ResKind, ResState, SlotTable

NAIVE = ("job-style", "jit", "aggressive")


class Staging:
    """Image staging for one site (see module doc)."""

    def __init__(self, st: SlotTable, pools: ImagePools, config: LeaseConfig) -> None:
        self.st = st
        self.pools = pools
        self.cfg = config
        self.enabled = config.lease_preparation == "imagetransfer"
        self.strategy = config.ar_transfer_strategy
        self.multicast = config.transfer_mechanism == "multicast"
        self.piggyback = config.avoid_redundant_transfers
        self.shared = config.imagetransfer_link == "shared"
        # Haizea 1.1's multicast join (multicastjoin.py): off unless asked for
        self.join = bool(config.multicast_join and self.multicast and self.piggyback)
        self.pending = multicastjoin.PendingMulticasts(st) if self.join else None
        self.be_tail = 0.0
        self.naive: list[Reservation] = []
        self._ready_cache: dict = {}
        self._copies_cache: dict = {}
        # Configuration read once (issue 16: LeaseConfig's attribute lookup was a tenth of a
        # VM-MULT run): link bandwidths in MB/s, the local copy rate (None: no copy).
        self._bw = {"ar": config.link_bandwidth_mbs("ar"), "be": config.link_bandwidth_mbs("be")}
        self._haizea = compat_haizea(config)
        self._versioned = self.shared or self._haizea   # ready times depend on every transfer
        self._copy_rate = (None if not self.enabled or config.diskimage_copy == "cow"
                           else config.diskimage_copy_rate)

    # ------------------------------------------------------------ helpers
    def transfer_time(self, mb: float, link: str) -> float:
        """Seconds to send ``mb`` MB over ``link`` ("ar", "ar-naive" or "be"), or
        ``force-imagetransfer-time`` (>= 0)."""
        forced = self.cfg.force_imagetransfer_time
        if forced >= 0:
            return forced
        bw = self._bw.get(link)
        if bw is None:
            bw = self._bw[link] = self.cfg.link_bandwidth_mbs(link)
        if self._haizea:   # Haizea 1.1 rounds each transfer up to the second
            return compat_staging.transfer_time(mb, bw)
        return mb / bw

    def copy_time(self, lease: Lease) -> float:
        """Seconds to copy the lease's image from the pool to its VM (0 with copy-on-write)."""
        return self.copy_time_mb(lease.image_mb)

    def copy_time_mb(self, mb: float) -> float:
        """Seconds to copy an image of ``mb`` MB from the pool to a VM (0 with copy-on-write)."""
        if self._copy_rate is None:
            return 0.0
        return math.ceil(mb / self._copy_rate)

    def fifo_end(self, mb: float, now: float) -> float:
        """End (s) of one more FIFO best-effort transfer of ``mb`` MB placed at ``now``."""
        dur = self.transfer_time(mb, "be")
        return self._be_start(now, dur) + dur

    def _usable(self, node: int, lease: Lease, t: float, use_at: float | None = None) -> PoolEntry | None:
        e = self.pools.usable(node, lease.image_id, lease.id, t, use_at)
        if e is not None and not e.arrived and e.transfer is not None and (not self.piggyback or self._haizea):
            return None   # Haizea 1.1: a pool holds an image from its arrival on (compat_staging rule 10)
        return e

    def _new_transfer(self, lease: Lease, link: str, start: float, dest: tuple, deadline) -> Reservation:
        dur = self.transfer_time(lease.image_mb, link)
        res = Reservation(ResKind.TRANSFER, lease, start, start + dur, link=link, image_id=lease.image_id,
                          mb=lease.image_mb, deadline=deadline, dest=dest, users=[lease.id])
        self.st.add(res)
        self.st.set(lease, "transfers", lease.transfers + 1)
        self.st.set(lease, "mb_transferred", lease.mb_transferred + lease.image_mb)
        return res

    # ------------------------------------------------------------ advance reservations
    def stage_ar(self, lease: Lease, mapping: tuple, t_s: float, t_e: float, now: float) -> bool:
        """Make the image available on every node of ``mapping`` by ``t_s`` (minus the copy
        time). Returns False if a transfer cannot meet its deadline or a pool has no room; the
        caller then rolls back the transaction."""
        if not self.enabled:
            return True
        deadline = t_s - self.copy_time(lease)
        missing = []
        for node in sorted(set(mapping)):
            e = self._usable(node, lease, deadline, t_s)
            if e is not None and self._haizea and self.pools.reuse and e.timeout < t_s:
                e = None   # Haizea 1.1 reuses only a pool image whose timeout is >= the AR's start (rule 21)
            if e is not None:
                self.pools.pin(e, lease.id, t_e, t_s)   # Haizea's pool timeout: the AR's start
            else:
                missing.append(node)
        if not missing:
            return True
        if self.strategy in NAIVE:
            return self._stage_naive(lease, missing, t_s, t_e, now)
        if deadline < now:
            return False
        groups = [tuple(missing)] if self.multicast else [(n,) for n in missing]
        if self._haizea:   # Haizea 1.1: the latest hole before the deadline, nothing moves
            return compat_staging.stage_ar(self, lease, groups, deadline, t_e, now)
        for dest in groups:
            res = self._new_transfer(lease, "ar", now, dest, deadline)
            for node in dest:
                if self.pools.add(node, lease.image_id, lease.image_mb, res, lease.id, t_e, deadline) is None:
                    return False
        if not self.edf_layout(now):
            return False
        if self.strategy == "edf-jit":
            self.jit_push()
        return True

    def ar_schedule(self) -> list[Reservation]:
        """AR transfers that have not started, in EDF order."""
        sched = [r for r in self.st.reservations()
                 if r.kind is ResKind.TRANSFER and r.link == "ar" and r.state is ResState.SCHEDULED]
        sched.sort(key=lambda r: (r.deadline, r.id))
        return sched

    def _fixed(self) -> list[tuple[float, float]]:
        """Busy intervals of the AR link that EDF cannot move: started AR transfers and, on a
        shared link, every best-effort transfer."""
        out = []
        for r in self.st.reservations():
            if r.kind is not ResKind.TRANSFER or r.link == "ar-naive":
                continue
            if (r.link == "ar" and r.state is ResState.ACTIVE) or (self.shared and r.link == "be"):
                out.append((r.start, r.end))
        return sorted(out)

    @staticmethod
    def _earliest_gap(t: float, dur: float, busy: list) -> float:
        """First start >= t of a gap of length ``dur`` between sorted ``busy`` intervals."""
        for a, b in busy:
            if b <= t:
                continue
            if a >= t + dur:
                break
            t = max(t, b)
        return t

    @staticmethod
    def _latest_gap(end_by: float, dur: float, busy: list) -> float:
        """Latest start of a gap of length ``dur`` ending by ``end_by``."""
        s = end_by - dur
        for a, b in reversed(busy):
            if a >= s + dur:
                continue
            if b <= s:
                break
            s = a - dur
        return s

    def edf_layout(self, now: float) -> bool:
        """Seed 000 Algorithm 2 over all AR transfers that have not started: by deadline, back
        to back from when the link is free (around the fixed intervals of a shared link), none
        ending before its ``not_before`` (the pool images its arrival evicts are pinned until
        then; vgrid, ``diskimage-cache-size``)."""
        fixed = self._fixed()
        nxt = now
        for tr in self.ar_schedule():
            dur = tr.end - tr.start
            start = self._earliest_gap(max(nxt, tr.not_before - dur), dur, fixed)
            end = start + dur
            if end > tr.deadline + 1e-9:
                return False
            if tr.start != start:
                self.st.move(tr, start, end)
            nxt = end
        return True

    def jit_push(self) -> None:
        """Seed 000 Algorithm 3's backward pass: push transfers as late as possible."""
        fixed = self._fixed()
        nxt = INF
        for tr in reversed(self.ar_schedule()):
            dur = tr.end - tr.start
            start = self._latest_gap(min(tr.deadline, nxt), dur, fixed)
            if start != tr.start:
                self.st.move(tr, start, start + dur)
            nxt = start

    def _be_start(self, now: float, dur: float) -> float:
        """Start of the next FIFO best-effort transfer (after the queue's tail; on a shared
        link also in a gap of the AR transfers as they are placed now)."""
        if self._haizea:   # Haizea 1.1: the first hole among the transfers not yet ended
            return compat_staging.next_transfer_slot(self.st, now, dur, ("be", "ar") if self.shared else ("be",))
        t = max(now, self.be_tail)
        if not self.shared:
            return t
        busy = sorted((r.start, r.end) for r in self.st.reservations()
                      if r.kind is ResKind.TRANSFER and r.link in ("ar", "ar-naive") and r.end > t)
        return self._earliest_gap(t, dur, busy)

    def _stage_naive(self, lease: Lease, missing: list, t_s: float, t_e: float, now: float) -> bool:
        groups = [tuple(missing)] if self.multicast else [(n,) for n in missing]
        # JIT allots the full link to the lease's own transfers (seed 000 Section 8.1: "just
        # enough time" to stage the workspace's images), blind to every other lease's
        dur = self.transfer_time(lease.image_mb, "ar") * len(groups)
        start = {"job-style": t_s, "jit": t_s - dur, "aggressive": now}[self.strategy]
        start = max(start, now)
        for dest in groups:
            res = self._new_transfer(lease, "ar-naive", start, dest, None)
            self.naive.append(res)
            self.st.on_rollback(lambda r=res: self.naive.remove(r) if r in self.naive else None)
            for node in dest:
                self.pools.add(node, lease.image_id, lease.image_mb, res, lease.id, t_e, res.end)
        return True

    # ------------------------------------------------------------ best effort (FIFO)
    def be_ready(self, lease: Lease, now: float, n_nodes: int) -> list[float] | None:
        """Per node, the earliest time the lease's image can be there (one more FIFO transfer
        if it is not in the pool or arriving); None when staging is off."""
        if not self.enabled:
            return None
        return self._ready(lease, now, n_nodes)[1].tolist()

    def fifo_ready(self, mb: float, now: float, image_id: str | None = None) -> float:
        """When an image of ``mb`` MB sent by one more FIFO best-effort transfer would be ready
        for a VM (s): the ready time ``_ready`` gives every node without a copy (the same float
        operations; ``queuescan``). With ``multicast-join`` pass the ``image_id``: a pending
        multicast of it that ends sooner is joined (``multicastjoin.ready``; without the image
        the FIFO time would be a wrong, later, ready time: session 8)."""
        if self.join and image_id is not None:
            return multicastjoin.first_ready(self, image_id, mb, now)
        return self.fifo_end(mb, now) + self.copy_time_mb(mb)

    def _copies(self, lease: Lease, now: float) -> tuple:
        """((node, ready_by s), ...) of the nodes holding a copy of the lease's image it may
        use (``_usable`` with no start limit), cached until an entry of that image changes
        (``ImagePools.copies_version``): with reuse a queue pass asks once per image and pass,
        and the pools change for few images between passes (issue 16, session 6)."""
        return self._copy_rows(lease, now)[0]

    def _copy_rows(self, lease: Lease, now: float) -> tuple:
        """``_copies`` and the same as numpy arrays: (copies, node indices, ready_by s, whether
        the nodes are distinct), cached together (``_ready_value``)."""
        key = (lease.image_id, None if self.pools.reuse else lease.id,
               now if self.pools.remove_on_expire else None)
        version = self.pools.copies_version(lease.image_id, lease.id)
        hit = self._copies_cache.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        part = []
        for node in self.pools.nodes_with(lease.image_id, lease.id):  # indexed: only nodes with the image
            e = self._usable(node, lease, INF, now)
            if e is not None:
                part.append((node, e.ready_by()))
        if len(self._copies_cache) > 4096:
            self._copies_cache.clear()
        idx = np.fromiter((n for n, _ in part), dtype=np.int64, count=len(part))
        rb = np.fromiter((r for _, r in part), dtype=float, count=len(part))
        rows = (tuple(part), idx, rb, len(set(idx.tolist())) == len(part))
        self._copies_cache[key] = (version, rows)
        return rows

    def _ready(self, lease: Lease, now: float, n_nodes: int) -> tuple:
        """(per-node ready times as a list or None, the same as a numpy array, their distinct values, a
        memo of ``besteffort._may_start`` answers that lives as long as these times),
        cached while the pools, the FIFO tail and the slot table stay as they are: with reuse
        every queued lease of one image shares them (issue 16: one lookup per image and queue
        pass instead of one per lease and node). A lease with no usable copy anywhere (every
        queued lease without reuse) is ready everywhere at the FIFO tail: one entry per image
        size, whatever the image or the pools (issue 16, session 6: VM-MULT)."""
        if self.join:
            return multicastjoin.ready(self, lease, now, n_nodes)
        rows = self._copy_rows(lease, now)
        if rows[0]:
            key = (lease.image_id, None if self.pools.reuse else lease.id, lease.image_mb, now)
            valid = (self.pools.copies_version(lease.image_id, lease.id), self.be_tail,
                     self.st.version if self._versioned else None)
        else:
            key = (None, lease.image_mb, now)
            valid = (self.be_tail, self.st.version if self._versioned else None)
        hit = self._ready_cache.get(key)
        if hit is not None and hit[0] == valid:
            return hit[1]
        tail = self.fifo_end(lease.image_mb, now)
        return self._ready_value(key, valid, tail, rows, now, None, self.copy_time(lease), n_nodes)

    def _ready_value(self, key: tuple, valid: tuple, first: float, rows: tuple, now: float,
                     cap: float | None, copy: float, n_nodes: int) -> tuple:
        """The value ``_ready`` returns, kept in the bounded cache under ``key`` while ``valid``
        holds: per node ``first + copy``, except on the nodes of ``rows`` (``_copy_rows``):
        ``max(now, ready_by) + copy``, or ``min(max(now, ready_by), cap) + copy`` when ``cap``
        (s, a joinable multicast's end: ``multicastjoin.ready``) is given. Computed with numpy
        over the copies (the same float operations as the per-node loop it replaces; issue 16,
        session 10: 178,000 misses in a 30-day VM-REUSE run, mostly at a new ``now``)."""
        copies, idx, rb, distinct = rows
        if not distinct or n_nodes == 0:     # never seen; the loop keeps the last copy of a node
            out = [first + copy] * n_nodes
            for node, ready_by in copies:
                t = max(now, ready_by)
                out[node] = (t if cap is None else min(t, cap)) + copy
            arr, times = np.asarray(out, dtype=float), set(out)
        else:
            vals = np.maximum(now, rb)
            if cap is not None:
                vals = np.minimum(vals, cap)
            vals += copy
            arr = np.full(n_nodes, first + copy)
            arr[idx] = vals
            times = set(vals.tolist())
            if len(idx) < n_nodes:
                times.add(first + copy)
            out = None
        value = (out, arr, times, {})
        if len(self._ready_cache) > 4096:
            self._ready_cache.clear()
        self._ready_cache[key] = (valid, value)
        return value

    def stage_be(self, lease: Lease, mapping: tuple, start: float, end: float, now: float) -> float:
        """Schedule the FIFO transfers (or reuse/piggyback) for ``mapping``; returns the time
        when every node is ready (s). ``inf`` if an image pool has no room."""
        if not self.enabled:
            return now
        if self.join:
            return multicastjoin.stage(self, lease, mapping, start, end, now)
        copy = self.copy_time(lease)
        ready = now
        missing = []
        for node in sorted(set(mapping)):
            e = self._usable(node, lease, INF, start)
            if e is not None:
                self.pools.pin(e, lease.id, end)
                if e.transfer is not None and lease.id not in e.transfer.users:
                    self.st.set(e.transfer, "users", e.transfer.users + [lease.id])
                ready = max(ready, e.ready_by() + copy)
            else:
                missing.append(node)
        groups = [tuple(missing)] if (self.multicast and missing) else [(n,) for n in missing]
        for dest in groups:
            t0 = self._be_start(now, self.transfer_time(lease.image_mb, "be"))
            res = self._new_transfer(lease, "be", t0, dest, None)
            self.st.set(self, "be_tail", res.end)
            for node in dest:
                if self.pools.add(node, lease.image_id, lease.image_mb, res, lease.id, end, res.end) is None:
                    return INF
            ready = max(ready, res.end + copy)
        return ready

    # ------------------------------------------------------------ undo a lease's staging
    def unstage(self, lease: Lease, now: float) -> None:
        """Release a lease's pins and drop its transfers that have not started and that no
        other lease rides on."""
        if not self.enabled:
            return
        if self.join:
            multicastjoin.unstage(self, lease, now)
            return
        for _node, e in sorted(self.pools.entries_pinned_by(lease.id), key=lambda ne: (ne[0], ne[1].key)):
            self.pools.release(e, lease.id, now)
        for res in self.st.of_lease(lease):
            if res.kind is ResKind.TRANSFER and res.state is ResState.SCHEDULED:
                others = [u for u in res.users if u != lease.id]
                if others:
                    self.st.set(res, "users", others)
                else:
                    self.st.remove(res)
                    self.pools.forget_transfer(res)
                    if res in self.naive:
                        self.naive.remove(res)


def processor_sharing_ends(transfers: list[tuple], bandwidth_mbs: float) -> list[float]:
    """End times of transfers ``[(start_s, mb)]`` sharing one link fairly (processor sharing).

    Used for the naive staging strategies (seed 000 Section 8.1), whose concurrent transfers
    share the bandwidth and take longer than estimated.
    """
    order = sorted(range(len(transfers)), key=lambda i: transfers[i][0])
    ends = [0.0] * len(transfers)
    active: dict[int, float] = {}
    t = 0.0
    k = 0
    while k < len(order) or active:
        next_arrival = transfers[order[k]][0] if k < len(order) else INF
        if active:
            rate = bandwidth_mbs / len(active)
            first = min(active.values())
            t_finish = t + first / rate
        else:
            t_finish = INF
            t = max(t, next_arrival)
        if next_arrival <= t_finish and k < len(order):
            if active:
                done = (next_arrival - t) * bandwidth_mbs / len(active)
                for i in active:
                    active[i] -= done
            t = next_arrival
            i = order[k]
            active[i] = transfers[i][1]
            k += 1
        else:
            done = first
            for i in list(active):
                active[i] -= done
                if active[i] <= 1e-9:
                    ends[i] = t_finish
                    del active[i]
            t = t_finish
    return ends
