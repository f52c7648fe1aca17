"""The CE agent remembers (issue 11): ``kill -9`` of a ``vgrid serve ce`` process with jobs in
flight on real node agents, and a restart with the same configuration and state directory."""
from __future__ import annotations

import itertools
import signal
import time

import pytest
import requests

from vgrid_cli.services import ServiceGroup
from vgrid_runtime.clock import SimulatedClock
from vwn_agents.ce_agent import CEAgentConfig, create_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as create_node_app
from vgrid_runtime.wsgi import BackgroundServer

from .waiting import gated_jdl, release, wait_until

_n = itertools.count(1)


@pytest.fixture
def nodes(tmp_path):
    """nodes(n) -> [(url, NodeAgent)]: in-process node agents whose outboxes retry quickly."""
    servers = []

    def start(n: int):
        out = []
        for _ in range(n):
            name = f"rsn{next(_n)}"
            app = create_node_app(NodeAgentConfig.from_dict(
                {"node": name, "capacity": 1.0, "retry_initial_s": 0.05, "retry_max_s": 0.3,
                 "work_dir": str(tmp_path / name)}))
            servers.append(BackgroundServer(app))
            out.append((servers[-1].url, app.config["VGRID_AGENT"]))
        return out

    yield start
    for server in servers:
        server.close()


def ce_toml(state_dir, node_urls, port=0, **extra) -> str:
    lines = {"ce_id": "ce9.vgrid.local:8443/vgrid-vwn-long", "host": "ce9.vgrid.local", "site": "T",
             "queue": "long", "state_dir": str(state_dir), "port": port, "vwns_per_node": 2,
             "lease_tick_s": 0.1, "retry_initial_s": 0.05, "retry_max_s": 0.3, **extra}
    text = "".join(f"{k} = {v!r}\n".replace("'", '"') if isinstance(v, str) else f"{k} = {v}\n"
                   for k, v in lines.items())
    return text + "nodes = [" + ", ".join(f'"{u}"' for u in node_urls) + "]\n"


def submit(ce_url, receiver, jdl, key):
    body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "jdl": jdl, "filename": "j.jdl",
            "callback_url": f"{receiver.url}/jobs/{key}/events", "input_sandbox": [],
            "heartbeat_url": f"{receiver.url}/heartbeats"}
    r = requests.post(f"{ce_url}/jobs", json=body, timeout=10)
    assert r.status_code == 202, r.text


def vwn_states(node_list, key) -> list[str]:
    """States of the VWNs of job ``key`` on the in-process node agents."""
    return [v.state.value for _, a in node_list for v in list(a.vwns.values()) if v.request.key == key]


def test_kill_9_of_the_ce_agent_with_jobs_in_flight_loses_nothing(tmp_path, receiver, nodes):
    node_list = nodes(2)
    urls = [u for u, _ in node_list]
    group = ServiceGroup(tmp_path / "svc")
    (tmp_path / "svc").mkdir()
    with group:
        ce = group.start("ce", "ce9", ce_toml(tmp_path / "ce-state", urls))
        port = int(ce.url.rsplit(":", 1)[1])
        jobs = {f"rs{next(_n)}": gated_jdl(tmp_path, f"rs-{i}") for i in range(6)}
        keys = list(jobs)
        for key in keys:
            submit(ce.url, receiver, jobs[key][0], key)
        def started():
            now_running = [k for k in keys if receiver.events_for(k, "running")]
            return now_running if len(now_running) == 4 else None
        running = wait_until(started, "4 jobs running (2 nodes x 2 VWN slots), 2 queued")
        queued = [k for k in keys if k not in running]
        group.stop(ce, sig=signal.SIGKILL)
        release(jobs[running[0]][1])                 # ends while the CE agent is down
        release(jobs[running[1]][1])
        wait_until(lambda: all(vwn_states(node_list, k) == ["done"] for k in running[:2]),
                   "2 VWNs done while the CE agent is down")
        ce2 = group.start("ce", "ce9", ce_toml(tmp_path / "ce-state", urls, port=port))
        assert ce2.url == ce.url
        for k in running[:2]:                        # what ended while it was down reaches the broker
            assert receiver.wait_event(k, "done", timeout_s=60)["exit_code"] == 0
        for k in queued:                             # queued leases still start, in the freed slots
            receiver.wait_event(k, "running", timeout_s=60)
        # nothing the restart found running was killed: their VWNs still run
        for k in running[2:]:
            assert vwn_states(node_list, k) == ["running"]
        for k in keys:
            release(jobs[k][1])
        for k in keys:
            receiver.wait_event(k, "done", timeout_s=60)
        for k in keys:
            kinds = [e["event"] for e in receiver.events_for(k) if e["event"] != "caps"]
            assert kinds.count("done") == 1 and "aborted" not in kinds, (k, kinds)
        records = {r["key"]: r for r in requests.get(f"{ce.url}/jobs", timeout=10).json()}
        assert all(records[k]["state"] == "Done" and records[k]["exit_code"] == 0 for k in keys)
        status = requests.get(f"{ce.url}/status", timeout=10).json()
        assert status["ready"] and status["lost_nodes"] == []


