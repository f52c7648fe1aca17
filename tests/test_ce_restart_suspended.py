"""A CE agent restarted while a lease is suspended in place (its VWN frozen, ``suspend_vwns``,
on by default) adopts it: the VWN stays frozen, its memory stays held in the engine, and it is
thawed at the time the engine had scheduled before the restart; the job's counter never restarts.
(Issue 13: "a CE agent restarted while a lease is suspended adopts it and resumes it".)"""
from __future__ import annotations

import itertools
import time

import pytest
import requests

from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app
from vwn_agents.leasing.slottable import ResKind
from vwn_agents.node_agent import NodeAgentConfig, create_app as create_node_app

from .paths import JOB_PYTHON
from .test_ce_agent_restart import submit
from .test_vwn_suspend import burner, counters
from .waiting import gated_jdl, release, wait_until

_n = itertools.count(1)


def _resume_at(ce, key: str) -> float:
    """When the engine plans to resume job ``key``'s suspended lease (clock s), once it has."""
    eng = ce.leases.engine

    def planned():
        with eng._lock:
            lease = eng._by_key.get(key)
            return lease is not None and min((r.start for r in eng.scheduler.st.of_lease(lease)
                                              if r.kind in (ResKind.RESUME, ResKind.VM)), default=None)
    return wait_until(planned, f"the resumption of {key} scheduled")


def _held_mb(ce, key: str) -> float:
    eng = ce.leases.engine
    return sum(vec[1] for r in eng.scheduler.st.of_lease(eng._by_key[key]) if r.kind is ResKind.HOLD
               for vec in r.use.values())


def test_a_restarted_ce_agent_adopts_a_frozen_lease_and_resumes_it_when_scheduled(tmp_path, receiver):
    clock = SimulatedClock(float(int(time.time())))
    node = BackgroundServer(create_node_app(NodeAgentConfig.from_dict(
        {"node": f"fzn{next(_n)}", "capacity": 1.0, "retry_initial_s": 0.05, "retry_max_s": 0.3,
         "work_dir": str(tmp_path / "node")}), clock))
    node_agent = node.app.config["VGRID_AGENT"]
    if node_agent.fz.version == "none":
        node.close()
        pytest.skip(f"no cgroup freezer: {node_agent.fz.reason}")
    lease_cfg = tmp_path / "lease.toml"
    lease_cfg.write_text('[scheduling]\nsuspend-rate = 2048.0\nresume-rate = 2048.0\n')
    cfg = CEAgentConfig.from_dict({"ce_id": "ce7.vgrid.local:8443/vgrid-vwn-long", "host": "ce7", "site": "T",
                                   "queue": "q", "nodes": [node.url], "state_dir": str(tmp_path / "ce"),
                                   "vwns_per_node": 1, "lease_tick_s": 0.1, "retry_initial_s": 0.05,
                                   "retry_max_s": 0.3, "heartbeat_s": 0, "lease_config": str(lease_cfg)})
    assert cfg.suspend_vwns                      # the default
    srv = BackgroundServer(create_app(cfg, clock))
    srv2 = None
    be, ar = f"fb{next(_n)}", f"fa{next(_n)}"
    args, be_gate = burner(tmp_path, be)
    start = int(clock.now()) + 5
    ar_jdl, ar_gate = gated_jdl(tmp_path, ar, f'LeaseType = "advance-reservation"; LeaseStart = {start}; '
                                              'LeaseDuration = 60; VMMemory = 64; ')
    try:
        submit(srv.url, receiver, f'[ Executable = "{JOB_PYTHON}"; Arguments = "{args}"; StdOutput = "out.txt"; '
                                  'PreemptionClass = "suspendable"; VMMemory = 64; ]', be)
        vwn = receiver.wait_event(be, "running")["vwn"]
        out = node_agent.job_dir(vwn) / "out.txt"
        wait_until(lambda: len(counters(out)) >= 3, "the counter to print")
        submit(srv.url, receiver, ar_jdl, ar)
        wait_until(lambda: requests.get(f"{srv.url}/jobs/{ar}", timeout=5).json()["lease"]["state"] == "Scheduled",
                   "the advance reservation accepted")
        clock.advance_to(start - 0.5)            # the job's VM reservation ended: frozen
        receiver.wait_event(be, "suspended")
        assert node_agent.vwns[vwn].state.value == "suspended" and node_agent.fz.frozen(vwn)
        clock.advance_to(start)
        receiver.wait_event(ar, "running")
        ce = srv.app.config["VGRID_AGENT"]
        planned = _resume_at(ce, be)
        assert planned >= start + 60 - 1e-6 and _held_mb(ce, be) == 64
        ran = ce.get(be).lease_ran_s
        assert ran is not None and 0 < ran <= start - 0.5 - ce.get(be).lease_start + 1e-6
        printed = len(counters(out))

        port = int(srv.url.rsplit(":", 1)[1])
        srv.close()                               # the CE agent goes away; its state is on disk
        srv2 = BackgroundServer(create_app(cfg, clock), port=port)
        wait_until(lambda: requests.get(f"{srv2.url}/status", timeout=5).json()["ready"], "the recovery")
        ce2 = srv2.app.config["VGRID_AGENT"]
        rec = requests.get(f"{srv2.url}/jobs/{be}", timeout=5).json()
        assert rec["state"] == "Running" and rec["lease"]["frozen"] and rec["vwn"] == vwn
        assert rec["lease"]["state"] in ("Suspended", "Scheduled")
        assert requests.get(f"{srv2.url}/jobs/{ar}", timeout=5).json()["lease"]["state"] == "Active"
        assert node_agent.vwns[vwn].state.value == "suspended" and node_agent.fz.frozen(vwn)
        assert _resume_at(ce2, be) == pytest.approx(planned, abs=1e-6)     # the same schedule
        assert _held_mb(ce2, be) == 64                                    # its memory still counted
        assert ce2.get(be).lease_ran_s == pytest.approx(ran)
        status = requests.get(f"{srv2.url}/status", timeout=5).json()["suspension"]
        assert status["suspend_vwns"] and status["nodes"][node.url]["live"], status

        clock.advance_to(planned - 1.0)           # not yet: still frozen, nothing printed
        wait_until(lambda: requests.get(f"{srv2.url}/jobs/{ar}", timeout=5).json()["lease"]["state"] == "Active",
                   "a pass of the engine")
        assert node_agent.vwns[vwn].state.value == "suspended" and len(counters(out)) == printed
        clock.advance_to(planned)
        receiver.wait_event(be, "resumed", timeout_s=60)
        clock.advance(2.0)
        wait_until(lambda: len(counters(out)) >= printed + 3, "the counter to go on after the restart")
        seen = counters(out)
        assert seen == list(range(len(seen))), "the job restarted"
        release(be_gate)
        done = receiver.wait_event(be, "done", timeout_s=60)
        assert done["exit_code"] == 0 and done["vwn"] == vwn
        kinds = [e["event"] for e in receiver.events_for(be) if e["event"] != "caps"]
        assert kinds == ["running", "suspended", "resumed", "done"], kinds
        assert _held_mb(ce2, be) == 0
    finally:
        release(ar_gate)
        release(be_gate)
        if srv2 is not None:
            srv2.close()
        elif srv is not None:
            srv.close()
        node.close()


