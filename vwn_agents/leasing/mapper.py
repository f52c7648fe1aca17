"""Spatial placement (the mapper): which nodes host a lease's VMs, and from when.

Two questions, both answered from the slot table:

* ``map_interval``: place n VMs over a fixed [t1, t2) (advance reservations, seed 000
  Algorithm 1: candidate nodes with room over the whole interval, ordered by a host score --
  image reuse first, then how many VMs the node can host -- then packed greedily);
* ``earliest``: the earliest start s >= now at which n VMs fit for a duration D (or, for
  leases that may be suspended, for at least a minimum duration), considering per-node
  readiness times (image staging) -- Haizea's "find fit at changepoints".

``earliest`` works on *VM slots*: for a resource vector r, slot j of node N is free over the
maximal intervals where j x r fits on N. Those intervals are cached per node and rebuilt only
for nodes whose reservations changed; candidate start times are then tested all at once with
numpy. Times in seconds.
"""
from __future__ import annotations

import bisect
import math

import numpy as np

from .compat_mapper import greedy_start
from .model import vec_scale, vms_in
from .slotfit import first_fit
from .slottable import SlotTable

INF = math.inf


class StartScore:
    """A host score that depends on the lease's start: ``Mapper.earliest`` calls ``at(s)`` once
    it knows the start s (s) and orders nodes by the returned ``score(node, hostable) -> tuple``
    (higher first). A plain callable ``score(node, hostable)`` is a score that does not depend on
    the start. The hooks below are the compat mode's (Haizea 1.1's greedy mapper,
    ``compat_staging.GreedyScore``); their defaults are vgrid's own behaviour."""

    #: Rules 15 and 23 (compat_staging): for a lease that may be suspended, every node free at a
    #: start competes in score order, even one free for too short a time, and such a start is
    #: rejected (``compat_mapper.greedy_start``).
    score_order = False

    def at(self, s: float):
        """The node score for a start at ``s`` (s)."""
        raise NotImplementedError

    def order_by(self, ready) -> None:
        """Rule 14: how equal scores are ordered, from the per-node ready times (s) or None."""

    def vnodes(self, s: float, mapping: tuple) -> tuple:
        """Rule 18: ``mapping``'s nodes in virtual-node order for a start at ``s``; () when the
        order does not matter."""
        return ()