@pytest.mark.parametrize("scheduler", ["leases", "fair-share"])
def test_a_restart_applies_what_ended_while_it_was_down_from_the_node_agents_records(tmp_path, receiver, nodes,
                                                                                    scheduler):
    """The node agent's own event cannot arrive (its outbox is stopped): the restarted CE agent
    learns the end from the node agent's ``GET /vwns`` and reports it with the exit code."""
    node_list = nodes(1)
    cfg = CEAgentConfig.from_dict({"ce_id": "ce8.vgrid.local:8443/vgrid-vwn-long", "host": "ce8", "site": "T",
                                   "queue": "q", "nodes": [node_list[0][0]], "state_dir": str(tmp_path / "ce"),
                                   "scheduler": scheduler,
                                   "lease_tick_s": 0.1, "retry_initial_s": 0.05, "retry_max_s": 0.3})
    srv = BackgroundServer(create_app(cfg))
    key = f"rs{next(_n)}"
    jdl, gate = gated_jdl(tmp_path, key)
    submit(srv.url, receiver, jdl, key)
    receiver.wait_event(key, "running")
    port = int(srv.url.rsplit(":", 1)[1])
    srv.close()                       # the CE agent stops; a new one reads only its database
    node_list[0][1].outbox.close()    # the node agent's done event will not come
    release(gate)
    wait_until(lambda: vwn_states(node_list, key) == ["done"], "the VWN done while the CE agent is down")
    srv2 = BackgroundServer(create_app(cfg), port=port)
    try:
        done = receiver.wait_event(key, "done", timeout_s=30)
        assert done["exit_code"] == 0 and done["outcome"] == "exit"
        assert requests.get(f"{srv2.url}/jobs/{key}", timeout=5).json()["state"] == "Done"
    finally:
        srv2.close()


