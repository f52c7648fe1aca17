"""The VOC pool survives a CE agent restart (kill -9): its nodes are kept in the CE agent's
database (``vwn_agents.voc.store``) and adopted on restart; no node is booted twice and no job
is lost (issue 15, seed 003 Section 5.3)."""
from __future__ import annotations

import itertools
import signal

import requests
from sqlalchemy import create_engine

from vgrid_cli.services import ServiceGroup
from vwn_agents.voc.pool import VOCNodeState, VOCPool
from vwn_agents.voc.store import VOCStore

from .waiting import gated_jdl, release, wait_until

_n = itertools.count(1)


class Slots:
    """The pool's driver for the store test: named slots; boots complete when the test says."""

    def __init__(self, n: int) -> None:
        self.slots = [f"slot-{i}" for i in range(n)]

    def free_slots(self, busy):
        return [s for s in self.slots if s not in busy]

    def boot(self, node) -> None:
        pass

    def terminate(self, node) -> None:
        pass


def test_store_round_trip_and_no_write_without_change(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'ce.db'}")
    pool = VOCPool(3, Slots(3))
    a = pool.boot("alpha", 0.0)
    b = pool.boot("beta", 1.0)
    pool.ready(a.id, 5.0)
    pool.claim("alpha", "job-1", 6.0)
    store = VOCStore(engine)
    assert store.save(pool) is True and store.save(pool) is False      # unchanged: nothing written
    nodes, serial, boots = VOCStore(engine).load()
    assert (serial, boots) == (2, 2)
    got = {n.id: n for n in nodes}
    assert got[a.id].state is VOCNodeState.BUSY and got[a.id].job == "job-1" and got[a.id].boot_s == 5.0
    assert got[b.id].state is VOCNodeState.BOOTING and got[b.id].slot == b.slot
    fresh = VOCPool(3, Slots(3))
    fresh.restore(nodes, serial, boots)
    assert fresh.boots == 2 and fresh.free == 1
    assert fresh.boot("alpha", 7.0).id == "voc-alpha-3"                # ids never repeat
    pool.terminate(b.id, 8.0)
    assert store.save(pool) and {n.id for n in VOCStore(engine).load()[0]} == {a.id}


def ce_toml(state_dir, node_url, port=0) -> str:
    return (f'ce_id = "vocr.vgrid.local:8443/vgrid-vwn-voc"\nhost = "vocr"\nsite = "T"\nqueue = "voc"\n'
            f'nodes = ["{node_url}"]\ncpus_per_node = 3\nscheduler = "voc"\nvoc_policy = "damped"\n'
            f'voc_interval_s = 0.3\nvoc_keep_warm_s = 600\nvoc_hysteresis = 0\nvoc_growth_limit = 0\n'
            f'retry_s = 0.2\nretry_initial_s = 0.05\nretry_max_s = 0.3\nheartbeat_s = 0\n'
            f'state_dir = "{state_dir}"\nport = {port}\n')


def submit(ce_url, receiver, jdl, key, vo="dteam"):
    body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "jdl": jdl, "filename": "j.jdl",
            "callback_url": f"{receiver.url}/jobs/{key}/events", "input_sandbox": [],
            "owner": {"dn": f"/DC=org/DC=vgrid/CN={vo}-user", "vo": vo, "fqans": [f"/{vo}"]}}
    r = requests.post(f"{ce_url}/jobs", json=body, timeout=10)
    assert r.status_code == 202, r.text


def voc(ce_url):
    return requests.get(f"{ce_url}/status", timeout=5).json()["voc"]


def test_kill_9_of_the_ce_agent_keeps_the_voc_pool(tmp_path, receiver):
    (tmp_path / "svc").mkdir()
    gates = {}
    with ServiceGroup(tmp_path / "svc") as group:
        name = f"vocr{next(_n)}"
        node = group.start("node", name, f'node = "{name}"\ncapacity = 1.0\nport = 0\nretry_initial_s = 0.05\n'
                                         f'retry_max_s = 0.3\nheartbeat_s = 0.5\nwork_dir = "{tmp_path / name}"\n'
                                         f'disk_quota_mb = 0\n')
        ce = group.start("ce", "vocr", ce_toml(tmp_path / "ce-state", node.url))
        port = int(ce.url.rsplit(":", 1)[1])
        try:
            first = [f"vr{next(_n)}" for _ in range(2)]
            for key in first:
                jdl, gates[key] = gated_jdl(tmp_path, key)
                submit(ce.url, receiver, jdl, key)
            for key in first:
                receiver.wait_event(key, "running", timeout_s=60)
            before = voc(ce.url)
            assert before["boots"] == 2 and sorted(n["state"] for n in before["nodes"]) == ["busy", "busy"]
            node_of = {n["job"]: n for n in before["nodes"]}

            group.stop(ce, sig=signal.SIGKILL)
            release(gates[first[0]])                     # ends while the CE agent is down
            wait_until(lambda: any(v["key"] == first[0] and v["state"] == "done"
                                   for v in requests.get(f"{node.url}/vwns", timeout=5).json()),
                       "the first job's VWN done while the CE agent is down")

            ce2 = group.start("ce", "vocr", ce_toml(tmp_path / "ce-state", node.url, port=port))
            assert ce2.url == ce.url
            assert receiver.wait_event(first[0], "done", timeout_s=60)["exit_code"] == 0
            # the restarted agent adopts its stored pool when its recovery is over
            after = wait_until(lambda: (lambda v: v if len(v["nodes"]) == 2 else None)(voc(ce2.url)),
                               "the stored VOC nodes adopted", timeout_s=30)
            assert after["boots"] == 2, "no node booted again"
            by_id = {n["id"]: n for n in after["nodes"]}
            assert set(by_id) == {n["id"] for n in before["nodes"]}, (before["nodes"], after["nodes"])
            kept = by_id[node_of[first[1]]["id"]]
            assert kept["state"] == "busy" and kept["job"] == first[1] and kept["slot"] == node_of[first[1]]["slot"]
            assert kept["booted_at"] == node_of[first[1]]["booted_at"]
            wait_until(lambda: {n["id"]: n for n in voc(ce2.url)["nodes"]}[node_of[first[0]]["id"]]["state"] == "idle",
                       "the finished job's node idle (kept warm)")

            # a new job of the VO runs on the restored idle node: no boot
            late = f"vr{next(_n)}"
            jdl, gates[late] = gated_jdl(tmp_path, late)
            submit(ce2.url, receiver, jdl, late)
            receiver.wait_event(late, "running", timeout_s=60)
            now = voc(ce2.url)
            assert now["boots"] == 2
            assert next(n for n in now["nodes"] if n["job"] == late)["id"] == node_of[first[0]]["id"]
            for key in (first[1], late):
                release(gates[key])
            for key in first + [late]:
                receiver.wait_event(key, "done", timeout_s=60)
                kinds = [e["event"] for e in receiver.events_for(key) if e["event"] != "caps"]
                assert kinds.count("done") == 1 and "aborted" not in kinds, (key, kinds)
        finally:
            for gate in gates.values():
                release(gate)