class Mapper:
    """Spatial placement over a ``SlotTable`` (see module doc)."""

    def __init__(self, st: SlotTable) -> None:
        self.st = st
        self._global_cache: dict = {}
        self._m: dict = {}
        self._node_ids = np.arange(len(st.nodes), dtype=np.int64)
        self._at_memo: dict = {}   # need -> (slot-table version, {t: sorted slot ends})
        self._free_memo: dict = {}  # need -> (slot-table version, {t: sorted slot ends, a list})
        self._upper_memo: dict = {}  # need -> (slot-table shrink version, {t: sorted slot ends})
        self._stale_memo: dict = {}  # need -> (version of the built arrays, {t: sorted slot ends})

    # ------------------------------------------------------------ fixed interval (ARs)
    def map_interval(self, need: tuple, n: int, t1: float, t2: float, score=None,
                     only_nodes=None, exclude=()) -> tuple | None:
        """Node index per VM for n VMs of ``need`` over [t1, t2), or None if they do not fit.

        ``score(node, hostable) -> tuple`` orders candidate nodes (highest first); default:
        most VMs hostable, then lowest index.
        """
        st = self.st
        cands = []
        nodes = range(len(st.nodes)) if only_nodes is None else only_nodes
        for node in nodes:
            if node in exclude:
                continue
            k = st.vms_fit(node, need, t1, t2)
            if k > 0:
                cands.append((node, k))
        if sum(k for _, k in cands) < n:
            return None
        key = score or (lambda node, k: (k,))
        cands.sort(key=lambda c: (tuple(-x for x in key(*c)), c[0]))
        mapping = []
        for node, k in cands:
            take = min(k, n - len(mapping))
            mapping.extend([node] * take)
            if len(mapping) == n:
                break
        return tuple(mapping)

    # ------------------------------------------------------------ slot intervals
    def _node_slots(self, node: int, need: tuple) -> tuple[list, list]:
        """([a...], [b...]) maximal intervals where j VMs of ``need`` fit on ``node``, for
        j = 1..(VMs the empty node can host, at most 64)."""
        st = self.st
        cap = st.nodes[node].capacity
        m = self._m.get((cap, need))
        if m is None:
            m = self._m[(cap, need)] = min(vms_in(cap, need), 64)
        if m <= 0 or node in st.down:
            return [], []
        if m == 1:    # the common case (one VM per node, HPDC'08): in one pass (issue 16, session 9)
            spans = _blocking_spans(st.on_node(node), node, cap, need)
            if spans is not None:
                return _complement_of_spans(spans)
        lst = [r for r in st.on_node(node) if r.end > r.start]
        if not lst:
            return [-INF] * m, [INF] * m
        if len(lst) == 1:
            return _one_reservation(lst[0], node, cap, need, m)
        if m == 1:
            key = _block_key(node, need)
            for r in lst:
                blk = r.blocks.get(key)
                if blk is None:
                    blk = r.blocks[key] = _blocks(r.use[node], cap, need)
                if not blk:
                    break
            else:
                return _complement_of_spans([(r.start, r.end) for r in lst])
        return _sweep(lst, node, cap, need, m)

    def slot_arrays(self, need: tuple):
        """(A, B, NODE, memo) numpy arrays of all slot intervals for ``need``.

        Node i owns the block [i*K, (i+1)*K) of the arrays, padded with empty intervals
        (A = +inf, B = -inf); only nodes whose reservations changed are recomputed and written
        in place. K doubles when a node needs more room.
        """
        st = self.st
        g = self._global_cache.get(need)
        if g is not None and g["version"] == st.version:
            return g["arrays"]
        n_nodes = len(st.nodes)
        if g is None:
            g = {"K": 4, "dirty": set(range(n_nodes)), "per_node": [([], [])] * n_nodes}
            self._global_cache[need] = g
            self._alloc(g, n_nodes)
        if st.dirty_nodes:
            for other in self._global_cache.values():
                other["dirty"] |= st.dirty_nodes
            st.dirty_nodes = set()
        per_node = g["per_node"]
        K = g["K"]
        dirty = sorted(g["dirty"])
        longest = 0
        for node in dirty:
            ab = per_node[node] = self._node_slots(node, need)
            longest = max(longest, len(ab[0]))
        if longest > K:
            while longest > K:
                K *= 2
            g["K"] = K
            self._alloc(g, n_nodes)
            dirty = range(n_nodes)
        if dirty:   # pad the dirty blocks, then write their slots (session 10: no padded lists)
            flat_a, flat_b, lens = [], [], []
            for node in dirty:
                a, b = per_node[node]
                flat_a += a
                flat_b += b
                lens.append(len(a))
            rows, ln = np.asarray(dirty, dtype=np.int64), np.asarray(lens, dtype=np.int64)
            g["A"].reshape(n_nodes, K)[rows] = INF
            g["B"].reshape(n_nodes, K)[rows] = -INF
            idx = np.repeat(rows * K - np.cumsum(ln) + ln, ln) + np.arange(len(flat_a))
            g["A"][idx] = flat_a
            g["B"][idx] = flat_b
        g["dirty"] = set()
        g["arrays"] = (g["A"], g["B"], g["N"], {})
        g["version"] = st.version
        g["shrink"] = st.shrink_version
        return g["arrays"]

    @staticmethod
    def _alloc(g: dict, n_nodes: int) -> None:
        K = g["K"]
        g["A"] = np.full(n_nodes * K, INF)
        g["B"] = np.full(n_nodes * K, -INF)
        g["N"] = np.repeat(np.arange(n_nodes, dtype=np.int64), K)

    def count_now(self, need: tuple, now: float, length: float) -> int:
        """VM slots free over [now, now + length) -- O(log n) after one build per change."""
        A, B, N, memo = self.slot_arrays(need)
        b_now = memo.get(now)
        if b_now is None:
            b_now = np.sort(B[(A <= now) & (B > now)])
            memo.clear()
            memo[now] = b_now
            memo[("list", now)] = b_now.tolist()
        return len(b_now) - int(np.searchsorted(b_now, now + length, side="left"))

    def count_now_upper(self, need: tuple, now: float, length: float) -> int:
        """An upper bound of ``count_now`` without rebuilding: valid because reservations
        added since the last build can only lower the count (falls back to ``count_now``
        if any reservation was removed or moved since)."""
        g = self._global_cache.get(need)
        if g is None or g.get("shrink") != self.st.shrink_version or "arrays" not in g:
            return self.count_now(need, now, length)
        memo = g["arrays"][3]
        b_list = memo.get(("list", now))
        if b_list is None:
            b_now = memo.get(now)
            if b_now is None:
                return self.count_now(need, now, length)
            b_list = memo[("list", now)] = b_now.tolist()
        return len(b_list) - bisect.bisect_left(b_list, now + length)

    def count_ready_at(self, need: tuple, t: float, length: float, ready) -> int:
        """VM slots of ``need`` free over [t, t + length) (s) on nodes whose ready time (numpy
        array, s per node) is <= t: what ``earliest`` counts at start ``t``. The slots open at
        ``t`` are selected once per (slot-table version, t)."""
        A, B, NODE, _ = self.slot_arrays(need)
        memo = self._at_memo.get(need)
        if memo is None or memo[0] != self.st.version:
            memo = self._at_memo[need] = (self.st.version, {})
        hit = memo[1].get(t)
        if hit is None:
            sel = (A <= t) & (B > t)
            hit = memo[1][t] = (B[sel], NODE[sel])
        b, nodes = hit
        return int(np.count_nonzero((b >= t + length) & (ready[nodes] <= t)))

    def count_free_at(self, need: tuple, t: float, length: float) -> int:
        """``count_ready_at`` when every node is ready by ``t``: VM slots of ``need`` free over
        [t, t + length) (s); O(log n) after one sort per (slot-table version, t)."""
        b = self.free_ends_at(need, t)
        return len(b) - bisect.bisect_left(b, t + length)

    def free_ends_at(self, need: tuple, t: float) -> list:
        """Sorted ends (s) of the VM slots of ``need`` free at instant ``t``: ``count_free_at``
        is how many end at or after t + length. Memoized per (slot-table version, t)."""
        memo = self._free_memo.get(need)
        if memo is None or memo[0] != self.st.version:
            memo = self._free_memo[need] = (self.st.version, {})
        b = memo[1].get(t)
        if b is None:
            A, B, _, _ = self.slot_arrays(need)
            b = memo[1][t] = np.sort(B[(A <= t) & (B > t)]).tolist()
            upper = self._upper_memo.get(need)
            if upper is None or upper[0] != self.st.shrink_version:
                upper = self._upper_memo[need] = (self.st.shrink_version, {})
            upper[1][t] = b
        return b

    def count_free_upper(self, need: tuple, t: float, length: float) -> int:
        """An upper bound of ``count_free_at`` from its last answer at ``t``, valid while no
        reservation was removed or moved (``SlotTable.shrink_version``): reservations added
        since can only lower the count. Falls back to ``count_free_at``. Issue 16, session 7:
        a queue pass places a lease every few leases, and each placement made every later
        lease of the pass sort the slot ends again, although most of them only needed a no."""
        b = self.free_ends_upper(need, t)
        return len(b) - bisect.bisect_left(b, t + length)

    def free_ends_upper(self, need: tuple, t: float) -> list:
        """``free_ends_at`` as it was last computed at ``t``, or from the slot arrays as they
        were last built, while no reservation was removed or moved since: then every slot free
        now lies within one of those, so the counts are upper bounds (``count_free_upper``);
        without a rebuild of the arrays after each placement. Else ``free_ends_at``."""
        st = self.st
        if st.version == self._free_memo.get(need, (None,))[0]:
            b = self._free_memo[need][1].get(t)
            if b is not None:
                return b
        upper = self._upper_memo.get(need)
        if upper is not None and upper[0] == st.shrink_version:
            b = upper[1].get(t)
            if b is not None:
                return b
        g = self._global_cache.get(need)
        if g is None or "arrays" not in g or g["shrink"] != st.shrink_version:
            return self.free_ends_at(need, t)
        stale = self._stale_memo.get(need)
        if stale is None or stale[0] != g["version"]:
            stale = self._stale_memo[need] = (g["version"], {})
        b = stale[1].get(t)
        if b is None:
            A, B = g["A"], g["B"]
            b = stale[1][t] = np.sort(B[(A <= t) & (B > t)]).tolist()
        return b

    def _upper_arrays(self, need: tuple) -> dict:
        """The slot arrays of ``need`` as last built, rebuilt first if a reservation was removed
        or moved since (``SlotTable.shrink_version``): each slot free now at an instant lies in
        one of them, so counts over them are upper bounds (``free_ends_upper``)."""
        g = self._global_cache.get(need)
        if g is None or "arrays" not in g or g["shrink"] != self.st.shrink_version:
            self.slot_arrays(need)
            g = self._global_cache[need]
        return g

    def each_node_free_upper(self, need: tuple, now: float, length: float, nodes) -> bool:
        """False only if one of ``nodes`` (indices) has no VM slot of ``need`` free over
        [now, now + length) (s) in the arrays as last built (``_upper_arrays``; 1 ms margin, so
        both float forms ``B >= now + length`` and ``B - now >= length`` imply it): then one VM
        on each cannot start now (issue 16, session 9: ``besteffort._may_resume``)."""
        per_node = self._upper_arrays(need)["per_node"]
        t = now + length - 1e-3
        for node in nodes:
            a, b = per_node[node]
            for x, y in zip(a, b):
                if x <= now < y and y >= t:
                    break
            else:
                return False
        return True

    # ------------------------------------------------------------ earliest start
    def earliest(self, need: tuple, n: int, duration: float, now: float, min_duration: float | None = None,
                 ready=None, only_nodes=None, allow_future: bool = True, score=None):
        """Earliest placement of n VMs of ``need``.

        ``duration``: wanted length (s); ``min_duration``: if not None the lease may be
        suspended, so a start is acceptable when every chosen slot stays free for at least
        that long. ``ready``: per-node earliest start (s) or None (all ready now);
        ``only_nodes``: allowed node indices. Without ``allow_future`` only ``now`` and the
        nodes' ready times are tried. ``score``: None (latest-ending slots first), a callable
        ``score(node, hostable) -> tuple`` or a ``StartScore``. Returns ``(start, end, mapping)`` where ``end`` is when
        the chosen slots stop being free (start + duration when the full length fits), or None.
        """
        A, B, NODE, _ = self.slot_arrays(need)
        need_len = duration if min_duration is None else min(duration, min_duration)
        with np.errstate(invalid="ignore"):  # a free slot [inf, inf) after a hold (frozenhold): never kept
            keep = (B - A) >= need_len
        allowed = None
        if only_nodes is not None:
            allowed = np.zeros(len(self.st.nodes), dtype=bool)
            allowed[list(only_nodes)] = True
            keep &= allowed[NODE]
        A, B, NODE = A[keep], B[keep], NODE[keep]
        if len(A) == 0:
            return None
        ready_arr = None
        parts = [np.array([now])]
        if ready is not None:
            ready_arr = np.asarray(ready, dtype=float)
            parts.append(ready_arr[(ready_arr > now) & (ready_arr < INF)])
        if allow_future:
            parts.append(A[A > now])
        S = np.unique(np.concatenate(parts))
        hit = first_fit(A, B, S, n, need_len, None, None if ready_arr is None else ready_arr[NODE])
        if hit is None:
            return None
        if isinstance(score, StartScore) and score.score_order and min_duration is not None:
            return greedy_start(self, need, n, duration, need_len, S, hit, (A, B, NODE), ready_arr, allowed, score)
        s = float(S[hit[0]])
        sel = np.nonzero(hit[1])[0]
        full = sel[B[sel] >= s + duration]
        if isinstance(score, StartScore):
            score = score.at(s)
        if len(full) >= n:
            chosen = self._pick(full, NODE, B, n, score, by_end=False)
            return s, s + duration, chosen
        chosen = self._pick(sel, NODE, B, n, score, by_end=True)
        end = min(float(B[k]) for k in chosen[1])
        return s, end, chosen[0]

    def could_start_before(self, need: tuple, n: int, length: float, now: float, t: float) -> bool:
        """Necessary condition for a lease already reserved from ``t`` to start earlier: n VM
        slots free from some s in [now, t) until min(s + length, t). (The lease's own
        reservations start at t or later, so removing them cannot matter before t.)"""
        if t <= now:
            return False
        A, B, _, _ = self.slot_arrays(need)
        # Only slots that can count at some s in [now, t) (a necessary test with the same float
        # operations as below: s + length grows with s), and only their starts as candidate s:
        # between two such starts the count can only fall (issue 16: the matrix was S x all slots).
        with np.errstate(invalid="ignore"):
            rel = (A < t) & (B > now) & ((B >= t) | (B >= np.maximum(A, now) + length))
        if np.count_nonzero(rel) < n:
            return False
        A, B = A[rel], B[rel]
        S = np.unique(np.concatenate([[now], A[A > now]]))
        return first_fit(A, B, S, n, ends=np.minimum(S + length, t)) is not None

    def _pick(self, idx, NODE, B, n, score, by_end, slots=False):
        """Choose n slots among ``idx``: latest end first (by_end) or by host score; with
        ``slots`` (host score only) also the chosen slot indexes, as ``by_end`` returns."""
        if score is None or by_end:
            nodes = NODE[idx]
            ends = B[idx]
            if by_end:
                order = np.lexsort((nodes, -ends))[:n]
            else:
                per = np.bincount(nodes)
                order = np.lexsort((-ends, nodes, -per[nodes]))[:n]
            mapping = tuple(sorted(int(x) for x in nodes[order]))
            if by_end:
                return mapping, [int(k) for k in np.asarray(idx)[order]]
            return mapping
        rows = [(int(NODE[k]), float(B[k]), int(k)) for k in idx]
        if by_end:
            rows.sort(key=lambda r: (-r[1], r[0]))
        else:
            counts: dict = {}
            for node, _, _ in rows:
                counts[node] = counts.get(node, 0) + 1
            key = score or (lambda node, k: (k,))
            rows.sort(key=lambda r: (tuple(-x for x in key(r[0], counts[r[0]])), r[0], -r[1]))
        rows = rows[:n]
        mapping = tuple(sorted(r[0] for r in rows))
        if by_end or slots:
            return mapping, [r[2] for r in rows]
        return mapping


