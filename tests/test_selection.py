"""Selection policies: SFETE, Max Rank, Fuzzy Rank (seed 004 Sections 3.2, 4.1, 4.2)."""
import math
import random
from collections import Counter

import pytest
from hypothesis import given, strategies as st

from broker.selection import (Candidate, FuzzyRankSelection, MaxRankSelection, SfeteSelection,
                              ce_capacity, policy_by_name, published_jobs, sfete_rank)


def cand(ce, n=0, cap=1.0, rank=None):
    return Candidate(ce_id=ce, ad={}, rank=rank, n_jobs=n, capacity=cap)


def test_sfete_rank_is_n_plus_one_over_capacity():
    assert sfete_rank(3, 2, 4.0) == pytest.approx(1.5)
    with pytest.raises(ValueError):
        sfete_rank(0, 0, 0)


def test_sfete_prefers_fast_empty_ce():
    chosen = SfeteSelection().select([cand("slow", 0, 1.0), cand("fast", 1, 4.0)], random.Random(1))
    assert chosen.ce_id == "fast"  # (1+1)/4 < (0+1)/1


def test_sfete_spreads_in_proportion_to_capacity_with_feedback():
    # Dispatch 300 jobs with the feedback counter incremented after each choice: the share of
    # each CE must follow its capacity share (seed 004 Section 4.2).
    caps = {"a": 1.0, "b": 2.0, "c": 3.0}
    counts = Counter()
    rng = random.Random(7)
    pol = SfeteSelection()
    for _ in range(300):
        c = pol.select([cand(k, counts[k], v) for k, v in caps.items()], rng)
        counts[c.ce_id] += 1
    for k, v in caps.items():
        assert abs(counts[k] / 300 - v / 6) < 0.02


def test_max_rank_breaks_ties_at_random():
    rng = random.Random(3)
    seen = {MaxRankSelection().select([cand("a", rank=5), cand("b", rank=5), cand("c", rank=1)], rng).ce_id
            for _ in range(50)}
    assert seen == {"a", "b"}


def test_fuzzy_weights_follow_glite_formula():
    pol = FuzzyRankSelection(fuzzy_factor=2.0)
    w = pol.scores([cand("a", rank=0.0), cand("b", rank=2.0)])
    assert w[0] == pytest.approx(math.atan(2.0 * -1.0) + math.pi / 2)
    assert w[1] == pytest.approx(math.atan(2.0 * 1.0) + math.pi / 2)


def test_fuzzy_prefers_higher_rank_statistically():
    rng = random.Random(11)
    pol = FuzzyRankSelection()
    counts = Counter(pol.select([cand("lo", rank=-3), cand("hi", rank=3)], rng).ce_id for _ in range(2000))
    assert counts["hi"] > counts["lo"] * 3


def test_capacity_and_published_jobs_from_ad():
    ad = {"GlueCEInfoTotalCPUs": 4, "GlueHostBenchmarkSI00": 1500, "GlueCEStateRunningJobs": 2,
          "GlueCEStateWaitingJobs": 3}
    assert ce_capacity(ad) == 6000
    assert published_jobs(ad) == 5
    assert published_jobs({**ad, "GlueCEStateTotalJobs": 9}) == 9


def test_policy_by_name_rejects_unknown():
    assert isinstance(policy_by_name("SFETE"), SfeteSelection)
    with pytest.raises(ValueError, match="sfete, max, fuzzy"):
        policy_by_name("round-robin")


@given(st.lists(st.tuples(st.integers(0, 50), st.floats(0.1, 100)), min_size=1, max_size=20),
       st.integers(0, 2**32 - 1))
def test_sfete_always_returns_a_minimum(cands, seed):
    cs = [cand(str(i), n, c) for i, (n, c) in enumerate(cands)]
    chosen = SfeteSelection().select(cs, random.Random(seed))
    assert (chosen.n_jobs + 1) / chosen.capacity == min((c.n_jobs + 1) / c.capacity for c in cs)


def test_vo_access_rules_with_the_owners_verified_fqans():
    """GlueCEAccessControlBaseRule: VO:<vo> admits every member, VOMS:<fqan> only its holders."""
    from broker.matchmaker import vo_allowed
    vo_ce = {"GlueCEAccessControlBaseRule": ["VO:dteam"]}
    role_ce = {"GlueCEAccessControlBaseRule": ["VOMS:/dteam/Role=production"]}
    root_ce = {"GlueCEAccessControlBaseRule": "VOMS:/dteam"}
    assert vo_allowed(vo_ce, "dteam", ("/dteam",)) and not vo_allowed(vo_ce, "atlas", ("/atlas",))
    assert not vo_allowed(role_ce, "dteam", ("/dteam",))
    assert vo_allowed(role_ce, "dteam", ("/dteam", "/dteam/Role=production"))
    assert vo_allowed(root_ce, "dteam", ("/dteam",)) and not vo_allowed(root_ce, "dteam", ())
    assert not vo_allowed({}, "dteam", ("/dteam",)) and vo_allowed({}, None)
    # without verified FQANs (the VO named by the JDL) any VOMS:/<vo>... rule admits the VO
    assert vo_allowed(role_ce, "dteam") and not vo_allowed(role_ce, "atlas")
