"""``LeaseScheduler.adopt``: a restarted CE agent records the leases whose VWNs kept running
(property tests on random sites: adopted leases hold their slots, nothing is over-committed,
adopted leases end at their reservation's end, and queued leases all complete)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from vgrid_runtime.clock import SimulatedClock
from vwn_agents.leasing import LeaseConfig, LeaseState, uniform_site
from vwn_agents.leasing.enactment import SimulatedNodes
from vwn_agents.leasing.model import Lease, LeaseType, resource_vector
from vwn_agents.leasing.scheduler import LeaseScheduler

NOW = 1000.0
PER_VM = resource_vector(cpu=100, memory=256)


@st.composite
def restarts(draw):
    n_nodes = draw(st.integers(1, 3))
    slots = draw(st.integers(1, 3))
    adopted = []
    for node in range(n_nodes):
        for _ in range(draw(st.integers(0, slots))):
            start = NOW - draw(st.integers(0, 300))
            adopted.append((node, start, float(draw(st.integers(1, 600)))))
    queued = [(float(draw(st.integers(1, 400))), draw(st.one_of(st.none(), st.integers(1, 300))))
              for _ in range(draw(st.integers(0, 6)))]
    return n_nodes, slots, adopted, queued


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(restarts())
def test_adopted_leases_keep_their_slots_and_queued_ones_complete(case):
    n_nodes, slots, adopted, queued = case
    nodes = uniform_site(n_nodes, cpus_per_node=slots, mem_per_node=256 * slots)
    clock = SimulatedClock(NOW)
    enact = SimulatedNodes(nodes)          # raises OverCommitError if a start over-commits a node
    sched = LeaseScheduler(nodes, LeaseConfig().with_options(suspension="none"), clock, enact)
    ids = iter(range(1, 10_000))
    olds = []
    for node, start, duration in adopted:
        lease = Lease(next(ids), LeaseType.BEST_EFFORT, start, duration, 1, PER_VM)
        sched.adopt(lease, (node,), start)
        enact._hold(lease, (node,), NOW)   # its VWN exists on that node
        olds.append(lease)
        assert lease.state is LeaseState.ACTIVE and lease.start_s == start
    news = []
    for duration, real in queued:
        lease = Lease(next(ids), LeaseType.BEST_EFFORT, NOW, duration, 1, PER_VM,
                      real_duration_s=None if real is None else float(real))
        sched.submit(lease)
        news.append(lease)
    sched.process(NOW)
    for _ in range(10_000):
        t = sched.next_event_time()
        if t == float("inf"):
            break
        clock.advance_to(max(t, clock.now()))
        sched.process(clock.now())
    for lease in olds:                     # each ends when its reservation does (else now, if past)
        assert lease.state is LeaseState.DONE
        assert lease.end_s == lease.start_s + lease.duration_s
    for lease in news:
        assert lease.state is LeaseState.DONE and lease.start_s >= NOW
        assert lease.time_run >= lease.effective_duration_s - 1e-6


def test_adopting_the_same_lease_twice_is_refused():
    nodes = uniform_site(1, cpus_per_node=1, mem_per_node=256)
    sched = LeaseScheduler(nodes, LeaseConfig(), SimulatedClock(NOW), SimulatedNodes(nodes))
    lease = Lease(1, LeaseType.BEST_EFFORT, NOW, 60.0, 1, PER_VM)
    sched.adopt(lease, (0,), NOW - 10)
    try:
        sched.adopt(lease, (0,), NOW - 10)
    except ValueError as exc:
        assert "already" in str(exc)
    else:
        raise AssertionError("a second adopt of lease 1 was accepted")
