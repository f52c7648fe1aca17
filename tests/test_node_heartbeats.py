"""Node agent heartbeats to the CE agents (contracts 3 and 4), over real loopback HTTP."""
from __future__ import annotations

import logging
import socket

import pytest
import requests

from vwn_agents.proctree import is_running

from .node_site import node_starter
from .test_node_agent import submit
from .waiting import gate_file, gate_script, release, wait_until


@pytest.fixture
def start_node(tmp_path):
    with node_starter("hb", lambda n: {"work_dir": str(tmp_path / "work"), "disk_quota_mb": 0,
                                       "heartbeat_s": 0.2, "retry_initial_s": 0.05}) as start:
        yield start


def beats_of(receiver, node_url):
    return [h for h in receiver.heartbeats if h.get("node") == node_url]


def test_heartbeats_list_the_active_vwns_and_an_unknown_one_is_killed(start_node, receiver, tmp_path):
    url, agent = start_node()
    hb = f"{receiver.url}/node-heartbeats"
    gate = gate_file(tmp_path, "hb-1")
    v = submit(url, receiver, "hb-1", str(gate_script(tmp_path)), str(gate), heartbeat_url=hb)
    other = submit(url, receiver, "hb-2", str(gate_script(tmp_path)), str(gate))   # no heartbeat_url
    receiver.wait_event("hb-1", "running")
    beat = wait_until(lambda: next((h for h in beats_of(receiver, url)
                                    if h["vwns"] and h["vwns"][0]["state"] == "running"), None),
                      "a heartbeat listing the running VWN")
    assert beat["vwns"] == [{"key": "hb-1", "vwn": v["vwn"], "state": "running"}]
    assert beat["interval_s"] == 0.2 and isinstance(beat["time"], float)
    target = requests.get(f"{url}/status", timeout=5).json()["heartbeat"]["targets"][0]
    assert target["url"] == hb and target["last_ok"] is not None and target["last_error"] is None

    pid = requests.get(f"{url}/vwns/{v['vwn']}", timeout=5).json()["pid"]
    receiver.unknown.add(v["vwn"])                   # the CE no longer knows it
    record = wait_until(lambda: (r := requests.get(f"{url}/vwns/{v['vwn']}", timeout=5).json())
                        ["state"] == "cancelled" and r, "the unknown VWN to be killed")
    assert (record["outcome"], record["reason"]) == ("cancelled", "the CE agent no longer knows this VWN")
    assert not is_running(pid)
    assert requests.get(f"{url}/vwns/{other['vwn']}", timeout=5).json()["state"] == "running"
    release(gate)
    receiver.wait_event("hb-2", "done")
    assert not [e for e in receiver.events_for("hb-1") if e["event"] in ("done", "aborted", "cancelled")]


def test_a_failing_heartbeat_target_is_logged_once_and_harms_nothing(start_node, receiver, tmp_path, caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/node-heartbeats"
    caplog.set_level(logging.WARNING, logger="vwn_agents.heartbeats")
    url, agent = start_node()
    gate = gate_file(tmp_path, "hb-3")
    v = submit(url, receiver, "hb-3", str(gate_script(tmp_path)), str(gate), heartbeat_url=dead)
    receiver.wait_event("hb-3", "running")
    wait_until(lambda: requests.get(f"{url}/status", timeout=5).json()["heartbeat"]["targets"][0]
               ["last_error"], "a failed heartbeat")
    failures = lambda: [r for r in caplog.records if dead in r.getMessage()]   # noqa: E731
    rounds = agent.heartbeats.rounds
    wait_until(lambda: agent.heartbeats.rounds >= rounds + 3, "three more heartbeat rounds")
    assert len(failures()) == 1                       # at most once per URL per minute
    release(gate)
    assert receiver.wait_event("hb-3", "done")["exit_code"] == 0
    assert requests.get(f"{url}/vwns/{v['vwn']}", timeout=5).json()["state"] == "done"


def test_heartbeat_targets_are_remembered_across_restarts(start_node, receiver, tmp_path):
    url, agent = start_node(node="hbkeep")
    hb = f"{receiver.url}/node-heartbeats"
    submit(url, receiver, "hb-4", "/bin/true", heartbeat_url=hb)
    receiver.wait_event("hb-4", "done")
    agent.shutdown()
    before = len(beats_of(receiver, url))
    _, agent2 = start_node(node="hbkeep")
    assert agent2.heartbeats.targets() == [hb]
    # it still calls itself by the URL the CE agent used (its own port is new in this test)
    wait_until(lambda: len(beats_of(receiver, url)) > before, "a heartbeat from the restarted agent")