def _blocks(use: tuple, cap: tuple, need: tuple) -> bool:
    """Whether a reservation using ``use`` leaves no room for one more VM of ``need``."""
    return (use[0] + need[0] > cap[0] or use[1] + need[1] > cap[1] or use[2] + need[2] > cap[2]
            or use[3] + need[3] > cap[3])


def _one_reservation(r, node: int, cap: tuple, need: tuple, m: int) -> tuple[list, list]:
    """Slot intervals of a node holding one reservation: slots 1..k stay free throughout, the
    others are free before it and after it."""
    u = r.use[node]
    k = max(min(vms_in((cap[0] - u[0], cap[1] - u[1], cap[2] - u[2], cap[3] - u[3]), need), m), 0)
    if k >= m:
        return [-INF] * m, [INF] * m
    return [-INF] * k + [-INF, r.end] * (m - k), [INF] * k + [r.start, INF] * (m - k)


_NEED_IDS: dict = {}   # resource vector -> small int, process-wide (all mappers share ``blocks``)


def _block_key(node: int, need: tuple) -> int:
    """The key of ``Reservation.blocks`` for (node, need): an int, whose hash costs nothing
    (a (node, need) tuple was hashed again at every lookup: 3 % of a VM-REUSE run, session 9)."""
    nid = _NEED_IDS.get(need)
    if nid is None:
        nid = _NEED_IDS[need] = len(_NEED_IDS)
    return nid * 1_000_003 + node