def test_get_status_says_where_suspensions_freeze_vwns_and_why_not(tmp_path):
    """``suspend_vwns`` is on by default; GET /status "suspension" names, per node, whether a
    preempted suspendable lease is frozen there (live) and otherwise why not."""
    plain = BackgroundServer(create_node_app(NodeAgentConfig.from_dict(
        {"node": f"fzn{next(_n)}", "capacity": 1.0, "cgroup": "none", "work_dir": str(tmp_path / "n1")})))
    frozen = BackgroundServer(create_node_app(NodeAgentConfig.from_dict(
        {"node": f"fzn{next(_n)}", "capacity": 1.0, "work_dir": str(tmp_path / "n2")})))
    fz = frozen.app.config["VGRID_AGENT"].fz
    base = {"ce_id": "ce8.vgrid.local:8443/vgrid-vwn-q", "host": "ce8", "site": "T", "queue": "q",
            "nodes": [plain.url, frozen.url], "lease_tick_s": 0.1, "heartbeat_s": 0}
    ce = BackgroundServer(create_app(CEAgentConfig.from_dict(base)))
    off = BackgroundServer(create_app(CEAgentConfig.from_dict({**base, "suspend_vwns": False})))
    try:
        def probed(url):
            s = requests.get(f"{url}/status", timeout=5).json()["suspension"]
            return s if all(n["freezer"] != "unknown" for n in s["nodes"].values()) else None
        s = wait_until(lambda: probed(ce.url), "the node agents probed")
        assert s["suspend_vwns"] is True
        assert s["nodes"][plain.url] == {"freezer": "none", "live": False, "reason":
                                         "the node agent has no freezer: cgroups disabled by configuration "
                                         '(cgroup = "none")'}
        assert s["nodes"][frozen.url]["freezer"] == fz.version
        assert s["nodes"][frozen.url]["live"] is (fz.version != "none")
        s = wait_until(lambda: probed(off.url), "the node agents probed")
        assert s["suspend_vwns"] is False
        assert all(not n["live"] and n["reason"].startswith("suspend_vwns = false") for n in s["nodes"].values())
    finally:
        for srv in (ce, off, plain, frozen):
            srv.close()
