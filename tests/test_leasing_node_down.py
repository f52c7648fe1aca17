"""Node down / up in the lease engine: the slot table and mapper offer no slot on a down node,
its unstarted leases are requeued onto the others (property test over random workloads with
SimulatedNodes), and the live engine marks an unreachable node agent down and up again."""
import socket
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from vgrid_runtime.clock import SimulatedClock
from vwn_agents.leasing import LeaseConfig
from vwn_agents.leasing.enactment import SimulatedNodes
from vwn_agents.lease_engine import LeaseEngine
from vwn_agents.node_client import NodeAgentError
from vwn_agents.leasing.model import Lease, LeaseState, LeaseType, Node, resource_vector
from vwn_agents.leasing.scheduler import LeaseScheduler
from vwn_agents.leasing.slottable import ResKind, ResState

from .test_leasing_live import body, node, pump  # noqa: F401  (fixture)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_nodes=st.integers(2, 4), jobs=st.lists(st.integers(1, 6), min_size=1, max_size=10),
       down=st.data())
def test_a_down_node_gets_no_new_reservation_and_its_unstarted_leases_move(n_nodes, jobs, down):
    clock = SimulatedClock(0.0)
    nodes = [Node(i, f"n{i}", resource_vector(cpu=200, memory=4096)) for i in range(n_nodes)]
    sched = LeaseScheduler(nodes, LeaseConfig().with_options(suspension="none"), clock, SimulatedNodes(nodes))
    for i, hours in enumerate(jobs):
        sched.submit(Lease(i + 1, LeaseType.BEST_EFFORT, 0.0, 3600.0 * hours, 1,
                           resource_vector(cpu=100, memory=512), "img", 0.0))
    sched.process(0.0)
    dead = down.draw(st.integers(0, n_nodes - 1))
    running = {l.id for l in sched.leases.values() if l.state is LeaseState.ACTIVE}
    moved = sched.set_node_down(dead, True, 0.0)
    sched.process(0.0)
    for res in sched.st.reservations():
        if res.kind is ResKind.VM and res.state is ResState.SCHEDULED:
            assert dead not in res.use, res          # nothing waits on the down node
    assert all(l.id not in running for l in moved)   # running leases are left alone
    assert {l.id for l in sched.leases.values() if l.state is LeaseState.ACTIVE} >= running
    assert sched.mapper.count_now(resource_vector(cpu=100, memory=512), 0.0, 60.0) <= 2 * (n_nodes - 1)
    for _ in range(1000):                             # run everything to the end
        t = sched.next_event_time()
        if t == float("inf"):
            break
        clock.advance_to(max(t, clock.now()))
        sched.process(clock.now())
    assert all(l.state is LeaseState.DONE for l in sched.leases.values())
    for lease in sched.leases.values():
        if lease.id not in running:
            assert all(dead not in seg.nodes for seg in lease.segments)
    sched.set_node_down(dead, False, 0.0)
    assert sched.mapper.count_now(resource_vector(cpu=100, memory=512), 1e9, 60.0) == 2 * n_nodes


def _dead_url() -> str:
    with socket.socket() as s:  # a loopback port with nothing listening
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_live_engine_marks_an_unreachable_node_down_and_moves_the_job(node):
    url, receiver = node
    dead = _dead_url()
    clock = SimulatedClock(time.time())                  # node_down_after_s is counted on the engine's clock
    engine = LeaseEngine([(dead, 1, 2048), (url, 1, 2048)], clock=clock, node_down_after_s=0.3,
                         probe_timeout_s=0.5)
    with pytest.raises(NodeAgentError):
        engine.submit_job("x", body(receiver, "x", 0.1), duration_s=30)
    st = engine.status("x")
    assert st["state"] == "Scheduled" and st["nodes"] == [dead] and st["start_error"]
    assert engine.nodes_up() == [(dead, True), (url, True)]   # failing for less than 0.3 s: still up
    clock.advance(0.35)
    engine.tick()
    assert engine.nodes_up() == [(dead, False), (url, True)]
    st = engine.status("x")
    assert st["state"] == "Active" and st["nodes"] == [url] and st["vwns"] and st["start_error"] is None
    assert st["attempts"] == 2 and engine.job_of("x-r2") == ("x", True) and engine.job_of("x") == ("x", False)
    pump(engine, receiver, lambda: engine.status("x")["state"] == "Done")
    assert [e["key"] for e in receiver.events if e["event"] == "done"] == ["x-r2"]
