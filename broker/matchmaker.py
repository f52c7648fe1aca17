"""The matchmaker: filtering CEs by ``Requirements``, then selection (seed 004 Section 3.2).

Filtering keeps the CE ads of the ISM snapshot whose evaluation of the job's ``Requirements``
(with ``other.`` bound to the CE ad) is exactly true, and, when the job names a
``VirtualOrganisation``, whose ``GlueCEAccessControlBaseRule`` admits that VO (as the gLite WMS
adds to every job's requirements). Selection is a :mod:`broker.selection` policy:

- ``FeteRank = true`` in the JDL, or the broker's default policy "sfete" when the JDL says
  nothing: SFETE, minimum (N_j + 1) / C_j with N_j = published jobs + feedback counter
  (seed 004 eq. (1) and Section 4.2);
- ``FuzzyRank = true``: Fuzzy Rank over the job's Rank;
- ``FeteRank = false`` (or default policy "max"): Max Rank over the job's Rank.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import jdl as jdlmod
from infosys.ism import ad_id

from .selection import (Candidate, FuzzyRankSelection, MaxRankSelection, SelectionPolicy,
                        SfeteSelection, ad_value, ce_capacity, published_jobs)

CE_ID = "GlueCEUniqueID"


def vo_allowed(ad: Mapping[str, Any], vo: str | None) -> bool:
    """True when ``vo`` is None or the CE's access control base rules contain ``VO:<vo>``."""
    if not vo:
        return True
    rules = ad_value(ad, "GlueCEAccessControlBaseRule")
    if rules is None:
        return False
    if isinstance(rules, str):
        rules = [rules]
    want = {f"vo:{vo}".lower(), f"voms:/{vo}".lower()}
    return any(str(r).lower() in want or str(r).lower().startswith(f"voms:/{vo.lower()}/") for r in rules)


@dataclass(frozen=True)
class MatchResult:
    """Outcome of matching one job: the candidates (after filtering) and the policy used."""

    candidates: list[Candidate]
    policy: SelectionPolicy

    def to_json(self) -> dict[str, Any]:
        """``{"policy", "ces": [{"id", "rank", "sfete", "n_j", "capacity"}]}``, best first."""
        return {"policy": self.policy.name, "ces": [
            {"id": c.ce_id, "rank": c.rank,
             "sfete": (c.n_jobs + 1) / c.capacity if c.capacity > 0 else None,
             "n_j": c.n_jobs, "capacity": c.capacity} for c in self.ranked()]}

    def ranked(self) -> list[Candidate]:
        """Candidates best first, by the policy's score (ties keep ISM order)."""
        scores = self.policy.scores(self.candidates)
        order = sorted(range(len(self.candidates)), key=lambda i: -scores[i])
        return [self.candidates[i] for i in order]


class Matchmaker:
    """Filters and selects CEs for jobs. ``default_policy`` is "sfete", "max" or "fuzzy".

    ``feedback`` is any object with ``get(ce_id) -> int`` (infosys.feedback.FeedbackCounters).
    ``rng`` is a ``random.Random`` used for tie-breaks and Fuzzy Rank draws.
    """

    def __init__(self, feedback, default_policy: str = "sfete", fuzzy_factor: float = 1.0,
                 rng: random.Random | None = None) -> None:
        self.feedback = feedback
        self.rng = rng or random.Random()
        self._policies = {"sfete": SfeteSelection(), "max": MaxRankSelection(),
                          "fuzzy": FuzzyRankSelection(fuzzy_factor)}
        if default_policy not in self._policies:
            raise ValueError(f"unknown selection policy {default_policy!r}; choose sfete, max or fuzzy")
        self.default_policy = default_policy

    def policy_for(self, job: "jdlmod.JobDescription") -> SelectionPolicy:
        """The selection policy the job asks for (FeteRank / FuzzyRank), else the default."""
        fete = job.fete_rank
        if fete is True:
            return self._policies["sfete"]
        if job.fuzzy_rank:
            return self._policies["fuzzy"]
        if fete is False:
            return self._policies["max"]
        return self._policies[self.default_policy]

    def match(self, job: "jdlmod.JobDescription", ads: Sequence[Mapping[str, Any]],
              blacklist: frozenset[str] = frozenset(), *, now: float) -> MatchResult:
        """Filter ``ads`` for ``job`` and build the candidates; nothing is chosen yet.

        ``now``: the broker's ``clock.now()`` in seconds, what ``time()`` in the JDL returns."""
        vo = job.virtual_organisation
        candidates = []
        for ad in ads:
            if not isinstance(ad_value(ad, CE_ID), str):
                continue
            ce_id = getattr(ad, "key", None) or ad_id(ad)  # CE id, or CE/VO-view key
            if ce_id in blacklist:
                continue
            if not vo_allowed(ad, vo) or not jdlmod.matches(job, ad, now):
                continue
            candidates.append(Candidate(
                ce_id=ce_id, ad=ad, rank=jdlmod.rank_value(job, ad, now),
                n_jobs=published_jobs(ad) + self.feedback.get(ce_id), capacity=ce_capacity(ad)))
        return MatchResult(candidates, self.policy_for(job))

    def select(self, result: MatchResult) -> Candidate | None:
        """The chosen CE, or None when no CE matched."""
        if not result.candidates:
            return None
        return result.policy.select(result.candidates, self.rng)
