"""Seed 002 (Amini Salehi, Javadi, Buyya 2013): request types, the overhead model eq. (3)-(8),
candidate sets eq. (1)-(2), the policies NOP / MOV (eq. (9)) / MLIP (eq. (10)) / MOML
(Algorithm 1), the metrics eq. (11)-(13) and Table III on the Table II scenario.

Hand-computed values are written as the arithmetic they come from; the paper's numbers carry
their table / section reference. docs/experiments/preemption.md derives the Table III constants.
"""
import statistics

import pytest

from vwn_agents.leasing import LeaseConfig, LeaseState, LeaseType, load_config, read_trace, simulate
from vwn_agents.leasing.candidatepolicy import MLIP, MOML, MOV, NOP, candidate_set_policy
from vwn_agents.leasing.candidates import Candidate, enumerate_candidate_sets
from vwn_agents.leasing.config import ConfigError
from vwn_agents.leasing.model import Lease, resource_vector
from vwn_agents.leasing.overhead import OverheadModel, vm_copy_time, vm_resume_time, vm_suspend_time
from vwn_agents.leasing.requesttypes import RequestType, request_type

from .paths import REPO

SCENARIO = REPO / "examples/preemption/seed002-table2.lwf"
CONFIG = REPO / "examples/preemption/seed002-table3.toml"
# Section 7.2's simulation constants: B = 6.36 MB/s, r = 8.12 MB/s, t_p = 5 ms, delta = 2.3 s,
# b = 100 Mb/s = 12.5 MB/s.
SIM = OverheadModel(pause_s=0.005, suspend_rate=6.36, resume_rate=8.12, rescheduling_s=2.3,
                    migration_bandwidth=12.5)
# Table III's constants (docs/experiments/preemption.md): t_p = 0.5 s, B = r = 20.25 MB/s, delta = 0.
T3 = OverheadModel(pause_s=0.5, suspend_rate=20.25, resume_rate=20.25, rescheduling_s=0.0)


def lease(lid, vms=1, mem=1024, rtype=RequestType.BEST_EFFORT_SUSPENDABLE, local=False, **kw):
    return Lease(lid, kw.pop("type", LeaseType.BEST_EFFORT), kw.pop("submit_s", 0.0), kw.pop("duration_s", 3600.0),
                 vms, resource_vector(cpu=100, memory=mem), request_type=rtype, local=local, **kw)


# ---------------------------------------------------------------- request types (Section 4.2)

def test_request_type_names_and_local_requests():
    assert request_type("Best-Effort-Cancellable") is RequestType.BEST_EFFORT_CANCELLABLE
    assert request_type("migratable") is RequestType.DEADLINE_CONSTRAINT_MIGRATABLE
    with pytest.raises(ValueError, match="non-preemptable"):
        request_type("sometimes")
    loc = lease(1, rtype=None, local=True, type=LeaseType.ADVANCE_RESERVATION, requested_start_s=0.0)
    assert loc.request_type is RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE and not loc.preemptable
    with pytest.raises(ValueError, match="local request"):
        lease(2, local=True)
    assert lease(3).preemptable and not lease(4, rtype=RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE).preemptable
    # the older boolean maps onto the types: preemptible best-effort = suspendable
    assert Lease(5, LeaseType.BEST_EFFORT, 0, 10, 1, (100, 1, 0, 0)).request_type is RequestType.BEST_EFFORT_SUSPENDABLE
    ar = Lease(6, LeaseType.ADVANCE_RESERVATION, 0, 10, 1, (100, 1, 0, 0), requested_start_s=5)
    assert ar.request_type is RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE
    with pytest.raises(ValueError, match="deadline"):
        lease(7, deadline_s=100.0)


# ---------------------------------------------------------------- overhead model, eq. (3)-(8)

def test_eq3_eq4_one_vm_of_1024_mb_section_7_2():
    # Section 7.2: "suspension time (t_s) and resumption time (t_r) for a lease with 1 VM are
    # 161.0 and 126.1 s" for 1024 MB VMs at B = 6.36 and r = 8.12 MB/s.
    assert round(vm_suspend_time(1024, 6.36), 1) == 161.0
    assert round(vm_resume_time(1024, 8.12), 1) == 126.1
    assert vm_copy_time(1024, 12.5) == pytest.approx(81.92)


