"""Virtual Organization Clusters live (CE agent ``scheduler = "voc"``, seed 003 Section 5.3):
real ``vgrid serve node`` processes, a CE agent whose watchdog sizes per-VO clusters on their
VWN slots, jobs of two VOs; a VOC node's node agent is killed -9 during the run and a job's
VWN processes are killed. Asserted: every VO's jobs run only on its own cluster's nodes (the
VO's pool account), boot delays are measured, the dead node leaves the pool within one
heartbeat plus one watchdog interval, no job is ever matched to it afterwards, and every waiting
job runs (none waits on a dead node: the failure of Figure 12 cannot happen)."""
from __future__ import annotations

import itertools
import os
import signal
import time

import pytest
import requests

from vgrid_cli.services import ServiceGroup
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app

from .waiting import SLACK, gated_jdl, release, wait_until

_n = itertools.count(1)
BEAT_S = 0.5            # node agents' heartbeat interval
INTERVAL_S = 0.3        # VOC watchdog interval


def submit(ce_url, receiver, jdl, key, vo):
    body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "jdl": jdl, "filename": "j.jdl",
            "callback_url": f"{receiver.url}/jobs/{key}/events", "input_sandbox": [],
            "owner": {"dn": f"/DC=org/DC=vgrid/CN={vo}-user", "vo": vo, "fqans": [f"/{vo}"]}}
    r = requests.post(f"{ce_url}/jobs", json=body, timeout=10)
    assert r.status_code == 202, r.text


def job(ce_url, key):
    return requests.get(f"{ce_url}/jobs/{key}", timeout=5).json()


def voc(ce_url):
    return requests.get(f"{ce_url}/status", timeout=5).json()["voc"]


def test_voc_config_is_checked():
    base = {"ce_id": "c:1/q", "host": "h", "site": "s", "queue": "q", "nodes": [], "scheduler": "voc"}
    with pytest.raises(Exception, match="voc_policy.*unknown VOC policy 'eager'"):
        CEAgentConfig.from_dict({**base, "voc_policy": "eager"})
    with pytest.raises(Exception, match="voc_interval_s"):
        CEAgentConfig.from_dict({**base, "voc_interval_s": 0})
    with pytest.raises(Exception, match="voc_growth_limit"):
        CEAgentConfig.from_dict({**base, "voc_growth_limit": -1})
    with pytest.raises(Exception, match="voc_driver.*'cgroup' or 'libvirt'"):
        CEAgentConfig.from_dict({**base, "voc_driver": "xen"})
    with pytest.raises(Exception, match=r"voc_images\[1\].*vo=image"):
        CEAgentConfig.from_dict({**base, "voc_driver": "libvirt", "voc_images": ["alpha=a.img", "beta"]})
    with pytest.raises(Exception, match="voc_boot_timeout_s"):
        CEAgentConfig.from_dict({**base, "voc_boot_timeout_s": 0})
    ok = CEAgentConfig.from_dict({**base, "voc_driver": "libvirt", "voc_images": ["alpha=a.img"]})
    assert ok.voc_driver == "libvirt" and ok.voc_images == ["alpha=a.img"]


