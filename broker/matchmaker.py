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

Identical JDLs are grouped per ISM snapshot: the Requirements, VO rule and Rank of one JDL
text are evaluated once per ad of a snapshot (and reused across snapshots for ads that did not
change: the ISM keeps an unchanged ad's dict); later jobs with the same text only see their
N_j updated from the feedback counters. The live broker and the grid simulator both get this.
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping, Sequence

import jdl as jdlmod
from infosys.ism import DISPATCHED, ad_id

from .class_filter import SnapshotIndex, filter_class
from .selection import (Candidate, FuzzyRankSelection, MaxRankSelection, SelectionPolicy,
                        SfeteSelection, ad_value, ce_capacity, published_jobs, sfete_score)

CE_ID = "GlueCEUniqueID"

#: At most this many distinct JDL texts are grouped per snapshot (then the groups restart).
MAX_GROUPS = 256


def vo_allowed(ad: Mapping[str, Any], vo: str | None, fqans: tuple[str, ...] | None = None) -> bool:
    """Whether the CE's ``GlueCEAccessControlBaseRule`` values admit a job of ``vo``.

    With the owner's verified ``fqans`` (gLite semantics): ``VO:<vo>`` admits every member,
    ``VOMS:<fqan>`` only holders of that FQAN (``VOMS:/dteam`` = the VO's root group). Without
    them (the VO comes from the JDL: plain-HTTP mode, the simulator) a ``VOMS:/<vo>...`` rule
    admits the VO too. True when ``vo`` is None. Source: GLUE 1.3 (AccessControlBaseRule),
    gLite WMS matchmaking."""
    if not vo:
        return True
    return rules_allow(acl_rules(ad), vo, None if fqans is None else tuple(fqans))   # hashable: memoized


def acl_rules(ad: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The CE's ``GlueCEAccessControlBaseRule`` values lower-cased (None: none published)."""
    rules = ad_value(ad, "GlueCEAccessControlBaseRule")
    if rules is None:
        return None
    return tuple(str(r).lower() for r in ([rules] if isinstance(rules, str) else rules))


def _ad_facts(ad: Mapping[str, Any]) -> tuple:
    """What the filtering reads of an ad whatever the job: (has a string CE id, ACL rules,
    published jobs, C_j); both filtering paths (``Matchmaker._filter`` and
    :class:`broker.class_filter.SnapshotIndex`) take them from here."""
    raw = getattr(ad, "ad", ad)
    return (isinstance(ad_value(ad, CE_ID), str), acl_rules(ad), published_jobs(raw), ce_capacity(raw))


@lru_cache(maxsize=8192)
def rules_allow(rules: tuple[str, ...] | None, vo: str | None, fqans: tuple[str, ...] | None = None) -> bool:
    """:func:`vo_allowed` over rules already lower-cased by :func:`acl_rules`. Memoized (a
    pure function of hashable arguments): a class filtered against N CEs asks it N times for
    a handful of distinct ACLs."""
    if not vo:
        return True
    if rules is None:
        return False
    if f"vo:{vo}".lower() in rules:
        return True
    if fqans is not None:
        held = {f"voms:{f}".lower() for f in fqans}
        return any(r in held for r in rules)
    return any(r == f"voms:/{vo.lower()}" or r.startswith(f"voms:/{vo.lower()}/") for r in rules)


@dataclass(frozen=True)
class MatchResult:
    """Outcome of matching one job: the candidates (after filtering) and the policy used."""

    candidates: list[Candidate]
    policy: SelectionPolicy

    def to_json(self) -> dict[str, Any]:
        """``{"policy", "ces": [{"id", "rank", "sfete", "n_j", "capacity"}]}``, best first."""
        return {"policy": self.policy.name, "ces": [
            {"id": c.ce_id, "rank": c.rank,
             "sfete": c.sfete if c.capacity > 0 else None,
             "n_j": c.n_jobs, "capacity": c.capacity} for c in self.ranked()]}

    def ranked(self) -> list[Candidate]:
        """Candidates best first, by the policy's score (ties keep ISM order)."""
        scores = self.policy.scores(self.candidates)
        order = sorted(range(len(self.candidates)), key=lambda i: -scores[i])
        return [self.candidates[i] for i in order]


def _reusable(text: str) -> bool:
    """Whether one evaluation of a JDL's expressions per ad may serve every job with that text:
    not when they may call time() (the answer changes with the clock)."""
    return "time(" not in text.lower()


class _Group:
    """One JDL text on one ISM snapshot: the ads that pass its Requirements and VO rule, their
    Rank, published jobs and capacity (evaluated once), and the candidates built from them with
    the feedback counts last seen (rebuilt only for the CEs whose count moved)."""

    __slots__ = ("job", "policy", "ids", "index", "ads", "records", "ranks", "published",
                 "capacities", "counts", "version", "candidates", "rank_reads_feedback",
                 "dispatched")

    def __init__(self, job, policy: SelectionPolicy, rank_reads_feedback: bool) -> None:
        self.job, self.policy = job, policy
        self.rank_reads_feedback = rank_reads_feedback
        self.ids: list[str] = []
        self.ads: list = []
        self.records: list[list] = []
        self.ranks: list = []
        self.published: list[int] = []
        self.capacities: list[float] = []
        self.index: dict[str, list[int]] = {}  # CE id -> its positions
        self.counts: list[int] | None = None
        self.version: int | None = None   # feedback.version when counts were read
        self.dispatched: list | None = None
        self.candidates: list[Candidate] = []

    def add(self, ce_id: str, ad, record: list) -> None:
        """Add a matching ad; ``record`` is its memo ``[dict, True, rank, published jobs, C_j,
        last candidate built from it or None]``."""
        self.index.setdefault(ce_id, []).append(len(self.ids))
        self.ids.append(ce_id)
        self.ads.append(ad)
        self.records.append(record)
        self.ranks.append(record[2])
        self.published.append(record[3])
        self.capacities.append(record[4])

    def current(self, feedback, now: float) -> list[Candidate]:
        """The candidates with N_j = published jobs + ``feedback`` count (a fresh list)."""
        stale = self._recount(feedback)
        if self.rank_reads_feedback:
            seen = [ad.get(DISPATCHED) for ad in self.ads]
            moved = self._moved(self.dispatched, seen)
            if moved:  # None on the first call: the ranks were just evaluated
                for i in moved:
                    self.ranks[i] = jdlmod.rank_value(self.job, self.ads[i], now)
                stale = None if stale is None else sorted(set(stale) | set(moved))
            self.dispatched = seen
        counts = self.counts
        if stale is None:
            self.candidates = [self._candidate(i, counts) for i in range(len(self.ids))]
        else:
            for i in stale:
                self.candidates[i] = self._candidate(i, counts)
        return list(self.candidates)

    def _recount(self, feedback) -> list[int] | None:
        """Update ``counts`` from ``feedback``; the indexes whose count moved (None: all).

        Reads only the keys ``feedback.changed_since`` names when it has that change log."""
        version = getattr(feedback, "version", None)
        keys = None
        if self.counts is not None and self.version is not None and version is not None:
            keys = feedback.changed_since(self.version)
        self.version = version
        if keys is None:
            counts = _counts(feedback, self.ids)
            stale = self._moved(self.counts, counts)
            self.counts = counts
            return stale
        stale = []
        for i in sorted({i for k in set(keys) for i in self.index.get(k, ())}):
            n = feedback.get(self.ids[i])
            if n != self.counts[i]:
                self.counts[i] = n
                stale.append(i)
        return stale

    @staticmethod
    def _moved(old: list | None, new: list) -> list[int] | None:
        if old is None:
            return None
        if old == new:
            return []
        return [i for i, (a, b) in enumerate(zip(old, new)) if a != b]

    def _candidate(self, i: int, counts: list[int]) -> Candidate:
        """Candidate i, reusing the one last built from the same ad dict when nothing moved
        (its ``ad`` may then be an earlier snapshot's view of that same dict)."""
        published, dispatched, capacity = self.published[i], counts[i], self.capacities[i]
        record, rank = self.records[i], self.ranks[i]
        last = record[5]
        if last is not None and last.n_jobs == published + dispatched and last.rank == rank \
                and last.ce_id == self.ids[i]:
            return last
        record[5] = last = Candidate(
            self.ids[i], self.ads[i], rank, published + dispatched, capacity,
            sfete_score(published, dispatched, capacity))
        return last


def _counts(feedback, ids: list[str]) -> list[int]:
    counts = getattr(feedback, "counts", None)
    return counts(ids) if counts is not None else [feedback.get(k) for k in ids]


class Matchmaker:
    """Filters and selects CEs for jobs. ``default_policy`` is "sfete", "max" or "fuzzy".

    ``feedback`` is any object with ``get(ce_id) -> int`` (infosys.feedback.FeedbackCounters,
    whose ``counts``, ``version`` and ``changed_since`` are used when present: a job then costs
    O(CEs whose count moved), not O(CEs)): N_j = published jobs + its count.
    ``rng`` is a ``random.Random`` used for tie-breaks and Fuzzy Rank draws. Thread-safe.
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
        self._lock = threading.Lock()
        self._snapshot: tuple | None = None            # (ads, blacklist) the groups belong to
        self._groups: dict[str, _Group] = {}           # JDL text -> its group on that snapshot
        self._facts: dict[int, tuple] = {}             # id(ad) -> (ad, has id, ACL, published, C_j, record)
        self._index: SnapshotIndex | None = None       # the latest ads' facts for filtered()
        self.evaluations = 0                           # Requirements + Rank run by filtered()
        self._memo: dict[str, dict[int, list]] = {}    # JDL text -> id(ad dict) -> its
        #                           [dict, ok, rank, published jobs, C_j, last candidate or None]

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
              blacklist: frozenset[str] = frozenset(), *, now: float, vo: str | None = None,
              fqans: tuple[str, ...] = (), exclude: frozenset[str] | set[str] = frozenset()) -> MatchResult:
        """Filter ``ads`` (an ISM snapshot's ads, e.g. ``ISM.candidates()``, in ISM order) for
        ``job`` and build the candidates in that order; nothing is chosen yet.

        ``now``: the broker's ``clock.now()`` in seconds, what ``time()`` in the JDL returns
        (a JDL that calls ``time()`` is never reused from an earlier evaluation). ``vo`` and
        ``fqans``: the job owner's, from the verified proxy; they decide which CEs admit the job
        (:func:`vo_allowed`) instead of the JDL's VirtualOrganisation.

        ``ads`` and the dicts in it must not be mutated while in use (the ISM's never are): a
        later call with the same ``ads`` object and blacklist reuses the evaluation of the
        same JDL text. Raises nothing for bad ads (they are skipped).

        ``exclude``: CE ids (``GlueCEUniqueID``) left out of this job's candidates, e.g. the CEs
        a resubmitted job failed on (gLite's previous matches); applied after the per-snapshot
        grouping, so jobs with different exclusions still share one evaluation of their JDL.
        """
        text = job.text if vo is None else f"{job.text}\0{vo}\0{chr(0).join(fqans)}"
        reusable = _reusable(job.text)
        with self._lock:
            if self._snapshot is None or self._snapshot[0] is not ads or self._snapshot[1] != blacklist:
                self._snapshot, self._groups = (ads, blacklist), {}
            group = self._groups.get(text) if reusable else None
            if group is None:
                group = self._filter(job, ads, blacklist, reusable, now, text, vo, fqans)
                if reusable:
                    if len(self._groups) >= MAX_GROUPS:
                        self._groups.clear()
                    self._groups[text] = group
            candidates = group.current(self.feedback, now)
        if exclude:
            candidates = [c for c in candidates if ad_value(c.ad, CE_ID) not in exclude]
        return MatchResult(candidates, group.policy)

    def filtered(self, job: "jdlmod.JobDescription", ads: Sequence[Mapping[str, Any]],
                 blacklist: frozenset[str] = frozenset(), *, now: float, vo: str | None = None,
                 fqans: tuple[str, ...] = (), ranks: bool = True) -> list[tuple]:
        """The filtering phase alone (for :mod:`broker.taskqueues`): ``[(key, ad, rank,
        published jobs, C_j)]`` of the ads that pass ``job``'s Requirements and VO rule, in
        ISM order (``key``: the feedback counter's key). Evaluates each expression once per
        distinct projection of the ads (:func:`broker.class_filter.filter_class`; session 7),
        the per-ad facts kept for the latest ``ads`` object. ``ranks`` False: Rank not
        evaluated (``rank`` is :data:`broker.class_filter.RANK_LATER`). ``evaluations`` counts
        the evaluations run."""
        access = (vo, tuple(fqans)) if vo is not None else (job.virtual_organisation, None)
        with self._lock:
            index = self._index
            if index is None or index.ads is not ads:
                index = self._index = SnapshotIndex(ads, _ad_facts)
            rows, n = filter_class(job, index, blacklist, now,
                                   lambda rules: not access[0] or rules_allow(rules, *access), ranks)
            self.evaluations += n
        return rows

    def _filter(self, job, ads, blacklist, reusable: bool, now: float, key: str,
                vo: str | None, fqans: tuple[str, ...]) -> _Group:
        """The Requirements + VO filtering phase, with Rank, for one JDL on ``ads``."""
        rank_reads_feedback = DISPATCHED.lower() in job.text.lower()
        group = _Group(job, self.policy_for(job), rank_reads_feedback)
        memo = self._memo.get(key, {}) if reusable else {}
        seen: dict[int, list] = {}
        access = (vo, tuple(fqans)) if vo is not None else (job.virtual_organisation, None)
        facts = self._facts
        if len(facts) > 2 * len(ads) + 1024:     # at most about one older snapshot kept alive
            facts.clear()
        for ad in ads:
            raw = getattr(ad, "ad", ad)  # an AdView's dict: the same object holds the same data
            rec = memo.get(id(raw))
            if rec is None or rec[0] is not raw:
                # what does not depend on the job, once per ad object (not per class and ad)
                f = facts.get(id(ad))
                if f is None or f[0] is not ad:   # f[5]: the ad as a record, its case index built once
                    f = facts[id(ad)] = (ad, *_ad_facts(ad), jdlmod.as_ad(ad))
                if not f[1]:
                    continue
                ok = (not access[0] or rules_allow(f[2], *access)) and jdlmod.matches(job, f[5], now)
                rec = [raw, ok, jdlmod.rank_value(job, f[5], now) if ok else None, f[3], f[4], None]
            elif rec[1] and rank_reads_feedback:
                rec = [raw, True, jdlmod.rank_value(job, ad, now), rec[3], rec[4], None]
            ce_id = getattr(ad, "key", None) or ad_id(ad)  # CE id, or CE/VO-view key
            if ce_id in blacklist:
                continue
            seen[id(raw)] = rec
            if rec[1]:
                group.add(ce_id, ad, rec)
        if reusable:
            if len(self._memo) >= MAX_GROUPS and key not in self._memo:
                self._memo.clear()
            self._memo[key] = seen
        return group

    def select(self, result: MatchResult) -> Candidate | None:
        """The chosen CE, or None when no CE matched."""
        if not result.candidates:
            return None
        return result.policy.select(result.candidates, self.rng)
