"""Acceptance: the 30-day SDSC Blue Horizon workload runs to completion (issue 5).

144 nodes of 1 CPU and 1024 MB, best-effort only, aggressive backfilling, suspension of all
leases at 50 MB/s, no image transfers. Haizea 1.1 reports all-best-effort = 2,651,340 s for
this configuration; docs/benchmarks.md explains the small difference.
"""
from pathlib import Path

import pytest

from vwn_agents.leasing import LeaseConfig, LeaseState, read_trace, simulate, uniform_site

from .paths import TRACES

BLUE = TRACES / "haizea/blue/30days.swf"


def test_blue_30_days_completes_close_to_haizea():
    leases = read_trace(BLUE).leases
    cfg = LeaseConfig({"backfilling": "aggressive", "suspension": "all", "suspend-rate": 50.0,
                       "resume-rate": 50.0})
    result = simulate(leases, uniform_site(144, 1, 1024), cfg)
    metrics = result.report()["metrics"]
    assert len(leases) == 5108
    assert all(l.state is LeaseState.DONE for l in leases)
    assert all(abs(l.time_run - l.effective_duration_s) < 1e-6 for l in leases)
    assert metrics["all_best_effort_s"] == pytest.approx(2_651_340, rel=0.01)
    assert 0 < metrics["utilization"] <= 1 and metrics["mean_wait_s"] > 0