def test_voc_clusters_survive_killed_nodes_and_killed_vwns(tmp_path, receiver):
    (tmp_path / "svc").mkdir()
    with ServiceGroup(tmp_path / "svc") as group:
        nodes = group.start_many([
            ("node", name, f'node = "{name}"\ncapacity = 1.0\nport = 0\nretry_initial_s = 0.05\n'
                           f'retry_max_s = 0.3\nheartbeat_s = {BEAT_S}\nwork_dir = "{tmp_path / name}"\n'
                           f'disk_quota_mb = 0\n')
            for name in (f"voc{next(_n)}", f"voc{next(_n)}", f"voc{next(_n)}")])
        urls = [n.url for n in nodes]
        cfg = CEAgentConfig.from_dict({
            "ce_id": "voc.vgrid.local:8443/vgrid-vwn-voc", "host": "voc", "site": "T", "queue": "voc",
            "nodes": urls, "scheduler": "voc", "voc_policy": "greedy", "voc_interval_s": INTERVAL_S,
            "retry_s": 0.2, "retry_initial_s": 0.05, "retry_max_s": 0.3, "node_lost_s": 3.0, "heartbeat_s": 0})
        srv = BackgroundServer(create_app(cfg))
        ce, gates = srv.url, {}
        try:
            def start(key, vo):
                jdl, gates[key] = gated_jdl(tmp_path, key)
                submit(ce, receiver, jdl, key, vo)

            # 2 alpha + 1 beta jobs: the watchdog boots 2 alpha and 1 beta nodes, one per node agent
            first = {f"va{next(_n)}": "alpha", f"va{next(_n)}": "alpha", f"vb{next(_n)}": "beta"}
            for key, vo in first.items():
                start(key, vo)
            for key in first:
                receiver.wait_event(key, "running", timeout_s=30)
            status = voc(ce)
            assert status["policy"] == "greedy" and status["slots"] == 3 and status["boots"] == 3
            assert sorted(n["vo"] for n in status["nodes"]) == ["alpha", "alpha", "beta"]
            assert all(n["state"] == "busy" and n["boot_s"] is not None and n["boot_s"] >= 0 for n in status["nodes"])
            on = {key: job(ce, key)["node_url"] for key in first}
            assert sorted(on.values()) == sorted(urls)
            for key, vo in first.items():           # the VO's cluster runs as the VO's pool account
                node = next(n for n in nodes if n.url == on[key])
                vwn = requests.get(f"{node.url}/vwns", timeout=5).json()
                assert any(v["key"] == key and v["account"].startswith(vo) for v in vwn), vwn

            # two more alpha jobs wait: no slot is free
            waiting = [f"vw{next(_n)}", f"vw{next(_n)}"]
            for key in waiting:
                start(key, "alpha")
            wait_until(lambda: all("waiting for a node of VO alpha" in (job(ce, k)["reason"] or "")
                                   for k in waiting), "the alpha jobs waiting for a node")

            # kill -9 the node agent of one running alpha job: its VOC node leaves the pool
            victim = next(k for k, vo in first.items() if vo == "alpha")
            dead = next(n for n in nodes if n.url == on[victim])
            t0 = time.monotonic()
            group.stop(dead, sig=signal.SIGKILL)
            wait_until(lambda: all(not n["slot"].startswith(dead.url + "#") for n in voc(ce)["nodes"]),
                       "the dead node's VOC node out of the pool", timeout_s=10)
            left_s = time.monotonic() - t0
            print(f"VOC node left the pool {left_s:.2f} s after kill -9; boot_s {[n['boot_s'] for n in status['nodes']]}")
            assert left_s < (BEAT_S + 2 * INTERVAL_S + 2.5) * SLACK
            assert dead.url in voc(ce)["dead"]

            # kill the processes of the beta job's VWN: the VWN ends, the beta node idles and the
            # greedy watchdog gives its slot to alpha
            beta = next(k for k, vo in first.items() if vo == "beta")
            beta_node = next(n for n in nodes if n.url == on[beta])
            rec = next(v for v in requests.get(f"{beta_node.url}/vwns", timeout=5).json() if v["key"] == beta)
            os.kill(rec["pid"], signal.SIGKILL)
            assert receiver.wait_event(beta, "done", timeout_s=30)["exit_code"] == 137

            # the other alpha job ends: its node runs a waiting job; the beta slot runs the other
            other = next(k for k, vo in first.items() if vo == "alpha" and k != victim)
            release(gates[other])
            for key in waiting:
                receiver.wait_event(key, "running", timeout_s=30)
                assert job(ce, key)["node_url"] != dead.url          # never matched to the dead node
            assert receiver.wait_event(victim, "aborted", timeout_s=30)["outcome"] == "node-lost"
            for key in waiting:
                release(gates[key])
                assert receiver.wait_event(key, "done", timeout_s=30)["exit_code"] == 0
            assert receiver.wait_event(other, "done", timeout_s=30)["exit_code"] == 0
            gone = voc(ce)["gone"]
            assert any(g["gone_reason"].startswith("lost:") and g["slot"].startswith(dead.url) for g in gone)
            assert any(g["vo"] == "beta" and g["gone_reason"] == "terminated" for g in gone)
            # the queue drained: the greedy watchdog vacates the site
            wait_until(lambda: voc(ce)["nodes"] == [], "the clusters vacated")
        finally:
            for gate in gates.values():
                release(gate)
            srv.close()
