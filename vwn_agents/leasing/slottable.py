"""The slot table: the single source of truth of reservations per node, resource and time.

Every scheduling decision is a typed ``Reservation`` (VM, suspension, resumption, migration,
image transfer) in the slot table (Haizea's "one currency"). The table answers

* ``free(node, t1, t2)``: the resource vector free on a node over the whole of [t1, t2);
* ``vms_fit(node, need, t1, t2)``: how many VMs of ``need`` fit there, and ``fits(mapping,
  per_vm, t1, t2)``: do these VMs fit on these nodes;
* ``free_until(node, need, t)``: the first time >= t at which ``need`` stops fitting;
* ``next_change_point()``: the earliest pending reservation start or end (what a simulated clock
  advances to), and ``pop_due(now)`` the starts and ends that are due;

and records every change in an undo log so that a tentative schedule can be rolled back
(``begin()`` / ``commit(tx)`` / ``rollback(tx)``; transactions nest as savepoints).

The table only holds reservations that have not ended: ended ones are removed by the scheduler
and live on in the lease's accounting record. Times are seconds (float).
"""
from __future__ import annotations

import enum
import heapq
import itertools
import math
from dataclasses import dataclass, field

from .model import Lease, Node, vec_add, vec_sub

INF = math.inf


class ResKind(enum.IntEnum):
    """Reservation types; the value orders the handling of simultaneous starts."""
    TRANSFER = 0
    MIGRATE = 1
    RESUME = 2
    VM = 3
    SUSPEND = 4
    HOLD = 5  # memory a lease suspended in place keeps on its nodes (``frozenhold``)
    COPY = 6  # Haizea 1.1's migration rounds (compat mode): time steps only, no resources


class ResState(enum.Enum):
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    DONE = "done"


@dataclass(eq=False)
class Reservation:
    """One reservation: ``kind`` over [start, end) seconds using ``use[node] = vector``.

    VM reservations carry ``mapping`` (node index per VM); transfers carry ``link`` ("ar"/"be"),
    ``image_id``, ``mb``, ``deadline`` (s, AR transfers), ``dest`` (receiving node indices) and
    ``not_before`` (s): the earliest the transfer may end, because its arrival evicts pool images
    that are pinned until then (``ImagePools.add``); EDF never moves it to end earlier.
    A COPY (compat mode: one of Haizea 1.1's migration rounds) carries in ``dest`` the nodes whose
    network the round reserves (rule 18 of ``compat_staging``), in ``link`` what it copies
    ("disk" or "memory") and in ``moves`` its copies as (virtual node, origin, destination)
    (rule 24).
    """
    kind: ResKind
    lease: Lease | None
    start: float
    end: float
    use: dict = field(default_factory=dict)
    mapping: tuple = ()
    link: str = ""
    image_id: str = ""
    mb: float = 0.0
    deadline: float | None = None
    dest: tuple = ()
    not_before: float = -INF
    users: list = field(default_factory=list)  # leases riding on a transfer (piggybacking)
    vnodes: tuple = ()  # compat mode, VM: node per virtual node in Haizea's mapper order (rule 18)
    origins: tuple = ()  # compat mode, COPY: nodes a disk-image round moves the lease away from (rule 22)
    moves: tuple = ()  # compat mode, COPY: (virtual node, origin, destination) per copy (rule 24)
    state: ResState = ResState.SCHEDULED
    id: int = 0
    blocks: dict = field(default_factory=dict, repr=False)  # mapper cache: _block_key(node, need) -> no room left

    def __repr__(self) -> str:
        lid = self.lease.id if self.lease is not None else "-"
        return f"<{self.kind.name} #{self.id} lease={lid} [{self.start:g},{self.end:g}) {self.state.value}>"


