"""Skipping runs of a long best-effort queue at once (issue 16, session 7: HPDC'08 VM-MULT).

With image staging and no future reservation left to take, a queue pass asks of every queued
lease whether it may start (``besteffort._may_start``): enough VM slots free for its minimum
slot length on nodes whose image is ready, at ``now`` or at one of the nodes' ready times. Behind
a saturated image link that queue is hundreds of leases long and almost every answer is no: a
profile of the whole VM-MULT rho = 10 % run spent 55 % of its time in nine million such calls,
mostly Python overhead per lease (its ready times, its slot length, the memo).

A lease with no copy of its image in any pool (every queued lease without reuse; with reuse,
each lease whose image is nowhere) is ready on every node at the same time T = the end of one
more FIFO transfer of its image size, or with ``multicast-join`` the end of a pending multicast
of its image if that ends sooner (``Staging.fifo_ready``), so ``_may_start`` reduces to

    T < inf  and  count_free_at(need, max(T, now), L) >= n

with L its minimum slot length (``besteffort.min_slot_length``) and n its VMs. ``QueueScan``
evaluates that test for the run of such leases from the current one in one numpy operation per
(VM size, image size) and returns the index of the next lease that either may start or needs the
full test (a copy somewhere, not Queued, or the answer may be yes); every lease before it is
answered no without a call. The counts come from the slot arrays as last built while no
reservation was removed since (``Mapper.free_ends_upper``): an upper bound, so a no is exact (the
same floats, the same comparisons) and a possible yes is decided by ``may_start``. Answers are
recomputed as soon as the slot table, the FIFO tail or the pools change (a placement). With reuse
most queued leases have a copy somewhere and go through ``may_start`` unchanged (session 7: a
bulk test over their per-image ready times was 3x slower and is not done).
"""
from __future__ import annotations

import numpy as np

from . import compat_staging
from .model import LeaseState
from .slottable import INF

_UNCOVERED = (0, 0.0, None, None, False)   # the row of a lease that is not Queued


class QueueScan:
    """One queue pass's bulk ``_may_start`` (see module doc). ``queue``: the list the pass
    iterates; ``may_start(sched, lease, now) -> bool``: the per-lease test;
    ``slot_length(sched, lease) -> float`` (s): ``besteffort.min_slot_length``."""

    def __init__(self, sched, queue: list, now: float, may_start, slot_length) -> None:
        self.sched = sched
        self.queue = queue
        self.now = now
        self.may_start = may_start
        self.slot_length = slot_length
        self._static = None     # per lease: VMs, slot length s, (need, MB, image) group, pool key, Queued
        self._state = None      # (slot-table version, FIFO tail, pool version, queue length)
        self._next = -1         # index of the next lease that is not a no under that state

    def allows(self, i: int) -> bool:
        """``may_start(sched, queue[i], now)`` for the i-th lease of the pass (Queued)."""
        sched = self.sched
        if self._static is None:     # the rows are built at the first lease without a copy
            lease = self.queue[i]
            if (lease.image_id, None if sched.pools.reuse else lease.id) in sched.pools.entry_keys():
                return self.may_start(sched, lease, self.now)
        state = (sched.st.version, sched.staging.be_tail, sched.pools.version, len(self.queue))
        if state != self._state or i > self._next:
            self._state = state
            self._next = self._scan(i)
        if i < self._next:
            return False
        return self.may_start(sched, self.queue[i], self.now)

    def _static_rows(self):
        """Per lease of the queue: (VMs, minimum slot length s, (need, image MB, image) group, pool key,
        Queued) as arrays and lists; rows are cached per (lease id, time run) across passes."""
        if self._static is None:
            sched = self.sched
            cache = sched.__dict__.setdefault("_queuescan_rows", {})
            if len(cache) > 4 * len(self.queue) + 1024:
                cache.clear()
            queued = LeaseState.QUEUED
            rows = [cache.get((l.id, l.time_run)) if l.state is queued else _UNCOVERED for l in self.queue]
            for k, row in enumerate(rows):
                if row is None:
                    lease = self.queue[k]
                    rows[k] = cache[(lease.id, lease.time_run)] = self._row(lease)
            groups: dict = {}   # (need, image MB, image id or None) -> group number
            self._static = (np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=float),
                            np.array([groups.setdefault(r[2], len(groups)) for r in rows], dtype=np.int64),
                            list(groups), [r[3] for r in rows], np.array([r[4] for r in rows], dtype=bool))
        return self._static

    def _row(self, lease) -> tuple:
        """(VMs, minimum slot length s, (need, image MB, image id or None), pool key, True) of a
        Queued lease. The image id is part of the group only with ``multicast-join``, where a
        pending multicast of the image may make it ready before the FIFO tail (session 8)."""
        sched = self.sched
        return (lease.n_vms, self.slot_length(sched, lease),
                (lease.per_vm, lease.image_mb, lease.image_id if sched.staging.join else None),
                (lease.image_id, None if sched.pools.reuse else lease.id), True)

    def _scan(self, i: int) -> int:
        """Index >= i of the first lease not answered no in bulk (len(queue) if none)."""
        sched = self.sched
        n_arr, len_arr, gid_arr, group_keys, keys, queued = self._static_rows()
        end = len(keys)
        if i >= end:
            return end
        by_image = sched.pools.entry_keys()
        # a lease is covered when it is Queued and no pool holds an entry of its image it may use;
        # only the run of covered leases from i is scanned (with reuse most leases have a copy:
        # each of them ends a run at once, without numpy work)
        stop = i
        riding = compat_staging.joinable_images(sched.staging, self.now)   # compat mode only
        while stop < end and queued[stop] and keys[stop] not in by_image and keys[stop][0] not in riding:
            stop += 1
        if stop == i:
            return i
        end = stop
        no = np.zeros(end - i, dtype=bool)
        gid, n_rest, len_rest = gid_arr[i:end], n_arr[i:end], len_arr[i:end]
        now = self.now
        # each group's start t (its FIFO or joined ready time); groups of one VM size with the
        # same t are counted together (with multicast-join a group is one image, and most
        # images have no joinable transfer: one t for all of them; session 8)
        classes: dict = {}     # (need, t) -> class number
        cls_of = np.zeros(len(group_keys), dtype=np.int64)
        for g in np.unique(gid).tolist():
            need, mb, image = group_keys[g]
            t_ready = sched.staging.fifo_ready(mb, now, image)
            t = INF if t_ready >= INF else max(t_ready, now)
            cls_of[g] = classes.setdefault((need, t), len(classes))
        cls = cls_of[gid] if len(classes) > 1 else None
        for (need, t), c in classes.items():
            ks = np.flatnonzero(cls == c) if cls is not None else slice(None)
            if t >= INF:                # never ready: no start at all
                no[ks] = True
                continue
            # ends of the slots free at t before this pass's latest placements: an upper bound
            # of the count, so a no is exact and a yes is checked by ``may_start``
            ends = np.asarray(sched.mapper.free_ends_upper(need, t), dtype=float)
            free = len(ends) - np.searchsorted(ends, t + len_rest[ks], side="left")
            no[ks] = free < n_rest[ks]
        first = np.flatnonzero(~no)
        return i + int(first[0]) if len(first) else end
