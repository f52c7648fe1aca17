"""CE agent heartbeats (issue 11, contracts 4-6): node heartbeats in and who may send them, a
node agent that is killed and never comes back (its jobs end Aborted, node-lost), and a broker
heartbeat answer that lists a job as unknown (the CE cancels it)."""
from __future__ import annotations

import itertools
import signal
import time

import requests

from vgrid_cli.services import ServiceGroup, unmount_leftovers
from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app

from .test_ce_agent import site  # noqa: F401  (fixture)
from .test_ce_agent_restart import submit
from .test_security_mtls import ADDR, pki, tls, tls_fields, user  # noqa: F401  (pki is a fixture)
from .waiting import SLACK, gated_jdl, release, wait_until

_n = itertools.count(1)


def ce_config(nodes, **extra) -> CEAgentConfig:
    return CEAgentConfig.from_dict({"ce_id": "ce7.vgrid.local:8443/vgrid-vwn-long", "host": "ce7", "site": "T",
                                    "queue": "q", "nodes": nodes, "lease_tick_s": 0.1, "retry_initial_s": 0.05,
                                    "retry_max_s": 0.3, **extra})


def test_node_heartbeats_only_from_the_ces_own_node_agents_over_tls(pki):
    d, _ = pki
    node_url = f"https://{ADDR['node']}:9"                 # nothing listens there: only its identity matters
    cfg = ce_config([node_url], **tls_fields(d, "ce"))
    srv = BackgroundServer(create_app(cfg), host=ADDR["ce"], tls=cfg.tls_files())
    beat = {"node": node_url, "interval_s": 5.0, "time": 0, "vwns": [{"key": "nokey", "vwn": "vwn-x-1",
                                                                      "state": "running"}]}
    try:
        ok = new_session(tls(d, "node")).post(f"{srv.url}/node-heartbeats", json=beat, timeout=10)
        assert ok.status_code == 200 and ok.json() == {"unknown": ["vwn-x-1"]}
        rogue = new_session(tls(d, "rogue")).post(f"{srv.url}/node-heartbeats", json=beat, timeout=10)
        assert rogue.status_code == 403 and rogue.json()["error"]["reason"] == "forbidden"
        other = dict(beat, node=f"https://{ADDR['rogue']}:9")   # its own URL, not one of the CE's nodes
        r = new_session(tls(d, "rogue")).post(f"{srv.url}/node-heartbeats", json=other, timeout=10)
        assert r.status_code == 403
        assert user(d, "alice.proxy").post(f"{srv.url}/node-heartbeats", json=beat, timeout=10).status_code == 403
        assert new_session(tls(d, "broker")).post(f"{srv.url}/node-heartbeats", json=beat,
                                                  timeout=10).status_code == 403
    finally:
        srv.close()


def test_plain_http_node_heartbeats_only_from_loopback_and_for_its_nodes():
    app = create_app(ce_config(["http://127.0.0.1:9"], heartbeat_s=0))
    try:
        client = app.test_client()
        beat = {"node": "http://127.0.0.1:9", "interval_s": 5.0, "time": 0, "vwns": []}
        far = client.post("/node-heartbeats", json=beat, environ_base={"REMOTE_ADDR": "192.0.2.7"})
        assert far.status_code == 403 and "loopback" in far.get_json()["error"]["message"]
        near = client.post("/node-heartbeats", json=beat, environ_base={"REMOTE_ADDR": "127.0.0.1"})
        assert near.status_code == 200 and near.get_json() == {"unknown": []}
        stranger = client.post("/node-heartbeats", json=dict(beat, node="http://127.0.0.1:10"),
                               environ_base={"REMOTE_ADDR": "127.0.0.1"})
        assert stranger.status_code == 403
        bad = client.post("/node-heartbeats", json={"node": 3}, environ_base={"REMOTE_ADDR": "127.0.0.1"})
        assert bad.status_code == 400
        nodes = client.get("/status").get_json()["nodes"]
        assert nodes[0]["heard_age_s"] is not None and nodes[0]["limit_s"] == 15.0   # 3 x interval_s
    finally:
        app.config["VGRID_ON_STOP"]()


def test_a_node_agent_killed_for_good_ends_its_jobs_node_lost(tmp_path, receiver):
    try:
        _killed_for_good(tmp_path, receiver)
    finally:
        unmount_leftovers(tmp_path)      # the killed node agent's (spare) quota mounts