def test_eq5_to_eq7_suspendable_lease():
    two = lease(1, vms=2, mem=1024)
    s = 2 * 0.005 + 2 * 1024 / 6.36 + 2.3          # eq. (5)
    r = 2 * 0.005 + 2 * 1024 / 8.12                # eq. (6)
    assert SIM.suspension(two) == pytest.approx(s)
    assert SIM.resumption(two) == pytest.approx(r)
    assert SIM.suspendable(two) == pytest.approx(s + r)                    # eq. (7) = s + r
    assert SIM.suspendable(two) == pytest.approx(4 * 0.005 + 2.3 + 2 * (1024 / 6.36 + 1024 / 8.12))
    assert SIM.lease_overhead(two) == SIM.suspendable(two)
    assert SIM.lease_overhead(two, started=False) == 2.3                    # a waiting reservation


def test_eq8_migratable_lease_overlaps_suspend_and_resume():
    three = lease(1, vms=3, mem=512, rtype=RequestType.DEADLINE_CONSTRAINT_MIGRATABLE)
    ts, tr, tc = 512 / 6.36, 512 / 8.12, 512 / 12.5
    # 3 copies + t_s^1 + max(t_s^2, t_r^1) + max(t_s^3, t_r^2) + t_r^3 + 2 v t_p + delta
    want = 3 * tc + ts + max(ts, tr) + max(ts, tr) + tr + 2 * 3 * 0.005 + 2.3
    assert SIM.migratable(three) == pytest.approx(want)
    assert SIM.lease_overhead(three) == pytest.approx(want)
    # resuming faster than suspending is hidden by the overlap; slower is not
    slow_resume = OverheadModel(0.0, 10.0, 5.0, 0.0, 100.0)
    one = 512 / 10.0
    assert slow_resume.migratable(three) == pytest.approx(3 * 5.12 + one + 2 * 102.4 + 102.4)
    assert SIM.migratable(lease(2, vms=1, mem=512)) == pytest.approx(tc + ts + tr + 0.01 + 2.3)


def test_cancellable_and_non_preemptable_overheads():
    model = OverheadModel(cancel_s=0.7)
    assert model.lease_overhead(lease(1, vms=4, rtype=RequestType.BEST_EFFORT_CANCELLABLE)) == 0.7
    with pytest.raises(ValueError, match="Non-Preemptable"):
        model.lease_overhead(lease(2, rtype=RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE))


def test_overhead_constants_come_from_the_lease_configuration():
    cfg = LeaseConfig({"pause-time": 0.1, "suspend-rate": 2.0, "resume-rate": 4.0, "rescheduling-time": 1.5,
                       "migration-bandwidth": 8.0, "cancel-time": 0.2})
    assert OverheadModel.from_config(cfg) == OverheadModel(0.1, 2.0, 4.0, 1.5, 8.0, 0.2)
    with pytest.raises(ConfigError, match="pause-time"):
        LeaseConfig({"pause-time": -1.0})


# ---------------------------------------------------------------- Table II candidate sets, eq. (1)-(2)

TABLE2 = {1: (3, 256), 2: (1, 128), 3: (2, 128), 4: (1, 256), 5: (2, 64), 6: (3, 128)}  # id: (VMs, MB per VM)


def table2_candidates(model=T3):
    leases = [lease(i, vms=v, mem=mem) for i, (v, mem) in TABLE2.items()]
    return [Candidate(l, l.n_vms, model.lease_overhead(l), True, l.n_vms * l.per_vm[1]) for l in leases]


def test_table2_candidate_sets_are_the_nine_minimal_ones():
    sets, complete = enumerate_candidate_sets(table2_candidates(), need=5)
    assert complete
    # by hand: every set of Table II's external leases with >= 5 VMs where no member can be dropped
    assert {frozenset(s.ids) for s in sets} == {frozenset(x) for x in (
        {1, 3}, {1, 5}, {1, 6}, {3, 6}, {5, 6}, {1, 2, 4}, {2, 3, 5}, {3, 4, 5}, {2, 4, 6})}
    assert all(s.vms >= 5 and all(s.vms - c.vms < 5 for c in s.members) for s in sets)
    # enumeration order: cheapest per VM first (5: 64 MB; 2, 3, 6: 128 MB; 1, 4: 256 MB), ids break ties
    assert sets[0].ids == (5, 2, 3)


