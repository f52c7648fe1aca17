"""Selection policies of the matchmaker: SFETE, Max Rank and Fuzzy Rank.

The matchmaker first filters CEs by the job's ``Requirements`` (the filtering phase of the gLite
WMS, seed 004 Section 3.2); these policies implement the selection phase over the survivors.
Every policy scores candidates (higher is better) and picks one, breaking ties at random with the
``random.Random`` passed in, so simulations are reproducible with a seed.

Used by the live broker and by the grid simulator alike (one code path).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: Default benchmark when a CE publishes no GlueHostBenchmarkSI00 (SpecInt2000 of one CPU).
DEFAULT_SI00 = 1000


@dataclass(frozen=True)
class Candidate:
    """One CE that satisfied the job's Requirements.

    ``n_jobs`` is N_j: the CE's published GlueCEStateTotalJobs (running + waiting) plus the jobs
    the broker dispatched to it since the last ISM refresh (the feedback counter, seed 004
    Section 4.2). ``capacity`` is C_j (SI00 x CPUs by default, see :func:`ce_capacity`).
    ``rank`` is the job's Rank evaluated against the CE ad, or None when undefined/error.
    ``sfete`` is (N_j + 1) / C_j (:func:`sfete_rank`), computed from ``n_jobs`` and
    ``capacity`` when not given; +inf for a CE of capacity 0.
    """

    ce_id: str
    ad: Mapping[str, Any]
    rank: float | None
    n_jobs: int
    capacity: float
    sfete: float | None = None

    def __post_init__(self) -> None:
        if self.sfete is None:
            object.__setattr__(self, "sfete", sfete_score(self.n_jobs, 0, self.capacity))


def sfete_rank(published_jobs: int, dispatched_since_refresh: int, capacity: float) -> float:
    """Simple fair execution time estimate of one more job on a CE, up to the job's workload.

    Returns (N_j + 1) / C_j where N_j = published jobs + jobs dispatched since the last ISM
    refresh; lower is better. ``capacity`` is C_j in the CE's capacity unit (SI00 x CPUs by
    default) and must be > 0, else ValueError. Source: seed 004, eq. (1) and Section 4.2.
    The formula itself is :func:`sfete_score`'s.
    """
    if not capacity > 0:
        raise ValueError(f"SFETE needs a CE capacity > 0, got {capacity!r}")
    return sfete_score(published_jobs, dispatched_since_refresh, capacity)


def sfete_score(published_jobs: int, dispatched_since_refresh: int, capacity: float) -> float:
    """:func:`sfete_rank`, (N_j + 1) / C_j, as the selection compares it: +inf for a CE of
    capacity C_j <= 0 (or NaN), so that it is chosen only when no candidate has capacity;
    never raises. Source: seed 004, eq. (1) and Section 4.2. The one implementation:
    :class:`Candidate` (hence SFETE selection, list-match and the grid simulator), the
    matchmaker's groups, the task queues and :class:`broker.sfete_order.SfeteOrder`.
    """
    if capacity > 0:
        return (published_jobs + dispatched_since_refresh + 1) / capacity
    return math.inf


def cpu_capacity(total_cpus: float, si00: float) -> float:
    """C_j = CPUs x SpecInt2000 of one CPU (SI00), negatives counted as 0.

    Source: seed 004 Section 4.2. Used by :func:`ce_capacity` (CE ads) and by the grid
    simulator's CE specs (``broker.gridsim.model.CESpec.capacity``).
    """
    return max(0.0, total_cpus) * max(0.0, si00)


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value)


def ad_value(ad: Mapping[str, Any], name: str) -> Any:
    """Attribute ``name`` of a CE ad, exact spelling first, else case-insensitively; None if absent."""
    if name in ad:
        return ad[name]
    low = name.lower()
    for k, v in ad.items():
        if k.lower() == low:
            return v
    return None


def ce_capacity(ad: Mapping[str, Any]) -> float:
    """C_j of a CE ad: GlueCEInfoTotalCPUs x GlueHostBenchmarkSI00 (seed 004 Section 4.2).

    Keys are looked up case-insensitively. A missing benchmark counts as
    :data:`DEFAULT_SI00`; a CE with no CPUs has capacity 0 (and can never be chosen by SFETE).
    """
    cpus = _number(ad_value(ad, "GlueCEInfoTotalCPUs"), 0.0)
    si00 = _number(ad_value(ad, "GlueHostBenchmarkSI00"), DEFAULT_SI00)
    return cpu_capacity(cpus, si00)


def published_jobs(ad: Mapping[str, Any]) -> int:
    """GlueCEStateTotalJobs of a CE ad, or running + waiting when TotalJobs is not published."""
    total = ad_value(ad, "GlueCEStateTotalJobs")
    if isinstance(total, int) and not isinstance(total, bool):
        return total
    running = _number(ad_value(ad, "GlueCEStateRunningJobs"), 0)
    waiting = _number(ad_value(ad, "GlueCEStateWaitingJobs"), 0)
    return int(running + waiting)


def _argmax_random(scores: Sequence[float], rng: random.Random) -> int:
    best = max(scores)
    ties = [i for i, s in enumerate(scores) if s == best]
    return ties[0] if len(ties) == 1 else rng.choice(ties)


class SelectionPolicy:
    """Base class: ``scores(candidates)`` (higher is better) and ``select(candidates, rng)``."""

    name = "base"

    def scores(self, candidates: Sequence[Candidate]) -> list[float]:
        raise NotImplementedError

    def select(self, candidates: Sequence[Candidate], rng: random.Random) -> Candidate:
        """The chosen candidate; ValueError when there is none to choose from."""
        if not candidates:
            raise ValueError("no candidate CE to select from")
        return candidates[_argmax_random(self.scores(candidates), rng)]


class SfeteSelection(SelectionPolicy):
    """SFETE: the CE with minimum (N_j + 1) / C_j, ties at random (seed 004 Algorithm 1).

    CEs with capacity 0 score -inf (never chosen while another CE has capacity).
    """

    name = "sfete"

    def scores(self, candidates: Sequence[Candidate]) -> list[float]:
        return [-c.sfete for c in candidates]


class MaxRankSelection(SelectionPolicy):
    """gLite Max Rank: the CE maximising the job's Rank, ties at random (seed 004 Section 3.2).

    A candidate whose Rank is undefined scores -inf.
    """

    name = "max"

    def scores(self, candidates: Sequence[Candidate]) -> list[float]:
        return [c.rank if c.rank is not None else -math.inf for c in candidates]


class FuzzyRankSelection(SelectionPolicy):
    """gLite Fuzzy Rank: pick CE i with probability proportional to
    atan(FuzzyFactor * (r_i - mean r)) + pi/2 (seed 004 Section 3.2; gLite WMS matchmaker).

    Candidates with undefined Rank get weight 0 unless every rank is undefined (then uniform).
    ``fuzzy_factor`` is dimensionless, > 0.
    """

    name = "fuzzy"

    def __init__(self, fuzzy_factor: float = 1.0) -> None:
        if not fuzzy_factor > 0:
            raise ValueError(f"fuzzy_factor must be > 0, got {fuzzy_factor!r}")
        self.fuzzy_factor = fuzzy_factor

    def scores(self, candidates: Sequence[Candidate]) -> list[float]:
        ranks = [c.rank for c in candidates if c.rank is not None]
        if not ranks:
            return [1.0] * len(candidates)
        mean = sum(ranks) / len(ranks)
        return [math.atan(self.fuzzy_factor * (c.rank - mean)) + math.pi / 2
                if c.rank is not None else 0.0 for c in candidates]

    def select(self, candidates: Sequence[Candidate], rng: random.Random) -> Candidate:
        if not candidates:
            raise ValueError("no candidate CE to select from")
        weights = self.scores(candidates)
        if sum(weights) <= 0:
            return candidates[rng.randrange(len(candidates))]
        return rng.choices(list(candidates), weights=weights, k=1)[0]


POLICIES: dict[str, type[SelectionPolicy]] = {
    "sfete": SfeteSelection,
    "max": MaxRankSelection,
    "fuzzy": FuzzyRankSelection,
}


def policy_by_name(name: str, **options: Any) -> SelectionPolicy:
    """The policy called ``name`` ("sfete", "max" or "fuzzy"); ValueError naming the choices."""
    try:
        cls = POLICIES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown selection policy {name!r}; choose one of {', '.join(POLICIES)}") from None
    return cls(**options)
