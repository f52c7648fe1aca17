"""Federation of three real brokers through peering gateways, over mutual TLS on loopback (issue 15).

Brokers A, B, C (each with its own CE agent and node agent, every service on its own loopback
address with a host certificate for it) peer with each other. A's CE admits only VO atlas, so
a dteam job at A has no local match and goes to the peer of the lowest priority number (B,
then C). Forwarding, proxied status/output/cancel, delegation (and its refusals), loop
prevention and the failure of a peer (run last: it stops B) are tested on that one grid.
"""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from broker.client import BrokerClient
from broker.config import BrokerConfig
from broker.server import build_app, build_broker
from vgrid_runtime.clock import WallClock
from vgrid_runtime.delegation import sign_request
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.pki import Credential, issue_user
from vgrid_runtime.proxy import create_proxy, write_proxy
from vgrid_runtime.tls import TLSFiles
from vgrid_runtime.voms import issue_ac
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app as ce_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app

from .pki_site import site_pki
from .waiting import wait_until

NAMES = "abc"
IP = {**{f"broker-{n}": f"127.0.15.{i + 1}" for i, n in enumerate(NAMES)},
      **{f"ce-{n}": f"127.0.15.{i + 4}" for i, n in enumerate(NAMES)},
      **{f"node-{n}": f"127.0.15.{i + 7}" for i, n in enumerate(NAMES)}}
CE_VOS = {"a": ["atlas"], "b": ["dteam"], "c": ["dteam"]}
PRIORITY = {"a": 0, "b": 0, "c": 1}
ENDED = {"Done", "Aborted", "Cancelled"}


def free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, voms, dns, now = site_pki(d, IP, ("dteam", "atlas"))
    for user, plen, vo in (("alice", None, "dteam"), ("bob", None, "dteam"), ("dora", 0, "dteam"),
                           ("erin", None, "atlas")):
        cred = issue_user(ca, user.capitalize(), now=now)
        dns[user] = cred.dn
        acs = [issue_ac(voms, vo, [f"/{vo}"], cred.cert, now, 3600)]
        write_proxy(d / f"{user}.proxy", create_proxy(cred, now, 3600, acs=acs, path_len=plen))
    return d, dns


def tls_fields(d, name):
    return {"tls_cert": str(d / f"{name}.pem"), "tls_key": str(d / f"{name}.key"),
            "cert_dir": str(d / "certs"), "voms_dir": str(d / "vomsdir")}


