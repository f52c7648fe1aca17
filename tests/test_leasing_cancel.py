"""Cancelling a lease frees its resources for the best-effort leases queued behind it: they move
earlier at once (as after a premature end), instead of waiting for their old reservation."""
from hypothesis import HealthCheck, given, settings, strategies as st

from vgrid_runtime.clock import SimulatedClock
from vwn_agents.leasing import LeaseConfig
from vwn_agents.leasing.enactment import SimulatedNodes
from vwn_agents.leasing.model import Lease, LeaseState, LeaseType, Node, resource_vector
from vwn_agents.leasing.scheduler import LeaseScheduler


def _site(n_nodes: int = 1):
    clock = SimulatedClock(0.0)
    nodes = [Node(i, f"n{i}", resource_vector(cpu=100, memory=1024)) for i in range(n_nodes)]
    sched = LeaseScheduler(nodes, LeaseConfig().with_options(suspension="none"), clock, SimulatedNodes(nodes))
    return clock, sched


def _be(lid: int, duration_s: float) -> Lease:
    return Lease(lid, LeaseType.BEST_EFFORT, 0.0, duration_s, 1, resource_vector(cpu=100, memory=512), "img", 0.0)


def test_the_next_best_effort_lease_starts_when_the_running_one_is_cancelled():
    clock, sched = _site()
    sched.submit(_be(1, 7200.0))
    sched.submit(_be(2, 600.0))
    sched.process(0.0)
    assert sched.leases[1].state is LeaseState.ACTIVE
    assert sched.leases[2].state is not LeaseState.ACTIVE       # waits for lease 1's 7,200 s
    clock.advance_to(10.0)
    sched.cancel(1)
    sched.process(10.0)
    assert sched.leases[2].state is LeaseState.ACTIVE and sched.leases[2].start_s == 10.0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_nodes=st.integers(1, 3), hours=st.lists(st.integers(1, 5), min_size=2, max_size=8),
       data=st.data())
def test_after_a_cancel_no_queued_lease_waits_while_a_node_is_free(n_nodes, hours, data):
    clock, sched = _site(n_nodes)
    for i, h in enumerate(hours):
        sched.submit(_be(i + 1, 3600.0 * h))
    sched.process(0.0)
    running = sorted(l.id for l in sched.leases.values() if l.state is LeaseState.ACTIVE)
    victim = data.draw(st.sampled_from(running))
    clock.advance_to(60.0)
    sched.cancel(victim)
    sched.process(60.0)
    active = [l for l in sched.leases.values() if l.state is LeaseState.ACTIVE]
    waiting = [l for l in sched.leases.values() if l.state not in (LeaseState.ACTIVE, LeaseState.DONE,
                                                                    LeaseState.CANCELLED)]
    # every node busy, or nobody waiting: a freed node is never left idle
    assert len(active) == n_nodes or not waiting
