"""The filtering phase of one task queue (class) on one ISM snapshot, one evaluation per distinct
projection of the ads (issue 12, session 7).

:class:`SnapshotIndex` holds, once per snapshot (ads tuple), what does not depend on the job:
each ad's feedback key, record, ACL, published jobs and C_j, and, per tuple of attribute names
read by some class (:func:`broker.projection.ad_reads`), the ads' projections interned as small
integers (:meth:`SnapshotIndex.groups`). :func:`filter_class` then evaluates a class's
Requirements once per distinct projection of its names (the benchmark's 50 classes read the same
four GLUE attributes, which take ~100 distinct value tuples over 10,000 CEs), its VO rule once per
distinct ACL, and its Rank once per distinct projection of the Rank's names among the matching
ads; per ad only list lookups remain. An expression whose reads cannot be bounded (a bare
``other``, ``eval``, the live dispatch counter) or an ad that is not a plain
:class:`jdl.MappingAd` is evaluated per ad, as before.

The rows are exactly what :meth:`broker.matchmaker.Matchmaker.filtered` returned before
(``tests/test_class_filter.py`` compares with per-ad evaluation under hypothesis).
"""
from __future__ import annotations

from typing import Any, Sequence

import jdl as jdlmod
from infosys.ism import ad_id
from jdl import MappingAd, nodes as jn

from .projection import ad_reads, projection

_UNSET = object()
#: Requirements ``a && b && ...`` are evaluated conjunct by conjunct when (whole-expression groups
#: - conjunct groups) x this > ads x (conjuncts - 1): one evaluation (~4 µs) against one lookup
#: per conjunct per ad (~0.3 µs). None: always (the tests use it to exercise both paths).
SPLIT_COST_RATIO: int | None = 13
#: The rank of a row whose Rank was not evaluated (``want_rank`` False: SFETE ignores Rank).
RANK_LATER = object()


class SnapshotIndex:
    """Per-ad facts of one snapshot's ``ads`` (a sequence not mutated while in use).

    ``facts(ad) -> (has a string CE id, ACL rules, published jobs, C_j)`` is supplied by the
    matchmaker (its :func:`acl_rules`, :func:`published_jobs`, :func:`ce_capacity`)."""

    __slots__ = ("ads", "n", "keys", "valid", "records", "published", "capacities",
                 "acl_ids", "acls", "_groups")

    def __init__(self, ads: Sequence, facts) -> None:
        self.ads = ads
        self.n = len(ads)
        self.keys: list[str] = []
        self.valid: list[bool] = []
        self.records: list = []
        self.published: list[int] = []
        self.capacities: list[float] = []
        self.acl_ids: list[int] = []
        self.acls: list = []
        acl_index: dict[Any, int] = {}
        for ad in ads:
            has_id, acl, published, capacity = facts(ad)
            self.keys.append(getattr(ad, "key", None) or ad_id(ad))   # CE id, or CE/VO-view key
            self.valid.append(has_id)
            self.records.append(jdlmod.as_ad(ad))
            self.published.append(published)
            self.capacities.append(capacity)
            a = acl_index.get(acl)
            if a is None:
                a = acl_index[acl] = len(self.acls)
                self.acls.append(acl)
            self.acl_ids.append(a)
        self._groups: dict[tuple[str, ...] | None, tuple[list[int], list[int]]] = {}

    def groups(self, names: tuple[str, ...] | None) -> tuple[list[int], list[int]]:
        """``(group of each ad, first ad of each group)``: ads with equal :func:`projection`
        on ``names`` share a group; ``names`` None (or an ad that is not a plain MappingAd):
        each ad its own group. Computed once per names tuple and snapshot."""
        got = self._groups.get(names)
        if got is not None:
            return got
        if names is None:
            got = (list(range(self.n)), list(range(self.n)))
        else:
            index: dict[Any, int] = {}
            ids: list[int] = []
            firsts: list[int] = []
            for k, rec in enumerate(self.records):
                key = projection(rec, names) if type(rec) is MappingAd else ("ad", k)
                g = index.get(key)
                if g is None:
                    g = index[key] = len(firsts)
                    firsts.append(k)
                ids.append(g)
            got = (ids, firsts)
        self._groups[names] = got
        return got