def test_enumeration_bound_keeps_the_greedy_sets():
    sets, complete = enumerate_candidate_sets(table2_candidates(), need=5, max_sets=2)
    assert not complete
    ids = [frozenset(s.ids) for s in sets]
    assert frozenset({5, 2, 3}) in ids and frozenset({1, 6}) in ids   # cheapest-first and largest-first
    assert enumerate_candidate_sets(table2_candidates(), need=0) == ([], True)
    assert enumerate_candidate_sets(table2_candidates(), need=13) == ([], True)


def test_policies_on_table2_sets():
    sets, _ = enumerate_candidate_sets(table2_candidates(), need=5)
    assert NOP().choose(sets) is None
    assert set(MOV().choose(sets).ids) == {5, 2, 3}
    assert set(MLIP().choose(sets).ids) == {1, 6}
    assert set(MOML().choose(sets).ids) == {5, 6}
    # alpha = the median of the nine overheads: the 5th smallest, {2, 4, 6} (768 MB, 5 VMs)
    assert MOML.alpha(sets) == pytest.approx(5 * 2 * 0.5 + 768 * (1 / 20.25 + 1 / 20.25), abs=1e-6)
    with pytest.raises(ConfigError, match="policy-preemption"):
        candidate_set_policy("fifo")


def test_moml_between_mov_and_mlip():
    # alpha -> 0 gives MOV, alpha -> infinity gives MLIP (Section 6.3): with one set below the
    # median MOML is MOV's choice; with equal overheads it is MLIP's.
    cands = [Candidate(lease(i), 1, h) for i, h in ((1, 1.0), (2, 1.0), (3, 9.0))]
    big = Candidate(lease(4, vms=2), 2, 30.0)
    sets, _ = enumerate_candidate_sets(cands + [big], need=2)
    assert set(MOV().choose(sets).ids) == {1, 2}
    assert set(MLIP().choose(sets).ids) == {4}
    assert set(MOML().choose(sets).ids) == {1, 2}      # median: {1,3}/{2,3} 10 s; {4} is above it
    equal = [Candidate(lease(i), 1, 1.0) for i in (1, 2)] + [Candidate(lease(4, vms=2), 2, 2.0)]
    sets, _ = enumerate_candidate_sets(equal, need=2)
    assert set(MOML().choose(sets).ids) == {4}


# ---------------------------------------------------------------- Table III on the Table II scenario

def run(policy: str):
    w = read_trace(SCENARIO)
    cfg = load_config(CONFIG).with_options(policy_preemption=policy)
    result = simulate(w.leases, w.nodes, cfg)
    return result.scheduler, result.report()


def test_table2_scenario_reads_as_the_paper_states():
    w = read_trace(SCENARIO)
    assert len(w.nodes) == 3 and all(n.capacity[0] == 400 for n in w.nodes)     # 3 quad-core servers
    byid = {l.id: l for l in w.leases}
    assert [(byid[i].n_vms, byid[i].per_vm[1], byid[i].duration_s) for i in range(1, 8)] == [
        (3, 256, 3600), (1, 128, 5400), (2, 128, 5400), (1, 256, 5400), (2, 64, 2400), (3, 128, 3600),
        (5, 128, 3600)]
    assert byid[7].local and byid[7].requested_start_s == byid[7].submit_s == 720.0
    assert all(byid[i].request_type is RequestType.BEST_EFFORT_SUSPENDABLE for i in range(1, 7))


def test_nop_rejects_the_local_request():
    sched, rep = run("nop")
    assert sched.leases[7].state is LeaseState.REJECTED
    assert rep["metrics"]["local_rejection_rate"] == 1.0 and rep["metrics"]["preemptions"] == 0
    assert rep["metrics"]["last_end_s"] == 480 + 5400          # lease 4 ends last


# Table III: policy -> (preempted leases, MB, overhead s (paper), paper makespan s). Its overhead
# column is the suspension s(C) = sum of eq. (5) over the set (docs/experiments/preemption.md).
TABLE3 = {"mlip": ({1, 6}, 1152, 59.9, 7800), "mov": ({5, 2, 3}, 512, 27.8, 8479), "moml": ({5, 6}, 512, 27.8, 7800)}
# Our makespans by hand (the preempted leases resume in FCFS order under conservative backfilling):
# MLIP: 1 resumes at 2,930 s (lease 5 ends), 6 at 4,320 s (the local request ends): 4320 + r(6) + (3600 - 140)
# MOML: 5 resumes at 3,600 s (lease 1 ends), 6 at 4,320 s: the same 4320 + r(6) + 3460
# MOV: 2 and 3 resume at 3,600 s, 5 at 4,180 s (lease 6 ends); 3 ends last: 3600 + r(3) + (5400 - 360)
R6 = 3 * 0.5 + 3 * 128 / 20.25            # r(6), eq. (6)
R3 = 2 * 0.5 + 2 * 128 / 20.25
OURS = {"mlip": 4320 + R6 + 3460, "moml": 4320 + R6 + 3460, "mov": 3600 + R3 + 5040}


