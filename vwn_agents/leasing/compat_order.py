"""Haizea 1.1's order of equally scored nodes: the iteration order of a Python 2.7 set
(``compat = "haizea-1.1"``; issue 16, rule 14 of ``compat_staging.py``'s list).

Haizea's ``__schedule_asap`` tries each earliest-start changepoint with the set of nodes ready
by then (``set(nodes)``, the nodes added in order of their earliest start, ties by node id),
and ``GreedyMapper.map`` takes ``list(set(aw.get_nodes_at(start)) & onlynodes)`` before a
*stable* sort by host score. So among nodes of equal score the first taken is the first in
that set's iteration order -- CPython 2.7's hash-table slot order -- not the lowest id. For
ints (hash = the int) a set whose members are all below its table size iterates in
ascending order (every node, or nodes with low ids), but a subset of high ids wraps around
the table: ``{57, 97..112, 121, 122}`` iterates 97..112 first, then 57, 121, 122 (3 days of
VM-REUSE, lease 622: Haizea took nodes 96-103, 0-based, vgrid 56 and 96-102).

This module replays CPython 2.7's ``setobject.c`` for non-negative int keys: open addressing
from slot ``key & mask`` with the probe ``i = 5 i + perturb + 1``, ``perturb >>= 5``; the table
starts at 8 slots and, when an insertion makes it two thirds full, is rebuilt with the
smallest power of two above 4 x (2 x above 50,000) its members, re-inserting them in slot
order. Haizea's node ids are vgrid's node indexes + 1.
"""
from __future__ import annotations

_MIN = 8
_MASK64 = (1 << 64) - 1


class Py2IntSet:
    """A CPython 2.7 ``set`` of non-negative ints, only to know its iteration order."""

    def __init__(self, keys=()) -> None:
        self.table: list = [None] * _MIN
        self.used = 0
        self.members: set = set()
        for k in keys:
            self.add(k)

    @staticmethod
    def _place(table: list, key: int) -> None:
        mask = len(table) - 1
        i = key & mask
        perturb = key
        while table[i & mask] is not None:
            i = (5 * i + perturb + 1) & _MASK64
            perturb >>= 5
        table[i & mask] = key

    def add(self, key: int) -> None:
        if key in self.members:
            return
        self.members.add(key)
        self._place(self.table, key)
        self.used += 1
        if self.used * 3 >= len(self.table) * 2:
            minused = self.used * 2 if self.used > 50000 else self.used * 4
            size = _MIN
            while size <= minused:
                size <<= 1
            old, self.table = self.table, [None] * size
            for k in old:
                if k is not None:
                    self._place(self.table, k)

    def __iter__(self):
        return (k for k in self.table if k is not None)

    def __len__(self) -> int:
        return self.used


def _final_size(n: int) -> int:
    """Table size of a Python 2.7 set after ``n`` insertions of distinct keys."""
    size, used = _MIN, 0
    for used in range(1, n + 1):
        if used * 3 >= size * 2:
            minused = used * 2 if used > 50000 else used * 4
            size = _MIN
            while size <= minused:
                size <<= 1
    return size


_CACHE: dict = {}


def haizea_node_order(ready_nodes) -> dict:
    """{vgrid node index: position} of ``list(set(all nodes) & set(ready_nodes))`` in
    Haizea 1.1 (``ready_nodes``: vgrid node indexes in the order Haizea adds them to the
    changepoint's set -- by earliest start, ties by index). The set of every node is bigger
    than the ready set (or as big), so the intersection iterates the ready set and inserts
    into a new set. Cached by the input (a bounded memo)."""
    key = tuple(ready_nodes)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    ids = [n + 1 for n in key]
    if not ids or max(ids) < _final_size(len(set(ids))):
        order = sorted(set(ids))      # every key in its own slot: ascending
    else:
        order = list(Py2IntSet(Py2IntSet(ids)))
    out = {k - 1: i for i, k in enumerate(order)}
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[key] = out
    return out
