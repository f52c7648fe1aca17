"""The CE agent's lease engine over real loopback node agents when a node agent goes away and
comes back (node down / up), and a preempted job that restarts in a new VWN (fresh VWN key)."""
from __future__ import annotations

import itertools
import time

import pytest
import requests

from vgrid_runtime.clock import SimulatedClock
from vwn_agents.lease_engine import vwn_key
from vwn_agents.node_agent import NodeAgentConfig, create_app as create_node_app
from vgrid_runtime.wsgi import BackgroundServer

from .test_ce_agent import glue_attrs, site, sleep_jdl, submit  # noqa: F401  (fixtures)
from .test_ce_agent_leases import record
from .waiting import EngineTicks, gated_jdl, release, wait_until

_names = itertools.count(1)


@pytest.fixture
def node_server(tmp_path):
    """node_server(port=0) -> BackgroundServer of a fresh node agent (closed at the end)."""
    servers = []

    def start(port: int = 0) -> BackgroundServer:
        name = f"nd{next(_names)}"
        app = create_node_app(NodeAgentConfig.from_dict(
            {"node": name, "capacity": 1.0, "retry_initial_s": 0.05, "work_dir": str(tmp_path / name)}))
        servers.append(BackgroundServer(app, port=port))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def node_up(ce_url: str) -> dict[str, bool]:
    return {n["url"]: n["up"] for n in requests.get(f"{ce_url}/status", timeout=5).json()["nodes"]}


def test_vwn_keys_of_start_attempts():
    assert [vwn_key("k9", a) for a in (1, 2, 3)] == ["k9", "k9-r2", "k9-r3"]
    assert vwn_key("k9", 2, vm=0) == "k9-r2-0" and vwn_key("k9", 1, vm=1) == "k9-1"


def test_a_stopped_node_is_marked_down_its_job_runs_elsewhere_and_it_comes_back(site, receiver, node_server):
    a, b = node_server(), node_server()
    clock = SimulatedClock(float(int(time.time())))     # the CE's clock: node_down_after_s is counted on it
    ce_url, ce, _ = site(n_nodes=0, extra_nodes=[a.url, b.url], vwns_per_node=1, node_down_after_s=1.0,
                         lease_tick_s=0.2, node_timeout_s=1.0, clock=clock)
    ticks = EngineTicks(ce)
    assert wait_until(lambda: node_up(ce_url), "the CE's first node probe") == {a.url: True, b.url: True}
    assert glue_attrs(ce_url)["GlueCEInfoTotalCPUs"] == ["2"]
    port_a = int(a.url.rsplit(":", 1)[1])
    a.close()                                            # node agent a stops answering
    t0 = clock.now()
    key, _ = submit(ce_url, receiver, sleep_jdl(30))     # a is the first node: the mapper tries it first
    ticks.wait()                                         # a has failed for less than node_down_after_s
    assert receiver.events_for(key) == [] and node_up(ce_url)[a.url] is True
    clock.advance(1.0)                                   # now it has: a is marked down, the job moves to b
    running = receiver.wait_event(key, "running", timeout_s=30)
    assert clock.now() - t0 < 6 and record(ce_url, key)["lease"]["start_s"] == t0 + 1.0
    assert record(ce_url, key)["node_url"] == b.url and running["vwn"]
    assert wait_until(lambda: node_up(ce_url)[a.url] is False, "node a marked down")
    assert node_up(ce_url)[b.url] is True
    glue = glue_attrs(ce_url)
    assert glue["GlueCEInfoTotalCPUs"] == ["1"] and glue["GlueCEStateFreeCPUs"] == ["0"]
    status = requests.get(f"{ce_url}/status", timeout=5).json()
    assert status["capacity"]["total_cpus"] == 1

    queued, _ = submit(ce_url, receiver, sleep_jdl(0.2))  # b is full and a is down: it waits
    ticks.wait()
    assert record(ce_url, queued)["state"] == "Scheduled" and receiver.events_for(queued) == []

    a2 = node_server(port=port_a)                        # node agent a is back on the same port
    assert a2.url == a.url
    assert wait_until(lambda: node_up(ce_url)[a.url], "node a marked up again")
    assert glue_attrs(ce_url)["GlueCEInfoTotalCPUs"] == ["2"]
    assert receiver.wait_event(queued, "done", timeout_s=30)["exit_code"] == 0
    assert record(ce_url, queued)["node_url"] == a.url
    assert a2.app.config["VGRID_AGENT"].vwns                # it ran on the restarted node agent
    requests.post(f"{ce_url}/jobs/{key}/cancel", timeout=15)


def test_preempted_suspendable_job_restarts_in_a_new_vwn_and_runs_to_done(site, receiver, tmp_path):
    clock = SimulatedClock(float(int(time.time())))     # the CE and its node agent run on it
    ce_url, ce, nodes = site(n_nodes=1, vwns_per_node=1, clock=clock)
    ticks = EngineTicks(ce)
    be_jdl, be_gate = gated_jdl(tmp_path, "be", 'PreemptionClass = "suspendable"; ')
    be, _ = submit(ce_url, receiver, be_jdl)             # runs until released
    first = receiver.wait_event(be, "running")
    start = int(clock.now()) + 2                         # it still runs then: it is preempted
    ar_jdl, ar_gate = gated_jdl(tmp_path, "ar", f'LeaseType = "advance-reservation"; LeaseStart = {start}; '
                                                'LeaseDuration = 30; ')
    ar, resp = submit(ce_url, receiver, ar_jdl)
    assert resp.status_code == 202
    assert record(ce_url, be)["lease"]["restarts"] is True
    ticks.wait()                                         # engine passes before the AR's start: be keeps running
    assert receiver.events_for(ar) == [] and record(ce_url, be)["state"] == "Running"
    clock.advance_to(start)
    ar_run = receiver.wait_event(ar, "running", timeout_s=30)
    assert ar_run["time"] >= start - 0.01
    requeued = wait_until(lambda: (r := record(ce_url, be))["state"] == "Scheduled" and r,
                          "the preempted job back in the queue")
    assert requeued["vwn"] is None and "restarts in a new VWN" in requeued["reason"]
    assert requeued["outcome"] == "requeued"
    release(ar_gate)                                     # the AR ends: be's lease starts again
    release(be_gate)
    receiver.wait_event(ar, "done", timeout_s=30)
    done = receiver.wait_event(be, "done", timeout_s=30)
    assert done["exit_code"] == 0 and done["vwn"] != first["vwn"]
    # the old VWN's end is not forwarded; the requeue is (a history note at the broker)
    assert kinds_of(receiver, be) == ["running", "requeued", "running", "done"]
    requeued = next(e for e in receiver.events_for(be) if e["event"] == "requeued")
    assert requeued["outcome"] == "requeued" and requeued["reason"].startswith("preempted by an advance reservation")
    agent = nodes[0]
    assert agent.vwns[first["vwn"]].state == "cancelled"
    assert agent.vwns[done["vwn"]].request.key == vwn_key(be, 2) == f"{be}-r2"
    rec = record(ce_url, be)
    assert rec["state"] == "Done" and rec["vwn"] == done["vwn"] and rec["lease"]["attempts"] == 2


def kinds_of(receiver, key: str) -> list[str]:
    return [e["event"] for e in receiver.events_for(key) if e["event"] != "caps"]
