"""The CE agent's lease engine over real loopback node agents when a node agent goes away and
comes back (node down / up), and a preempted job that restarts in a new VWN (fresh VWN key)."""
from __future__ import annotations

import itertools
import time

import pytest
import requests

from vwn_agents.lease_engine import vwn_key
from vwn_agents.node_agent import NodeAgentConfig, create_app as create_node_app
from vgrid_runtime.wsgi import BackgroundServer

from .test_ce_agent import glue_attrs, site, sleep_jdl, submit  # noqa: F401  (fixtures)
from .test_ce_agent_leases import record

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


def wait_until(predicate, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_vwn_keys_of_start_attempts():
    assert [vwn_key("k9", a) for a in (1, 2, 3)] == ["k9", "k9-r2", "k9-r3"]
    assert vwn_key("k9", 2, vm=0) == "k9-r2-0" and vwn_key("k9", 1, vm=1) == "k9-1"


def test_a_stopped_node_is_marked_down_its_job_runs_elsewhere_and_it_comes_back(site, receiver, node_server):
    a, b = node_server(), node_server()
    ce_url, _, _ = site(n_nodes=0, extra_nodes=[a.url, b.url], vwns_per_node=1, node_down_after_s=1.0,
                        lease_tick_s=0.2, node_timeout_s=1.0)
    assert wait_until(lambda: node_up(ce_url)) == {a.url: True, b.url: True}
    assert glue_attrs(ce_url)["GlueCEInfoTotalCPUs"] == ["2"]
    port_a = int(a.url.rsplit(":", 1)[1])
    a.close()                                            # node agent a stops answering
    t0 = time.monotonic()
    key, _ = submit(ce_url, receiver, sleep_jdl(30))     # a is the first node: the mapper tries it first
    running = receiver.wait_event(key, "running", timeout_s=8)
    assert time.monotonic() - t0 < 6
    assert record(ce_url, key)["node_url"] == b.url and running["vwn"]
    assert wait_until(lambda: node_up(ce_url)[a.url] is False, 5)
    assert node_up(ce_url)[b.url] is True
    glue = glue_attrs(ce_url)
    assert glue["GlueCEInfoTotalCPUs"] == ["1"] and glue["GlueCEStateFreeCPUs"] == ["0"]
    status = requests.get(f"{ce_url}/status", timeout=5).json()
    assert status["capacity"]["total_cpus"] == 1

    queued, _ = submit(ce_url, receiver, sleep_jdl(0.2))  # b is full and a is down: it waits
    time.sleep(0.8)
    assert record(ce_url, queued)["state"] == "Scheduled" and receiver.events_for(queued) == []

    a2 = node_server(port=port_a)                        # node agent a is back on the same port
    assert a2.url == a.url
    assert wait_until(lambda: node_up(ce_url)[a.url], 5)
    assert glue_attrs(ce_url)["GlueCEInfoTotalCPUs"] == ["2"]
    assert receiver.wait_event(queued, "done", timeout_s=8)["exit_code"] == 0
    assert record(ce_url, queued)["node_url"] == a.url
    assert a2.app.config["VGRID_AGENT"].vwns                # it ran on the restarted node agent
    requests.post(f"{ce_url}/jobs/{key}/cancel", timeout=15)


def test_preempted_suspendable_job_restarts_in_a_new_vwn_and_runs_to_done(site, receiver):
    ce_url, _, nodes = site(n_nodes=1, vwns_per_node=1)
    be, _ = submit(ce_url, receiver, '[ Executable = "/bin/sleep"; Arguments = "3"; '
                                     'PreemptionClass = "suspendable"; ]')
    first = receiver.wait_event(be, "running")
    start = int(time.time()) + 2                         # before its 3 s are over: it is preempted
    ar, resp = submit(ce_url, receiver, f'[ Executable = "/bin/sleep"; Arguments = "1.5"; '
                                        f'LeaseType = "advance-reservation"; LeaseStart = {start}; '
                                        f'LeaseDuration = 30; ]')
    assert resp.status_code == 202
    assert record(ce_url, be)["lease"]["restarts"] is True
    ar_run = receiver.wait_event(ar, "running", timeout_s=10)
    assert ar_run["time"] >= start - 0.01
    requeued = wait_until(lambda: (r := record(ce_url, be))["state"] == "Scheduled" and r, 3)
    assert requeued["vwn"] is None and "restarts in a new VWN" in requeued["reason"]
    assert requeued["outcome"] == "requeued"
    receiver.wait_event(ar, "done", timeout_s=10)
    done = receiver.wait_event(be, "done", timeout_s=15)
    assert done["exit_code"] == 0 and done["vwn"] != first["vwn"]
    assert kinds_of(receiver, be) == ["running", "running", "done"]   # the old VWN's end is not forwarded
    agent = nodes[0]
    assert agent.vwns[first["vwn"]].state == "cancelled"
    assert agent.vwns[done["vwn"]].request.key == vwn_key(be, 2) == f"{be}-r2"
    rec = record(ce_url, be)
    assert rec["state"] == "Done" and rec["vwn"] == done["vwn"] and rec["lease"]["attempts"] == 2


def kinds_of(receiver, key: str) -> list[str]:
    return [e["event"] for e in receiver.events_for(key) if e["event"] != "caps"]
