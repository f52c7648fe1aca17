"""SfeteOrder (issue 12, session 7): the tied best candidates equal a brute-force argmin.

Random candidate sets with many equal scores (few distinct published counts and capacities,
capacity 0 included), random increments of shared counters between choices (as other classes
dispatch), resets and subtracts of the counters, and feedback objects without a version: after
every step ``best`` must name exactly the positions (in ISM order) whose current
(N_j + 1) / C_j is the least -- what :class:`broker.selection.SfeteSelection` ties over.
"""
import math
import random

from hypothesis import HealthCheck, given, settings, strategies as st

from broker.selection import Candidate, SfeteSelection, sfete_rank
from broker.sfete_order import SfeteOrder
from infosys.feedback import FeedbackCounters


def brute_force(keys, published, capacities, feedback) -> list[int]:
    scores = [sfete_rank(p, feedback.get(k), c) if c > 0 else math.inf
              for k, p, c in zip(keys, published, capacities)]
    least = min(scores)
    return [i for i, s in enumerate(scores) if s == least]


class Unversioned:
    """Counters without ``version``: the order must re-read them at every choice."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def get(self, key: str) -> int:
        return self.counts.get(key, 0)

    def increment(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1


@st.composite
def scenarios(draw):
    n_keys = draw(st.integers(1, 8))
    n = draw(st.integers(1, 14))
    cands = draw(st.lists(st.tuples(st.integers(0, n_keys - 1),      # shared key (CE/VO view)
                                    st.sampled_from([0, 0, 1, 2, 3, 6]),    # published jobs
                                    st.sampled_from([0, 1, 2, 2, 4, 3000.0, 1e-300])),  # C_j
                         min_size=n, max_size=n))
    steps = draw(st.lists(st.tuples(st.sampled_from(["choose", "choose", "other", "other", "reset",
                                                     "subtract"]),
                                    st.integers(0, n_keys - 1), st.integers(0, 2 ** 16)),
                          min_size=1, max_size=80))
    return cands, steps, draw(st.booleans())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_best_is_the_brute_force_argmin_ties_included(scenario):
    cands, steps, versioned = scenario
    keys = [f"ce{k}" for k, _, _ in cands]
    published = [p for _, p, _ in cands]
    capacities = [c for _, _, c in cands]
    feedback = FeedbackCounters() if versioned else Unversioned()
    order = SfeteOrder(keys, published, capacities)
    for what, key, draw in steps:
        if what == "other":          # another class dispatched to a shared CE
            feedback.increment(f"ce{key}")
            continue
        if what == "reset" and versioned:
            feedback.reset()
            continue
        if what == "subtract" and versioned:
            feedback.subtract({f"ce{key}": 1 + draw % 2})
            continue
        ties = list(order.best(feedback))
        assert ties == brute_force(keys, published, capacities, feedback)
        pos = ties[0] if len(ties) == 1 else random.Random(draw).choice(ties)
        feedback.increment(keys[pos])   # the broker counts the dispatch before the next choice


def test_ties_are_what_sfete_selection_ties_over():
    """The same positions and the same random draw as SfeteSelection.select over Candidates."""
    keys = [f"ce{i}" for i in range(40)]
    published = [i % 3 for i in range(40)]
    capacities = [(1, 2, 2, 4)[i % 4] for i in range(40)]
    feedback = FeedbackCounters()
    order = SfeteOrder(keys, published, capacities)
    ra, rb = random.Random(7), random.Random(7)
    for _ in range(300):
        ties = order.best(feedback)
        mine = ties[0] if len(ties) == 1 else ra.choice(ties)
        cands = [Candidate(k, {}, None, p + feedback.get(k), c)
                 for k, p, c in zip(keys, published, capacities)]
        theirs = SfeteSelection().select(cands, rb)
        assert keys[mine] == theirs.ce_id
        feedback.increment(keys[mine])


def test_a_long_run_keeps_the_heap_bounded():
    """Emptied scores leave the heap: it stays within a small multiple of the live buckets."""
    n = 500
    keys = [f"ce{i}" for i in range(n)]
    order = SfeteOrder(keys, [0] * n, [1000.0 + i for i in range(n)])
    feedback = FeedbackCounters()
    for _ in range(20 * n):
        feedback.increment(keys[order.best(feedback)[0]])
    assert len(order.heap) <= 2 * len(order.buckets) + 64
    assert sum(len(b) for b in order.buckets.values()) == n


def test_the_choice_benchmark_prints_one_json_line_per_ce_count():
    """benchmarks/taskqueue_choose.py on a tiny grid: one JSON line per CE count with the warm
    and cold figures and the digest of its choices; exit 2 on a bad --ces."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "taskqueue_choose.py"
    out = subprocess.run([sys.executable, str(script), "--ces", "30,60", "--jobs", "300"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-500:]
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["ces"] for r in rows] == [30, 60]
    assert all(r["warm_cpu_us_per_job"] > 0 and r["evaluations"] > 0 and len(r["choices_digest"]) == 16
               for r in rows)
    bad = subprocess.run([sys.executable, str(script), "--ces", "ten"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "--ces" in bad.stderr
