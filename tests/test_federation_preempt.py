"""A local request preempts a forwarded (external, p(L) = 1) lease, end to end (issue 15, seed 002).

Three real brokers over mutual TLS on loopback (the set-up of tests/test_federation.py): A's CE
admits only atlas, so alice's dteam job at A goes to peer B, whose CE runs the lease engine
with one VWN slot and ``policy-preemption = "moml"`` (seed 002 Algorithm 1). There the job is
an external lease. Bob, a local user of B, then submits a local immediate request
(``RequestOrigin = "local"``) that needs the node: MOML chooses the forwarded lease, the CE
cancels it (Best-Effort-Cancellable), the peer's job ends with outcome ``preempted`` and its
reason, the relay reports both to the ORIGIN, and A's resubmission rules apply (RetryCount 0:
Aborted there with the reason; RetryCount 1: resubmitted, it runs to Done elsewhere).
"""
from __future__ import annotations

import pytest

from broker.client import BrokerClient
from broker.config import BrokerConfig
from broker.server import build_app, build_broker
from vgrid_runtime.clock import WallClock
from vgrid_runtime.pki import issue_user
from vgrid_runtime.proxy import create_proxy, write_proxy
from vgrid_runtime.tls import TLSFiles
from vgrid_runtime.voms import issue_ac
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app as ce_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app

from .pki_site import site_pki
from .test_federation import ENDED, _all_received, free_port, peer_job, session_of, stop_all, tls_fields, wait_state
from .waiting import wait_until

NAMES = "abc"
IP = {**{f"broker-{n}": f"127.0.35.{i + 1}" for i, n in enumerate(NAMES)},
      **{f"ce-{n}": f"127.0.35.{i + 4}" for i, n in enumerate(NAMES)},
      **{f"node-{n}": f"127.0.35.{i + 7}" for i, n in enumerate(NAMES)}}
CE_VOS = {"a": ["atlas"], "b": ["dteam"], "c": ["dteam"]}
PRIORITY = {"a": 0, "b": 0, "c": 1}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, voms, dns, now = site_pki(d, IP, ("dteam", "atlas"))
    for user in ("alice", "bob"):
        cred = issue_user(ca, user.capitalize(), now=now)
        dns[user] = cred.dn
        write_proxy(d / f"{user}.proxy", create_proxy(cred, now, 3600, acs=[
            issue_ac(voms, "dteam", ["/dteam"], cred.cert, now, 3600)]))
    return d, dns


