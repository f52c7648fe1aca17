"""Candidate sets for a local request: seed 002 eq. (1)-(2), enumerated with pruning.

A candidate set C_m (eq. (1)) is a set of external (p(L) = 1), preemptable leases whose VMs
together cover what the local request R_j is missing: ``need`` = v(R_j) minus the VMs of R_j
that already fit without preemption. A = {C_0 .. C_(S-1)} (eq. (2)) is every such set.

Only *minimal* sets are enumerated: dropping any member would leave fewer than ``need`` VMs.
A superset of a candidate set frees nothing the request needs and costs at least as much
overhead and at least as many leases, so no policy of seed 002 Section 6 can prefer it.

Enumeration order (it is the tie-break of every policy, as in Algorithm 1's strict ``<``): the
leases are ranked by overhead per VM, h(L) / v(L) (eq. (7)-(8)), then by lease id; sets come
out in the lexicographic order of their members' ranks (a depth-first search that adds leases
in rank order). The first set found is the greedy "cheapest VMs first" choice.

Pruning and the bound: only the ``max_leases`` best-ranked leases are used; a branch stops
as soon as its VMs reach ``need`` (a minimal set is recorded or the branch is not minimal) or
when all the leases after it cannot reach ``need``. The search stops after ``max_sets`` sets
(or 20 x ``max_sets`` search nodes); then ``complete`` is False and, over *all* the leases,
the least-overhead cover (MOV's optimum, by dynamic programming), the largest-leases-first set
(MLIP's optimum) and the cheapest-VMs-first set are added, made minimal, so MOV and MLIP still
find their optimum. Cost: O(max_sets x max_leases + leases x need).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """One preemptable lease: ``vms`` v(L) (eq. (1)), ``overhead_s`` h(L) (s), ``started``
    (its VMs run; False: a reservation waiting in the queue), ``memory_mb`` (all its VMs)."""
    lease: object
    vms: int
    overhead_s: float
    started: bool = True
    memory_mb: float = 0.0

    @property
    def id(self) -> int:
        return self.lease.id

    @property
    def per_vm_overhead(self) -> float:
        return self.overhead_s / self.vms


@dataclass(frozen=True)
class CandidateSet:
    """C_m: its ``members`` (in rank order) and ``order`` m (enumeration index)."""
    members: tuple
    order: int

    @property
    def ids(self) -> tuple:
        return tuple(c.id for c in self.members)

    @property
    def leases(self) -> list:
        return [c.lease for c in self.members]

    @property
    def size(self) -> int:
        """|C_m|, the number of leases involved (eq. (10))."""
        return len(self.members)

    @property
    def vms(self) -> int:
        """sum of v(L_i) over C_m (eq. (1))."""
        return sum(c.vms for c in self.members)

    @property
    def overhead_s(self) -> float:
        """h(C_m) = sum of h(L_i) over C_m, in s (eq. (9))."""
        return sum(c.overhead_s for c in self.members)

    @property
    def memory_mb(self) -> float:
        return sum(c.memory_mb for c in self.members)


def rank(candidates) -> list:
    """Candidates in enumeration rank: overhead per VM (rounded to 1e-9 s), then lease id."""
    return sorted(candidates, key=lambda c: (round(c.per_vm_overhead, 9), c.id))


def _minimal(members: list, need: int) -> list:
    """Drop members (the most expensive per VM first) while the rest still covers ``need``."""
    kept = list(members)
    for c in sorted(members, key=lambda c: (-c.per_vm_overhead, -c.id)):
        if sum(x.vms for x in kept) - c.vms >= need:
            kept.remove(c)
    return kept


def min_overhead_cover(candidates: list, need: int, max_cells: int = 2_000_000) -> list | None:
    """The set of least total overhead covering ``need`` VMs (MOV's optimum, eq. (9)), by
    dynamic programming over the VMs covered so far (capped at ``need``): O(len x need). None
    when nothing covers ``need`` or len x need > ``max_cells`` (then it is not computed)."""
    n = len(candidates)
    if need <= 0 or n * need > max_cells:
        return None
    inf = float("inf")
    best = [0.0] + [inf] * need
    took = []  # took[i][k]: candidate i is in the best cover of k VMs after i was considered
    for c in candidates:
        row = bytearray(need + 1)
        for k in range(need, 0, -1):
            cost = best[max(0, k - c.vms)] + c.overhead_s
            if cost < best[k]:
                best[k], row[k] = cost, 1
        took.append(row)
    if best[need] == inf:
        return None
    chosen, k = [], need
    for i in range(n - 1, -1, -1):
        if k > 0 and took[i][k]:
            chosen.append(candidates[i])
            k = max(0, k - candidates[i].vms)
    return chosen


def greedy_sets(ranked: list, need: int) -> list[list]:
    """The greedy choices: cheapest VMs first (rank order), largest leases first (most VMs,
    then rank; the fewest leases, MLIP's optimum) and the least-overhead cover
    (``min_overhead_cover``, MOV's optimum), each made minimal; [] when all leases together do
    not cover ``need``."""
    out = []
    cover = min_overhead_cover(ranked, need)
    if cover is not None:
        out.append(_minimal(cover, need))
    for order in (ranked, sorted(ranked, key=lambda c: -c.vms)):
        picked, total = [], 0
        for c in order:
            if total >= need:
                break
            picked.append(c)
            total += c.vms
        if total >= need:
            out.append(_minimal(picked, need))
    return out


def enumerate_candidate_sets(candidates, need: int, max_sets: int = 10000,
                             max_leases: int = 40) -> tuple[list[CandidateSet], bool]:
    """A (eq. (2)): the minimal candidate sets covering ``need`` VMs, in enumeration order, and
    whether the enumeration was complete (see module doc). ``need`` <= 0 gives ([], True): no
    preemption is needed. ValueError if ``max_sets`` or ``max_leases`` < 1."""
    if max_sets < 1 or max_leases < 1:
        raise ValueError("max_sets and max_leases must be >= 1")
    if need <= 0:
        return [], True
    ranked = rank(candidates)
    complete = len(ranked) <= max_leases
    pool = ranked[:max_leases]
    suffix = [0] * (len(pool) + 1)
    for i in range(len(pool) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + pool[i].vms
    found: list[tuple] = []
    budget = [20 * max_sets]
    stack: list = []

    def dfs(start: int, total: int, smallest: int) -> bool:
        for j in range(start, len(pool)):
            if len(found) >= max_sets or budget[0] <= 0:
                return False
            if total + suffix[j] < need:
                return True
            budget[0] -= 1
            c = pool[j]
            new_total, new_small = total + c.vms, min(smallest, c.vms)
            if new_total >= need:
                if new_total - new_small < need:
                    found.append(tuple(stack) + (c,))
                continue
            stack.append(c)
            ok = dfs(j + 1, new_total, new_small)
            stack.pop()
            if not ok:
                return False
        return True

    if not dfs(0, 0, 1 << 60):
        complete = False
    if not complete:
        seen = {tuple(c.id for c in s) for s in found}
        for g in greedy_sets(ranked, need):
            members = tuple(rank(g))
            if tuple(c.id for c in members) not in seen:
                seen.add(tuple(c.id for c in members))
                found.append(members)
    return [CandidateSet(m, i) for i, m in enumerate(found)], complete
