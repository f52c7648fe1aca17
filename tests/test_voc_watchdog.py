"""The VOC pool, the watchdog and its policies on a simulated clock (seed 003, Section 5.2;
vwn_agents/voc). Hypothesis properties: never more VOC nodes than slots, busy nodes never
terminated, the damped policy's growth limit and warm nodes, max-min fair shares."""
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.states import IllegalTransition
from vwn_agents.voc.policies import Damped, Greedy, fair_shares, make_policy
from vwn_agents.voc.pool import VOCNodeState, VOCPool
from vwn_agents.voc.sim import SimJob, Workload, simulate
from vwn_agents.voc.watchdog import Watchdog

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Recorder:
    """A driver that boots nothing by itself: the test says when a node is ready."""

    def __init__(self, slots: int) -> None:
        self.slots = [f"s{i}" for i in range(slots)]
        self.booted, self.terminated = [], []

    def free_slots(self, busy):
        return [s for s in self.slots if s not in busy]

    def boot(self, node):
        self.booted.append(node.id)

    def terminate(self, node):
        self.terminated.append(node.id)


def site(slots, policy):
    pool = VOCPool(slots, Recorder(slots))
    return pool, Watchdog(pool, policy, interval_s=10.0)


def ready_all(pool, now):
    for n in list(pool.nodes.values()):
        if n.state is VOCNodeState.BOOTING:
            pool.ready(n.id, now)


def test_greedy_fills_every_slot_at_the_first_interval_and_vacates_as_the_queue_drains():
    pool, dog = site(16, Greedy())
    report = dog.tick(0.0, {"engage": (20, 0)})
    assert len(report.booted["engage"]) == 16 and pool.free == 0
    ready_all(pool, 55.0)
    assert all(n.boot_s == 55.0 for n in pool.live())
    for i in range(16):
        assert pool.claim("engage", f"j{i}", 55.0) is not None
    assert pool.claim("engage", "j16", 55.0) is None                # no idle node left
    for n in pool.live()[:10]:
        pool.release(n.id, 65.0)
    report = dog.tick(70.0, {"engage": (0, 6)})                      # queue 6 < size 16
    assert len(report.terminated["engage"]) == 10
    assert [n.state for n in pool.live()] == [VOCNodeState.BUSY] * 6   # busy nodes are never stopped


def test_greedy_terminates_booting_nodes_when_the_queue_vanishes():
    pool, dog = site(4, Greedy())
    dog.tick(0.0, {"engage": (4, 0)})
    report = dog.tick(10.0, {"engage": (1, 0)})
    assert len(report.terminated["engage"]) == 3 and len(pool.live()) == 1


def test_greedy_divides_free_slots_round_robin_between_vos():
    pool, dog = site(4, Greedy())
    report = dog.tick(0.0, {"engage": (6, 0), "nanohub": (2, 0)})
    assert {vo: len(ids) for vo, ids in report.booted.items()} == {"engage": 2, "nanohub": 2}


def test_damped_grows_by_at_most_its_limit_and_keeps_idle_nodes_warm():
    clock = SimulatedClock()
    pool, dog = site(16, Damped(growth_limit=4, keep_warm_s=60.0))
    assert len(dog.tick(clock.now(), {"engage": (10, 0)}).booted["engage"]) == 4
    clock.advance(10)
    assert len(dog.tick(clock.now(), {"engage": (10, 0)}).booted["engage"]) == 4
    clock.advance(10)
    report = dog.tick(clock.now(), {"engage": (0, 0)})
    assert report.terminated == {} and len(pool.live()) == 8          # booting nodes are kept
    ready_all(pool, clock.now())
    clock.advance(50)
    assert dog.tick(clock.now(), {"engage": (0, 0)}).terminated == {}  # idle 50 s < 60 s
    clock.advance(10)
    assert len(dog.tick(clock.now(), {"engage": (0, 0)}).terminated["engage"]) == 8
    assert pool.free == 16


def test_damped_reclaims_idle_nodes_above_the_fair_share_for_a_waiting_vo():
    pool, dog = site(4, Damped(keep_warm_s=600.0))
    dog.tick(0.0, {"engage": (4, 0)})
    ready_all(pool, 60.0)
    report = dog.tick(70.0, {"engage": (0, 0), "nanohub": (2, 0)})    # engage's nodes are warm
    assert len(report.terminated["engage"]) == 2 and len(report.booted["nanohub"]) == 2
    assert report.shares == {"engage": 0, "nanohub": 2}


def test_pool_refuses_what_the_node_state_table_refuses():
    pool, dog = site(2, Greedy())
    dog.tick(0.0, {"engage": (1, 0)})
    node = pool.live()[0]
    assert pool.claim("engage", "j", 1.0) is None                     # booting: not matched
    pool.ready(node.id, 5.0)
    assert pool.claim("engage", "j", 6.0) is node
    with pytest.raises(ValueError, match="runs job j"):
        pool.terminate(node.id, 7.0)
    with pytest.raises(IllegalTransition):
        node.to(VOCNodeState.BOOTING)
    assert pool.lost(node.id, 8.0, "killed") == "j"                   # the pool hands the job back
    assert pool.live() == [] and pool.gone[-1].gone_reason == "lost: killed"
    assert pool.claim("engage", "k", 9.0) is None
    assert pool.lost(node.id, 9.0, "again") is None


