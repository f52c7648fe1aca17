"""Class filtering by projection (issue 12, session 7): one evaluation per distinct projection
of the ads gives the rows per-ad evaluation gives.

Random CE ads whose attribute values collide across types (1, 1.0, True, "1", 0.0 and -0.0,
lists, nested records, missing attributes, keys spelled in other cases) and JDLs that read the ad in every way the evaluator allows (other./target.,
job attributes reached unscoped, through my./self./absolute references, gang matching,
a bare ``other``, ``eval``): :func:`broker.class_filter.filter_class` must return exactly the
rows of a direct ``jdl.matches`` / ``jdl.rank_value`` loop, and :func:`ad_reads` must refuse
what it cannot bound.
"""
import math

from hypothesis import HealthCheck, given, settings, strategies as st

import jdl as jdlmod
from broker import class_filter
from broker.class_filter import RANK_LATER, SnapshotIndex, filter_class
from broker.matchmaker import _ad_facts, acl_rules, rules_allow
from broker.projection import ad_reads, canonical

JDLS = [
    'Requirements = other.A > 1; Rank = other.B;',
    'Requirements = other.a == 1 && other.B >= 0; Rank = -other.b * 2;',
    'Requirements = target.A =?= 1.0; Rank = other.C;',
    'Requirements = other.A is true || other.C == "1"; Rank = other.A + other.B;',
    'Requirements = other.B > Min; Min = other.A; Rank = my.R; R = other.C;',
    'Requirements = self.Q; Q = other.A != undefined; Rank = .R; R = other.B / 2;',
    'Requirements = member(1, other.L); Rank = size(other.L);',
    'Requirements = anyMatch(other.N, x > 0); Rank = other.N.x;',
    'Requirements = other.N.x == 1 || other.A < 0; Rank = 1.0 / other.B;',
    'Requirements = isList(other); Rank = 0;',
    'Requirements = eval("other.A > 0"); Rank = other.A;',
    'Requirements = true; Rank = other.Missing;',
    'Requirements = other.B == 0 && 1 / other.B < 0; Rank = other.B;',
    'Requirements = other.A && other.B; Rank = 0;',
    'Requirements = other.B >= 0 && (other.C && other.A < 2) && Flag; Flag = other.N.x; Rank = other.C;',
    'Requirements = other.A == undefined && other.B is undefined || other.C; Rank = 1;',
]
VALUES = st.sampled_from([0, 1, 2, 1.0, 0.0, -0.0, True, False, "1", "a", None, [1, 2], [1.0],
                          [], {"x": 1}, {"X": 1.0}, {"x": 0}])


@st.composite
def ce_ads(draw):
    n = draw(st.integers(1, 25))
    ads = []
    for i in range(n):
        ad = {"GlueCEUniqueID": f"ce{i}"}
        for name in ("A", "B", "C", "L", "N"):
            v = draw(VALUES)
            if v is not None:
                ad[draw(st.sampled_from([name, name.lower()]))] = v
        if draw(st.booleans()):
            ad["GlueCEAccessControlBaseRule"] = draw(st.sampled_from([["VO:dteam"], ["VO:atlas"], []]))
        ads.append(ad)
    return tuple(ads)


def direct(job, ads, blacklist, vo):
    rows = []
    for ad in ads:
        has_id, acl, published, capacity = _ad_facts(ad)
        key = str(ad.get("GlueCEUniqueID"))
        if not has_id or (vo and not rules_allow(acl, vo, None)):
            continue
        if not jdlmod.matches(job, ad, 5.0) or key in blacklist:
            continue
        rows.append((key, jdlmod.rank_value(job, ad, 5.0)))
    return rows


def same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ce_ads(), st.lists(st.integers(0, len(JDLS) - 1), min_size=1, max_size=4),
       st.sampled_from([None, "dteam"]), st.sets(st.integers(0, 24), max_size=3), st.booleans(),
       st.sampled_from([0, 13, None]))
def test_projection_filter_equals_per_ad_evaluation(ads, which, vo, black, want_rank, split_ratio):
    """split_ratio: 0 never splits Requirements into conjuncts, None splits whenever it can."""
    class_filter.SPLIT_COST_RATIO = split_ratio
    try:
        index = SnapshotIndex(ads, _ad_facts)    # shared by the classes, as on one snapshot
        blacklist = frozenset(f"ce{i}" for i in black)
        for w in which:
            job = jdlmod.parse_jdl(f'[ Executable = "/bin/true"; {JDLS[w]} ]', "t.jdl", local_files=False)
            rows, _ = filter_class(job, index, blacklist, 5.0, lambda rules: not vo or rules_allow(rules, vo, None),
                                   want_rank)
            want = direct(job, ads, blacklist, vo)
            assert [r[0] for r in rows] == [k for k, _ in want]
            if want_rank:
                assert all(same(r[2], rank) for r, (_, rank) in zip(rows, want))
            else:
                assert all(r[2] is RANK_LATER for r in rows)
    finally:
        class_filter.SPLIT_COST_RATIO = 13


def test_reads_are_bounded_only_through_other_dot_name():
    def reads(body):
        job = jdlmod.parse_jdl(f'[ Executable = "/bin/true"; {body} ]', "t.jdl", local_files=False)
        return ad_reads(job.record, job.requirements.node)
    assert reads("Requirements = other.A > M; M = other.B + my.K; K = target.C;") == ("a", "b", "c")
    assert reads("Requirements = isList(other);") is None
    assert reads('Requirements = eval("other.A");') is None
    assert reads("Requirements = other.VGridDispatchedSinceRefresh < 3;") is None
    assert reads("Requirements = true;") == ()


def test_canonical_keeps_what_the_evaluator_tells_apart():
    keys = [canonical(v) for v in (1, 1.0, True, "1", 0.0, -0.0, [1], [1.0], None)]
    assert len(set(keys)) == len(keys)
    assert canonical({"X": 1}) == canonical({"x": 1})


def test_acl_rules_are_evaluated_once_per_distinct_acl():
    ads = tuple({"GlueCEUniqueID": f"ce{i}", "GlueCEAccessControlBaseRule": ["VO:dteam"] if i % 2 else ["VO:cms"],
                 "A": i % 3} for i in range(300))
    index = SnapshotIndex(ads, _ad_facts)
    asked = []
    job = jdlmod.parse_jdl('[ Executable = "/bin/true"; Requirements = other.A > 0; Rank = other.A; ]',
                           "t.jdl", local_files=False)
    rows, evaluations = filter_class(job, index, frozenset(), 0.0,
                                     lambda rules: asked.append(rules) or rules_allow(rules, "dteam", None))
    assert len(asked) == 2 and sorted(asked) == sorted({acl_rules(a) for a in ads})
    assert evaluations <= 3 + 2    # Requirements on A in {0,1,2}, Rank on A in {1,2}
    assert [r[0] for r in rows] == [f"ce{i}" for i in range(300) if i % 2 and i % 3]
