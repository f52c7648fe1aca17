"""A lease suspended in place (frozen VWNs) keeps its memory: placement does not count it free.

``SimulatedFrozenNodes`` stands in for node agents that suspend with the cgroup freezer: a
suspended lease's VMs keep their memory on their nodes until they are resumed or stopped, and
(as ``SimulatedNodes``) any start that would exceed a node's capacity raises OverCommitError --
so a scheduler that counted the frozen memory free fails loudly. ``leasing.frozenhold``.
"""
from __future__ import annotations

import random

from hypothesis import example, given, settings, strategies as stc

from vgrid_runtime.clock import SimulatedClock
from vwn_agents.leasing import LeaseConfig, LeaseScheduler, LeaseState, SimulatedNodes, uniform_site
from vwn_agents.leasing.model import Lease, LeaseType, resource_vector
from vwn_agents.leasing.slottable import INF, ResKind


class SimulatedFrozenNodes(SimulatedNodes):
    """``SimulatedNodes`` whose suspended VMs stay frozen in memory (see module doc)."""

    suspends_in_place = True

    def __init__(self, nodes) -> None:
        super().__init__(nodes)
        self.frozen: set[int] = set()

    def holds_memory(self, lease) -> bool:
        return lease.id in self.frozen

    def suspended(self, lease, now: float) -> None:       # the paused VMs keep their memory
        self.frozen.add(lease.id)

    def resume_vms(self, lease, mapping, now: float) -> None:
        self.frozen.discard(lease.id)                     # thawed: memory and CPU held again
        self._release(lease)
        self._hold(lease, mapping, now)

    def stop_vms(self, lease, now: float) -> None:
        self.frozen.discard(lease.id)
        super().stop_vms(lease, now)


def _site():
    return uniform_site(1, 2, 1024)       # one node: 2 cores, 1,024 MB


def _run(sched, clock, until: float) -> None:
    """Advance the simulated clock event by event up to ``until`` (or until nothing is due)."""
    for _ in range(10_000):
        t = sched.next_event_time()
        if t > until or t == INF:
            return
        clock.advance_to(max(t, clock.now()))
        sched.process(clock.now())
    raise AssertionError("the scheduler did not settle in 10,000 events")


def _cfg() -> LeaseConfig:
    return LeaseConfig({"migration": "no"})


def test_frozen_memory_is_not_given_to_another_lease_and_the_lease_resumes_in_place():
    clock, site = SimulatedClock(0.0), _site()
    nodes = SimulatedFrozenNodes(site)
    sched = LeaseScheduler(site, _cfg(), clock, nodes)
    a = sched.submit(Lease(1, LeaseType.BEST_EFFORT, 0.0, 1000.0, 1, resource_vector(cpu=100, memory=600)))
    sched.process(0.0)
    assert a.state is LeaseState.ACTIVE
    clock.advance_to(10.0)
    ar = sched.submit(Lease(2, LeaseType.ADVANCE_RESERVATION, 10.0, 300.0, 1,
                            resource_vector(cpu=200, memory=300), preemptible=False, requested_start_s=100.0))
    assert ar.state is LeaseState.SCHEDULED
    _run(sched, clock, 150.0)                     # the AR runs, A is suspended in place
    assert a.state is LeaseState.SCHEDULED and a.suspensions == 1 and a.id in nodes.frozen
    hold = [r for r in sched.st.of_lease(a) if r.kind is ResKind.HOLD]
    resume = min(r.start for r in sched.st.of_lease(a) if r.kind in (ResKind.RESUME, ResKind.VM))
    assert len(hold) == 1 and hold[0].use == {0: (0, 600, 0, 0)}
    assert hold[0].start <= 100.0 and hold[0].end == resume >= ar.requested_start_s + 300.0
    assert sched.st.free(0, 150.0, 160.0)[1] == 1024 - 600 - 300
    # a lease that fits the CPU left but not the memory the frozen VMs keep must wait
    c = sched.submit(Lease(3, LeaseType.BEST_EFFORT, 150.0, 50.0, 1, resource_vector(cpu=0, memory=600)))
    sched.process(150.0)
    assert c.state is not LeaseState.ACTIVE
    _run(sched, clock, INF)                       # never over-committed (OverCommitError otherwise)
    assert a.state is LeaseState.DONE and c.state is LeaseState.DONE
    assert [seg.nodes for seg in a.segments] == [(0,), (0,)]
    assert a.segments[1].start >= ar.end_s        # resumed after the AR, on its node
    assert c.start_s >= a.segments[1].start       # C waited for A's memory to be used again
    assert not any(r.kind is ResKind.HOLD for r in sched.st.reservations())