def test_a_requeued_job_stays_queued_across_a_restart_and_restarts_in_a_fresh_vwn(tmp_path, receiver):
    """A suspendable job preempted by an advance reservation waits in the queue (its VWN was
    deleted); the CE agent restarts: the AR's running VWN is adopted, the waiting job is not
    aborted, and when the AR ends it starts in VWN ``<key>-r2``, a key no node agent has seen."""
    clock = SimulatedClock(float(int(time.time())))
    node = BackgroundServer(create_node_app(NodeAgentConfig.from_dict(
        {"node": f"rsn{next(_n)}", "capacity": 1.0, "retry_initial_s": 0.05, "retry_max_s": 0.3,
         "work_dir": str(tmp_path / "node")}), clock))
    node_agent = node.app.config["VGRID_AGENT"]
    cfg = CEAgentConfig.from_dict({"ce_id": "ce6.vgrid.local:8443/vgrid-vwn-long", "host": "ce6", "site": "T",
                                   "queue": "q", "nodes": [node.url], "state_dir": str(tmp_path / "ce"),
                                   "vwns_per_node": 1, "lease_tick_s": 0.1, "retry_initial_s": 0.05,
                                   "retry_max_s": 0.3, "heartbeat_s": 0})
    srv = BackgroundServer(create_app(cfg, clock))
    be, ar = f"rq{next(_n)}", f"ra{next(_n)}"
    be_jdl, be_gate = gated_jdl(tmp_path, be, 'PreemptionClass = "suspendable"; ')
    ar_jdl, ar_gate = gated_jdl(tmp_path, ar, f'LeaseType = "advance-reservation"; '
                                              f'LeaseStart = {int(clock.now()) + 2}; LeaseDuration = 60; ')
    srv2 = None
    try:
        submit(srv.url, receiver, be_jdl, be)
        first = receiver.wait_event(be, "running")
        submit(srv.url, receiver, ar_jdl, ar)
        clock.advance(2.0)
        receiver.wait_event(ar, "running")
        wait_until(lambda: requests.get(f"{srv.url}/jobs/{be}", timeout=5).json()["outcome"] == "requeued",
                   "the preempted job back in the queue")
        port = int(srv.url.rsplit(":", 1)[1])
        srv.close()
        srv2 = BackgroundServer(create_app(cfg, clock), port=port)
        wait_until(lambda: requests.get(f"{srv2.url}/status", timeout=5).json()["ready"], "the recovery")
        rec = requests.get(f"{srv2.url}/jobs/{be}", timeout=5).json()
        assert rec["state"] == "Scheduled" and rec["outcome"] == "requeued"
        assert requests.get(f"{srv2.url}/jobs/{ar}", timeout=5).json()["lease"]["state"] == "Active"
        release(ar_gate)
        receiver.wait_event(ar, "done", timeout_s=30)
        release(be_gate)
        done = receiver.wait_event(be, "done", timeout_s=30)
        assert done["exit_code"] == 0 and done["vwn"] != first["vwn"]
        assert node_agent.vwns[done["vwn"]].request.key == f"{be}-r2"
        assert [e["event"] for e in receiver.events_for(be) if e["event"] not in ("caps",)] == \
            ["running", "requeued", "running", "done"]
    finally:
        release(ar_gate)
        release(be_gate)
        if srv2 is not None:
            srv2.close()
        node.close()


def test_events_the_broker_had_not_taken_survive_a_kill_9_of_the_ce_agent(tmp_path, receiver, nodes):
    node_list = nodes(1)
    (tmp_path / "svc").mkdir()
    with ServiceGroup(tmp_path / "svc") as group:
        ce = group.start("ce", "ce5", ce_toml(tmp_path / "ce-state", [node_list[0][0]]))
        port = int(ce.url.rsplit(":", 1)[1])
        key = f"ob{next(_n)}"
        receiver.fail_events = 10**9                       # the broker answers 503: events wait
        try:
            submit(ce.url, receiver, '[ Executable = "/bin/true"; ]', key)
            wait_until(lambda: requests.get(f"{ce.url}/jobs/{key}", timeout=5).json()["state"] == "Done",
                       "the job Done at the CE, its events in the CE's outbox")
            group.stop(ce, sig=signal.SIGKILL)
        finally:
            receiver.fail_events = 0
        assert receiver.events_for(key) == []
        group.start("ce", "ce5", ce_toml(tmp_path / "ce-state", [node_list[0][0]], port=port))
        assert receiver.wait_event(key, "done", timeout_s=60)["exit_code"] == 0
        assert [e["event"] for e in receiver.events_for(key) if e["event"] != "caps"] == ["running", "done"]


