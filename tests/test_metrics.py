"""GET /metrics of the broker, CE agent and node agent over real mutual TLS on loopback.

One site (node agent -> CE agent -> broker, each on its own 127.0.17.x with a host certificate
for it) is scraped with a monitoring identity (a host certificate listed in ``metrics_dns``);
the scrapes are parsed with prometheus_client's own parser and the values must follow what the
site does: a submitted job moves the broker's counters and its jobs-by-state gauge, a running
VWN shows in the node's gauges with the cap C/(N+1), a failed handshake is counted. Who may
scrape is checked too (an ordinary user proxy is refused everywhere).
"""
from __future__ import annotations

import json
import re
import socket
import ssl
from pathlib import Path

import pytest
import requests
from hypothesis import given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from broker.api import create_app as broker_app
from broker.config import BrokerConfig
from broker.metrics import install_broker_metrics
from broker.server import build_broker
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.pki import create_ca, issue_host, issue_user
from vgrid_runtime.proxy import create_proxy, write_proxy
from vgrid_runtime.tls import TLSFiles
from vgrid_runtime.voms import issue_ac
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app as ce_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app

from .pki_site import site_pki
from .test_ce_agent import site as site_ce, submit as ce_submit  # noqa: F401  (fixture)
from .waiting import gated_jdl, release, wait_until

ADDR = {"broker": "127.0.17.1", "ce": "127.0.17.2", "node": "127.0.17.3", "prom": "127.0.17.4"}
SLEEP_JDL = '[ Executable = "/bin/sleep"; Arguments = "60"; ]'
DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana" / "vgrid.json"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, voms, dns, now = site_pki(d, ADDR)
    for who in ("alice", "carol"):
        cred = issue_user(ca, who.capitalize(), now=now)
        dns[who] = cred.dn
        write_proxy(d / f"{who}.proxy", create_proxy(cred, now, 3600,
                                                     acs=[issue_ac(voms, "dteam", ["/dteam"], cred.cert, now, 3600)]))
    stranger = create_ca(dn="/DC=org/DC=elsewhere/CN=other CA", now=now)   # not trusted by the site
    issue_host(stranger, "intruder", ["127.0.17.9"], now=now).save(d / "intruder.pem", d / "intruder.key")
    return d, dns