def _killed_for_good(tmp_path, receiver):
    (tmp_path / "svc").mkdir()
    lost_s = 2.0
    with ServiceGroup(tmp_path / "svc") as group:
        doomed, alive = group.start_many([
            ("node", name, f'node = "{name}"\ncapacity = 1.0\nport = 0\nretry_initial_s = 0.05\n'
                           f'retry_max_s = 0.3\nwork_dir = "{tmp_path / name}"\n')
            for name in (f"lost{next(_n)}", f"kept{next(_n)}")])
        app = create_app(ce_config([doomed.url, alive.url], node_lost_s=lost_s, vwns_per_node=1,
                                   node_down_after_s=30.0, heartbeat_s=0.3))
        srv = BackgroundServer(app)
        try:
            jobs = {f"nl{next(_n)}": gated_jdl(tmp_path, f"nl-{i}") for i in range(2)}
            for key, (jdl, _) in jobs.items():
                submit(srv.url, receiver, jdl, key)
            for key in jobs:
                receiver.wait_event(key, "running")
            on_doomed = [k for k in jobs if requests.get(f"{srv.url}/jobs/{k}", timeout=5).json()["node_url"]
                         == doomed.url]
            assert len(on_doomed) == 1
            victim, survivor = on_doomed[0], next(k for k in jobs if k not in on_doomed)
            vwn = receiver.events_for(victim, "running")[0]["vwn"]
            t0 = time.monotonic()
            group.stop(doomed, sig=signal.SIGKILL)                  # never restarted
            aborted = receiver.wait_event(victim, "aborted", timeout_s=lost_s + 30)
            assert time.monotonic() - t0 < (lost_s + 10) * SLACK
            assert aborted["outcome"] == "node-lost" and doomed.url in aborted["reason"]
            status = requests.get(f"{srv.url}/status", timeout=5).json()
            assert [n["url"] for n in status["lost_nodes"]] == [doomed.url]
            assert wait_until(lambda: not {n["url"]: n["up"] for n in requests.get(
                f"{srv.url}/status", timeout=5).json()["nodes"]}[doomed.url], "the lost node marked down")
            assert requests.get(f"{srv.url}/jobs/{survivor}", timeout=5).json()["state"] == "Running"
            assert receiver.events_for(survivor, "aborted") == []
            # it comes back listing the job's VWN: unknown (its node agent kills it), no longer lost
            beat = {"node": doomed.url, "interval_s": 1.0, "time": 0,
                    "vwns": [{"key": victim, "vwn": vwn, "state": "running"}]}
            answer = requests.post(f"{srv.url}/node-heartbeats", json=beat, timeout=5).json()
            assert answer == {"unknown": [vwn]}
            assert requests.get(f"{srv.url}/status", timeout=5).json()["lost_nodes"] == []
        finally:
            for _, gate in jobs.values():
                release(gate)
            srv.close()


def test_a_heartbeat_answered_unknown_cancels_that_job_at_the_ce(site, receiver, tmp_path):  # noqa: F811
    ce_url, ce, nodes = site(n_nodes=1, heartbeat_s=0.2)
    keys = [f"hb{next(_n)}" for _ in range(2)]
    gates = []
    for key in keys:
        jdl, gate = gated_jdl(tmp_path, key)
        gates.append(gate)
        submit(ce_url, receiver, jdl, key)
    try:
        for key in keys:
            receiver.wait_event(key, "running")

        def listed():
            for beat in reversed(list(receiver.heartbeats)):
                jobs = {j["key"]: j for j in beat.get("jobs", []) if beat.get("url") == ce_url}
                if all(k in jobs and jobs[k]["state"] == "Running" and jobs[k]["vwn"] for k in keys):
                    return beat
            return None
        beat = wait_until(listed, "a CE heartbeat listing both running jobs")
        assert beat["ce"] == ce.config.ce_id and beat["interval_s"] == 0.2
        assert all(j["silent_s"] is not None and j["silent_s"] >= 0 for j in beat["jobs"] if j["key"] in keys)
        gone, kept = keys
        receiver.unknown.add(gone)
        rec = wait_until(lambda: (lambda r: r if r["state"] == "Cancelled" else None)(
            requests.get(f"{ce_url}/jobs/{gone}", timeout=5).json()), "the unknown job cancelled at the CE")
        assert rec["outcome"] == "cancelled" and "no longer knows" in rec["reason"]
        vwn_of_gone = receiver.events_for(gone, "running")[0]["vwn"]
        assert wait_until(lambda: nodes[0].get(vwn_of_gone).state.value == "cancelled", "its VWN killed")
        assert requests.get(f"{ce_url}/jobs/{kept}", timeout=5).json()["state"] == "Running"
        targets = requests.get(f"{ce_url}/status", timeout=5).json()["heartbeats"]["targets"]
        assert [t["url"] for t in targets] == [f"{receiver.url}/heartbeats"] and targets[0]["last_success"]
        release(gates[1])
        receiver.wait_event(kept, "done")
        assert [e["event"] for e in receiver.events_for(gone) if e["event"] != "caps"] == ["running"]
    finally:
        receiver.unknown.discard(keys[0])
        for gate in gates:
            release(gate)


def test_a_node_that_answers_is_not_lost_though_it_sends_no_heartbeat(site, receiver, tmp_path):  # noqa: F811
    """fair-share (no lease-engine probes), a node agent that sends no heartbeat: silent past
    node_lost_s on the CE's clock, it is probed, answers, and its job keeps running."""
    clock = SimulatedClock(float(int(time.time())))
    ce_url, ce, nodes = site(n_nodes=1, scheduler="fair-share", node_lost_s=2.0, heartbeat_s=0, clock=clock)
    key = f"na{next(_n)}"
    jdl, gate = gated_jdl(tmp_path, key)
    try:
        submit(ce_url, receiver, jdl, key)
        receiver.wait_event(key, "running")
        clock.advance(10.0)                                  # 5 x node_lost_s without a word from it

        def heard_again():
            node = requests.get(f"{ce_url}/status", timeout=5).json()["nodes"][0]
            return node["heard_age_s"] is not None and node["heard_age_s"] < 2.0 and node
        node = wait_until(heard_again, "the CE's probe of the silent node answered")
        assert node["lost"] is False
        assert requests.get(f"{ce_url}/status", timeout=5).json()["lost_nodes"] == []
        assert requests.get(f"{ce_url}/jobs/{key}", timeout=5).json()["state"] == "Running"
        release(gate)
        assert receiver.wait_event(key, "done")["exit_code"] == 0
    finally:
        release(gate)