def filter_class(job: "jdlmod.JobDescription", index: SnapshotIndex, blacklist, now: float,
                 allowed, want_rank: bool = True) -> tuple[list[tuple], int]:
    """``([(key, ad, rank, published jobs, C_j)], evaluations)`` of the ads of ``index`` that
    have a CE id, are not in ``blacklist`` (feedback keys), pass ``allowed(acl rules) -> bool``
    (the VO rule) and ``job``'s Requirements at ``now`` (seconds), in ISM order; ``rank`` is the
    job's Rank (float or None; :data:`RANK_LATER` unless ``want_rank``). ``evaluations``:
    Requirements + Rank evaluations run."""
    records = index.records
    req = job.requirements.node
    req_ids, req_firsts = index.groups(ad_reads(job.record, req))
    parts = _split(job, index, req, len(req_firsts))
    if parts is not None:   # one group per ad of the conjunction: Requirements = and of its parts
        req_ids, req_firsts = list(range(index.n)), list(range(index.n))
    ok: list = [_UNSET] * len(req_firsts)
    acl_ok = [_UNSET] * len(index.acls)
    rank_ids, rank_firsts = index.groups(ad_reads(job.record, job.rank.node) if want_rank else ())
    ranks: list = [_UNSET] * len(rank_firsts)
    evaluations = 0
    rows = []
    keys, valid, acl_ids, ads = index.keys, index.valid, index.acl_ids, index.ads
    for k in range(index.n):
        if not valid[k]:
            continue
        a = acl_ids[k]
        allow = acl_ok[a]
        if allow is _UNSET:
            allow = acl_ok[a] = allowed(index.acls[a])
        if not allow:
            continue
        g = req_ids[k]
        passed = ok[g]
        if passed is _UNSET:
            if parts is None:
                evaluations += 1
                passed = ok[g] = jdlmod.matches(job, records[req_firsts[g]], now)
            else:
                passed, n = _all_parts(job, parts, k, records, now)
                evaluations += n
        if not passed or keys[k] in blacklist:
            continue
        if not want_rank:
            rows.append((keys[k], ads[k], RANK_LATER, index.published[k], index.capacities[k]))
            continue
        r = rank_ids[k]
        rank = ranks[r]
        if rank is _UNSET:
            evaluations += 1
            rank = ranks[r] = jdlmod.rank_value(job, records[rank_firsts[r]], now)
        rows.append((keys[k], ads[k], rank, index.published[k], index.capacities[k]))
    return rows, evaluations


def _conjuncts(node) -> list:
    """The operands of a top-level ``a && b && ...`` (nested ``&&`` flattened), else [node]."""
    out, stack = [], [node]
    while stack:
        x = stack.pop()
        if type(x) is jn.Binary and x.op == "&&":
            stack.append(x.right)
            stack.append(x.left)
        else:
            out.append(x)
    return out


def _true(v) -> bool:
    """Whether ``&&`` takes ``v`` as true (``jdl.operators.to_bool``: True or a non-zero number)."""
    return v is True or ((type(v) is int or type(v) is float) and v != 0)


def _split(job, index: SnapshotIndex, req, whole_groups: int) -> list | None:
    """``[(conjunct, group of each ad, first ad of each group, verdicts)]`` when evaluating
    Requirements' conjuncts on their own projections is cheaper than the whole expression on
    its projection (each distinct whole projection costs one evaluation, ~4 µs; each ad then
    costs a lookup per conjunct, ~0.3 µs), else None. ``a && b && ...`` is true iff every
    operand is true for ``&&`` (:func:`_true`; the operands are pure), so the verdicts combine
    exactly."""
    parts = _conjuncts(req) if type(req) is jn.Binary and req.op == "&&" else [req]
    if len(parts) < 2:
        return None
    grouped = [(p,) + index.groups(ad_reads(job.record, p)) for p in parts]
    part_groups = sum(len(firsts) for _, _, firsts in grouped)
    ratio = SPLIT_COST_RATIO
    if ratio is not None and (whole_groups - part_groups) * ratio <= index.n * (len(parts) - 1):
        return None
    return [(p, ids, firsts, [_UNSET] * len(firsts)) for p, ids, firsts in grouped]


def _all_parts(job, parts: list, k: int, records, now: float) -> tuple[bool, int]:
    """Whether ad ``k`` passes every conjunct (verdicts memoized per conjunct group); the
    evaluations run."""
    n = 0
    for node, ids, firsts, verdicts in parts:
        g = ids[k]
        v = verdicts[g]
        if v is _UNSET:
            n += 1
            v = verdicts[g] = _true(jdlmod.evaluate(node, job.ad, records[firsts[g]], now))
        if not v:
            return False, n
    return True, n