def _blocking_spans(res: list, node: int, cap: tuple, need: tuple) -> list | None:
    """[(start, end)] of the non-empty reservations on ``node``, or None if one of them leaves
    room for a VM of ``need`` (then the general sweep applies). Caches each answer in the
    reservation's ``blocks`` as ``_node_slots`` does."""
    key = _block_key(node, need)
    spans = []
    for r in res:
        a, b = r.start, r.end
        if b > a:
            blk = r.blocks.get(key)
            if blk is None:
                blk = r.blocks[key] = _blocks(r.use[node], cap, need)
            if not blk:
                return None
            spans.append((a, b))
    return spans


def _complement_of_spans(spans: list) -> tuple[list, list]:
    """The one slot of a node where every reservation, (start, end) in ``spans`` (sorted in
    place), alone leaves no room: free outside their union; ([-inf], [inf]) when none."""
    spans.sort()
    A, B = [-INF], []
    cur_end = -INF
    for a, b in spans:
        if a > cur_end:
            B.append(a)
            A.append(b)
            cur_end = b
        elif b > cur_end:
            cur_end = b
            A[-1] = b
    B.append(INF)
    return A, B


def _sweep(lst: list, node: int, cap: tuple, need: tuple, m: int) -> tuple[list, list]:
    """General case: sweep the reservation boundaries, tracking how many VMs fit (level) and
    opening/closing the intervals of slots level+1..m as the level changes."""
    dims = [i for i in range(4) if need[i] > 0]
    delta: dict = {}
    for r in lst:
        u = r.use[node]
        d = delta.setdefault(r.start, [0.0] * len(dims))
        e = delta.setdefault(r.end, [0.0] * len(dims))
        for k, i in enumerate(dims):
            d[k] += u[i]
            e[k] -= u[i]
    used = [0.0] * len(dims)
    A: list = []
    B: list = []
    open_at = [-INF] * (m + 1)  # open_at[j]: start of slot j's current free interval
    level = m
    for t in sorted(delta):
        k_new = m
        for k, i in enumerate(dims):
            used[k] += delta[t][k]
            free = cap[i] - used[k]
            k_new = min(k_new, int(free // need[i] + 1e-9) if free > 0 else 0)
        k_new = max(k_new, 0)
        for j in range(k_new + 1, level + 1):  # slots closing at t
            if open_at[j] < t:
                A.append(open_at[j])
                B.append(t)
        for j in range(level + 1, k_new + 1):  # slots opening at t
            open_at[j] = t
        level = k_new
    for j in range(1, level + 1):
        A.append(open_at[j])
        B.append(INF)
    return A, B


def vm_use(mapping: tuple, per_vm: tuple) -> dict:
    """Per-node resource use of VMs placed by ``mapping`` (node index per VM)."""
    counts: dict = {}
    for node in mapping:
        counts[node] = counts.get(node, 0) + 1
    return {node: vec_scale(per_vm, k) for node, k in counts.items()}


__all__ = ["Mapper", "vm_use"]