def user_client(d, user: str, url: str) -> BrokerClient:
    return BrokerClient(url, credentials=TLSFiles(cert=str(d / f"{user}.proxy"), key=None,
                                                  cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir")))


@pytest.fixture(scope="module")
def grid(pki, tmp_path_factory):
    d, dns = pki
    work = tmp_path_factory.mktemp("fedpreempt")
    lease_toml = work / "lease.toml"
    lease_toml.write_text('[scheduling]\npolicy-preemption = "moml"\n')
    urls = {n: f"https://{IP['broker-' + n]}:{free_port(IP['broker-' + n])}" for n in NAMES}
    servers, out = [], {"urls": urls, "brokers": {}, "servers": {}, "ce": {}, "late": []}
    try:
        for n in NAMES:
            node_cfg = NodeAgentConfig(node=f"n-{n}", cgroup="none", work_dir=str(work / f"node-{n}"),
                                       ce_dns=[dns[f"ce-{n}"]], **tls_fields(d, f"node-{n}"))
            node = BackgroundServer(node_app(node_cfg), host=IP[f"node-{n}"], tls=node_cfg.tls_files())
            servers.append((node, None))
            ce_cfg = CEAgentConfig(ce_id=f"ce-{n}.vgrid.local:8443/vgrid-vwn-long", host=f"ce-{n}.vgrid.local",
                                   site=f"S{n}", queue="long", nodes=[node.url], vos=CE_VOS[n],
                                   vwns_per_node=1, lease_config=str(lease_toml), suspend_vwns=False,
                                   max_wallclock_s=600, broker_dns=[dns[f"broker-{n}"]], **tls_fields(d, f"ce-{n}"))
            ce = BackgroundServer(ce_app(ce_cfg), host=IP[f"ce-{n}"], tls=ce_cfg.tls_files())
            servers.append((ce, None))
            out["ce"][n] = ce.url
            peers = [{"name": m, "url": urls[m], "dn": dns[f"broker-{m}"], "send_vos": ["dteam"],
                      "accept_vos": ["dteam"], "share_cpus": 4, "priority": PRIORITY[m]}
                     for m in NAMES if m != n]
            cfg = BrokerConfig.from_dict({
                "state_dir": str(work / f"broker-{n}"), "ce_urls": [ce.url], "ism_refresh_s": 0.5,
                "match_interval_s": 0.2, "match_expiry_s": 20.0, "stalled_resubmit_s": 30.0,
                "federation_relay_s": 0.5, "blacklist_s": 2.0, "peers": peers, "bind": IP[f"broker-{n}"],
                **tls_fields(d, f"broker-{n}")})
            broker = build_broker(cfg)
            srv = BackgroundServer(build_app(broker, cfg), host=IP[f"broker-{n}"],
                                   port=int(urls[n].rsplit(":", 1)[1]), tls=cfg.tls_files())
            servers.append((srv, broker))
            broker.settings.base_url = srv.url
            broker.ism.start()
            broker.start()
            broker.federation.start()
            out["brokers"][n], out["servers"][n] = broker, srv
        alice = user_client(d, "alice", urls["a"])
        alice.delegate(d / "alice.proxy", WallClock().now(), 3000)
        out["alice"], out["bob"] = alice, user_client(d, "bob", urls["b"])
        for n, b in out["brokers"].items():
            wait_until(lambda: sum(1 for ad in b.ism.candidates() if b.federation.peers.of_ad(ad)) == 2,
                       timeout_s=30, what=f"broker {n} sees its two peers")
        yield out
    finally:
        stop_all(servers + out["late"])


FORWARDED = ('[ Executable = "/bin/sleep"; Arguments = "300"; VirtualOrganisation = "dteam"; '
             'PreemptionClass = "cancellable"; LeaseDuration = 400; RetryCount = {retry}; ]')
LOCAL = ('[ Executable = "/bin/sleep"; Arguments = "1"; VirtualOrganisation = "dteam"; RequestOrigin = "local"; '
         'LeaseType = "advance-reservation"; LeaseStart = {start}; LeaseDuration = 30; ]')
#: seconds from submission to the local AR's start (matching and dispatch at B take < 1 s)
AR_LEAD_S = 6


def b_free_as_a_sees_it(grid) -> bool:
    a = grid["brokers"]["a"]
    return any(a.federation.peers.of_ad(ad) is not None and a.federation.peers.of_ad(ad).name == "b"
               and ad["GlueCEStateFreeCPUs"] >= 1 for ad in a.ism.candidates())


def forwarded_running_at_b(grid, retry: int):
    """Submit the forwarded job at A until it runs at B (a dispatch to B that fails on a loaded
    host -- a TLS connection error -- blacklists B for 2 s and sends the job to C: cancelled, retried)."""
    alice = grid["alice"]
    for _ in range(3):
        # B's one slot is free (an earlier test's leases ended) and A's ISM has read it so
        wait_until(lambda: b_free_as_a_sees_it(grid), timeout_s=60, what="A sees a free CPU at peer B")
        key = alice.submit_text(FORWARDED.replace("{retry}", str(retry)), "forwarded.jdl")["key"]
        job = wait_state(alice, key, {"Running"} | ENDED, timeout_s=90)
        assert job["state"] == "Running", (job["reason"], job["history"])
        b_job = peer_job(grid, "b", job["dispatch_key"])
        if b_job is not None:
            break
        alice.cancel(key)
    assert b_job is not None and b_job.state.value == "Running", "forwarded to B, running there"
    lease = session_of(grid["pki"], "broker-b").get(f"{grid['ce']['b']}/jobs/{b_job.dispatch_key}",
                                                     timeout=10).json()["lease"]
    assert lease["origin"] == "external" and lease["request_type"] == "cancellable", lease
    return key, job, b_job


def local_request_at_b(grid):
    bob = grid["bob"]
    start = int(WallClock().now()) + AR_LEAD_S
    key = bob.submit_text(LOCAL.replace("{start}", str(start)), "local.jdl")["key"]
    job = wait_state(bob, key, ENDED, timeout_s=90)
    assert job["state"] == "Done" and job["ce"].startswith("ce-b."), [(h["state"], h["reason"]) for h in job["history"]]
    return job


@pytest.fixture(autouse=True)
def _pki_in_grid(grid, pki):
    grid["pki"] = pki[0]


def test_local_request_preempts_the_forwarded_lease_and_the_origin_sees_why(grid):
    key, job, b_job = forwarded_running_at_b(grid, retry=0)
    local_request_at_b(grid)
    # the peer's job ends preempted, with the engine's reason, and so does the origin's
    wait_until(lambda: grid["brokers"]["b"].get(b_job.key).state.value in ENDED, timeout_s=30,
               what="the forwarded job at B ends")
    b_end = grid["brokers"]["b"].get(b_job.key)
    assert b_end.state.value == "Aborted" and b_end.outcome.value == "preempted", (b_end.state, b_end.outcome)
    a_end = wait_state(grid["alice"], key, ENDED, timeout_s=60)
    assert a_end["state"] == "Aborted" and a_end["outcome"] == "preempted", a_end
    assert "preempted" in (a_end["reason"] or ""), a_end["reason"]
    assert a_end["deep_resubmissions"] == 0, "RetryCount 0: no resubmission"
    assert any(h["state"] == "Aborted" and "preempted" in (h["reason"] or "") for h in a_end["history"])
    # at B's CE: the seed 002 decision cancelled the external lease (MOML chose it: the only candidate)
    rec = session_of(grid["pki"], "broker-b").get(f"{grid['ce']['b']}/jobs/{b_job.dispatch_key}", timeout=10).json()
    assert rec["state"] == "Aborted" and rec["outcome"] == "preempted", rec
    assert rec["lease"]["state"] == "Cancelled" and rec["lease"]["reason"].startswith("preempted by a local request")
    assert rec["lease"]["reason"] in a_end["reason"], "the CE's reason reaches the origin"


def test_a_preempted_forwarded_job_is_resubmitted_by_the_origin(grid):
    key, job, b_job = forwarded_running_at_b(grid, retry=1)
    local_request_at_b(grid)
    wait_until(lambda: grid["alice"].job(key)["deep_resubmissions"] == 1 or
               grid["alice"].job(key)["state"] in ENDED, timeout_s=60, what="the origin resubmits")
    a_job = grid["alice"].job(key)
    assert a_job["deep_resubmissions"] == 1, [(h["state"], h["reason"]) for h in a_job["history"]]
    assert any("preempted" in (h["reason"] or "") for h in a_job["history"]), a_job["history"]
    # the peer did not resubmit it itself (RetryCount 0 there): its job ended Aborted
    assert grid["brokers"]["b"].get(b_job.key).state.value == "Aborted"
    assert grid["brokers"]["b"].get(b_job.key).deep_count == 0
    # the origin's new attempt is forwarded again (A has no dteam CE), as a new received job
    wait_until(lambda: len([r for n in "bc" for r in _all_received(grid["brokers"][n])
                            if r.origin_id == a_job["id"]]) >= 2, timeout_s=60,
               what="the resubmitted attempt is forwarded again")
    grid["alice"].cancel(key)


def test_a_suspendable_forwarded_lease_is_requeued_at_the_peer_and_runs_once_to_done(grid):
    """PreemptionClass "suspendable": B's node agent has no freezer here (cgroup = "none"), so
    the preempted lease's VWN is deleted and the job restarts at B after the local AR; B's CE
    agent sends a ``requeued`` note, B's broker records it and passes it on to the origin, whose
    history shows it; the origin's job ends Done once, not resubmitted."""
    alice = grid["alice"]
    wait_until(lambda: b_free_as_a_sees_it(grid), timeout_s=60, what="A sees a free CPU at peer B")
    jdl = ('[ Executable = "/bin/sleep"; Arguments = "15"; VirtualOrganisation = "dteam"; '
           'PreemptionClass = "suspendable"; LeaseDuration = 60; ]')
    key = alice.submit_text(jdl, "suspendable.jdl")["key"]
    job = wait_state(alice, key, {"Running"} | ENDED, timeout_s=90)
    assert job["state"] == "Running", (job["reason"], job["history"])
    b_job = peer_job(grid, "b", job["dispatch_key"])
    assert b_job is not None
    local_request_at_b(grid)
    end = wait_state(alice, key, ENDED, timeout_s=120)
    assert end["state"] == "Done" and end["exit_code"] == 0 and end["deep_resubmissions"] == 0, end["history"]
    rec = session_of(grid["pki"], "broker-b").get(f"{grid['ce']['b']}/jobs/{b_job.dispatch_key}", timeout=10).json()
    assert rec["lease"]["attempts"] == 2 and rec["lease"]["request_type"] == "suspendable", rec["lease"]
    assert rec["reason"].startswith("preempted by an advance reservation"), rec["reason"]
    assert grid["brokers"]["b"].get(b_job.key).state.value == "Done"
    b_notes = [h["reason"] or "" for h in grid["brokers"]["b"].get(b_job.key).history]
    assert any(r.startswith("requeued: preempted by an advance reservation") for r in b_notes), b_notes
    a_notes = [h["reason"] or "" for h in end["history"]]
    assert any(r.startswith(f"requeued: at peer {grid['urls']['b']}: preempted by an advance reservation")
               for r in a_notes), a_notes