def session_of(d, name):
    if name.endswith(".proxy"):
        return new_session(TLSFiles(cert=str(d / name), key=None, cert_dir=str(d / "certs"),
                                    voms_dir=str(d / "vomsdir")))
    return new_session(TLSFiles(cert=str(d / f"{name}.pem"), key=str(d / f"{name}.key"),
                                cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir")))


@pytest.fixture(scope="module")
def grid(pki, tmp_path_factory):
    d, dns = pki
    work = tmp_path_factory.mktemp("grid")
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
                                   broker_dns=[dns[f"broker-{n}"]], **tls_fields(d, f"ce-{n}"))
            ce = BackgroundServer(ce_app(ce_cfg), host=IP[f"ce-{n}"], tls=ce_cfg.tls_files())
            servers.append((ce, None))
            out["ce"][n] = ce.url
            peers = [{"name": m, "url": urls[m], "dn": dns[f"broker-{m}"], "send_vos": ["dteam"],
                      "accept_vos": ["dteam"], "share_cpus": 4, "priority": PRIORITY[m]}
                     for m in NAMES if m != n]
            cfg = BrokerConfig.from_dict({
                "state_dir": str(work / f"broker-{n}"), "ce_urls": [ce.url], "ism_refresh_s": 0.5,
                "match_interval_s": 0.2, "match_expiry_s": 6.0, "stalled_resubmit_s": 3.0,
                "federation_relay_s": 0.5, "blacklist_s": 300.0, "peers": peers, "bind": IP[f"broker-{n}"],
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
            out.setdefault("configs", {})[n] = cfg
        alice = BrokerClient(urls["a"], credentials=TLSFiles(cert=str(d / "alice.proxy"), key=None,
                                                             cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir")))
        alice.delegate(d / "alice.proxy", WallClock().now(), 3000)
        out["alice"] = alice
        # every broker sees both peers' aggregates before a test submits
        for n, b in out["brokers"].items():
            wait_until(lambda: sum(1 for ad in b.ism.candidates() if b.federation.peers.of_ad(ad)) == 2,
                       timeout_s=30, what=f"broker {n} sees its two peers")
        yield out
    finally:
        stop_all(servers + out["late"])


def stop_all(servers):
    for srv, broker in reversed(servers):
        gone = broker is not None and getattr(broker, "_gone", False)
        if broker is not None and not gone:
            broker.federation.stop()
            broker.stop()
            broker.ism.stop()
        if not gone:
            srv.close()
            if broker is not None:
                broker.store.close()


def client_of(pki, grid, user: str, at: str = "a") -> BrokerClient:
    d, _ = pki
    return BrokerClient(grid["urls"][at], credentials=TLSFiles(cert=str(d / f"{user}.proxy"), key=None,
                                                               cert_dir=str(d / "certs"),
                                                               voms_dir=str(d / "vomsdir")))


def received(grid, at: str):
    return grid["brokers"][at].federation.received.open() + [
        r for r in _all_received(grid["brokers"][at])]


def _all_received(broker):
    from sqlalchemy import select
    from broker.federation.received import _row, received_table
    with broker.store.engine.connect() as c:
        return [_row(r) for r in c.execute(select(received_table)).all()]


def peer_job(grid, at: str, origin_key: str):
    recs = [r for r in _all_received(grid["brokers"][at]) if r.origin_key == origin_key]
    return grid["brokers"][at].get(recs[0].key) if recs else None


def wait_state(client, key, states, timeout_s=60):
    wait_until(lambda: client.job(key)["state"] in states, timeout_s=timeout_s,
               what=f"job {key} in {states} (now {client.job(key)['state']})")
    return client.job(key)


JOB = '''[ Executable = "/bin/sh"; Arguments = "-c 'echo hello-from-$(hostname -s 2>/dev/null || echo peer)'";
  StdOutput = "out.txt"; OutputSandbox = {"out.txt"}; VirtualOrganisation = "dteam"; ]'''


def test_a_job_no_local_ce_matches_runs_at_the_peer_as_its_owner_and_reports_back(pki, grid):
    d, dns = pki
    alice = grid["alice"]
    key = alice.submit_text(JOB, "hello.jdl")["key"]
    job = wait_state(alice, key, ENDED)
    assert job["state"] == "Done" and job["exit_code"] == 0, (job["reason"], job["history"])
    b_job = peer_job(grid, "b", job["dispatch_key"])
    assert b_job is not None, "forwarded to the peer of priority 0"
    assert peer_job(grid, "c", job["dispatch_key"]) is None
    assert b_job.owner_dn == dns["alice"] and b_job.owner_vo == "dteam"
    assert 'RequestOrigin = "external"' in b_job.jdl and grid["urls"]["a"] in b_job.jdl
    assert b_job.state.value == "Done" and b_job.ce_id.startswith("ce-b.")
    # an external request at the receiving site: its lease at B's CE agent has origin external
    lease = session_of(d, "broker-b").get(f"{grid['ce']['b']}/jobs/{b_job.dispatch_key}", timeout=10).json()["lease"]
    assert lease["origin"] == "external", lease
    # output proxied: the origin serves the file the peer's node produced
    r = session_of(d, "alice.proxy").get(f"{grid['urls']['a']}/jobs/{key}/output/out.txt", timeout=10)
    assert r.status_code == 200 and r.text.startswith("hello-from-"), r.text
    # the history shows the gateway, the peer, and where it ran
    reasons = " ".join(h["reason"] or "" for h in job["history"])
    assert f"forwarded through gateway {grid['urls']['a']} to peer b" in reasons
    assert job["ce"].endswith("/vgrid-gateway-federation") and "ce-b." in (job["node"] or "")
    b_reasons = " ".join(h["reason"] or "" for h in b_job.history)
    assert f"received through gateway {grid['urls']['b']} from peer a" in b_reasons


def test_cancel_and_status_on_the_origin_reach_the_peer(pki, grid):
    alice = grid["alice"]
    key = alice.submit_text('[ Executable = "/bin/sleep"; Arguments = "120"; ]', "sleep.jdl")["key"]
    job = wait_state(alice, key, {"Running"} | ENDED)
    assert job["state"] == "Running", job
    b_job = peer_job(grid, "b", job["dispatch_key"])
    assert b_job.state.value == "Running"
    ce = session_of(pki[0], "broker-b").get(f"{grid['urls']['b']}/federation/jobs/{job['dispatch_key']}",
                                            timeout=10)
    assert ce.status_code == 403, "B serves A's jobs to A only"
    ce = session_of(pki[0], "broker-a").get(f"{grid['urls']['b']}/federation/jobs/{job['dispatch_key']}",
                                            timeout=10)
    assert ce.status_code == 200 and ce.json()["state"] == "Running"
    alice.cancel(key)
    assert alice.job(key)["state"] == "Cancelled"
    wait_until(lambda: grid["brokers"]["b"].get(b_job.key).state.value == "Cancelled", timeout_s=30,
               what="the peer's job cancelled")


def test_delegation_is_required_and_refused_without_it(pki, grid):
    d, dns = pki
    b = grid["urls"]["b"]
    body = {"job_id": f"{grid['urls']['a']}/jobs/x", "key": "forged-1", "jdl": '[ Executable = "/bin/true"; ]',
            "callback_url": f"{grid['urls']['a']}/jobs/x/events", "input_sandbox": [],
            "gateways": [grid["urls"]["a"]], "hops": 1, "origin": grid["urls"]["a"]}
    as_a = session_of(d, "broker-a")
    r = as_a.post(f"{b}/federation/jobs", json=body, timeout=10)
    assert r.status_code == 403 and r.json()["error"]["reason"] == "no-delegation", r.text
    # a valid delegated proxy of a VO that B does not accept from A (atlas) is refused
    req = as_a.post(f"{b}/federation/delegations", json={}, timeout=10).json()
    chain = sign_request(Credential.load(d / "erin.proxy"), req["csr"].encode(), WallClock().now(), 600)
    r = as_a.post(f"{b}/federation/jobs", json={**body, "delegation_id": req["id"], "proxy": chain.decode()},
                  timeout=10)
    assert r.status_code == 403 and r.json()["error"]["reason"] == "vo", r.text
    # the gateway talks back only to the origin: a callback elsewhere is refused
    r = as_a.post(f"{b}/federation/jobs", json={**body, "callback_url": f"{grid['urls']['c']}/jobs/x/events"},
                  timeout=10)
    assert r.status_code == 400 and r.json()["error"]["field"] == "callback_url", r.text
    r = as_a.post(f"{b}/federation/jobs", json={**body, "filename": 7}, timeout=10)   # ForwardedJob's types
    assert r.status_code == 400 and r.json()["error"]["field"] == "filename", r.text
    r = as_a.post(f"{b}/federation/jobs", json={**body, "delegation_id": "nope", "proxy": "junk"}, timeout=10)
    assert r.status_code == 403 and r.json()["error"]["reason"] == "no-delegation", r.text
    # not a peer: a user, or a CE agent host, may not use the gateway API
    for who in ("alice.proxy", "ce-b"):
        s = session_of(d, who)
        for method, path in (("post", "/federation/jobs"), ("get", "/federation/glue"),
                             ("post", "/federation/delegations")):
            r = getattr(s, method)(f"{b}{path}", json=body, timeout=10)
            assert r.status_code == 403, (who, path, r.text)
    # bob never delegated: his job is not forwarded, it ends without reaching a peer
    bob = client_of(pki, grid, "bob")
    key = bob.submit_text(JOB, "bob.jdl")["key"]
    job = wait_state(bob, key, ENDED, timeout_s=60)
    assert job["state"] == "Aborted" and job["outcome"] in ("no-resources", "dispatch-failed"), job
    assert all(r.origin_id != job["id"] for n in "bc" for r in _all_received(grid["brokers"][n]))
    # once bob delegates (the `vgrid delegate` command), his jobs are forwarded
    cli = subprocess.run([sys.executable, "-m", "vgrid_cli", "--proxy", str(d / "bob.proxy"), "--cert-dir",
                          str(d / "certs"), "--voms-dir", str(d / "vomsdir"), "delegate", "--broker",
                          grid["urls"]["a"], "--lifetime", "1800"], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0 and dns["bob"] in cli.stdout, cli.stderr
    key = bob.submit_text(JOB, "bob.jdl")["key"]
    job = wait_state(bob, key, ENDED, timeout_s=60)
    assert job["state"] == "Done" and peer_job(grid, "b", job["dispatch_key"]).owner_dn == dns["bob"], job
    # dora's proxy allows no further proxy (RFC 3820 path length 0): delegation is refused
    dora = client_of(pki, grid, "dora")
    from broker.client import ClientError
    with pytest.raises(ClientError, match="path length"):
        dora.delegate(d / "dora.proxy", WallClock().now(), 600)


def test_loops_and_hop_counts_are_refused(pki, grid):
    d, _ = pki
    alice = grid["alice"]
    # only gateway aggregates match: A -> B -> C, never back to A, and not beyond 2 hops
    key = alice.submit_text('[ Executable = "/bin/true"; Requirements = other.GlueCEInfoLRMSType == '
                            '"vgrid-gateway"; ]', "loop.jdl")["key"]
    job = wait_state(alice, key, ENDED, timeout_s=90)
    assert job["state"] == "Aborted", job
    b_job = peer_job(grid, "b", job["dispatch_key"])
    assert b_job is not None and b_job.state.value == "Aborted"
    c_job = peer_job(grid, "c", b_job.dispatch_key)
    assert c_job is not None and c_job.outcome.value == "no-resources"
    assert "VgridHops = 2" in c_job.jdl
    assert all(r.origin_id != b_job.key for r in _all_received(grid["brokers"]["a"])), "never back to A"
    # refused at the gateway itself: a list of gateways naming it, or too many hops
    as_a = session_of(d, "broker-a")
    body = {"job_id": f"{grid['urls']['a']}/jobs/y", "key": "forged-2", "jdl": '[ Executable = "/bin/true"; ]',
            "callback_url": f"{grid['urls']['a']}/jobs/y/events", "input_sandbox": []}
    r = as_a.post(f"{grid['urls']['b']}/federation/jobs",
                  json={**body, "gateways": [grid["urls"]["c"], grid["urls"]["b"]], "hops": 2}, timeout=10)
    assert r.status_code == 409 and r.json()["error"]["reason"] == "loop", r.text
    r = as_a.post(f"{grid['urls']['b']}/federation/jobs",
                  json={**body, "gateways": [grid["urls"]["a"]], "hops": 3}, timeout=10)
    assert r.status_code == 409 and r.json()["error"]["reason"] == "hops", r.text


def test_a_peer_restarted_with_our_job_reports_it_when_back(pki, grid):
    """Nothing is lost: the receiving gateway's table and delegations survive its restart; the
    restarted peer resynchronises its job with its CE and reports it to the origin."""
    alice, a = grid["alice"], grid["brokers"]["a"]
    a.settings.stalled_resubmit_s = 120.0          # the origin waits for the peer to come back
    try:
        key = alice.submit_text('[ Executable = "/bin/sleep"; Arguments = "4"; ]', "restart.jdl")["key"]
        job = wait_state(alice, key, {"Running"} | ENDED)
        assert job["state"] == "Running" and peer_job(grid, "b", job["dispatch_key"]) is not None
        old = grid["brokers"]["b"]
        old.federation.stop()
        old.stop()
        old.ism.stop()
        grid["servers"]["b"].close(stop_app=False)
        old.store.close()
        old._gone = True
        cfg = grid["configs"]["b"]
        b = build_broker(cfg)
        srv = BackgroundServer(build_app(b, cfg), host=IP["broker-b"],
                               port=int(grid["urls"]["b"].rsplit(":", 1)[1]), tls=cfg.tls_files())
        b.settings.base_url = srv.url
        b.ism.start()
        b.start()
        b.federation.start()
        grid["brokers"]["b"], grid["servers"]["b"] = b, srv
        grid["late"].append((srv, b))
        job = wait_state(alice, key, ENDED, timeout_s=90)
        assert job["state"] == "Done" and job["exit_code"] == 0, (job["reason"], job["history"])
        assert job["attempt"] == 0, "not resubmitted: the same attempt ran to its end at the peer"
    finally:
        a.settings.stalled_resubmit_s = 3.0


def test_a_peer_that_dies_is_blacklisted_and_its_job_comes_back(pki, grid):
    alice = grid["alice"]
    jdl = '[ Executable = "/bin/sleep"; Arguments = "6"; RetryCount = 1; ]'
    key = alice.submit_text(jdl, "retry.jdl")["key"]
    job = wait_state(alice, key, {"Running"} | ENDED)
    assert job["state"] == "Running" and peer_job(grid, "b", job["dispatch_key"]) is not None
    b = grid["brokers"]["b"]                     # B dies with our job
    b.federation.stop()
    b.stop()
    b.ism.stop()
    b._gone = True
    grid["servers"]["b"].close(stop_app=False)
    b.store.close()
    # a job submitted now is matched to the dead peer (its ad is still fresh): the dispatch
    # finds it unreachable, blacklists it, and the job runs at C
    key2 = alice.submit_text('[ Executable = "/bin/true"; ]', "after.jdl")["key"]
    job = wait_state(alice, key, ENDED, timeout_s=90)
    assert job["state"] == "Done", job
    assert job["deep_resubmissions"] == 1 and any(h["state"] == "Stalled" for h in job["history"])
    assert peer_job(grid, "c", job["dispatch_key"]) is not None, "resubmitted to the other peer"
    job2 = wait_state(alice, key2, ENDED, timeout_s=90)
    assert job2["state"] == "Done" and peer_job(grid, "c", job2["dispatch_key"]) is not None, job2
    a = grid["brokers"]["a"]
    b_ce = f"{grid['urls']['b'].split('//', 1)[1]}/vgrid-gateway-federation"
    assert b_ce in a.ism.blacklist_entries(), a.ism.blacklist_entries()


def test_a_note_to_an_origin_that_is_down_is_stored_and_arrives_exactly_once(pki, grid):
    """Durable notes (broker.federation.notes): the origin A is down when its peer B produces a
    note (B's CE agent reports the forwarded job's VWN suspended); B acknowledges the CE's event
    only once the note is stored, B restarts meanwhile (its outbox is reloaded from its
    database), A comes back and records the note exactly once -- a repeat of the same note is
    acknowledged and not recorded again."""
    d, _ = pki
    alice, a = grid["alice"], grid["brokers"]["a"]
    a.settings.stalled_resubmit_s = 120.0          # A keeps the job while it is away
    key = alice.submit_text('[ Executable = "/bin/sleep"; Arguments = "120"; ]', "note.jdl")["key"]
    try:
        job = wait_state(alice, key, {"Running"} | ENDED)
        at = next((n for n in "bc" if not getattr(grid["brokers"][n], "_gone", False)
                   and peer_job(grid, n, job["dispatch_key"]) is not None), None)
        assert job["state"] == "Running" and at is not None, job     # B, or C once B died (test order)
        b_job = peer_job(grid, at, job["dispatch_key"])
        # A goes down
        grid["servers"]["a"].close(stop_app=False)
        # B's CE agent reports the VWN suspended (as its lease engine would): acknowledged = stored
        event = {"event": "suspended", "key": b_job.dispatch_key, "vwn": b_job.vwn or "vwn-n-b-1",
                 "node": "n-b", "time": 1234.5}
        r = session_of(d, f"ce-{at}").post(f"{grid['urls'][at]}/jobs/{b_job.key}/events", json=event, timeout=10)
        assert r.status_code == 200, r.text
        b = grid["brokers"][at]
        wait_until(lambda: any(p["attempts"] >= 1 for p in b.federation.notes.pending()), timeout_s=20,
                   what="B tried to deliver the note to A, which is down")
        [note] = b.federation.notes.pending()
        assert note["payload"]["key"] == job["dispatch_key"] and note["payload"]["note_id"]
        # B restarts (its outbox is reloaded from its database) while A is still down
        b.federation.stop()
        b.stop()
        b.ism.stop()
        grid["servers"][at].close(stop_app=False)
        b.store.close()
        b._gone = True
        cfg_b = grid["configs"][at]
        b = build_broker(cfg_b)
        srv_b = BackgroundServer(build_app(b, cfg_b), host=IP[f"broker-{at}"],
                                 port=int(grid["urls"][at].rsplit(":", 1)[1]), tls=cfg_b.tls_files())
        b.settings.base_url = srv_b.url
        b.ism.start()
        b.start()
        b.federation.start()
        grid["brokers"][at], grid["servers"][at] = b, srv_b
        grid["late"].append((srv_b, b))
        assert [p["payload"]["note_id"] for p in b.federation.notes.pending()] == [note["payload"]["note_id"]]
        # A comes back on its address: the note arrives, once
        cfg_a = grid["configs"]["a"]
        srv_a = BackgroundServer(build_app(a, cfg_a), host=IP["broker-a"],
                                 port=int(grid["urls"]["a"].rsplit(":", 1)[1]), tls=cfg_a.tls_files())
        grid["servers"]["a"] = srv_a
        grid["late"].append((srv_a, None))
        mark = f"[note {note['payload']['note_id']}]"
        notes = lambda: [h for h in alice.job(key)["history"] if mark in (h["reason"] or "")]   # noqa: E731
        wait_until(lambda: notes() and not b.federation.notes.pending(), timeout_s=30,
                   what="the note delivered to A once it is back")
        assert len(notes()) == 1 and notes()[0]["reason"].startswith("suspended: "), notes()
        # the same note again (at-least-once delivery): acknowledged, not recorded twice
        r = session_of(d, f"broker-{at}").post(note["url"], json=note["payload"], timeout=10)
        assert r.status_code == 200, r.text
        assert len(notes()) == 1
    finally:
        a.settings.stalled_resubmit_s = 3.0
        alice.cancel(key)
