"""Hypothesis property tests of seed 002's candidate sets, policies and local preemption.

* candidate sets (eq. (1)-(2)): a complete enumeration is exactly the minimal covering subsets
  found by brute force; every set covers the need;
* MOV's overhead <= every covering set's overhead (eq. (9)); MLIP's count <= every covering
  set's count (eq. (10)); MOML's set lies below the median and has the fewest leases there
  (Algorithm 1) -- compared with brute force over *all* covering subsets, not only minimal ones;
  with the enumeration cut short by its bounds MOV's and MLIP's choices are still optimal;
* in simulation (random local/external workloads, every request type, every policy): no
  candidate set ever contains a local or non-preemptable lease, the chosen set frees enough
  (an accepted local request starts at its ready time and runs its whole duration), nothing
  is over-committed (SimulatedNodes raises), suspended leases complete their duration, a
  deadline-constrained lease that completes ends by its deadline (else it was rejected at
  submission or cancelled saying so), and every lease ends in a terminal state.
"""
import itertools
import os
import statistics

from hypothesis import HealthCheck, given, settings, strategies as st

from vwn_agents.leasing import LeaseState, LeaseType, simulate, uniform_site
from vwn_agents.leasing.candidatepolicy import MLIP, MOML, MOV
from vwn_agents.leasing.candidates import Candidate, enumerate_candidate_sets
from vwn_agents.leasing.config import LeaseConfig
from vwn_agents.leasing.model import Lease, resource_vector
from vwn_agents.leasing.requesttypes import RequestType

SETTINGS = settings(max_examples=int(os.environ.get("LEASING_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
PREEMPTABLE = [RequestType.BEST_EFFORT_CANCELLABLE, RequestType.BEST_EFFORT_SUSPENDABLE,
               RequestType.DEADLINE_CONSTRAINT_MIGRATABLE]


def _lease(i, vms=1):
    return Lease(i, LeaseType.BEST_EFFORT, 0.0, 60.0, vms, resource_vector(cpu=100, memory=64))


@st.composite
def candidate_pools(draw):
    n = draw(st.integers(0, 8))
    cands = [Candidate(_lease(i + 1, v), v, h) for i, (v, h) in enumerate(
        draw(st.lists(st.tuples(st.integers(1, 4), st.floats(0.0, 100.0, allow_nan=False)), min_size=n, max_size=n)))]
    return cands, draw(st.integers(1, 12))


def covering(cands, need):
    return [c for k in range(1, len(cands) + 1) for c in itertools.combinations(cands, k)
            if sum(x.vms for x in c) >= need]


@SETTINGS
@given(candidate_pools())
def test_enumeration_is_the_minimal_covering_sets(pool):
    cands, need = pool
    sets, complete = enumerate_candidate_sets(cands, need)
    assert complete
    minimal = {frozenset(x.id for x in c) for c in covering(cands, need)
               if all(sum(x.vms for x in c) - y.vms < need for y in c)}
    assert {frozenset(s.ids) for s in sets} == minimal
    assert len(sets) == len(minimal)


@SETTINGS
@given(candidate_pools())
def test_policies_against_brute_force(pool):
    cands, need = pool
    sets, _ = enumerate_candidate_sets(cands, need)
    every = covering(cands, need)
    if not every:
        assert sets == [] and MOV().choose(sets) is None
        return
    mov, mlip, moml = MOV().choose(sets), MLIP().choose(sets), MOML().choose(sets)
    for chosen in (mov, mlip, moml):
        assert chosen.vms >= need
    assert all(round(mov.overhead_s, 6) <= round(sum(x.overhead_s for x in c), 6) for c in every)
    assert all(mlip.size <= len(c) for c in every)
    # beyond the enumeration bound MOV and MLIP still get their optimum (the added sets)
    bounded, _ = enumerate_candidate_sets(cands, need, max_sets=2, max_leases=3)
    assert round(MOV().choose(bounded).overhead_s, 6) == round(mov.overhead_s, 6)
    assert MLIP().choose(bounded).size == mlip.size
    alpha = statistics.median(round(s.overhead_s, 6) for s in sets)
    below = [s for s in sets if round(s.overhead_s, 6) <= alpha]
    assert round(moml.overhead_s, 6) <= alpha and moml.size == min(s.size for s in below)


@st.composite
def seed002_workloads(draw):
    n_nodes = draw(st.integers(1, 3))
    cpus = draw(st.integers(1, 4))
    cap = n_nodes * cpus
    leases = []
    for i in range(draw(st.integers(1, 10))):
        local = draw(st.booleans())
        submit = 60.0 * draw(st.integers(0, 40))
        dur = 60.0 * draw(st.integers(1, 60))
        vms = draw(st.integers(1, cap))
        per_vm = resource_vector(cpu=100, memory=draw(st.sampled_from([64, 128, 512])))
        if local:
            start = submit + 60.0 * draw(st.sampled_from([0, 0, 5, 30]))
            leases.append(Lease(i + 1, LeaseType.ADVANCE_RESERVATION, submit, dur, vms, per_vm,
                                requested_start_s=start, local=True))
        else:
            rtype = draw(st.sampled_from(PREEMPTABLE + [RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE]))
            deadline = None
            if not rtype.best_effort and draw(st.booleans()):
                deadline = submit + dur * draw(st.sampled_from([1.0, 1.5, 3.0]))
            leases.append(Lease(i + 1, LeaseType.BEST_EFFORT, submit, dur, vms, per_vm, request_type=rtype,
                                real_duration_s=draw(st.one_of(st.none(), st.floats(30.0, dur))),
                                deadline_s=deadline))
    return n_nodes, cpus, leases


@SETTINGS
@given(seed002_workloads(), st.sampled_from(["nop", "mov", "mlip", "moml"]),
       st.sampled_from(["aggressive", "conservative"]), st.sampled_from([0.0, 2.3]),
       st.sampled_from(["all", "all", "none"]), st.sampled_from(["yes-notransfer", "yes", "no"]))
def test_local_preemption_invariants(workload, policy, backfilling, delta, suspension, migration):
    n_nodes, cpus, leases = workload
    cfg = LeaseConfig({"policy-preemption": policy, "backfilling": backfilling, "rescheduling-time": delta,
                       "suspend-rate": 6.36, "resume-rate": 8.12, "migration": migration,
                       "suspension": suspension})
    result = simulate(leases, uniform_site(n_nodes, cpus, 4096), cfg)   # OverCommitError fails the test
    sched = result.scheduler
    byid = sched.leases
    for t, local_id, ids, h, name in sched.preemption_log:
        assert byid[local_id].local and name == policy != "nop"
        for i in ids:
            assert not byid[i].local and byid[i].request_type.preemptable
    for lease in byid.values():
        assert lease.done, (lease.id, lease.state)
        if lease.local and lease.state is LeaseState.DONE:
            assert lease.start_s == lease.requested_start_s
            assert sum(s.end - s.start for s in lease.segments) == lease.duration_s
        if lease.request_type is RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE and not lease.local:
            assert lease.preemptions == 0
        if not lease.local and lease.state is LeaseState.DONE:
            assert abs(lease.time_run - lease.effective_duration_s) < 1e-6
        if lease.state is LeaseState.CANCELLED:
            assert (lease.request_type is RequestType.BEST_EFFORT_CANCELLABLE and lease.preemptions >= 1
                    or lease.deadline_s is not None and "deadline" in lease.reject_reason)
        if lease.deadline_s is not None and lease.state is LeaseState.DONE:
            assert lease.end_s <= lease.deadline_s + 1e-6
    if policy == "nop":
        assert not sched.preemption_log