def _free_port() -> int:
    """A loopback port where nothing listens (yet)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _silent_node_ce(tmp_path, name: str, node_url: str) -> CEAgentConfig:
    """A leases CE on one node agent, no broker heartbeats, a node lost only after 600 s (so
    these tests see the verification after a restart, not the lost-node rule)."""
    return CEAgentConfig.from_dict({"ce_id": f"{name}.vgrid.local:8443/vgrid-vwn-long", "host": name, "site": "T",
                                    "queue": "q", "nodes": [node_url], "state_dir": str(tmp_path / "ce"),
                                    "lease_tick_s": 0.1, "retry_initial_s": 0.05, "retry_max_s": 0.3,
                                    "heartbeat_s": 0, "node_lost_s": 600})


def _ce_with_a_gated_job(tmp_path, receiver, cfg, prefix: str):
    """Serve a CE agent and submit one job that runs until its gate is released: (server, key, gate)."""
    srv = BackgroundServer(create_app(cfg))
    key = f"{prefix}{next(_n)}"
    jdl, gate = gated_jdl(tmp_path, key)
    submit(srv.url, receiver, jdl, key)
    return srv, key, gate


def _node_app(tmp_path, name: str):
    return create_node_app(NodeAgentConfig.from_dict(
        {"node": name, "capacity": 1.0, "retry_initial_s": 0.05, "retry_max_s": 0.3,
         "work_dir": str(tmp_path / name)}))


def test_a_start_the_silent_node_agent_never_received_is_made_again_when_it_answers(tmp_path, receiver):
    """The CE agent writes a start attempt (``lease_attempts``, ``lease_node``) before its
    ``POST /vwns``; here the node agent is down, so the VWN never exists. The CE agent restarts
    while the node agent is still down: the recovery adopts the job as running there
    (unverified). When the node agent comes up without that VWN, the job starts again in VWN
    ``<key>-r2`` and ends Done (CI, session 13: such a job stayed Scheduled for good)."""
    node_port = _free_port()
    node_url = f"http://127.0.0.1:{node_port}"
    cfg = _silent_node_ce(tmp_path, "ce5", node_url)
    srv, key, gate = _ce_with_a_gated_job(tmp_path, receiver, cfg, "rv")
    srv2 = node = None
    try:
        agent = srv.app.config["VGRID_AGENT"]
        wait_until(lambda: agent.jobs[key].lease_attempts >= 1 and agent.jobs[key].lease_node == node_url,
                   "the start attempt written before its POST /vwns")
        port = int(srv.url.rsplit(":", 1)[1])
        srv.close()
        srv2 = BackgroundServer(create_app(cfg), port=port)
        agent2 = srv2.app.config["VGRID_AGENT"]
        wait_until(lambda: agent2.ready.is_set(), "the recovery")
        assert key in agent2.unverified and agent2.jobs[key].vwn is None     # adopted on the silent node
        assert requests.get(f"{srv2.url}/jobs/{key}", timeout=5).json()["state"] == "Scheduled"
        node = BackgroundServer(_node_app(tmp_path, f"rsn{next(_n)}"), port=node_port)
        running = receiver.wait_event(key, "running", timeout_s=30)
        node_agent = node.app.config["VGRID_AGENT"]
        attempts = agent2.jobs[key].lease_attempts
        assert attempts >= 2 and node_agent.vwns[running["vwn"]].request.key == f"{key}-r{attempts}"
        assert key not in agent2.unverified
        release(gate)
        done = receiver.wait_event(key, "done", timeout_s=30)
        assert done["exit_code"] == 0
        assert requests.get(f"{srv2.url}/jobs/{key}", timeout=5).json()["state"] == "Done"
    finally:
        release(gate)
        for s in (srv2, node):
            if s is not None:
                s.close()


def test_a_vwn_the_silent_node_agent_no_longer_knows_when_it_answers_ends_node_lost(tmp_path, receiver):
    """A job runs; the CE agent stops, then its node agent; the CE agent restarts while the node
    agent is down (the job is adopted, unverified); a node agent comes up at the same URL with
    another work directory (a reinstalled worker node): the job ends Aborted, node lost, with
    a reason naming the VWN, not Scheduled or Running for good."""
    node_port = _free_port()
    node = BackgroundServer(_node_app(tmp_path, f"rsn{next(_n)}"), port=node_port)
    cfg = _silent_node_ce(tmp_path, "ce4", node.url)
    srv, key, gate = _ce_with_a_gated_job(tmp_path, receiver, cfg, "rw")
    srv2 = node2 = None
    try:
        vwn = receiver.wait_event(key, "running")["vwn"]
        port = int(srv.url.rsplit(":", 1)[1])
        srv.close()
        node.close()
        srv2 = BackgroundServer(create_app(cfg), port=port)
        agent2 = srv2.app.config["VGRID_AGENT"]
        wait_until(lambda: agent2.ready.is_set(), "the recovery")
        assert key in agent2.unverified and agent2.jobs[key].vwn == vwn
        node2 = BackgroundServer(_node_app(tmp_path, f"rsn{next(_n)}"), port=node_port)
        aborted = receiver.wait_event(key, "aborted", timeout_s=30)
        assert aborted["outcome"] == "node-lost" and vwn in aborted["reason"], aborted
        assert requests.get(f"{srv2.url}/jobs/{key}", timeout=5).json()["state"] == "Aborted"
    finally:
        release(gate)
        for s in (srv2, node2):
            if s is not None:
                s.close()
