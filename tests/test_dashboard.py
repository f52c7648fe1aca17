"""The broker's web dashboard (issue 17) over real mutual TLS: who sees what, ETags, the CE
agent's GET /site, and the SVG the pages draw. The browser tests are in test_dashboard_browser.py.

One site on its own loopback addresses (127.0.17.x): a node agent (no CPU caps here), a CE agent
with the lease engine, and a broker whose ISM reads the CE agent; users alice and bob (dteam) and
carol, the broker's administrator.
"""
from __future__ import annotations

import re

import pytest
import requests
from hypothesis import given, settings, strategies as st

from broker.api import create_app as broker_app
from broker.config import BrokerConfig
from broker.dashboard import svg
from broker.server import build_broker
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.pki import issue_user
from vgrid_runtime.proxy import create_proxy, write_proxy
from vgrid_runtime.tls import TLSFiles
from vgrid_runtime.voms import issue_ac
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app as ce_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app

from .pki_site import site_pki
from .pki_site import tls_fields as fields
from .waiting import wait_until

ADDR = {"broker": "127.0.17.1", "ce": "127.0.17.2", "node": "127.0.17.3"}
CE_ID = "ce.vgrid.local:8443/vgrid-vwn-long"
SLEEP = '[ Executable = "/bin/sleep"; Arguments = "300"; ]'
ROUTES = ("/dashboard/", "/dashboard/grid", f"/dashboard/site?ce={CE_ID}", "/dashboard/jobs",
          "/dashboard/jobs/x", "/dashboard/static/dashboard.js")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, voms, dns, now = site_pki(d, ADDR, ("dteam",))
    for user in ("alice", "bob", "carol"):
        cred = issue_user(ca, user.capitalize(), now=now)
        dns[user] = cred.dn
        cred.save(d / f"{user}.pem", d / f"{user}.key")     # the end-entity certificate a browser holds
        write_proxy(d / f"{user}.proxy", create_proxy(cred, now, 3600,
                                                      acs=[issue_ac(voms, "dteam", ["/dteam"], cred.cert, now, 3600)]))
    return d, dns


