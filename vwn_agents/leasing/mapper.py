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

from .model import vec_scale, vms_in
from .slottable import SlotTable

INF = math.inf


class Mapper:
    """Spatial placement over a ``SlotTable`` (see module doc)."""

    def __init__(self, st: SlotTable) -> None:
        self.st = st
        self._node_cache: dict = {}
        self._global_cache: dict = {}

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
    def _node_slots(self, node: int, need: tuple) -> list[tuple]:
        """[(a, b, j)] maximal intervals where j VMs of ``need`` fit on ``node``."""
        st = self.st
        ver = st.node_version[node]
        key = (node, need)
        hit = self._node_cache.get(key)
        if hit is not None and hit[0] == ver:
            return hit[1]
        cap = st.nodes[node].capacity
        m = vms_in(cap, need)
        lst = [r for r in st.on_node(node) if r.end > r.start]
        out = []
        if m > 0:
            if not lst:
                out = [(-INF, INF, j) for j in range(1, min(m, 64) + 1)]
            else:
                pts = sorted({r.start for r in lst} | {r.end for r in lst})
                segs = [(-INF, pts[0], m)]
                for i, p in enumerate(pts):
                    q = pts[i + 1] if i + 1 < len(pts) else INF
                    used = [0, 0, 0, 0]
                    for r in lst:
                        if r.start <= p < r.end:
                            u = r.use[node]
                            used[0] += u[0]; used[1] += u[1]; used[2] += u[2]; used[3] += u[3]
                    free = (cap[0] - used[0], cap[1] - used[1], cap[2] - used[2], cap[3] - used[3])
                    segs.append((p, q, min(vms_in(free, need), m)))
                for j in range(1, min(m, 64) + 1):
                    start = None
                    for a, b, k in segs:
                        if k >= j:
                            if start is None:
                                start = a
                            end = b
                        elif start is not None:
                            out.append((start, end, j))
                            start = None
                    if start is not None:
                        out.append((start, end, j))
        self._node_cache[key] = (ver, out)
        return out

    def slot_arrays(self, need: tuple):
        """(A, B, NODE) numpy arrays of all slot intervals for ``need`` (cached)."""
        st = self.st
        hit = self._global_cache.get(need)
        if hit is not None and hit[0] == st.version:
            return hit[1]
        A, B, N = [], [], []
        for node in range(len(st.nodes)):
            for a, b, _ in self._node_slots(node, need):
                A.append(a)
                B.append(b)
                N.append(node)
        arrays = (np.array(A, dtype=float), np.array(B, dtype=float), np.array(N, dtype=np.int64), {})
        self._global_cache = {need: (st.version, arrays)}
        return arrays

    def count_now(self, need: tuple, now: float, length: float) -> int:
        """VM slots free over [now, now + length) -- O(log n) after one build per change."""
        A, B, N, memo = self.slot_arrays(need)
        b_now = memo.get(now)
        if b_now is None:
            b_now = np.sort(B[(A <= now) & (B > now)])
            memo.clear()
            memo[now] = b_now
        return len(b_now) - int(np.searchsorted(b_now, now + length, side="left"))

    # ------------------------------------------------------------ earliest start
    def earliest(self, need: tuple, n: int, duration: float, now: float, min_duration: float | None = None,
                 ready=None, only_nodes=None, allow_future: bool = True, score=None):
        """Earliest placement of n VMs of ``need``.

        ``duration``: wanted length (s); ``min_duration``: if not None the lease may be
        suspended, so a start is acceptable when every chosen slot stays free for at least
        that long. ``ready``: per-node earliest start (s) or None (all ready now);
        ``only_nodes``: allowed node indices. Without ``allow_future`` only ``now`` and the
        nodes' ready times are tried. Returns ``(start, end, mapping)`` where ``end`` is when
        the chosen slots stop being free (start + duration when the full length fits), or None.
        """
        A, B, NODE, _ = self.slot_arrays(need)
        if len(A) == 0:
            return None
        mask = np.ones(len(A), dtype=bool)
        if only_nodes is not None:
            allowed = np.zeros(len(self.st.nodes), dtype=bool)
            allowed[list(only_nodes)] = True
            mask &= allowed[NODE]
        ready_arr = None
        cands = {now}
        if ready is not None:
            ready_arr = np.asarray(ready, dtype=float)
            cands.update(float(r) for r in ready_arr if r > now and r < INF)
        if allow_future:
            cands.update(float(a) for a in A[mask] if a > now)
            if ready_arr is not None:
                cands.update(float(r) for r in ready_arr if r > now and r < INF)
        S = np.array(sorted(cands), dtype=float)
        need_len = duration if min_duration is None else min(duration, min_duration)
        ok = mask[None, :] & (A[None, :] <= S[:, None]) & (B[None, :] >= S[:, None] + need_len) & (B[None, :] > S[:, None])
        if ready_arr is not None:
            ok &= ready_arr[NODE][None, :] <= S[:, None]
        counts = ok.sum(axis=1)
        hits = np.nonzero(counts >= n)[0]
        if len(hits) == 0:
            return None
        i = int(hits[0])
        s = float(S[i])
        sel = np.nonzero(ok[i])[0]
        full = sel[B[sel] >= s + duration]
        if len(full) >= n:
            chosen = self._pick(full, NODE, B, n, score, by_end=False)
            return s, s + duration, chosen
        chosen = self._pick(sel, NODE, B, n, score, by_end=True)
        end = min(float(B[k]) for k in chosen[1])
        return s, end, chosen[0]

    def _pick(self, idx, NODE, B, n, score, by_end):
        """Choose n slots among ``idx``: latest end first (by_end) or by host score."""
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
        if by_end:
            return mapping, [r[2] for r in rows]
        return mapping


def vm_use(mapping: tuple, per_vm: tuple) -> dict:
    """Per-node resource use of VMs placed by ``mapping`` (node index per VM)."""
    counts: dict = {}
    for node in mapping:
        counts[node] = counts.get(node, 0) + 1
    return {node: vec_scale(per_vm, k) for node, k in counts.items()}


__all__ = ["Mapper", "vm_use", "bisect"]
