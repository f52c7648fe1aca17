"""Preemption policies of seed 002 Section 6: they score candidate sets, the scheduler sorts.

``policy.scores(sets)`` returns one score per candidate set (lower = preempt first; None =
never) -- the scheduler tries the sets in score order and preempts the first whose leases,
once preempted, really make room for the local request. Every score ends with the set's
enumeration index m, so ties go to the set enumerated first (``candidates``: cheapest VMs
first), as Algorithm 1's strict ``<`` does. Overheads are compared rounded to 1 microsecond.

* ``nop`` -- NOP: no preemption (every score None); a local request that does not fit is
  rejected (the baseline of Section 7.3.1 and 8.3).
* ``mov`` -- MOV, eq. (9): the set with the minimum overhead h(C_m).
* ``mlip`` -- MLIP, eq. (10): the set with the fewest leases |C_m|; among those, the set that
  frees the most VMs (the largest-leases-first choice; derived from Table III, where MLIP
  preempts {1, 6} with 6 VMs rather than another two-lease set with 5).
* ``moml`` -- MOML, Algorithm 1: alpha = the median of the sets' overheads; among the sets
  with h(C_m) <= alpha the one with the fewest leases (sets above alpha come after all of them).
"""
from __future__ import annotations

import statistics

from .config import ConfigError


def _h(cset) -> float:
    return round(cset.overhead_s, 6)


class CandidateSetPolicy:
    """Base class: ``name``, ``preempts`` and ``scores(sets) -> list[tuple | None]``."""

    name = ""
    preempts = True

    def scores(self, sets: list) -> list:
        raise NotImplementedError

    def choose(self, sets: list):
        """policy(A) = C_m (seed 002 Section 2.1): the best-scored set, or None."""
        scored = [(s, c) for s, c in zip(self.scores(sets), sets) if s is not None]
        return min(scored, key=lambda x: x[0])[1] if scored else None


class NOP(CandidateSetPolicy):
    """No preemption: every score is None."""
    name = "nop"
    preempts = False

    def scores(self, sets: list) -> list:
        return [None] * len(sets)


class MOV(CandidateSetPolicy):
    """Minimum overhead, seed 002 eq. (9): score (h(C_m), m)."""
    name = "mov"

    def scores(self, sets: list) -> list:
        return [(_h(c), c.order) for c in sets]


class MLIP(CandidateSetPolicy):
    """Minimum leases involved, seed 002 eq. (10): score (|C_m|, -VMs freed, m)."""
    name = "mlip"

    def scores(self, sets: list) -> list:
        return [(c.size, -c.vms, c.order) for c in sets]


class MOML(CandidateSetPolicy):
    """Minimum overhead minimum lease, seed 002 Algorithm 1 (alpha = median of overheads):
    score (0 if h(C_m) <= alpha else 1, |C_m|, m)."""
    name = "moml"

    @staticmethod
    def alpha(sets: list) -> float:
        """The median of the candidate sets' overheads (Algorithm 1, lines 1-4), in s."""
        return statistics.median(_h(c) for c in sets)

    def scores(self, sets: list) -> list:
        if not sets:
            return []
        alpha = self.alpha(sets)
        return [(0 if _h(c) <= alpha else 1, c.size, c.order) for c in sets]


POLICIES = {p.name: p for p in (NOP, MOV, MLIP, MOML)}


def candidate_set_policy(name: str) -> CandidateSetPolicy:
    """The seed 002 policy ``policy-preemption = name``; ConfigError for another name."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise ConfigError(f"[scheduling] policy-preemption = {name!r}; expected one of "
                          f"{', '.join(POLICIES)}") from None