@pytest.mark.parametrize("policy", ["mlip", "mov", "moml"])
def test_table3(policy):
    chosen, mb, overhead, paper_makespan = TABLE3[policy]
    sched, rep = run(policy)
    assert len(sched.preemption_log) == 1
    t, local_id, ids, h, name = sched.preemption_log[0]
    assert (t, local_id, set(ids), name) == (720.0, 7, chosen, policy)
    assert sum(sched.leases[i].n_vms * sched.leases[i].per_vm[1] for i in ids) == mb
    suspension = sum(T3.suspension(sched.leases[i]) for i in ids)            # s(C), eq. (5)
    assert round(suspension, 1) == overhead
    assert h == pytest.approx(sum(T3.suspendable(sched.leases[i]) for i in ids))   # h(C), eq. (7)
    local = sched.leases[7]
    assert local.state is LeaseState.DONE and local.start_s == 720.0      # served without delay
    m = rep["metrics"]
    assert m["local_rejection_rate"] == 0.0 and m["external_rejection_rate"] == 0.0
    assert m["preemptions"] == len(chosen) and m["preemption_overhead_s"] == pytest.approx(h)
    assert m["last_end_s"] == pytest.approx(OURS[policy], abs=1e-6)
    assert all(l.state is LeaseState.DONE for l in sched.leases.values() if l.id != 7)
    if policy != "mov":  # Table III's makespan to the second; MOV: docs/experiments/preemption.md
        assert round(m["last_end_s"]) == paper_makespan


def test_table3_mov_makespan_of_the_paper_is_below_any_schedule():
    # MOV preempts 2 and 3 at 720 s with 4,980 s and 5,040 s left; no core is free before lease 1
    # ends at 3,600 s (all 12 cores run 1, 4, 6 and the local request), so 3 cannot end before
    # 3600 + 5040 = 8,640 s > Table III's 8,479 s (docs/experiments/preemption.md).
    sched, rep = run("mov")
    assert rep["metrics"]["last_end_s"] >= 3600 + 5040 > TABLE3["mov"][3]


def test_eq13_makespan_and_eq11_utilization_of_moml():
    sched, rep = run("moml")
    m = rep["metrics"]
    ends = {l.id: l.end_s for l in sched.leases.values()}
    ready = {1: 0, 2: 300, 3: 360, 4: 480, 5: 530, 6: 580}
    assert m["makespan_external_s"] == pytest.approx(statistics.mean(ends[i] - ready[i] for i in ready))
    useful = 100 * sum(l.n_vms * l.duration_s for l in sched.leases.values())   # every lease completed
    assert m["utilization_eq11"] == pytest.approx(useful / (1200 * max(ends.values())))
    assert m["utilization_eq11"] < 1.0
    rec = {r["id"]: r for r in rep["leases"]}
    assert rec[6]["preemptions"] == 1 and rec[6]["overhead_s"] == pytest.approx(T3.suspendable(sched.leases[6]))
    assert rec[7]["origin"] == "local" and rec[1]["request_type"] == "suspendable"


def test_cancellable_leases_are_cancelled_and_count_as_waste(tmp_path):
    text = SCENARIO.read_text().replace('request-type="suspendable"', 'request-type="cancellable"')
    p = tmp_path / "c.lwf"
    p.write_text(text)
    w = read_trace(p)
    result = simulate(w.leases, w.nodes, load_config(CONFIG).with_options(policy_preemption="mov"))
    sched, m = result.scheduler, result.report()["metrics"]
    (_, _, ids, h, _), = sched.preemption_log
    assert h == 0.0 and sched.leases[7].state is LeaseState.DONE
    cancelled = {l.id for l in sched.leases.values() if l.state is LeaseState.CANCELLED}
    assert cancelled == set(ids) and all(sched.leases[i].end_s == 720.0 for i in ids)
    assert m["utilization_eq11"] < m["utilization"]      # the cancelled leases' runs are waste