class SlotTable:
    """Reservations per node over time, with fit queries and an undo log (see module doc)."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self._by_node: list[list[Reservation]] = [[] for _ in nodes]
        self._res: dict[int, Reservation] = {}
        self._by_lease: dict[int, list[Reservation]] = {}
        self._heap: list = []
        self._ids = itertools.count(1)
        self._seq = itertools.count()
        self._undo: list | None = None
        self._depth = 0
        self._after = 0          # ("after", fn) entries in the undo log (after_commit)
        self.version = 0
        self.shrink_version = 0  # bumped when resources may have been freed (remove / move)
        self.node_version = [0] * len(nodes)
        self.dirty_nodes: set = set(range(len(nodes)))
        self.down: frozenset = frozenset()  # nodes not offered to new reservations (node down)

    def set_down(self, node: int, down: bool) -> bool:
        """Mark ``node`` down (no new reservation fits on it: ``vms_fit`` is 0, the mapper
        offers no slot there) or up again. Existing reservations are kept. Returns whether the
        node's state changed."""
        if (node in self.down) == down:
            return False
        self.down = self.down | {node} if down else self.down - {node}
        self.version += 1
        self.shrink_version += 1
        self.node_version[node] += 1
        self.dirty_nodes.add(node)
        return True

    # ------------------------------------------------------------------ transactions
    def begin(self) -> int:
        """Open a (nested) transaction; returns a token for ``commit``/``rollback``."""
        if self._undo is None:
            self._undo = []
        self._depth += 1
        return len(self._undo)

    def commit(self, tx: int) -> None:
        self._depth -= 1
        if self._depth == 0:
            log, self._undo = self._undo, None
            if self._after:
                self._after = 0
                for entry in log:
                    if entry[0] == "after":
                        entry[1]()

    def rollback(self, tx: int) -> None:
        """Undo every change made since ``begin()`` returned ``tx``."""
        log = self._undo
        while len(log) > tx:
            entry = log.pop()
            op = entry[0]
            if op == "add":
                self._remove(entry[1])
            elif op == "remove":
                self._add(entry[1])
            elif op == "move":
                res, start, end, use = entry[1:]
                self._unindex_nodes(res)
                if use is not res.use:
                    res.blocks = {}
                res.start, res.end, res.use = start, end, use
                self._index_nodes(res)
                self._push(res)
            elif op == "attr":
                setattr(entry[1], entry[2], entry[3])
            elif op == "call":
                entry[1]()
            elif op == "after":
                self._after -= 1
        self.commit(tx)

    def set(self, obj, name: str, value) -> None:
        """Set ``obj.name = value`` so that a rollback restores the old value."""
        if self._undo is not None:
            self._undo.append(("attr", obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def on_rollback(self, undo) -> None:
        """Register ``undo()`` (no arguments) to run if the open transaction is rolled back."""
        if self._undo is not None:
            self._undo.append(("call", undo))

    def after_commit(self, fn) -> None:
        """Run ``fn()`` (no arguments) once the changes made so far are final: at once when no
        transaction is open, else when the outermost one commits (in registration order); never
        if a transaction that encloses this call is rolled back (e.g. an inner placement
        committed, then its enclosing AR rejected). For what must not happen for a tentative
        schedule: the decision log (``decisionlog``)."""
        if self._undo is None:
            fn()
            return
        self._undo.append(("after", fn))
        self._after += 1

    # ------------------------------------------------------------------ changes
    def add(self, res: Reservation) -> Reservation:
        if res.end < res.start:
            raise ValueError(f"reservation ends before it starts: {res}")
        if not res.id:
            res.id = next(self._ids)
        self._add(res)
        if self._undo is not None:
            self._undo.append(("add", res))
        return res

    def remove(self, res: Reservation) -> None:
        if res.id not in self._res:
            return
        self._remove(res)
        if self._undo is not None:
            self._undo.append(("remove", res))

    def move(self, res: Reservation, start: float, end: float, use: dict | None = None) -> None:
        """Change a reservation's interval (and optionally its resource use)."""
        if self._undo is not None:
            self._undo.append(("move", res, res.start, res.end, res.use))
        self._unindex_nodes(res)
        res.start, res.end = start, end
        if use is not None:
            res.use = use
            res.blocks = {}
        self._index_nodes(res)
        self._push(res)

    def _add(self, res: Reservation) -> None:
        self._res[res.id] = res
        self._index_nodes(res)
        for lease in self._leases_of(res):
            self._by_lease.setdefault(lease.id, []).append(res)
        self._push(res)

    def _remove(self, res: Reservation) -> None:
        self._res.pop(res.id, None)
        self._unindex_nodes(res)
        for lease in self._leases_of(res):
            lst = self._by_lease.get(lease.id)
            if lst is not None and res in lst:
                lst.remove(res)
                if not lst:
                    del self._by_lease[lease.id]

    @staticmethod
    def _leases_of(res: Reservation):
        if res.lease is not None:
            yield res.lease

    def _index_nodes(self, res: Reservation) -> None:
        for n in res.use:
            self._by_node[n].append(res)
            self.node_version[n] += 1
            self.dirty_nodes.add(n)
        self.version += 1

    def _unindex_nodes(self, res: Reservation) -> None:
        self.version += 1
        self.shrink_version += 1
        for n in res.use:
            self.node_version[n] += 1
            self.dirty_nodes.add(n)
            lst = self._by_node[n]
            for i, r in enumerate(lst):
                if r is res:
                    del lst[i]
                    break

    def _push(self, res: Reservation) -> None:
        heapq.heappush(self._heap, (res.start, next(self._seq), res))
        heapq.heappush(self._heap, (res.end, next(self._seq), res))

    # ------------------------------------------------------------------ lookups
    def __contains__(self, res: Reservation) -> bool:
        return res.id in self._res

    def __len__(self) -> int:
        return len(self._res)

    def reservations(self) -> list[Reservation]:
        return list(self._res.values())

    def of_lease(self, lease: Lease) -> list[Reservation]:
        return list(self._by_lease.get(lease.id, ()))

    def on_node(self, node: int) -> list[Reservation]:
        return list(self._by_node[node])

    # ------------------------------------------------------------------ fit queries
    def free(self, node: int, t1: float, t2: float) -> tuple:
        """Resource vector free on ``node`` during the whole of [t1, t2)."""
        cap = self.nodes[node].capacity
        ov = [r for r in self._by_node[node] if r.start < t2 and r.end > t1 and r.end > r.start]
        if not ov:
            return cap
        if len(ov) == 1:
            return vec_sub(cap, ov[0].use[node])
        worst = (0, 0, 0, 0)
        for p in {max(r.start, t1) for r in ov}:
            u = (0, 0, 0, 0)
            for r in ov:
                if r.start <= p < r.end:
                    u = vec_add(u, r.use[node])
            worst = (max(worst[0], u[0]), max(worst[1], u[1]), max(worst[2], u[2]), max(worst[3], u[3]))
        return vec_sub(cap, worst)

    def usage_at(self, node: int, t: float) -> tuple:
        """Resource vector in use on ``node`` at instant t."""
        u = (0, 0, 0, 0)
        for r in self._by_node[node]:
            if r.start <= t < r.end:
                u = vec_add(u, r.use[node])
        return u

    def vms_fit(self, node: int, need: tuple, t1: float, t2: float) -> int:
        """How many VMs of resource vector ``need`` fit on ``node`` over [t1, t2) (0 on a
        node that is down)."""
        if node in self.down:
            return 0
        free = self.free(node, t1, t2)
        best = 1_000_000
        for f, n in zip(free, need):
            if n > 0:
                best = min(best, int(f // n) if f > 0 else 0)
        return max(best, 0)

    def fits(self, mapping: tuple, per_vm: tuple, t1: float, t2: float) -> bool:
        """Do VMs of ``per_vm`` placed by ``mapping`` (node index per VM) fit over [t1, t2)?"""
        counts: dict = {}
        for node in mapping:
            counts[node] = counts.get(node, 0) + 1
        return all(self.vms_fit(node, per_vm, t1, t2) >= k for node, k in counts.items())

    def free_until(self, node: int, need: tuple, t: float) -> float:
        """First time >= t at which ``need`` (a total vector) no longer fits on ``node``.

        Returns t if it does not fit at t (or the node is down), ``inf`` if it fits forever.
        """
        if node in self.down:
            return t
        cap = self.nodes[node].capacity
        lst = [r for r in self._by_node[node] if r.end > t and r.end > r.start]
        points = sorted({t} | {r.start for r in lst if r.start > t})
        for p in points:
            u = need
            for r in lst:
                if r.start <= p < r.end:
                    u = vec_add(u, r.use[node])
            if u[0] > cap[0] or u[1] > cap[1] or u[2] > cap[2] or u[3] > cap[3]:
                return p
        return INF

    def change_points(self, after: float) -> list[float]:
        """Sorted distinct reservation ends (when resources free up) strictly after ``after``."""
        return sorted({r.end for r in self._res.values() if r.end > after and r.use})

    # ------------------------------------------------------------------ time
    def next_change_point(self) -> float:
        """Earliest pending start or end of any reservation (``inf`` if none)."""
        heap = self._heap
        while heap:
            t, _, res = heap[0]
            if self._pending(t, res):
                return t
            heapq.heappop(heap)
        return INF

    def _pending(self, t: float, res: Reservation) -> bool:
        if res.id not in self._res:
            return False
        if res.state is ResState.SCHEDULED:
            return t == res.start
        if res.state is ResState.ACTIVE:
            return t == res.end
        return False

    def pop_due(self, now: float) -> list[tuple]:
        """Pending transitions at or before ``now``: ``[(time, is_start, res)]`` ends first.

        A reservation that is due to start is returned as a start; its end becomes pending
        once the scheduler marks it active.
        """
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            t, _, res = heapq.heappop(heap)
            if self._pending(t, res):
                out.append((t, res.state is ResState.SCHEDULED, res))
        out.sort(key=lambda e: (e[0], e[1], e[2].kind, e[2].id))
        seen = set()
        uniq = []
        for e in out:
            key = (e[2].id, e[1])
            if key not in seen:
                seen.add(key)
                uniq.append(e)
        return uniq

    def repush(self, res: Reservation) -> None:
        """Make a reservation's start/end pending again after a state change."""
        self._push(res)
