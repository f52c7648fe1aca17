"""Who may call what, over real mutual TLS on loopback (issue 10's attacks, each refused).

Each service listens on its own loopback address (127.0.10.x) with a host certificate for that
address, so that "the caller is the service at URL U" is checked as an HTTPS client checks a
server. Credentials are made at test time with the wall clock (OpenSSL checks validity against
it during the handshake).
"""
from __future__ import annotations

import pytest
import requests

from broker.api import create_app as broker_app
from broker.config import BrokerConfig
from broker.server import build_broker
from vgrid_runtime.clock import WallClock
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.pki import issue_user
from vgrid_runtime.proxy import create_proxy, write_proxy
from vgrid_runtime.tls import TLSFiles
from vgrid_runtime.voms import issue_ac
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app as ce_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app

from .pki_site import site_pki

JDL = '[ Executable = "/bin/true"; ]'
ADDR = {"broker": "127.0.10.1", "ce": "127.0.10.2", "node": "127.0.10.3", "rogue": "127.0.10.4"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, voms, dns, now = site_pki(d, ADDR, ("dteam", "atlas"))
    for user, vo in (("alice", "dteam"), ("bob", "dteam"), ("carol", "dteam"), ("nova", None)):
        cred = issue_user(ca, user.capitalize(), now=now)
        dns[user] = cred.dn
        acs = [issue_ac(voms, vo, [f"/{vo}"], cred.cert, now, 3600)] if vo else []
        write_proxy(d / f"{user}.proxy", create_proxy(cred, now, 3600, acs=acs))
        if user == "alice":
            write_proxy(d / "alice.limited", create_proxy(cred, now, 3600, limited=True, acs=acs))
    return d, dns


def tls(d, name, key=True):
    return TLSFiles(cert=str(d / (f"{name}.pem" if key else name)), key=str(d / f"{name}.key") if key else None,
                    cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir"))


def user(d, proxy):
    return new_session(tls(d, proxy, key=False))


def tls_fields(d, name):
    return {"tls_cert": str(d / f"{name}.pem"), "tls_key": str(d / f"{name}.key"),
            "cert_dir": str(d / "certs"), "voms_dir": str(d / "vomsdir")}


@pytest.fixture(scope="module")
def site(pki, tmp_path_factory):
    d, dns = pki
    work = tmp_path_factory.mktemp("site")
    node_cfg = NodeAgentConfig(node="n1", cgroup="none", work_dir=str(work / "node"), ce_dns=[dns["ce"]],
                               **tls_fields(d, "node"))
    node = BackgroundServer(node_app(node_cfg), host=ADDR["node"], tls=node_cfg.tls_files())
    ce_cfg = CEAgentConfig(ce_id="ce.vgrid.local:8443/vgrid-vwn-long", host="ce.vgrid.local", site="S",
                           queue="long", nodes=[node.url], vos=["dteam"], broker_dns=[dns["broker"]],
                           **tls_fields(d, "ce"))
    ce = BackgroundServer(ce_app(ce_cfg), host=ADDR["ce"], tls=ce_cfg.tls_files())
    b_cfg = BrokerConfig(state_dir=str(work / "broker"), admins=[dns["carol"]], **tls_fields(d, "broker"))
    broker = build_broker(b_cfg)
    bsrv = BackgroundServer(broker_app(broker, tls=b_cfg.tls_files(), admins=b_cfg.admins),
                            host=ADDR["broker"], tls=b_cfg.tls_files())
    broker.settings.base_url = bsrv.url
    yield {"broker": bsrv.url, "ce": ce.url, "node": node.url, "store": broker.store, "logic": broker}
    for srv in (bsrv, ce, node):
        srv.close()
    broker.store.close()


def submit(d, site, proxy, jdl=JDL, headers=None):
    return user(d, proxy).post(f"{site['broker']}/jobs", data={"jdl": jdl, "filename": "j.jdl"},
                               headers=headers, timeout=10)


def test_idempotency_keys_are_scoped_to_the_submitters_dn(pki, site):
    d, dns = pki
    key = {"Idempotency-Key": "shared-key-1"}
    a1, b1 = submit(d, site, "alice.proxy", headers=key), submit(d, site, "bob.proxy", headers=key)
    assert (a1.status_code, b1.status_code) == (201, 201), (a1.text, b1.text)
    assert a1.json()["key"] != b1.json()["key"]
    a2 = submit(d, site, "alice.proxy", headers=key)
    b2 = submit(d, site, "bob.proxy", jdl='[ Executable = "/bin/false"; ]', headers=key)
    assert a2.status_code == 200 and a2.json()["key"] == a1.json()["key"]
    assert b2.status_code == 409 and b2.json()["error"]["idempotency_key"] == "shared-key-1"
    owners = {j.key: j.owner_dn for j in site["store"].list()}
    assert owners[a1.json()["key"]] == dns["alice"] and owners[b1.json()["key"]] == dns["bob"]


def test_anonymous_callers_get_401_everywhere(pki, site):
    d, _ = pki
    anon, ca = requests.Session(), str(d / "certs" / "ca.pem")
    for url, method, path in ((site["node"], "post", "/vwns"), (site["ce"], "post", "/jobs"),
                              (site["broker"], "get", "/jobs"), (site["broker"], "post", "/jobs")):
        r = getattr(anon, method)(f"{url}{path}", json={}, verify=ca, timeout=10)
        assert r.status_code == 401, (url, path, r.text)
        assert r.json()["error"]["reason"] == "no-certificate"


def test_a_user_cannot_drive_a_node_agent_or_a_ce_agent(pki, site):
    d, _ = pki
    alice = user(d, "alice.proxy")
    body = {"job_id": "x", "key": "k1", "executable": "/bin/sh", "arguments": "-c \"id > /tmp/pwned\""}
    r = alice.post(f"{site['node']}/vwns", json=body, timeout=10)
    assert r.status_code == 403 and "may not create VWNs" in r.json()["error"]["message"]
    assert alice.get(f"{site['node']}/vwns", timeout=10).status_code == 403
    for verb in ("suspend", "resume"):        # only the CE agents suspend or resume a VWN
        r = alice.post(f"{site['node']}/vwns/vwn-x-1/{verb}", timeout=10)
        assert r.status_code == 403 and f"may not {verb} VWN" in r.json()["error"]["message"], r.text
        r = new_session(tls(d, "broker")).post(f"{site['node']}/vwns/vwn-x-1/{verb}", timeout=10)
        assert r.status_code == 403, r.text
        r = new_session(tls(d, "ce")).post(f"{site['node']}/vwns/vwn-x-1/{verb}", timeout=10)
        assert r.status_code == 404, r.text      # the CE agent passes the rule: unknown VWN
    r = alice.post(f"{site['ce']}/jobs", json={"job_id": "x", "key": "k", "jdl": JDL}, timeout=10)
    assert r.status_code == 403
    r = alice.post(f"{site['ce']}/node-events", json={"key": "k", "event": "done"}, timeout=10)
    assert r.status_code == 403
    # the CE agent's own identity may list the node's VWNs; the broker's may not
    assert new_session(tls(d, "ce")).get(f"{site['node']}/vwns", timeout=10).status_code == 200
    assert new_session(tls(d, "broker")).get(f"{site['node']}/vwns", timeout=10).status_code == 403
    # anyone authenticated reads the published GLUE
    assert alice.get(f"{site['ce']}/glue", timeout=10).status_code == 200


def test_only_the_ce_agents_boot_list_or_stop_voc_vms(pki, site):
    """VOC VMs (node_voc): a user or the broker may not boot, list or stop them; the CE agent
    passes the rule (this node has no libvirt driver: 409 not-libvirt)."""
    d, _ = pki
    body = {"node": "voc-alpha-1", "vo": "alpha"}
    for who in (user(d, "alice.proxy"), new_session(tls(d, "broker"))):
        r = who.post(f"{site['node']}/voc/vms", json=body, timeout=10)
        assert r.status_code == 403 and "may not boot VOC VMs" in r.json()["error"]["message"], r.text
        assert who.get(f"{site['node']}/voc/vms", timeout=10).status_code == 403
        assert who.delete(f"{site['node']}/voc/vms/voc-alpha-1", timeout=10).status_code == 403
    ce = new_session(tls(d, "ce"))
    r = ce.post(f"{site['node']}/voc/vms", json=body, timeout=10)
    assert r.status_code == 409 and r.json()["error"]["code"] == "not-libvirt", r.text
    assert ce.get(f"{site['node']}/voc/vms", timeout=10).json() == {"vms": []}
    r = ce.post(f"{site['node']}/vwns", json={"job_id": "x", "key": "kv", "executable": "/bin/true",
                                              "voc_node": "voc-alpha-1"}, timeout=10)
    assert r.status_code == 409 and r.json()["error"]["code"] == "not-libvirt", r.text


def test_only_the_ce_agents_set_or_see_a_node_agents_heartbeats_and_outbox(pki, site):
    d, _ = pki
    alice = user(d, "alice.proxy")
    rogue = f"https://{ADDR['rogue']}:9/node-heartbeats"
    body = {"job_id": "x", "key": "hb-evil", "executable": "/bin/true", "heartbeat_url": rogue}
    r = alice.post(f"{site['node']}/vwns", json=body, timeout=10)
    assert r.status_code == 403 and "may not create VWNs" in r.json()["error"]["message"]
    mine = alice.get(f"{site['node']}/status", timeout=10)
    assert mine.status_code == 200 and not {"heartbeat", "outbox"} & set(mine.json())
    ce = new_session(tls(d, "ce")).get(f"{site['node']}/status", timeout=10).json()
    assert set(ce["outbox"]) == {"pending", "dropped"}
    assert rogue not in [t["url"] for t in ce["heartbeat"]["targets"]]


def test_node_heartbeats_present_the_node_agents_certificate(pki, tmp_path):
    """Heartbeats go over mutual TLS with the node's host certificate (as its events do)."""
    from flask import Flask, jsonify, request
    from vgrid_runtime.authn import caller, install_authentication
    from .waiting import wait_until
    d, dns = pki
    seen = []
    app = Flask("fake-ce")
    install_authentication(app, tls(d, "ce"), WallClock())

    @app.post("/node-heartbeats")
    def heartbeat():
        seen.append((caller().dn, request.get_json()))
        return jsonify({"unknown": []})

    ce = BackgroundServer(app, host=ADDR["ce"], tls=tls(d, "ce"))
    cfg = NodeAgentConfig(node="hbtls", cgroup="none", work_dir=str(tmp_path / "n"), ce_dns=[dns["ce"]],
                          heartbeat_s=0.2, disk_quota_mb=0, **tls_fields(d, "node"))
    node = BackgroundServer(node_app(cfg), host=ADDR["node"], tls=cfg.tls_files())
    try:
        body = {"job_id": "x", "key": "hb-tls", "executable": "/bin/sleep", "arguments": "30",
                "heartbeat_url": f"{ce.url}/node-heartbeats"}
        assert new_session(tls(d, "ce")).post(f"{node.url}/vwns", json=body, timeout=10).status_code == 201
        dn, beat = wait_until(lambda: seen and seen[-1], "a heartbeat over mutual TLS")
        assert dn == dns["node"] and beat["node"] == node.url
        assert [v["key"] for v in beat["vwns"]] == ["hb-tls"]
    finally:
        node.close()
        ce.close()


def test_jobs_belong_to_their_submitter(pki, site):
    d, dns = pki
    r = submit(d, site, "alice.proxy")
    assert r.status_code == 201, r.text
    key = r.json()["key"]
    alice, bob, carol = user(d, "alice.proxy"), user(d, "bob.proxy"), user(d, "carol.proxy")
    job = alice.get(f"{site['broker']}/jobs/{key}", timeout=10).json()
    assert job["owner"] == {"dn": dns["alice"], "vo": "dteam", "fqans": ["/dteam"]}
    # another user's job reads like an unknown one (status, body, no ETag): its existence is not told
    theirs = bob.get(f"{site['broker']}/jobs/{key}", timeout=10)
    tag = alice.get(f"{site['broker']}/jobs/{key}", timeout=10).headers["ETag"]
    with_tag = bob.get(f"{site['broker']}/jobs/{key}", headers={"If-None-Match": tag}, timeout=10)
    unknown = bob.get(f"{site['broker']}/jobs/{key[:-1]}X", timeout=10)
    for r in (theirs, with_tag):
        assert r.status_code == 404 and "ETag" not in r.headers
        assert r.json() == {"error": {"message": f"unknown job {key}"}}
    assert unknown.status_code == 404 and unknown.json() == {"error": {"message": f"unknown job {key[:-1]}X"}}
    assert bob.post(f"{site['broker']}/jobs/{key}/cancel", timeout=10).status_code == 403
    assert bob.get(f"{site['broker']}/jobs/{key}/output", timeout=10).status_code == 403
    assert key not in {j["key"] for j in bob.get(f"{site['broker']}/jobs", timeout=10).json()["jobs"]}
    assert key in {j["key"] for j in alice.get(f"{site['broker']}/jobs", timeout=10).json()["jobs"]}
    assert key in {j["key"] for j in carol.get(f"{site['broker']}/jobs", timeout=10).json()["jobs"]}  # admin
    assert carol.get(f"{site['broker']}/jobs/{key}", timeout=10).status_code == 200
    r = alice.post(f"{site['broker']}/jobs/{key}/cancel", timeout=10)
    assert r.status_code == 200 and r.json()["state"] == "Cancelled"


@pytest.mark.parametrize("proxy, jdl, words", [
    ("alice.limited", JDL, "limited proxy"),
    ("nova.proxy", JDL, "without VO attributes"),
    ("alice.proxy", '[ Executable = "/bin/true"; VirtualOrganisation = "atlas"; ]', "for VO 'atlas'"),
])
def test_submissions_that_are_refused(pki, site, proxy, jdl, words):
    d, _ = pki
    before = len(site["store"].list())
    r = submit(d, site, proxy, jdl)
    assert r.status_code == 403 and words in r.json()["error"]["message"], r.text
    assert len(site["store"].list()) == before          # nothing stored


def test_events_and_outputs_only_from_the_services_the_job_went_to(pki, site):
    d, _ = pki
    key = submit(d, site, "alice.proxy").json()["key"]
    store, now = site["store"], WallClock().now()
    store.update_fields(key, now, ce_url=f"https://{ADDR['ce']}:9/", node_url=f"https://{ADDR['node']}:9/")
    event = {"key": key, "event": "done", "exit_code": 0}
    for who in ("alice.proxy",):
        assert user(d, who).post(f"{site['broker']}/jobs/{key}/events", json=event, timeout=10).status_code == 403
    for host in ("rogue", "node"):                       # another host, or the node itself
        r = new_session(tls(d, host)).post(f"{site['broker']}/jobs/{key}/events", json=event, timeout=10)
        assert r.status_code == 403, host
    assert site["store"].get(key).state.value == "Waiting"
    put = f"{site['broker']}/jobs/{key}/output/std.out"
    assert user(d, "alice.proxy").put(put, data=b"forged", timeout=10).status_code == 403
    assert new_session(tls(d, "rogue")).put(put, data=b"forged", timeout=10).status_code == 403
    node = new_session(tls(d, "node"))
    assert node.put(put, data=b"result\n", timeout=10).status_code == 201
    assert node.put(put, data=b"result\n", timeout=10).status_code == 201   # a retried upload
    r = node.put(put, data=b"overwrite\n", timeout=10)
    assert r.status_code == 409 and "write-once" in r.json()["error"]["message"]
    got = user(d, "alice.proxy").get(f"{put}", timeout=10)
    assert got.status_code == 200 and got.content == b"result\n"


def test_the_cli_presents_the_users_proxy(pki, site, tmp_path, monkeypatch):
    from click.testing import CliRunner
    from vgrid_cli.main import main
    d, _ = pki
    for var in ("X509_USER_PROXY", "X509_CERT_DIR", "X509_VOMS_DIR"):
        monkeypatch.setenv(var, "/nonexistent")          # restored after the test
    jdl = tmp_path / "j.jdl"
    jdl.write_text(JDL)
    common = ["--cert-dir", str(d / "certs"), "--voms-dir", str(d / "vomsdir")]
    r = CliRunner().invoke(main, ["--proxy", str(d / "alice.proxy"), *common, "submit", str(jdl),
                                  "--broker", site["broker"]])
    assert r.exit_code == 0, r.output
    job_id = r.output.strip().splitlines()[-1]
    assert job_id.startswith(f"{site['broker']}/jobs/")
    r = CliRunner().invoke(main, ["--proxy", str(d / "bob.proxy"), *common, "status", job_id])
    # another user's job is an unknown job to bob (its existence is not told)
    assert r.exit_code == 2 and "unknown job" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["--proxy", str(d / "absent"), *common, "status", job_id])
    assert r.exit_code != 0 and "no proxy at" in r.output


def test_gip_reads_a_ce_agent_over_mutual_tls(pki, site, monkeypatch):
    from click.testing import CliRunner
    from vgrid_cli.main import main
    d, _ = pki
    for var in ("X509_USER_PROXY", "X509_CERT_DIR", "X509_VOMS_DIR"):
        monkeypatch.setenv(var, "/nonexistent")
    r = CliRunner().invoke(main, ["--proxy", str(d / "alice.proxy"), "--cert-dir", str(d / "certs"),
                                  "gip", "--ce", site["ce"], "--glue", "1.3"])
    assert r.exit_code == 0 and "GlueCEUniqueID: ce.vgrid.local:8443/vgrid-vwn-long" in r.output, r.output


def test_sandbox_capability_urls(pki, site):
    """The URLs handed to the CE agent at dispatch carry a capability: a service holding it may
    transfer; a wrong token, or a user holding the right one, may not."""
    d, _ = pki
    key = submit(d, site, "alice.proxy").json()["key"]
    token = site["logic"].sandbox_token(key)
    base = f"{site['broker']}/jobs/{key}/sandbox"
    node = new_session(tls(d, "node"))
    assert node.put(f"{base}/{'0' * 32}/output/o.txt", data=b"x", timeout=10).status_code == 403
    assert user(d, "alice.proxy").put(f"{base}/{token}/output/o.txt", data=b"x", timeout=10).status_code == 403
    assert node.put(f"{base}/{token}/output/o.txt", data=b"ok", timeout=10).status_code == 201
    r = user(d, "alice.proxy").get(f"{site['broker']}/jobs/{key}/output/o.txt", timeout=10)
    assert r.status_code == 200 and r.content == b"ok"
    assert user(d, "bob.proxy").get(f"{site['broker']}/jobs/{key}/output/o.txt", timeout=10).status_code == 403


def test_heartbeats_only_from_the_ce_agent_of_the_url(pki, site):
    """POST /heartbeats: the caller's host certificate must serve the ``url`` it reports for;
    entries of jobs dispatched elsewhere are not applied (answered unknown)."""
    d, _ = pki
    key = submit(d, site, "alice.proxy").json()["key"]
    now = WallClock().now()
    site["store"].update_fields(key, now, ce_url=f"https://{ADDR['rogue']}:9")
    beat = {"ce": "ce.vgrid.local:8443/vgrid-vwn-long", "url": site["ce"], "interval_s": 10.0,
            "time": now, "jobs": [{"key": key, "state": "Running", "silent_s": 0.0}]}
    for who in (new_session(tls(d, "rogue")), new_session(tls(d, "node")), user(d, "alice.proxy")):
        r = who.post(f"{site['broker']}/heartbeats", json=beat, timeout=10)
        assert r.status_code == 403 and "heartbeats" in r.json()["error"]["message"]
    r = new_session(tls(d, "ce")).post(f"{site['broker']}/heartbeats", json=beat, timeout=10)
    assert r.status_code == 200 and r.json() == {"unknown": [key]}
    assert site["store"].get(key).last_heard is None
    assert site["store"].ce_heartbeats()[site["ce"].rstrip("/")]["interval_s"] == 10.0


def test_events_of_a_past_attempt_are_ignored_for_services_only(pki, site):
    d, _ = pki
    key = submit(d, site, "alice.proxy").json()["key"]
    site["store"].update_fields(key, WallClock().now(), attempt=1, ce_url=site["ce"])
    event = {"key": key, "event": "done", "exit_code": 0}
    assert user(d, "alice.proxy").post(f"{site['broker']}/jobs/{key}/events", json=event,
                                       timeout=10).status_code == 403
    r = new_session(tls(d, "ce")).post(f"{site['broker']}/jobs/{key}/events", json=event, timeout=10)
    assert r.status_code == 200 and r.json()["ignored"] == "past attempt"
    assert r.json()["current"] == f"{key}.1" and site["store"].get(key).state.value == "Waiting"


def test_listing_filters_by_owner_only_for_the_owner_or_an_admin(pki, site):
    d, dns = pki
    key = submit(d, site, "alice.proxy").json()["key"]
    alice, bob, carol = user(d, "alice.proxy"), user(d, "bob.proxy"), user(d, "carol.proxy")
    url = f"{site['broker']}/jobs"
    r = bob.get(url, params={"owner": dns["alice"]}, timeout=10)
    assert r.status_code == 403 and "not theirs" in r.json()["error"]["message"]
    assert key not in {j["key"] for j in bob.get(url, params={"owner": "me"}, timeout=10).json()["jobs"]}
    mine = alice.get(url, params={"owner": "me", "limit": 1000}, timeout=10).json()
    assert key in {j["key"] for j in mine["jobs"]} and {j["owner"]["dn"] for j in mine["jobs"]} == {dns["alice"]}
    own = alice.get(url, params={"owner": dns["alice"]}, timeout=10)
    assert own.status_code == 200
    admin = carol.get(url, params={"owner": dns["alice"], "limit": 1000}, timeout=10).json()
    assert key in {j["key"] for j in admin["jobs"]}
    assert {j["owner"]["dn"] for j in admin["jobs"]} == {dns["alice"]}


def test_only_a_broker_may_post_a_bulk_dispatch(pki, site):
    """POST /jobs/bulk has the rule of POST /jobs: a user (or another service) gets 403 and
    nothing is stored; the broker's identity is accepted job by job."""
    d, _ = pki
    entry = {"job_id": "x", "key": "bulk-evil", "jdl": JDL}
    for who in (user(d, "alice.proxy"), new_session(tls(d, "ce"))):
        r = who.post(f"{site['ce']}/jobs/bulk", json={"jobs": [entry]}, timeout=10)
        assert r.status_code == 403, r.text
    broker = new_session(tls(d, "broker"))
    assert "bulk-evil" not in {j["key"] for j in broker.get(f"{site['ce']}/jobs", timeout=10).json()}
    r = broker.post(f"{site['ce']}/jobs/bulk", json={"jobs": [{**entry, "key": "bulk-ok"}]}, timeout=10)
    assert r.status_code == 200 and r.json()["results"][0]["accepted"] is True, r.text
    broker.post(f"{site['ce']}/jobs/bulk-ok/cancel", timeout=10)
