"""One task queue's candidates ordered by SFETE, with feedback-counter increments applied lazily.

SFETE (seed 004, eq. (1) and Algorithm 1) gives the next job to the candidate CE with the least
(N_j + 1) / C_j, ties at random; N_j grows by one each time the broker dispatches a job to
CE j (the feedback counter, seed 004 Section 4.2), and the counters are shared by every class
(task queue) of a snapshot. :class:`SfeteOrder` keeps one class's candidates in **buckets of
equal score**: ``score -> sorted positions`` (ISM order), with a heap of the scores, so that

- the tied best candidates are the bucket of the least score (no scan of the candidates);
- a candidate whose counter moved is taken out of its bucket and put into the bucket of its new
  score in O(log distinct scores + bucket size), instead of a delete + insert into one sorted
  list of N candidates (O(N) memory moves: ~70 µs per job at 10,000 CEs in session 6).

Counters are applied **lazily**: between two ISM refreshes a counter only grows, so a stored
score is a lower bound of the current one and only the candidates of the least stored score can
be the best -- they alone are checked against the counters before each choice (a stale one
moves to its bucket, and the least bucket is looked at again). A reset or subtract of the
counters (``grown_only_since`` False, or counters without a version) re-reads every counter.

Cost per choice: O(ties + moved candidates x (log distinct scores + bucket size)), independent
of N when scores are mostly distinct; with N identical empty CEs the first choices see N ties,
as the per-job matcher does. The answer is the same as the per-job matcher's
(:class:`broker.selection.SfeteSelection` over every candidate): the positions tied at the least
current score, in ISM order (``tests/test_sfete_order.py`` compares with a brute-force argmin,
ties included).
"""
from __future__ import annotations

from bisect import bisect_left, insort
from heapq import heapify, heappop, heappush
from typing import Callable, Sequence

from .selection import sfete_score


#: The heap of scores is rebuilt when it holds more than this many times the live buckets (+64).
COMPACT_FACTOR = 2


class SfeteOrder:
    """Candidates ``0..n-1`` of one class ordered by their SFETE score (N_j + 1) / C_j.

    ``keys``: the feedback counter's key of each candidate (CE id or CE/VO view key);
    ``published``: GlueCEStateTotalJobs of each (jobs); ``capacities``: C_j of each (SI00 x
    CPUs; <= 0 scores +inf, chosen only when no candidate has capacity). Not thread-safe (the
    task queues call it under their lock)."""

    __slots__ = ("keys", "published", "capacities", "counts", "scores", "buckets", "heap", "version")

    def __init__(self, keys: Sequence[str], published: Sequence[int], capacities: Sequence[float]) -> None:
        self.keys = list(keys)
        self.published = list(published)
        self.capacities = list(capacities)
        self.counts: list[int] = []
        self.scores: list[float] = []
        self.buckets: dict[float, list[int]] = {}
        self.heap: list[float] = []
        self.version: int | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def reload(self, get: Callable[[str], int]) -> None:
        """Re-read every counter (``get(key) -> jobs dispatched since the refresh``) and
        rebuild the buckets: O(N)."""
        self.counts = counts = [get(k) for k in self.keys]
        self.scores = scores = [sfete_score(p, n, c) for p, n, c in zip(self.published, counts, self.capacities)]
        buckets: dict[float, list[int]] = {}
        for i, s in enumerate(scores):   # ascending positions: each bucket sorted
            b = buckets.get(s)
            if b is None:
                buckets[s] = [i]
            else:
                b.append(i)
        self.buckets = buckets
        self.heap = list(buckets)
        heapify(self.heap)

    def best(self, feedback) -> list[int]:
        """The positions (ISM order) of the candidates tied at the least current score; [] when
        there is none. ``feedback``: the counters (``get``, and ``version`` +
        ``grown_only_since`` or ``changed_since`` to tell whether they only grew since the last
        call; without them every counter is re-read). The returned list is the order's own:
        read it before the next call, do not change it."""
        if not self.keys:
            return []
        version = getattr(feedback, "version", None)
        grown = getattr(feedback, "grown_only_since", None)   # a restarted change log is no reset
        full = self.version is None or version is None or not (
            grown(self.version) if grown is not None else feedback.changed_since(self.version) is not None)
        self.version = version
        get = feedback.get
        if full:
            self.reload(get)
        heap, buckets, keys, counts = self.heap, self.buckets, self.keys, self.counts
        scores, published, capacities = self.scores, self.published, self.capacities
        if len(heap) > COMPACT_FACTOR * len(buckets) + 64:
            heap[:] = buckets
            heapify(heap)
        while True:
            bucket = buckets.get(heap[0])
            if bucket is None:         # emptied: its score is stale in the heap
                heappop(heap)
                continue
            stale = [(i, n) for i in bucket for n in (get(keys[i]),) if n != counts[i]]
            if not stale:
                return bucket
            for i, n in stale:   # to the bucket of its new score (the hot loop)
                counts[i] = n
                old, new = scores[i], sfete_score(published[i], n, capacities[i])
                if new == old:
                    continue
                b = buckets[old]
                if len(b) == 1:
                    del buckets[old]
                else:
                    del b[bisect_left(b, i)]
                scores[i] = new
                b = buckets.get(new)
                if b is None:
                    buckets[new] = [i]
                    heappush(heap, new)
                else:
                    insort(b, i)