def test_make_policy_names_unknown_policies_and_options():
    assert make_policy("damped", keep_warm_s=5).keep_warm_s == 5
    with pytest.raises(ValueError, match="unknown VOC policy 'fifo'.*greedy, damped"):
        make_policy("fifo")
    with pytest.raises(ValueError, match="no option warm"):
        make_policy("damped", warm=1)
    with pytest.raises(ValueError, match=">= 0"):
        make_policy("damped", growth_limit=-1)
    with pytest.raises(ValueError, match="interval"):
        Watchdog(VOCPool(1, Recorder(1)), Greedy(), interval_s=0)


@given(st.integers(0, 40), st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 30), max_size=6))
@SETTINGS
def test_fair_shares_are_max_min_fair(slots, demands):
    share = fair_shares(slots, demands)
    assert sum(share.values()) == min(slots, sum(demands.values()))
    assert all(0 <= share[v] <= demands[v] for v in demands)
    for a in demands:
        if share[a] < demands[a]:                       # a wants more: nobody holds more than it + 1
            assert all(share[b] <= share[a] + 1 for b in demands)


steps = st.lists(st.tuples(st.sampled_from(["tick", "ready", "claim", "release", "lost"]),
                           st.sampled_from(["engage", "nanohub", "cms"]), st.integers(0, 12)),
                 min_size=1, max_size=60)


@given(st.sampled_from(["greedy", "damped"]), st.integers(1, 10), steps)
@SETTINGS
def test_watchdog_invariants_over_random_runs(policy_name, slots, script):
    policy = make_policy(policy_name, growth_limit=3, keep_warm_s=25.0) if policy_name == "damped" \
        else make_policy(policy_name)
    pool, dog = site(slots, policy)
    waiting = {"engage": 0, "nanohub": 0, "cms": 0}
    t = 0.0
    for kind, vo, n in script:
        t += 5.0
        if kind == "tick":
            waiting[vo] = n
            busy = {x.id for x in pool.live() if x.state is VOCNodeState.BUSY}
            idle_before = {x.id: x.idle_since for x in pool.live() if x.state is VOCNodeState.IDLE}
            booting = {x.id for x in pool.live() if x.state is VOCNodeState.BOOTING}
            report = dog.tick(t, {v: (w, sum(x.vo == v and x.state is VOCNodeState.BUSY for x in pool.live()))
                                  for v, w in waiting.items()})
            stopped = [i for ids in report.terminated.values() for i in ids]
            assert not busy & set(stopped)                              # a running job is never killed
            assert len(pool.nodes) <= slots                             # never more VWNs than slots
            if policy_name == "greedy":                                 # the paper's rule, after a tick:
                for v in dog.views({vo: (w, 0) for vo, w in waiting.items()}).values():
                    assert v.size >= v.waiting + v.busy or pool.free == 0   # queue covered or site full
            if policy_name == "damped":
                assert all(len(ids) <= 3 for ids in report.booted.values())
                assert not booting & set(stopped)
                for i in stopped:                                       # warm, unless reclaimed for another VO
                    vo_of = pool.gone[[g.id for g in pool.gone].index(i)].vo
                    assert t - idle_before[i] >= 25.0 or any(
                        report.shares.get(v, 0) > 0 for v in waiting if v != vo_of)
        elif kind == "ready":
            booting = [x for x in pool.live() if x.state is VOCNodeState.BOOTING]
            if booting:
                pool.ready(booting[n % len(booting)].id, t)
        elif kind == "claim" and waiting[vo] > 0:
            if pool.claim(vo, f"job{t}", t) is not None:
                waiting[vo] -= 1
        elif kind == "release":
            busy = [x for x in pool.live() if x.state is VOCNodeState.BUSY]
            if busy:
                pool.release(busy[n % len(busy)].id, t)
        elif kind == "lost":
            live = pool.live()
            if live:
                gone = live[n % len(live)]
                pool.lost(gone.id, t, "killed")
                assert gone.id not in pool.nodes
                assert all(x.id != gone.id for x in pool.live(gone.vo))


@given(st.sampled_from(["greedy", "damped"]), st.integers(1, 6),
       st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 30), st.integers(1, 50)), min_size=1, max_size=15),
       st.lists(st.tuples(st.integers(0, 120), st.sampled_from(["a", "b"])), max_size=3))
@example("greedy", 1, [("a", 0, 1)], [(8, "a")])   # the last node killed as its job ended, between ticks
@SETTINGS
def test_simulated_runs_finish_every_job_within_the_slots(policy_name, slots, jobs, kills):
    w = Workload("random", tuple(SimJob(vo, 10.0 * s, float(r)) for vo, s, r in jobs), slots=slots,
                 boot_s=7.0, interval_s=5.0, kills=tuple((float(t), vo) for t, vo in kills))
    r = simulate(w, policy_name, **({"keep_warm_s": 20.0} if policy_name == "damped" else {}))
    assert len(r.waits) == len(jobs)                      # every job ran to its end, killed ones again
    assert r.vacated_s is not None and r.vacated_s >= r.makespan_s
    for t in {p[0] for s in r.series.values() for p in s}:
        assert sum(next(p[1] for p in reversed(s) if p[0] <= t) if any(p[0] <= t for p in s) else 0
                   for s in r.series.values()) <= slots
    assert all(d == 7.0 for d in r.boot_delays)