def test_only_local_requests_preempt_and_never_non_preemptable_leases(tmp_path):
    head, tail = SCENARIO.read_text().split('<lease id="7"')
    tail = tail.replace('origin="local"', 'origin="external"').replace("<start/>",
                                                                      '<start><exact time="00:12:00"/></start>')
    p = tmp_path / "x.lwf"
    p.write_text(head + '<lease id="7"' + tail)      # request 7 as an external advance reservation
    w = read_trace(p)
    assert not {l.id: l for l in w.leases}[7].local
    result = simulate(w.leases, w.nodes, load_config(CONFIG))
    assert result.scheduler.leases[7].state is LeaseState.REJECTED and not result.scheduler.preemption_log
    # a local request finds no candidate among non-preemptable external leases
    p.write_text(SCENARIO.read_text().replace('request-type="suspendable"', 'request-type="non-preemptable"'))
    w = read_trace(p)
    result = simulate(w.leases, w.nodes, load_config(CONFIG))
    assert result.scheduler.leases[7].state is LeaseState.REJECTED and not result.scheduler.preemption_log


@pytest.mark.parametrize("policy", ["ar-preempts-everything", "moml"])
def test_issue_13_local_request_starting_at_its_arrival_is_served(policy):
    # issue 13: replaying Table II, request 7 (start = arrival) was Rejected: no suspension can
    # end before a start that is now. The preempted VMs are now paused at 720 s and suspended
    # while request 7 runs; their SUSPEND reservation holds memory but no CPU.
    w = read_trace(SCENARIO)
    cfg = LeaseConfig({"policy-preemption": policy, "backfilling": "conservative"})
    result = simulate(w.leases, w.nodes, cfg)
    sched = result.scheduler
    local = sched.leases[7]
    assert local.state is LeaseState.DONE and local.start_s == 720.0 and local.end_s == 720.0 + 3600
    preempted = [l for l in sched.leases.values() if l.suspensions]
    assert preempted and all(l.segments[0].end == 720.0 for l in preempted)
    assert sum(l.n_vms for l in preempted) >= 5
    assert all(l.state is LeaseState.DONE for l in sched.leases.values())


def test_paused_suspension_holds_memory_only():
    from vgrid_runtime.clock import SimulatedClock
    from vwn_agents.leasing import LeaseScheduler, ResKind, SimulatedNodes, uniform_site
    nodes = uniform_site(1, 2, 1024)
    clock = SimulatedClock(0.0)
    sched = LeaseScheduler(nodes, LeaseConfig({"policy-preemption": "mov"}), clock, SimulatedNodes(nodes))
    ext = lease(1, vms=2, mem=256, duration_s=7200.0)
    sched.submit(ext)
    sched.process(0.0)
    clock.advance_to(100.0)
    loc = Lease(2, LeaseType.ADVANCE_RESERVATION, 100.0, 600.0, 1, resource_vector(cpu=100, memory=256),
                requested_start_s=100.0, local=True)
    sched.submit(loc)
    assert loc.state is LeaseState.SCHEDULED
    (susp,) = [r for r in sched.st.of_lease(ext) if r.kind is ResKind.SUSPEND]
    s = 2 * 0.005 + 2 * 256 / 32.0 + 2.3          # eq. (5) with the default rates
    assert (susp.start, susp.end) == (100.0, pytest.approx(100.0 + s))
    assert susp.use == {0: (0, 512, 0, 0)}
    sched.process(100.0)
    assert loc.state is LeaseState.ACTIVE and ext.state is LeaseState.SUSPENDING


def test_leases_preempted_together_are_requeued_even_if_one_is_cancelled_while_suspending():
    from vgrid_runtime.clock import SimulatedClock
    from vwn_agents.leasing import LeaseScheduler, SimulatedNodes
    w = read_trace(SCENARIO)
    clock = SimulatedClock(0.0)
    sched = LeaseScheduler(w.nodes, load_config(CONFIG).with_options(policy_preemption="mov"), clock,
                           SimulatedNodes(w.nodes))

    def run_until(t_end, pending):
        while True:
            t = min([l.submit_s for l in pending] + [sched.next_event_time()])
            if t > t_end:
                break
            clock.advance_to(max(t, clock.now()))
            sched.process(clock.now(), ends_only=True)
            for l in [l for l in pending if l.submit_s <= clock.now()]:
                sched.submit(l)
                pending.remove(l)
            sched.process(clock.now())
        clock.advance_to(t_end)
    pending = list(w.leases)
    run_until(721.0, pending)
    assert set(sched.preemption_log[0][2]) == {5, 2, 3}
    assert sched.leases[3].state is LeaseState.SUSPENDING       # 256 MB: the longest suspension
    sched.cancel(3)
    run_until(10**6, pending)
    assert sched.leases[3].state is LeaseState.CANCELLED
    assert sched.leases[2].state is LeaseState.DONE and sched.leases[5].state is LeaseState.DONE
    assert not sched.suspend_batches


