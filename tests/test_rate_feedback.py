"""Measured rates into the lease engine (``rate_feedback``) and the CE side of a failed cold
migration (``ce_migration`` through ``NodeAgentEnactment``), without VMs."""
from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, strategies as st

from vgrid_runtime.outcomes import Outcome
from vwn_agents.ce_leases import LeaseScheduling, JobLeaseRequest
from vwn_agents.ce_migration import LeaseMigration
from vwn_agents.leasing.config import LeaseConfig
from vwn_agents.node_enactment import NodeAgentEnactment
from vwn_agents.rate_feedback import MeasuredRates


def test_smoothing_dedup_and_the_slowest_node_plans():
    r = MeasuredRates(alpha=0.5)
    cfg = LeaseConfig()
    assert r.planning(cfg)["suspend-rate"] == (cfg.suspend_rate, "config")      # nothing measured
    assert r.observe("a", "save", {"mb": 100.0, "seconds": 2.0})                 # 50 MB/s
    assert not r.observe("a", "save", {"mb": 100.0, "seconds": 2.0})             # the same record again
    assert r.observe("a", "save", {"mb": 100.0, "seconds": 4.0})                 # 25 -> 0.5*25 + 0.5*50
    assert r.rates["save"]["a"] == 37.5
    assert not r.observe("a", "save", {"mb": 0.2, "seconds": 0.1})               # too small to count
    r.observe_status("b", {"driver": {"last_save": {"mb": 90.0, "seconds": 3.0, "mb_s": 30.0},
                                      "last_restore": None}})
    assert r.planning(cfg)["suspend-rate"] == (30.0, "measured on b")
    assert r.planning(cfg)["resume-rate"] == (cfg.resume_rate, "config")
    sched = SimpleNamespace(cfg=cfg, suspend_rate=cfg.suspend_rate, resume_rate=cfg.resume_rate)
    r.apply(sched, cfg)
    assert sched.suspend_rate == 30.0 == sched.cfg.suspend_rate
    assert sched.resume_rate == cfg.resume_rate and sched.cfg.migration_bandwidth == cfg.migration_bandwidth


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(1, 500), st.floats(0.01, 50)), max_size=30))
def test_the_planning_rate_is_never_faster_than_any_node_measured(samples):
    r = MeasuredRates()
    for node, mb, s in samples:
        r.observe(node, "restore", {"mb": mb, "seconds": s})
    rate, source = r.planning(LeaseConfig())["resume-rate"]
    if not r.rates["restore"]:
        assert source == "config"
    else:
        assert all(rate <= v + 1e-9 for v in r.rates["restore"].values())
        lo = min(mb / s for _, mb, s in samples)
        hi = max(mb / s for _, mb, s in samples)
        assert lo - 1e-6 <= rate <= hi + 1e-6


def test_a_migration_that_cannot_reach_its_nodes_ends_the_lease_with_migration_failed():
    """Both node agents unreachable (nothing listens): every attempt fails, the lease is
    abandoned -- its VWN deleted, its next start reports its end at once -- and the CE's view
    of it says why, which ends the job Aborted with ``migration-failed``."""
    enact = NodeAgentEnactment(["http://127.0.0.1:9", "http://127.0.0.1:7"], payload=None, timeout=1.0)
    slept = []
    enact.migration = LeaseMigration(LeaseConfig(), attempts=3, backoff_s=0.5, timeout_s=1.0, sleep=slept.append)
    lease = SimpleNamespace(id=7, per_vm=(100, 128, 0, 0))
    enact.vwns[7] = [(0, "vwn-a-1")]
    enact.frozen.add(7)
    enact.migrate_vms(lease, (1,), 10.0, planned_s=10.24)
    assert slept == [0.5, 0.5]                                    # three attempts
    reason = enact.migration.failed[7]
    assert "after 3 attempts" in reason and "http://127.0.0.1:9" in reason
    assert 7 in enact.abandoned and 7 not in enact.frozen and 7 not in enact.vwns
    enact.start_vms(lease, (1,), 12.0, 100.0)                    # never started again
    assert enact.pop_events(13.0) == [(12.0, 7)]
    req = JobLeaseRequest("best-effort", 100, 128, 60.0, "LeaseDuration")
    view = {"state": "Active", "start_s": 0.0, "end_s": None, "migration_failed": reason}
    assert LeaseScheduling.outcome(req, view) == (Outcome.MIGRATION_FAILED, reason)


def test_resuming_in_place_needs_no_migration():
    enact = NodeAgentEnactment(["http://127.0.0.1:9"], payload=None, timeout=1.0)
    enact.migration = LeaseMigration(LeaseConfig(), attempts=1, sleep=lambda s: None)
    lease = SimpleNamespace(id=3, per_vm=(100, 128, 0, 0))
    enact.vwns[3] = [(0, "vwn-a-1")]
    enact.frozen.add(3)
    enact.migrate_vms(lease, (0,), 1.0)                          # same node: nothing moves
    assert enact.migration.failed == {} and 3 in enact.frozen
