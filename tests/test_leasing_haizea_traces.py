"""Acceptance: every Haizea unit-test LWF gives the outcome its description states.

Configuration as Haizea's own tests: image transfers (multicast, 100 Mb/s), image caches,
suspend/resume at 32 MB/s with local exclusion, aggressive backfilling, migration allowed.
"""
from pathlib import Path

import pytest

from vwn_agents.leasing import LeaseConfig, LeaseState, read_trace, simulate

from .paths import TRACES

TESTS = TRACES / "lwf/haizea-tests"

BASE = {"lease-preparation": "imagetransfer", "transfer-mechanism": "multicast", "suspend-rate": 32.0,
        "resume-rate": 32.0, "diskimage-reuse": "image-caches", "backfilling": "aggressive"}


def run(name, **overrides):
    opts = dict(BASE)
    opts.update({k.replace("_", "-"): v for k, v in overrides.items()})
    w = read_trace(TESTS / name)
    result = simulate(w.leases, w.nodes, LeaseConfig(opts))
    return {l.id: l for l in result.scheduler.leases.values()}, result


def nodes_of(seg):
    return set(seg.nodes)


@pytest.mark.parametrize("strategy", ["edf", "edf-jit"])
def test_reuse1_best_effort_reuses_cached_image(strategy):
    leases, _ = run("reuse1.lwf", ar_transfer_strategy=strategy)
    ar, be = leases[1], leases[2]
    assert ar.state is LeaseState.DONE and ar.start_s == ar.requested_start_s and ar.ar_on_time
    assert be.transfers == 0 and be.mb_transferred == 0
    assert be.start_s == be.submit_s  # no wait for a transfer
    assert nodes_of(be.segments[0]) <= nodes_of(ar.segments[0])


@pytest.mark.parametrize("strategy", ["edf", "edf-jit"])
def test_reuse2_both_ars_accepted_and_best_effort_reuses(strategy):
    leases, _ = run("reuse2.lwf", ar_transfer_strategy=strategy)
    assert leases[1].state is LeaseState.DONE and leases[2].state is LeaseState.DONE
    assert leases[1].ar_on_time and leases[2].ar_on_time
    be = leases[3]
    assert be.transfers == 0
    assert nodes_of(be.segments[0]) <= nodes_of(leases[2].segments[0])


def test_piggybacking_best_effort_rides_on_ar_transfer():
    leases, _ = run("piggybacking.lwf")
    ar, be = leases[1], leases[2]
    assert ar.transfers == 1 and ar.ar_on_time
    assert be.transfers == 0
    assert be.start_s == ar.end_s
    assert nodes_of(be.segments[0]) == nodes_of(ar.segments[0])


def test_preemption_suspends_and_resumes_after_ar():
    leases, _ = run("preemption.lwf")
    be, ar = leases[1], leases[2]
    assert ar.ar_on_time and ar.start_s == 1800
    assert be.suspensions == 1 and len(be.segments) == 2
    assert be.segments[0].end <= ar.start_s - 32  # suspension (1024 MB at 32 MB/s) done by the AR
    assert be.segments[1].start >= ar.end_s + 32  # resumed after the AR
    assert be.time_run == pytest.approx(3600)


@pytest.mark.parametrize("name,run_s", [("preemption_prematureend.lwf", 2700),
                                         ("preemption_prematureend2.lwf", 2700)])
def test_preemption_with_premature_ends(name, run_s):
    leases, _ = run(name)
    be, ar = leases[1], leases[2]
    assert be.state is LeaseState.DONE and be.time_run == pytest.approx(run_s)
    assert ar.start_s == 1800 and ar.end_s == 1800 + ar.effective_duration_s
    assert be.segments[1].start == pytest.approx(ar.end_s + 32)  # resumed as soon as the AR ended


def test_wait_every_lease_waits_for_the_previous():
    leases, _ = run("wait.lwf")
    order = [leases[i] for i in range(1, 9)]
    for prev, cur in zip(order, order[1:]):
        assert cur.start_s >= prev.end_s
        assert cur.start_s - cur.submit_s > 0


def test_migrate_resumes_on_other_nodes():
    leases, _ = run("migrate.lwf")
    be = leases[3]
    assert be.suspensions == 1 and len(be.segments) == 2
    first, second = nodes_of(be.segments[0]), nodes_of(be.segments[1])
    assert first == nodes_of(leases[2].segments[0])  # ran where AR 2 later runs
    assert second == nodes_of(leases[1].segments[0])  # cold-migrated to AR 1's nodes
    assert be.segments[1].start < leases[2].end_s  # earlier than waiting for its own nodes
    assert be.time_run == pytest.approx(3600)


def test_migration_off_resumes_on_same_nodes():
    leases, _ = run("migrate.lwf", migration="no")
    be = leases[3]
    assert nodes_of(be.segments[1]) == nodes_of(be.segments[0])
    assert be.segments[1].start >= leases[2].end_s


def test_reservation_gets_future_reservation():
    leases, _ = run("reservation.lwf")
    assert leases[2].start_s == pytest.approx(leases[1].end_s)
    assert leases[2].suspensions == 0


def test_reservation_prematureend_moves_reservation_earlier():
    leases, _ = run("reservation_prematureend.lwf")
    first, second = leases[1], leases[2]
    assert first.time_run == pytest.approx(1800)
    assert second.start_s == pytest.approx(first.end_s)
    assert second.start_s < first.start_s + first.duration_s


def test_suspension_off_cancels_and_requeues():
    leases, _ = run("preemption.lwf", suspension="none")
    be, ar = leases[1], leases[2]
    assert ar.ar_on_time
    assert be.suspensions == 0 and len(be.segments) == 2
    assert be.segments[0].end == ar.start_s  # ran until the AR, then was killed
    assert be.segments[1].end - be.segments[1].start == pytest.approx(3600)  # restarted from scratch


def test_serial_best_effort_schedules_each_vm_on_its_own():
    # wait.lwf: 4-VM leases on 4 nodes; serially each VM is its own lease, same outcome order
    parallel, _ = run("wait.lwf", transfer_mechanism="unicast")
    serial, result = run("wait.lwf", besteffort_mode="serial", transfer_mechanism="unicast")
    report = result.report()
    assert len(report["leases"]) == 8
    assert all(rec["state"] == "Done" for rec in report["leases"])
    assert all(len(rec["nodes"]) >= 1 for rec in report["leases"])
    assert report["metrics"]["all_best_effort_s"] <= max(l.end_s for l in parallel.values())


def test_serial_vms_start_as_soon_as_one_node_is_free():
    # reservation.lwf: lease 2 (4 VMs) no longer waits for lease 1's node: 3 VMs start at once
    leases, result = run("reservation.lwf", besteffort_mode="serial")
    second = leases[2]
    assert second.start_s < leases[1].end_s
    assert sum(len(seg.nodes) for seg in second.segments) == 4  # four one-VM runs
    assert second.end_s < leases[1].end_s  # the fourth VM ran on a node freed by the first three