def test_an_ar_that_needs_the_frozen_memory_stops_the_lease_instead():
    """Freezing frees CPU only: an AR that also needs the lease's memory makes the engine stop
    the lease (requeued, restarted later from scratch) rather than freeze it."""
    clock, site = SimulatedClock(0.0), _site()
    nodes = SimulatedFrozenNodes(site)
    sched = LeaseScheduler(site, _cfg(), clock, nodes)
    a = sched.submit(Lease(1, LeaseType.BEST_EFFORT, 0.0, 1000.0, 1, resource_vector(cpu=100, memory=600)))
    sched.process(0.0)
    clock.advance_to(10.0)
    ar = sched.submit(Lease(2, LeaseType.ADVANCE_RESERVATION, 10.0, 300.0, 1,
                            resource_vector(cpu=200, memory=500), preemptible=False, requested_start_s=100.0))
    assert ar.state is LeaseState.SCHEDULED and a.cancel_at_end
    assert not any(r.kind is ResKind.HOLD for r in sched.st.reservations())
    _run(sched, clock, INF)
    assert a.state is LeaseState.DONE and a.suspensions == 0 and a.id not in nodes.frozen
    assert a.segments[-1].start >= 400.0 and a.segments[-1].end - a.segments[-1].start == 1000.0


def test_a_cancelled_frozen_lease_frees_its_memory():
    clock, site = SimulatedClock(0.0), _site()
    nodes = SimulatedFrozenNodes(site)
    sched = LeaseScheduler(site, _cfg(), clock, nodes)
    a = sched.submit(Lease(1, LeaseType.BEST_EFFORT, 0.0, 1000.0, 1, resource_vector(cpu=100, memory=600)))
    sched.process(0.0)
    clock.advance_to(10.0)
    sched.submit(Lease(2, LeaseType.ADVANCE_RESERVATION, 10.0, 300.0, 1,
                       resource_vector(cpu=200, memory=300), preemptible=False, requested_start_s=100.0))
    _run(sched, clock, 150.0)
    assert a.suspensions == 1 and a.id in nodes.frozen
    sched.cancel(a.id)
    assert not any(r.kind is ResKind.HOLD for r in sched.st.reservations())
    assert sched.st.free(0, 150.0, 160.0)[1] == 1024 - 300


def test_without_frozen_vms_nothing_is_held():
    """Suspension to disk (seed 002, Haizea): the suspended lease holds nothing."""
    clock, site = SimulatedClock(0.0), _site()
    sched = LeaseScheduler(site, _cfg(), clock, SimulatedNodes(site))
    a = sched.submit(Lease(1, LeaseType.BEST_EFFORT, 0.0, 1000.0, 1, resource_vector(cpu=100, memory=600)))
    sched.process(0.0)
    clock.advance_to(10.0)
    sched.submit(Lease(2, LeaseType.ADVANCE_RESERVATION, 10.0, 300.0, 1,
                       resource_vector(cpu=200, memory=300), preemptible=False, requested_start_s=100.0))
    _run(sched, clock, 150.0)
    assert a.suspensions == 1
    assert not any(r.kind is ResKind.HOLD for r in sched.st.reservations())


@settings(max_examples=30, deadline=None)
@given(stc.integers(min_value=0, max_value=10**6))
@example(2812)   # a second AR's preemption moved a planned suspension later (ar.preempt, fixed)
@example(49024)  # a past suspension's hold was never removed, so a new one was not planned
@example(225)    # an earlier suspension kept the later hold's start
@example(664)    # cancel-and-requeue extended a lease planned to be suspended earlier
@example(1144)   # a hold planned beside an AR already scheduled on that memory
def test_random_workloads_with_frozen_suspensions_never_overcommit_memory(seed):
    """Random best-effort leases and ARs on 3 nodes; the simulated frozen nodes raise
    OverCommitError if a placement ever counts frozen memory free; every lease ends."""
    rng = random.Random(seed)
    clock, site = SimulatedClock(0.0), uniform_site(3, 2, 1024)
    nodes = SimulatedFrozenNodes(site)
    sched = LeaseScheduler(site, _cfg(), clock, nodes)
    leases, t = [], 0.0
    for i in range(1, 16):
        t += rng.uniform(0, 200)
        _run(sched, clock, t)
        clock.advance_to(max(t, clock.now()))
        mem = rng.choice((200, 400, 600))
        if rng.random() < 0.3:
            lease = Lease(i, LeaseType.ADVANCE_RESERVATION, clock.now(), rng.uniform(50, 400), 1,
                          resource_vector(cpu=rng.choice((100, 200)), memory=mem), preemptible=False,
                          requested_start_s=clock.now() + rng.uniform(10, 300))
        else:
            lease = Lease(i, LeaseType.BEST_EFFORT, clock.now(), rng.uniform(50, 800), 1,
                          resource_vector(cpu=100, memory=mem))
        leases.append(sched.submit(lease))
        sched.process(clock.now())
    _run(sched, clock, INF)
    assert all(l.done for l in leases), [(l.id, l.state) for l in leases if not l.done]
    assert not any(r.kind is ResKind.HOLD for r in sched.st.reservations())
