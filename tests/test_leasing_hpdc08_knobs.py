"""The HPDC'08 / Haizea 1.1 knobs of the lease engine (issue 16, docs/experiments/hpdc08.md):

* ``migration-transfer = node-to-node``: a resumed lease's VMs are copied node to node at
  ``migration-bandwidth`` MB/s, disjoint pairs in parallel rounds (Haizea's
  ``schedule_migration``), instead of one after another over the image link;
* ``preemption-order = oldest-submission`` and ``preemption-horizon``: which best-effort leases
  an AR preempts first, and which are too old to be preempted (Haizea 1.1's 7-day aging).
"""
import pytest
from hypothesis import given, strategies as st

from vgrid_runtime.clock import SimulatedClock
from vwn_agents.leasing import LeaseConfig, LeaseScheduler, LeaseState, SimulatedNodes, uniform_site
from vwn_agents.leasing.model import Lease, LeaseType, resource_vector
from vwn_agents.leasing.preemption import migration_estimate, migration_rounds, migration_time

VM = resource_vector(cpu=100, memory=1024)


def test_migration_rounds_pair_disjoint_nodes_in_parallel():
    assert migration_rounds((0, 1, 2), (0, 1, 2)) == 0            # nothing moves
    assert migration_rounds((0, 1, 2), (3, 4, 5)) == 1            # three disjoint copies at once
    assert migration_rounds((0, 1), (1, 2)) == 1                  # VM on 1 stays; 0 -> 2
    assert migration_rounds((0, 0), (1, 2)) == 2                  # node 0 sends one VM at a time


@given(st.lists(st.integers(0, 6), min_size=1, max_size=8), st.data())
def test_migration_rounds_bounds(old, data):
    new = data.draw(st.lists(st.integers(0, 6), min_size=len(old), max_size=len(old)))
    moved = len(old) - sum(min(old.count(n), new.count(n)) for n in set(old))
    r = migration_rounds(tuple(old), tuple(new))
    busiest = max([old.count(n) for n in set(old)] + [new.count(n) for n in set(new)])
    assert (r == 0) == (moved == 0)
    assert r <= moved                              # at least one copy per round
    if moved:
        assert r >= 1 and r <= 2 * busiest + moved  # never worse than one copy at a time


def test_node_to_node_migration_is_per_round_not_per_vm():
    lease = Lease(1, LeaseType.BEST_EFFORT, 0.0, 100.0, 4, VM, mapping=(0, 1, 2, 3))
    link = LeaseConfig({"migration": "yes"})
    n2n = LeaseConfig({"migration": "yes", "migration-transfer": "node-to-node", "migration-bandwidth": 12.5})
    new = (4, 5, 6, 7)
    assert migration_time(lease, lease.mapping, new, link) == pytest.approx(4 * 1024 / 12.5)   # 100 Mb/s link
    assert migration_time(lease, lease.mapping, new, n2n) == pytest.approx(1024 / 12.5)        # one round
    assert migration_estimate(lease, n2n) == pytest.approx(1024 / 12.5)
    assert migration_estimate(lease, link) == pytest.approx(4 * 1024 / 12.5)


def _two_running_then_ar(options, submits=(0.0, 50.0)):
    """Two one-node best-effort leases running on a 2-node site (submitted at ``submits``),
    then an AR that needs one node: which one is preempted?"""
    clock = SimulatedClock(0.0)
    site = uniform_site(2, 1, 1024)
    sched = LeaseScheduler(site, LeaseConfig({"suspension": "none", **options}), clock, SimulatedNodes(site))
    old = Lease(1, LeaseType.BEST_EFFORT, submits[0], 10_000_000.0, 1, VM)
    young = Lease(2, LeaseType.BEST_EFFORT, submits[1], 10_000_000.0, 1, VM)
    for lease in (old, young):
        clock.advance_to(lease.submit_s)
        sched.submit(lease)
        sched.process(lease.submit_s)
    assert old.state is LeaseState.ACTIVE and young.state is LeaseState.ACTIVE
    t = submits[1] + 10.0
    clock.advance_to(t)
    ar = sched.submit(Lease(3, LeaseType.ADVANCE_RESERVATION, t, 100.0, 1, VM, preemptible=False,
                            requested_start_s=t + 1000.0))
    return sched, old, young, ar


def test_vgrid_preempts_the_most_recently_started_lease_haizea_the_oldest():
    _, old, young, ar = _two_running_then_ar({})
    assert ar.state is LeaseState.SCHEDULED and young.cancel_at_end and not old.cancel_at_end
    _, old, young, ar = _two_running_then_ar({"preemption-order": "oldest-submission"})
    assert ar.state is LeaseState.SCHEDULED and old.cancel_at_end and not young.cancel_at_end


def test_preemption_horizon_protects_old_leases_and_may_reject_the_ar():
    week = 7 * 86400.0
    # the old lease was submitted 8 days before the AR: only the young one may go
    _, old, young, ar = _two_running_then_ar({"preemption-order": "oldest-submission",
                                              "preemption-horizon": week}, submits=(0.0, 8 * 86400.0 - 1000.0))
    assert ar.state is LeaseState.SCHEDULED and young.cancel_at_end and not old.cancel_at_end
    # both too old: the AR does not fit and is rejected with a reason
    _, old, young, ar = _two_running_then_ar({"preemption-horizon": 100.0})
    assert ar.state is LeaseState.REJECTED and "not enough resources" in ar.reject_reason
    assert not old.cancel_at_end and not young.cancel_at_end