def test_a_waiting_reservation_is_a_candidate_that_costs_delta():
    # seed 002 Figure 2: reservations waiting in the queue are affected too; unscheduling one
    # costs only its rescheduling (delta), and it is placed again after the local request.
    from vwn_agents.leasing import uniform_site
    site = uniform_site(1, 2, 4096)
    a = lease(1, vms=2, mem=256, duration_s=3600.0)
    b = lease(2, vms=2, mem=256, duration_s=3600.0, submit_s=10.0)
    loc = Lease(3, LeaseType.ADVANCE_RESERVATION, 100.0, 1000.0, 2, resource_vector(cpu=100, memory=256),
                requested_start_s=4000.0, local=True)
    cfg = LeaseConfig({"policy-preemption": "moml", "backfilling": "conservative", "rescheduling-time": 2.3})
    sched = simulate([a, b, loc], site, cfg).scheduler
    (t, lid, ids, h, _), = sched.preemption_log
    assert (t, lid, ids, h) == (100.0, 3, (2,), 2.3)
    assert b.preemptions == 1 and b.state is LeaseState.DONE
    assert sum(g.end - g.start for g in b.segments) == pytest.approx(3600.0)
    assert all(g.end <= 4000.0 or g.start >= 5000.0 for g in b.segments)   # not while the local request runs
    assert loc.start_s == 4000.0 and loc.end_s == 5000.0 and a.end_s == 3600.0


def test_seed002_migration_copies_the_memory_images_over_b():
    from vwn_agents.leasing.preemption import migration_time
    cfg = LeaseConfig({"policy-preemption": "mov", "migration": "yes", "migration-bandwidth": 12.5})
    two = lease(1, vms=2, mem=1024, image_mb=600.0)
    assert migration_time(two, (0, 1), (0, 2), cfg) == pytest.approx(1024 / 12.5)     # one VM, memory only
    assert migration_time(two, (0, 1), (1, 0), cfg) == 0.0
    haizea = cfg.with_options(policy_preemption="ar-preempts-everything")           # memory + disk image
    assert migration_time(two, (0, 1), (0, 2), haizea) == pytest.approx((1024 + 600) / (100 / 8))


def test_a_lease_with_a_planned_suspension_is_suspended_earlier():
    # B runs from 0 s with Haizea's planned suspension before local request 1 (3,600 s); local
    # request 2 (arriving at 100 s for 2,000 s) preempts it: the planned suspension is replaced by
    # one that ends by 2,000 s, and B runs its whole duration around both requests.
    from vwn_agents.leasing import uniform_site
    site = uniform_site(1, 2, 4096)
    l1 = Lease(1, LeaseType.ADVANCE_RESERVATION, 0.0, 600.0, 2, resource_vector(cpu=100, memory=256),
               requested_start_s=3600.0, local=True)
    b = lease(2, vms=2, mem=256, duration_s=7200.0)
    l2 = Lease(3, LeaseType.ADVANCE_RESERVATION, 100.0, 600.0, 2, resource_vector(cpu=100, memory=256),
               requested_start_s=2000.0, local=True)
    sched = simulate([l1, b, l2], site, LeaseConfig({"policy-preemption": "mov"})).scheduler
    assert [x[2] for x in sched.preemption_log] == [(2,)]
    assert l1.start_s == 3600.0 and l2.start_s == 2000.0 and b.state is LeaseState.DONE
    assert sum(g.end - g.start for g in b.segments) == pytest.approx(7200.0)
    s_b = OverheadModel.from_config(LeaseConfig()).suspension(b)
    assert b.segments[0].end == pytest.approx(2000.0 - s_b)              # its suspension ends by 2,000 s
    assert all(g.end <= 2000.0 or g.start >= 2600.0 for g in b.segments)
    assert all(g.end <= 3600.0 or g.start >= 4200.0 for g in b.segments)