def tls_files(d, name, key=True):
    return TLSFiles(cert=str(d / (f"{name}.pem" if key else name)), key=str(d / f"{name}.key") if key else None,
                    cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir"))


def fields(d, name):
    return {"tls_cert": str(d / f"{name}.pem"), "tls_key": str(d / f"{name}.key"),
            "cert_dir": str(d / "certs"), "voms_dir": str(d / "vomsdir")}


@pytest.fixture(scope="module")
def site(pki, tmp_path_factory):
    d, dns = pki
    work = tmp_path_factory.mktemp("metrics-site")
    node_cfg = NodeAgentConfig(node="m1", cgroup="none", work_dir=str(work / "node"), ce_dns=[dns["ce"]],
                               disk_quota_mb=0, metrics_dns=[dns["prom"]], **fields(d, "node"))
    node = BackgroundServer(node_app(node_cfg), host=ADDR["node"], tls=node_cfg.tls_files())
    ce_cfg = CEAgentConfig(ce_id="ce.vgrid.local:8443/vgrid-vwn-long", host="ce.vgrid.local", site="S",
                           queue="long", nodes=[node.url], vos=["dteam"], broker_dns=[dns["broker"]],
                           state_dir=str(work / "ce"), metrics_dns=[dns["prom"]], **fields(d, "ce"))
    ce = BackgroundServer(ce_app(ce_cfg), host=ADDR["ce"], tls=ce_cfg.tls_files())
    b_cfg = BrokerConfig(state_dir=str(work / "broker"), ce_urls=[ce.url], ism_refresh_s=1.0,
                         match_interval_s=0.1, admins=[dns["carol"]], metrics_dns=[dns["prom"]],
                         **fields(d, "broker"))
    broker = build_broker(b_cfg)
    app = broker_app(broker, tls=b_cfg.tls_files(), admins=b_cfg.admins)
    install_broker_metrics(app, broker, b_cfg.metrics_dns, b_cfg.admins)

    def on_bound(url):
        broker.settings.base_url = url
        broker.ism.start()
        broker.start()

    app.config["VGRID_ON_BOUND"] = on_bound
    bsrv = BackgroundServer(app, host=ADDR["broker"], tls=b_cfg.tls_files())
    yield {"broker": bsrv.url, "ce": ce.url, "node": node.url, "logic": broker}
    bsrv.close()
    broker.stop()
    broker.ism.stop()
    broker.store.close()
    ce.close()
    node.close()


def session(d, name):
    return new_session(tls_files(d, name, key=not name.endswith(".proxy")))


def scrape(d, url, who="prom") -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of one scrape, parsed by prometheus_client."""
    r = session(d, who).get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain; version=")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_only_monitors_admins_and_the_service_itself_may_scrape(pki, site):
    d, _ = pki
    for svc in ("broker", "ce", "node"):
        url = f"{site[svc]}/metrics"
        r = session(d, "alice.proxy").get(url, timeout=10)
        assert r.status_code == 403 and r.json()["error"]["reason"] == "forbidden", (svc, r.text)
        assert "may not read the metrics" in r.json()["error"]["message"]
        assert session(d, "prom").get(url, timeout=10).status_code == 200, svc
        assert session(d, svc).get(url, timeout=10).status_code == 200, svc     # its own host cert
        anon = requests.get(url, verify=str(d / "certs" / "ca.pem"), timeout=10)
        assert anon.status_code == 401, svc
    assert session(d, "carol.proxy").get(f"{site['broker']}/metrics", timeout=10).status_code == 200
    assert session(d, "carol.proxy").get(f"{site['ce']}/metrics", timeout=10).status_code == 403
    assert session(d, "broker").get(f"{site['ce']}/metrics", timeout=10).status_code == 403
    assert session(d, "ce").get(f"{site['node']}/metrics", timeout=10).status_code == 403


def test_plain_http_metrics_are_open_as_every_endpoint_there(tmp_path):
    srv = BackgroundServer(node_app(NodeAgentConfig(node="mplain", cgroup="none", disk_quota_mb=0,
                                                    work_dir=str(tmp_path / "n"))))
    try:
        r = requests.get(f"{srv.url}/metrics", timeout=10)
        assert r.status_code == 200
        names = {f.name for f in text_string_to_metric_families(r.text)}
        assert {"vgrid_node_vwns", "vgrid_outbox_dropped"} <= names
    finally:
        srv.close()


def test_a_job_moves_the_broker_ce_and_node_metrics(pki, site):
    d, _ = pki
    before = scrape(d, site["broker"])
    alice = session(d, "alice.proxy")
    keys = []
    for _ in range(2):
        r = alice.post(f"{site['broker']}/jobs", data={"jdl": SLEEP_JDL, "filename": "m.jdl"}, timeout=10)
        assert r.status_code == 201, r.text
        keys.append(r.json()["key"])
    try:
        after = scrape(d, site["broker"])
        assert value(after, "vgrid_submissions_total") == value(before, "vgrid_submissions_total") + 2
        assert value(after, "vgrid_http_requests_total", endpoint="/jobs", method="POST", status="201") >= 2
        # both reach Running at the node: the node shows 2 running VWNs, each capped C/(N+1) = 0.5
        node = wait_until(lambda: (s := scrape(d, site["node"])) and
                          value(s, "vgrid_node_vwns", state="running") == 2 and s, "2 running VWNs")
        caps = [v for (name, _), v in node.items() if name == "vgrid_node_vwn_cpu_cap"]
        assert caps == [0.5, 0.5]
        assert value(node, "vgrid_node_capacity_cpus") == 1.0
        ce = wait_until(lambda: (s := scrape(d, site["ce"])) and
                        value(s, "vgrid_ce_jobs", state="Running") == 2 and
                        sorted(v for (n, _), v in s.items() if n == "vgrid_ce_vwn_cpu_cap") == [0.5, 0.5]
                        and s, "the CE agent sees 2 running VWNs capped at 0.5")
        assert value(ce, "vgrid_ce_node_vwns", node=site["node"]) == 2
        broker = wait_until(lambda: (s := scrape(d, site["broker"])) and
                            value(s, "vgrid_jobs", state="Running") - value(before, "vgrid_jobs", state="Running") == 2
                            and s, "the broker sees both Running")
        assert value(broker, "vgrid_dispatches_total") == value(before, "vgrid_dispatches_total") + 2
        assert value(broker, "vgrid_matches_total", result="matched") >= value(before, "vgrid_matches_total",
                                                                                result="matched") + 2
        assert value(broker, "vgrid_match_duration_seconds_count") >= value(
            before, "vgrid_match_duration_seconds_count") + 2
        assert value(broker, "vgrid_ism_refresh_duration_seconds_count") >= 1
        assert value(broker, "vgrid_ism_ces") == 1 and value(broker, "vgrid_ces_blacklisted") == 0
        assert 0 <= value(broker, "vgrid_ism_snapshot_age_seconds") < 60
    finally:
        for key in keys:
            alice.post(f"{site['broker']}/jobs/{key}/cancel", timeout=10)
    node = wait_until(lambda: (s := scrape(d, site["node"])) and
                      value(s, "vgrid_node_vwns", state="running") == 0 and s, "the VWNs end")
    assert value(node, "vgrid_node_vwns", state="cancelled") >= 2
    assert not [n for (n, _) in node if n == "vgrid_node_vwn_cpu_cap"]
    wait_until(lambda: value(scrape(d, site["broker"]), "vgrid_jobs", state="Cancelled") >= 2, "Cancelled")


def test_failed_tls_handshakes_are_counted(pki, site):
    d, _ = pki
    host, port = site["node"].removeprefix("https://").rsplit(":", 1)
    before = value(scrape(d, site["node"]), "vgrid_tls_handshake_failures_total")
    # a client certificate from a CA the site does not trust: OpenSSL refuses it in the handshake
    ctx = ssl.create_default_context(cafile=str(d / "certs" / "ca.pem"))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(d / "intruder.pem"), str(d / "intruder.key"))
    with pytest.raises((ssl.SSLError, OSError)):
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with ctx.wrap_socket(raw) as tls:         # TLS 1.3: the refusal comes with the first read
                tls.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                if not tls.recv(1):
                    raise OSError("closed")
    # plain HTTP on the TLS port
    r = requests.get(f"http://{host}:{port}/health", timeout=10)
    assert r.status_code == 400
    wait_until(lambda: value(scrape(d, site["node"]), "vgrid_tls_handshake_failures_total") >= before + 2,
               "two failed handshakes counted")


def test_the_grafana_dashboard_is_valid_json_over_metrics_that_exist(pki, site):
    d, _ = pki
    board = json.loads(DASHBOARD.read_text())
    assert board["title"] and board["panels"]
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 8
    served = set()
    for svc in ("broker", "ce", "node"):
        served |= {name for name, _ in scrape(d, site[svc])}
    served |= {"vgrid_http_requests_total", "vgrid_node_vwn_cpu_cap", "vgrid_ce_vwn_cpu_cap"}
    used = {m for e in exprs for m in re.findall(r"\bvgrid_[a-z_]+", e)
            if not m.startswith("vgrid_image_repo_")}      # the repository's: test_image_metrics.py
    assert used and used <= served, used - served


def plain_scrape(url: str) -> dict[tuple[str, tuple], float]:
    r = requests.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200, r.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def test_the_lease_queue_length_follows_the_engine(site_ce, receiver, tmp_path):
    """One VWN slot: a second job's lease waits (queued or reserved after the first) until the
    first job ends; then it runs and the queue is empty."""
    ce_url, _, _ = site_ce(n_nodes=1, vwns_per_node=1)
    first, gate = gated_jdl(tmp_path, "metrics-first")
    k1, r1 = ce_submit(ce_url, receiver, first)
    assert r1.status_code == 202
    receiver.wait_event(k1, "running")
    k2, r2 = ce_submit(ce_url, receiver, SLEEP_JDL)
    assert r2.status_code == 202
    s = wait_until(lambda: (m := plain_scrape(ce_url)) and value(m, "vgrid_ce_lease_queue_length") == 1 and m,
                   "the second lease waiting")
    assert value(s, "vgrid_ce_jobs", state="Running") == 1 and value(s, "vgrid_ce_jobs", state="Scheduled") == 1
    assert value(s, "vgrid_ce_leases", state="Active") == 1
    assert [v for (n, _), v in s.items() if n == "vgrid_ce_vwn_cpu_cap"] == [1.0]
    release(gate)
    receiver.wait_event(k2, "running")
    s = wait_until(lambda: (m := plain_scrape(ce_url)) and value(m, "vgrid_ce_lease_queue_length") == 0 and m,
                   "the queue empties")
    assert value(s, "vgrid_ce_jobs", state="Done") == 1 and value(s, "vgrid_ce_jobs", state="Running") == 1
    assert value(s, "vgrid_ce_leases", state="Done") == 1 and value(s, "vgrid_ce_leases", state="Active") == 1
    requests.post(f"{ce_url}/jobs/{k2}/cancel", timeout=10)


def test_outbox_drops_are_counted_by_reason(tmp_path):
    srv = BackgroundServer(node_app(NodeAgentConfig(node="mdrop", cgroup="none", disk_quota_mb=0,
                                                    work_dir=str(tmp_path / "n"))))
    try:
        body = {"job_id": "x", "key": "drop-1", "executable": "/bin/true", "callback_url": "nowhere/events"}
        assert requests.post(f"{srv.url}/vwns", json=body, timeout=10).status_code == 201
        s = wait_until(lambda: (m := plain_scrape(srv.url)) and
                       value(m, "vgrid_outbox_dropped_total", reason="bad-url") >= 1 and m, "a bad-url drop")
        assert value(s, "vgrid_outbox_dropped_total", reason="refused") == 0
        assert value(s, "vgrid_outbox_delivered_total") == 0
        wait_until(lambda: value(plain_scrape(srv.url), "vgrid_node_vwns", state="done") == 1, "the VWN done")
    finally:
        srv.close()


@settings(max_examples=25, deadline=None)
@given(batches=st.lists(st.lists(st.sampled_from(["Submitted", "Waiting", "Ready", "Scheduled", "Running"]),
                                 max_size=8), max_size=6))
def test_history_counted_incrementally_equals_a_full_count(tmp_path_factory, batches):
    """HistoryCounts (reading only rows past the last id it saw) == a GROUP BY over the whole
    history, after every batch of appended rows."""
    from sqlalchemy import func, select
    from broker.db import HistoryRow, JobStore
    from broker.metrics import HistoryCounts
    store = JobStore(f"sqlite:///{tmp_path_factory.mktemp('hist') / 'jobs.db'}")
    try:
        key = store.create('[ Executable = "/bin/true"; ]', "h.jdl", 0.0).key
        counts = HistoryCounts()
        for batch in batches:
            with store.engine.begin() as c:
                for state in batch:
                    c.execute(HistoryRow.__table__.insert(), {"key": key, "state": state, "time": 1.0})
            with store.engine.connect() as c:
                seen = counts.read(c)
                full = dict(c.execute(select(HistoryRow.state, func.count()).group_by(HistoryRow.state)).all())
            assert seen == {s: full.get(s, 0) for s in HistoryCounts.STATES}
    finally:
        store.close()


def test_request_labels_stay_bounded(tmp_path):
    """Unknown paths and methods do not create series of their own; statuses are counted."""
    srv = BackgroundServer(node_app(NodeAgentConfig(node="mlabels", cgroup="none", disk_quota_mb=0,
                                                    work_dir=str(tmp_path / "n"))))
    try:
        for path in ("/no/such/1", "/no/such/2"):
            assert requests.get(f"{srv.url}{path}", timeout=10).status_code == 404
        assert requests.request("BREW", f"{srv.url}/vwns", timeout=10).status_code == 405
        assert requests.get(f"{srv.url}/vwns/vwn-none-1", timeout=10).status_code == 404
        s = plain_scrape(srv.url)
        assert value(s, "vgrid_http_requests_total", endpoint="<unmatched>", method="GET", status="404") == 2
        assert value(s, "vgrid_http_requests_total", endpoint="<unmatched>", method="OTHER", status="405") == 1
        assert value(s, "vgrid_http_requests_total", endpoint="/vwns/<vwn>", method="GET", status="404") == 1
        assert not [n for (n, labels) in s if "vwn-none-1" in str(labels) or "/no/such" in str(labels)]
    finally:
        srv.close()
