"""Live image staging with real processes over mutual TLS on loopback: ``vgrid serve images``,
two ``vgrid serve node`` agents, and the lease engine in this process in the CE agent's role
(its host credential, ``LiveStaging``). An advance reservation's image is pulled at the time
and rate the engine scheduled (EDF and EDF/JIT); a second lease on the same image transfers
nothing and gets its own overlay; only the node's CE may use the image routes; a node agent
killed with SIGKILL in the middle of a pull resumes it by Range after its restart.

Times: the engine's clock and the node agents' are the wall clock of this machine (one clock,
seconds since the epoch); waits have deadlines (tests/waiting.py)."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import requests

from vgrid_cli.services import ServiceGroup
from vwn_agents.images.staging import LiveStaging
from vwn_agents.lease_engine import LeaseEngine
from vwn_agents.leasing import LeaseConfig
from vwn_agents.node_client import NodeAgentClient
from vwn_agents.testing import Receiver

from .image_site import make_image, make_pki, node_toml, repo_toml, session
from .paths import JOB_PYTHON
from .waiting import gate_dir, wait_until

IMAGE_MB = 3.0
RATE_MBS = 1.5                       # imagetransfer-bandwidth 12 Mb/s: a 2 s transfer
TOLERANCE = 0.20


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    dns = make_pki(d)
    images = tmp_path_factory.mktemp("images")
    for i, name in enumerate(("a-edf.img", "a-edf-jit.img", "b.img", "big.img")):
        make_image(images / name, 8.0 if name == "big.img" else IMAGE_MB, seed=i)
    work = tmp_path_factory.mktemp("svc")
    jobs = gate_dir(work)
    receiver = Receiver()
    with ServiceGroup(work) as group:
        repo = group.start("images", "repo", repo_toml(d, images, dns))
        tomls = {n: node_toml(d, n, work / n, jobs / n, repo.url, dns) for n in ("node1", "node2")}
        nodes = group.start_many([("node", n, t) for n, t in tomls.items()])
        yield {"d": d, "dns": dns, "group": group, "repo": repo, "nodes": nodes, "tomls": tomls,
               "receiver": receiver, "ce": session(d, "ce")}
    receiver.close()


def engine_for(site, strategy: str, node_urls=None) -> LeaseEngine:
    cfg = LeaseConfig({"lease-preparation": "imagetransfer", "ar-transfer-strategy": strategy,
                       "imagetransfer-bandwidth": RATE_MBS * 8})
    urls = node_urls or [n.url for n in site["nodes"]]
    return LeaseEngine([(u, 1, 2048) for u in urls], cfg, session=site["ce"], staging=LiveStaging(None))


def body(site, key, seconds=0.5):
    r = site["receiver"]
    return {"job_id": f"{r.url}/jobs/{key}", "key": key, "executable": JOB_PYTHON,
            "arguments": f"-c 'import time; time.sleep({seconds})'", "callback_url": f"{r.url}/events"}


class Ticker:
    """Ticks the engine every 0.1 s and forwards the node events to it (the CE agent's loop)."""

    def __init__(self, engine, receiver):
        self.engine, self.receiver, self.stop = engine, receiver, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        seen = 0
        while not self.stop.wait(0.1):
            events = list(self.receiver.events)
            try:                 # as the CE agent: a start that fails is retried on the next tick
                for ev in events[seen:]:
                    self.engine.job_event(ev)
                self.engine.tick()
            except Exception:  # noqa: BLE001
                pass
            seen = len(events)

    def close(self):
        self.stop.set()
        self.thread.join(10)


def node_transfers(site, url):
    return NodeAgentClient(url, session=site["ce"]).images()["transfers"]


@pytest.mark.parametrize("strategy", ["edf", "edf-jit"])
def test_an_ar_image_is_staged_at_its_scheduled_time_and_rate(site, strategy):
    engine = engine_for(site, strategy, [site["nodes"][0].url])
    ticker = Ticker(engine, site["receiver"])
    try:
        now = engine.clock.now()
        key = f"ar-{strategy}"
        engine.submit_job(key, body(site, key), start_s=now + 5.0, duration_s=3.0, image_id=f"a-{strategy}.img",
                          image_mb=IMAGE_MB, cpu=50)
        wait_until(lambda: engine.status(key)["state"] == "Done", f"{key} done", 60)
        report = wait_until(lambda: [r for r in engine.staging_report() if r["outcome"] == "ready"],
                            "the transfer's node record", 30)
    finally:
        ticker.close()
    [t] = [r for r in report if r["lease"] == key]
    length = IMAGE_MB / RATE_MBS
    assert t["scheduled_end"] - t["scheduled_start"] == pytest.approx(length)
    if strategy == "edf":                 # Algorithm 2: from when the link is free (now)
        assert t["scheduled_start"] == pytest.approx(now, abs=0.5)
    else:                                 # Algorithm 3: pushed to end at the deadline
        assert t["scheduled_end"] == pytest.approx(now + 5.0)
    assert t["bytes"] == IMAGE_MB * 1e6 and not t["hit"]
    late = t["actual_start"] - t["scheduled_start"]
    assert -0.05 <= late <= 1.0, f"pull started {late:+.3f} s from its scheduled start"
    rate = t["bytes"] / 1e6 / (t["actual_end"] - t["actual_start"])
    assert abs(rate - RATE_MBS) <= TOLERANCE * RATE_MBS, f"measured {rate:.3f} MB/s, scheduled {RATE_MBS}"
    st = engine.status(key)
    assert st["start_s"] == pytest.approx(now + 5.0) and t["actual_end"] <= st["start_s"] + 1.0
    created = NodeAgentClient(site["nodes"][0].url, session=site["ce"]).vwn(st["vwns"][0] if st["vwns"] else
                                                                            _last_vwn(site, key))["created"]
    assert 0 <= created - (now + 5.0) <= 1.5, f"VWN created {created - now - 5.0:+.3f} s from the AR start"


def _last_vwn(site, key):
    vwns = NodeAgentClient(site["nodes"][0].url, session=site["ce"]).vwns()
    return [v for v in vwns if v["key"].split("-r")[0] == key][-1]["vwn"]


def test_a_second_lease_on_the_same_image_transfers_nothing_and_gets_an_overlay(site):
    url = site["nodes"][1].url
    engine = engine_for(site, "edf-jit", [url])
    ticker = Ticker(engine, site["receiver"])
    overlays_seen: set = set()
    try:
        now = engine.clock.now()
        engine.submit_job("r1", body(site, "r1", 1.0), start_s=now + 3.0, duration_s=2.5, image_id="b.img",
                          image_mb=IMAGE_MB, cpu=100)
        engine.submit_job("r2", body(site, "r2", 1.0), start_s=now + 6.0, duration_s=2.5, image_id="b.img",
                          image_mb=IMAGE_MB, cpu=100)

        def both_done():
            pool = NodeAgentClient(url, session=site["ce"]).images()
            for img in pool["images"]:
                overlays_seen.update(img["overlays"])
            return all(engine.status(k)["state"] == "Done" for k in ("r1", "r2"))
        wait_until(both_done, "both leases done", 60)
    finally:
        ticker.close()
    assert [r[0] for r in engine.scheduler.transfer_log] == [engine.status("r1")["lease_id"]]
    pulls = [t for t in node_transfers(site, url) if t["image"] == "b.img"]
    assert len(pulls) == 1 and pulls[0]["bytes"] == IMAGE_MB * 1e6        # one transfer on the wire
    # each VM its own disk, named by its VWN key (r1-r2 ... when a start attempt found the image
    # not there yet: EDF/JIT leaves no slack, docs/vwn.md)
    assert any(k.split("-")[0] == "r1" for k in overlays_seen) and any(k.split("-")[0] == "r2" for k in overlays_seen)
    pool = NodeAgentClient(url, session=site["ce"]).images()
    [b] = [i for i in pool["images"] if i["name"] == "b.img"]
    assert b["state"] == "ready" and b["overlays"] == []                    # removed at the end


def test_only_the_nodes_ce_may_use_its_image_routes(site):
    d, url = site["d"], site["nodes"][0].url
    calls = [("post", "/images/pulls", {"image": "a.img"}), ("get", "/images", None),
             ("put", "/images/pins", {"pins": {}}), ("post", "/images/a.img/overlays", {"vwn": "x"}),
             ("delete", "/images/overlays/x", None)]
    for who in ("alice.proxy", "rogue", "repo", "node2"):
        s = session(d, who)
        for method, path, js in calls:
            r = getattr(s, method)(f"{url}{path}", json=js, timeout=10)
            assert r.status_code == 403, (who, method, path, r.text)
    anon = requests.get(f"{url}/images", verify=str(d / "certs" / "ca.pem"), timeout=10)
    assert anon.status_code == 401
    bad = site["ce"].post(f"{url}/images/pulls", json={"image": "../x"}, timeout=10)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad-name"


def test_a_node_agent_killed_during_a_pull_resumes_it_by_range(site):
    group, svc = site["group"], site["nodes"][1]
    client = NodeAgentClient(svc.url, session=site["ce"])
    client.pull_image({"image": "big.img", "transfer": "kill-9", "rate_mbs": 2.0, "pins": ["L9"]})
    pool_dir = site["tomls"]["node2"].split('work_dir = "')[1].split('"')[0] + "/images"
    parts = lambda: [p for p in os.listdir(pool_dir) if p.endswith(".part")]  # noqa: E731
    wait_until(lambda: parts() and os.path.getsize(os.path.join(pool_dir, parts()[0])) >= 2_000_000,
               "2 MB of big.img on disk", 30)
    os.kill(svc.process.pid, signal.SIGKILL)
    svc.process.wait()
    group.stop(svc)
    have = os.path.getsize(os.path.join(pool_dir, parts()[0]))
    assert have < 8_000_000
    svc = group.start("node", "node2", site["tomls"]["node2"])
    site["nodes"][1] = svc
    client = NodeAgentClient(svc.url, session=site["ce"])
    img = wait_until(lambda: next((i for i in client.images()["images"] if i["name"] == "big.img"
                                   and i["state"] in ("ready", "failed")), None), "big.img pulled", 60)
    assert img["state"] == "ready" and img["pins"] == ["L9"]
    rec = img["transfer"]
    assert rec["transfer"] == "kill-9" and rec["resumed_by_restart"]
    assert rec["restart_offset"] >= have                     # resumed from what was on disk ...
    assert rec["bytes"] - rec["bytes_at_restart"] == 8_000_000 - rec["restart_offset"]   # ... by Range