def test_deadline_constrained_requests_are_admitted_only_if_they_can_end_by_their_deadline():
    from vwn_agents.leasing import uniform_site
    site = uniform_site(1, 2, 4096)
    a = lease(1, vms=2, mem=256, duration_s=3600.0)
    tight = lease(2, vms=1, mem=256, duration_s=1000.0, rtype=RequestType.DEADLINE_CONSTRAINT_MIGRATABLE,
                  deadline_s=3000.0, submit_s=10.0)
    loose = lease(3, vms=1, mem=256, duration_s=1000.0, rtype=RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE,
                  deadline_s=5000.0, submit_s=10.0)
    result = simulate([a, tight, loose], site, LeaseConfig({"policy-preemption": "moml"}))
    assert tight.state is LeaseState.REJECTED and "deadline" in tight.reject_reason
    assert loose.state is LeaseState.DONE and (loose.start_s, loose.end_s) == (3600.0, 4600.0)
    assert result.report()["metrics"]["external_rejection_rate"] == pytest.approx(1 / 3)


def test_a_preempted_migratable_lease_that_cannot_meet_its_deadline_here_is_cancelled():
    from vwn_agents.leasing import uniform_site
    site = uniform_site(1, 2, 4096)
    mig = lease(1, vms=2, mem=256, duration_s=3600.0, rtype=RequestType.DEADLINE_CONSTRAINT_MIGRATABLE,
                deadline_s=4000.0)
    loc = Lease(2, LeaseType.ADVANCE_RESERVATION, 100.0, 1000.0, 2, resource_vector(cpu=100, memory=256),
                requested_start_s=100.0, local=True)
    cfg = LeaseConfig({"policy-preemption": "mov"})
    sched = simulate([mig, loc], site, cfg).scheduler
    assert loc.state is LeaseState.DONE and loc.start_s == 100.0
    assert mig.overhead_s == pytest.approx(OverheadModel.from_config(cfg).migratable(mig))   # eq. (8)
    # 3,500 s left after 100 s; the earliest resumption is at 1,100 s: it cannot end by 4,000 s
    assert mig.state is LeaseState.CANCELLED and "deadline" in mig.reject_reason
    assert sched.leases[1].segments[0].end == 100.0


def test_without_suspension_a_preempted_lease_restarts_from_scratch():
    # the live CE agent runs with suspension = none (node agents cannot suspend a VWN yet)
    w = read_trace(SCENARIO)
    cfg = load_config(CONFIG).with_options(policy_preemption="moml", suspension="none")
    sched = simulate(w.leases, w.nodes, cfg).scheduler
    assert set(sched.preemption_log[0][2]) == {5, 6} and sched.leases[7].start_s == 720.0
    for i in (5, 6):
        l = sched.leases[i]
        assert l.state is LeaseState.DONE and l.suspensions == 0
        assert l.segments[0].end == 720.0 and l.segments[-1].end - l.segments[-1].start == l.duration_s


def test_vgrid_simulate_preemption_policy_and_seed002_metrics(tmp_path):
    import csv
    import json

    from click.testing import CliRunner

    from vgrid_cli.simulate_cmds import simulate_cmd
    args = [str(SCENARIO), "--config", str(CONFIG), "--preemption-policy", "mov", "--json", "--out", str(tmp_path)]
    r = CliRunner().invoke(simulate_cmd, args)
    assert r.exit_code == 0, r.output
    m = json.loads(r.output)["metrics"]
    assert m["preemptions"] == 3 and m["local_rejection_rate"] == 0.0
    assert m["last_end_s"] == pytest.approx(OURS["mov"])
    rows = {row["id"]: row for row in csv.DictReader((tmp_path / "leases.csv").open())}
    assert rows["7"]["origin"] == "local" and rows["2"]["preemptions"] == "1"
    metrics = {row["metric"]: row["value"] for row in csv.DictReader((tmp_path / "metrics.csv").open())}
    for k in ("local_rejection_rate", "external_rejection_rate", "utilization_eq11", "preemptions",
              "preemption_overhead_s", "makespan_external_s"):
        assert float(metrics[k]) == pytest.approx(m[k]), k
    bad = CliRunner().invoke(simulate_cmd, [str(SCENARIO), "--preemption-policy", "fifo"])
    assert bad.exit_code == 2 and "policy-preemption" in bad.output
