"""The CE agent's lease engine enacts suspensions on real VWNs (``suspend_vwns``): an advance
reservation on a full CE freezes a Best-Effort-Suspendable job's VWN instead of deleting it, runs,
and the job is thawed afterwards where it stopped (issue 13, "Live, on real VWNs")."""
from __future__ import annotations

import time

import pytest

from vgrid_runtime.clock import SimulatedClock

from .paths import JOB_PYTHON
from .test_ce_agent import site, submit  # noqa: F401  (site: a fixture)
from .test_vwn_suspend import burner, counters
from .waiting import EngineTicks, release, wait_until


def test_an_advance_reservation_suspends_a_suspendable_job_which_resumes_where_it_stopped(site, tmp_path, receiver):
    """The CE agent with ``suspend_vwns``: an AR on a full CE freezes the Best-Effort-Suspendable
    job's VWN (no kill), runs, and the job is thawed afterwards; its counter never restarts."""
    lease_cfg = tmp_path / "lease.toml"
    lease_cfg.write_text('[scheduling]\nsuspend-rate = 2048.0\nresume-rate = 2048.0\n')
    clock = SimulatedClock(float(int(time.time())))
    ce_url, ce, nodes = site(n_nodes=1, vwns_per_node=1, clock=clock, suspend_vwns=True,
                            lease_config=str(lease_cfg))
    if nodes[0].fz.version == "none" or not nodes[0].cg.capped:
        pytest.skip(f"no cgroup freezer: {nodes[0].fz.reason or nodes[0].cg.reason}")
    args, gate = burner(tmp_path, "be-susp")
    be, resp = submit(ce_url, receiver, f'[ Executable = "{JOB_PYTHON}"; Arguments = "{args}"; '
                                      'StdOutput = "out.txt"; PreemptionClass = "suspendable"; VMMemory = 64; ]')
    assert resp.status_code == 202, resp.text
    running = receiver.wait_event(be, "running")
    vwn = running["vwn"]
    out = nodes[0].job_dir(vwn) / "out.txt"
    wait_until(lambda: len(counters(out)) >= 3, "the counter to print")
    ticks = EngineTicks(ce)
    start = int(clock.now()) + 5
    ar, resp = submit(ce_url, receiver, '[ Executable = "/bin/true"; LeaseType = "advance-reservation"; '
                                      f'LeaseStart = {start}; LeaseDuration = 30; VMMemory = 64; ]')
    assert resp.status_code == 202, resp.text
    ticks.wait()
    clock.advance_to(start - 0.5)          # the job's VM reservation ended: its suspension runs
    receiver.wait_event(be, "suspended")
    assert nodes[0].vwns[vwn].state.value == "suspended" and nodes[0].fz.frozen(vwn)
    printed = len(counters(out))
    clock.advance_to(start)                # the AR starts on the freed node
    receiver.wait_event(ar, "done")
    clock.advance(2.0)                     # the AR ended early: the job resumes on its node
    receiver.wait_event(be, "resumed", timeout_s=60)
    clock.advance(2.0)
    wait_until(lambda: len(counters(out)) >= printed + 3, "the counter to go on")
    seen = counters(out)
    assert seen == list(range(len(seen))), "the job restarted"
    release(gate)
    done = receiver.wait_event(be, "done", timeout_s=60)
    assert done["exit_code"] == 0
    kinds = [e["event"] for e in receiver.events_for(be)]
    assert "aborted" not in kinds and kinds.count("running") == 1, kinds
    assert kinds.index("suspended") < kinds.index("resumed") < kinds.index("done")