def tls(d, name):
    if name.endswith(".proxy"):
        return TLSFiles(cert=str(d / name), key=None, cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir"))
    return TLSFiles(cert=str(d / f"{name}.pem"), key=str(d / f"{name}.key"), cert_dir=str(d / "certs"),
                    voms_dir=str(d / "vomsdir"))


@pytest.fixture(scope="module")
def site(pki, tmp_path_factory):
    d, dns = pki
    work = tmp_path_factory.mktemp("site")
    node_cfg = NodeAgentConfig(node="wn1", cgroup="none", work_dir=str(work / "node"), ce_dns=[dns["ce"]],
                               **fields(d, "node"))
    node = BackgroundServer(node_app(node_cfg), host=ADDR["node"], tls=node_cfg.tls_files())
    ce_cfg = CEAgentConfig(ce_id=CE_ID, host="ce.vgrid.local", site="S", queue="long", nodes=[node.url],
                           vos=["dteam"], broker_dns=[dns["broker"]], state_dir=str(work / "ce"),
                           **fields(d, "ce"))
    ce = BackgroundServer(ce_app(ce_cfg), host=ADDR["ce"], tls=ce_cfg.tls_files())
    b_cfg = BrokerConfig(state_dir=str(work / "broker"), admins=[dns["carol"]], ce_urls=[ce.url],
                         ism_refresh_s=1.0, **fields(d, "broker"))
    broker = build_broker(b_cfg)
    app = broker_app(broker, tls=b_cfg.tls_files(), admins=b_cfg.admins)

    def bound(url):
        broker.settings.base_url = url
        broker.ism.start()
        broker.start()

    app.config["VGRID_ON_BOUND"] = bound
    bsrv = BackgroundServer(app, host=ADDR["broker"], tls=b_cfg.tls_files())
    wait_until(lambda: broker.ism.snapshot().ads, "the ISM to list the CE")
    yield {"broker": bsrv.url, "ce": ce.url, "node": node.url, "logic": broker}
    broker.stop()
    broker.ism.stop()
    for srv in (bsrv, ce, node):
        srv.close()
    broker.store.close()


def as_(d, who):
    return new_session(tls(d, who if who in ADDR else f"{who}.proxy"))


@pytest.fixture(scope="module")
def jobs(pki, site):
    """alice's and bob's running jobs: ``{"alice": key, "bob": key}``."""
    d, _ = pki
    keys = {}
    for who in ("alice", "bob"):
        r = as_(d, who).post(f"{site['broker']}/jobs", data={"jdl": SLEEP, "filename": f"{who}-sleep.jdl"},
                             timeout=10)
        assert r.status_code == 201, r.text
        keys[who] = r.json()["key"]
    for key in keys.values():
        wait_until(lambda: site["logic"].get(key).state.value == "Running", f"job {key} to run", timeout_s=60)
    return keys


def test_every_dashboard_route_needs_a_certificate(pki, site):
    d, _ = pki
    anon = requests.Session()
    for path in ROUTES:
        r = anon.get(f"{site['broker']}{path}", verify=str(d / "certs" / "ca.pem"), timeout=10,
                     allow_redirects=False)
        assert r.status_code == 401 and r.json()["error"]["reason"] == "no-certificate", (path, r.text)


def test_grid_view_lists_the_ce_with_its_sfete_estimate(pki, site, jobs):
    d, _ = pki
    r = as_(d, "alice").get(f"{site['broker']}/dashboard/grid", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    row = re.search(r'<tr data-ce="([^"]+)">(.*?)</tr>', r.text, re.S)
    assert row and row.group(1) == CE_ID
    ism = as_(d, "alice").get(f"{site['broker']}/ism", timeout=10).json()
    ad = ism["ces"][0]
    n_jobs = ad["total_jobs"] + ism["dispatched_since_refresh"].get(CE_ID, 0)
    shown = float(re.search(r'class="n sfete">([^<]+)<', row.group(2)).group(1))
    assert shown == pytest.approx((n_jobs + 1) / (ad["total_cpus"] * ad["si00"]), rel=1e-2)


def test_a_user_sees_only_their_jobs_and_an_admin_sees_everyones(pki, site, jobs):
    d, dns = pki
    url = site["broker"]
    mine = as_(d, "alice").get(f"{url}/dashboard/jobs", timeout=10).text
    assert jobs["alice"] in mine and jobs["bob"] not in mine
    assert as_(d, "alice").get(f"{url}/dashboard/jobs/{jobs['alice']}", timeout=10).status_code == 200
    r = as_(d, "alice").get(f"{url}/dashboard/jobs/{jobs['bob']}", timeout=10)
    assert r.status_code == 403 and "not theirs" in r.text and "/bin/sleep" not in r.text
    r = as_(d, "alice").get(f"{url}/dashboard/jobs", params={"owner": dns["bob"]}, timeout=10)
    assert r.status_code == 403 and jobs["bob"] not in r.text
    everyone = as_(d, "carol").get(f"{url}/dashboard/jobs", timeout=10).text
    assert jobs["alice"] in everyone and jobs["bob"] in everyone
    assert as_(d, "carol").get(f"{url}/dashboard/jobs/{jobs['bob']}", timeout=10).status_code == 200
    # search: by file name, within what the caller may see
    hit = as_(d, "carol").get(f"{url}/dashboard/jobs", params={"q": "BOB-sleep"}, timeout=10).text
    assert jobs["bob"] in hit and jobs["alice"] not in hit
    assert jobs["bob"] not in as_(d, "alice").get(f"{url}/dashboard/jobs", params={"q": "bob"}, timeout=10).text
    assert as_(d, "alice").get(f"{url}/dashboard/jobs", params={"state": "Nope"}, timeout=10).status_code == 400


def test_site_view_shows_vwns_and_names_only_the_callers_jobs(pki, site, jobs):
    d, _ = pki
    r = as_(d, "alice").get(f"{site['broker']}/dashboard/site", params={"ce": CE_ID}, timeout=20)
    assert r.status_code == 200, r.text
    vwns = re.findall(r'<tr data-vwn="([^"]+)" data-state="running"', r.text)
    assert len(vwns) == 2, r.text
    i = r.text.find(jobs["bob"])
    assert i < 0, r.text[max(0, i - 600):i + 100]
    assert jobs["alice"] in r.text and "another user's job" in r.text
    assert 'class="gantt"' in r.text and r.text.count('data-kind="VM"') >= 2
    assert as_(d, "alice").get(f"{site['broker']}/dashboard/site", params={"ce": "nope"}, timeout=10).status_code == 404
    assert as_(d, "carol").get(f"{site['broker']}/dashboard/site", params={"ce": CE_ID}, timeout=20).text.count(
        "another user") == 0


def test_only_brokers_and_the_ce_itself_read_a_ce_agents_site_document(pki, site, jobs):
    d, _ = pki
    assert as_(d, "alice").get(f"{site['ce']}/site", timeout=10).status_code == 403
    assert as_(d, "node").get(f"{site['ce']}/site", timeout=10).status_code == 403
    doc = as_(d, "broker").get(f"{site['ce']}/site", timeout=20).json()
    assert doc["ce_id"] == CE_ID and doc["nodes"][0]["status"]["node"] == "wn1"
    running = [v for v in doc["nodes"][0]["vwns"] if v["state"] == "running"]
    assert {v["job_id"].rsplit("/", 1)[1] for v in running} == set(jobs.values())
    vm = [r for r in doc["slots"]["reservations"] if r["kind"] == "VM"]
    assert {r["key"] for r in vm} == set(jobs.values()) and all(r["nodes"] == [site["node"]] for r in vm)
    assert as_(d, "ce").get(f"{site['ce']}/site", timeout=20).status_code == 200


def test_an_unchanged_page_answers_304_to_its_etag(pki, site, jobs):
    d, _ = pki
    alice = as_(d, "alice")
    site_url = f"{site['broker']}/dashboard/site?ce={CE_ID}"
    tag = alice.get(site_url, timeout=20).headers["ETag"]   # heartbeats in between change nothing shown
    assert alice.get(site_url, headers={"If-None-Match": tag}, timeout=20).status_code == 304
    url = f"{site['broker']}/dashboard/jobs/{jobs['alice']}"
    first = alice.get(url, timeout=10)
    tag = first.headers["ETag"]
    again = alice.get(url, headers={"If-None-Match": tag}, timeout=10)
    assert again.status_code == 304 and not again.content
    assert alice.get(url, headers={"If-None-Match": '"other"'}, timeout=10).status_code == 200
    # another user's view of the same URL never shares the tag
    assert as_(d, "carol").get(url, timeout=10).headers["ETag"] != tag


def test_a_users_end_entity_certificate_sees_what_their_proxy_sees(pki, site, jobs):
    d, _ = pki
    browser = new_session(TLSFiles(cert=str(d / "alice.pem"), key=str(d / "alice.key"),
                                   cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir")))
    page = browser.get(f"{site['broker']}/dashboard/jobs", timeout=10)
    assert page.status_code == 200 and jobs["alice"] in page.text and jobs["bob"] not in page.text
    assert browser.get(f"{site['broker']}/dashboard/jobs/{jobs['bob']}", timeout=10).status_code == 403


def test_a_dag_shows_its_nodes_and_edges(pki, site):
    d, _ = pki
    dag = ('[ Type = "dag"; nodes = [ first = [ description = [ Executable = "/bin/true"; ]; ];\n'
           '  second = [ description = [ Executable = "/bin/true"; ]; ];\n'
           '  dependencies = { { first, second } }; ]; ]\n')
    r = as_(d, "alice").post(f"{site['broker']}/jobs", data={"jdl": dag, "filename": "pair.jdl"}, timeout=10)
    assert r.status_code == 201, r.text
    page = as_(d, "alice").get(f"{site['broker']}/dashboard/jobs/{r.json()['key']}", timeout=10).text
    nodes = re.findall(r"<tr><td>(first|second)</td><td><a href=\"/dashboard/jobs/([^\"]+)\"", page)
    assert sorted(n for n, _ in nodes) == ["first", "second"]
    assert re.search(r"<li>first &rarr; second</li>", page), page
    listed = as_(d, "alice").get(f"{site['broker']}/dashboard/jobs", params={"q": "pair.jdl"}, timeout=10).text
    assert all(k in listed for _, k in nodes) and r.json()["key"] in listed


@settings(max_examples=60, deadline=None)
@given(now=st.floats(1e9, 2e9),
       bars=st.lists(st.tuples(st.floats(-4000, 4000), st.floats(0, 5000), st.sampled_from(["AR", "BE"])),
                     max_size=6))
def test_gantt_bars_sit_at_their_times_on_the_axis(now, bars):
    slots = {"nodes": ["https://n1"], "history": [],
             "reservations": [{"kind": "VM", "lease_type": t, "start": now + s, "end": now + s + d,
                               "nodes": ["https://n1"], "state": "scheduled", "lease": i}
                              for i, (s, d, t) in enumerate(bars)]}
    out = str(svg.gantt(slots, now))
    t0 = float(re.search(r'data-t0="([^"]+)"', out).group(1))
    t1 = float(re.search(r'data-t1="([^"]+)"', out).group(1))
    k = float(re.search(r'data-px-per-s="([^"]+)"', out).group(1))
    assert t0 <= now - 60 + 1e-3 and now + 120 - 1e-3 <= t1 <= now + 1800 + 1e-3
    for x, start in re.findall(r'<rect class="res" x="([^"]+)"[^>]*data-start="([^"]+)"', out):
        expect = svg.LEFT + (min(max(float(start), t0), t1) - t0) * k
        assert float(x) == pytest.approx(expect, abs=0.02)
        assert svg.LEFT <= float(x) <= svg.LEFT + svg.WIDTH + 0.01
    now_x = float(re.search(r'<line class="now" x1="([^"]+)"', out).group(1))
    assert now_x == pytest.approx(svg.LEFT + (now - t0) * k, abs=0.02)



def test_a_suspension_is_drawn_between_a_leases_run_segments():
    now, n1 = 1_800_000_000.0, "https://n1"
    slots = {"nodes": [n1, "https://n2"],
             "history": [{"lease": 7, "key": None, "lease_type": "BE", "start": now - 300, "end": now - 200,
                          "nodes": [n1]}],
             "reservations": [{"kind": "VM", "lease": 7, "lease_type": "BE", "start": now - 50, "end": now + 50,
                               "nodes": [n1], "state": "active", "id": 3},
                              {"kind": "VM", "lease": 8, "lease_type": "AR", "start": now + 60, "end": now + 90,
                               "nodes": ["https://n2"], "state": "scheduled", "id": 4}]}
    out = str(svg.gantt(slots, now, {n1: "wn1"}))
    gap = re.findall(r'data-kind="SUSPENDED"[^>]*data-start="([^"]+)" data-end="([^"]+)"', out)
    assert [(float(a), float(b)) for a, b in gap] == [(now - 200, now - 50)]
    assert ">wn1</text>" in out and out.count('data-kind="VM"') == 3


def test_the_slot_view_lists_an_advance_reservation_with_its_job_key_and_node():
    from vgrid_runtime.clock import SimulatedClock
    from vwn_agents.lease_engine import LeaseEngine
    clock = SimulatedClock(1_800_000_000.0)
    nodes = ["https://127.0.17.250:9", "https://127.0.17.251:9"]      # never called: nothing starts yet
    engine = LeaseEngine([(u, 1, 1024) for u in nodes], clock=clock)
    engine.submit_job("ar-job.1", {"key": "ar-job.1"}, cpu=100, memory_mb=256, duration_s=60,
                      start_s=clock.now() + 100)
    view = engine.slot_table()
    [res] = view["reservations"]
    assert (res["kind"], res["lease_type"], res["key"], res["state"]) == ("VM", "AR", "ar-job.1", "scheduled")
    assert (res["start"], res["end"]) == (clock.now() + 100, clock.now() + 160)
    assert len(res["nodes"]) == 1 and res["nodes"][0] in nodes and view["history"] == []
    assert view["nodes"] == nodes and view["now"] == clock.now()


def test_grid_view_lists_the_peer_gateways(tmp_path):
    from broker.server import build_app
    cfg = BrokerConfig.from_dict({"state_dir": str(tmp_path / "b"), "peers": [
        {"name": "north", "url": "https://127.0.17.9:1", "send_vos": ["dteam"], "accept_vos": ["atlas"],
         "share_cpus": 4, "priority": 1}]})
    broker = build_broker(cfg)
    try:
        page = build_app(broker, cfg).test_client().get("/dashboard/grid")   # plain HTTP: no identity
        assert page.status_code == 200
        row = re.search(r'<table id="peers">.*?<tbody><tr>(.*?)</tr>', page.get_data(as_text=True), re.S).group(1)
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", row)
        assert cells == ["north", "https://127.0.17.9:1", "dteam", "atlas", "4", "1"]
    finally:
        broker.store.close()
