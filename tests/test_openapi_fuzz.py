"""``GET /openapi.json`` of the four services over real mutual TLS, and schemathesis against each
(issue 17): one site on loopback (broker -> CE agent -> node agent, and an image repository the
node pulls from), each service called with the identity that may use it (a user proxy for the
broker, the broker's host certificate for the CE agent, the CE's for the node agent, the node's
for the repository). Every generated request must answer without a 5xx and every answer must
conform to the service's own document (status code, content type, JSON Schema).

Examples are bounded (``VGRID_FUZZ_EXAMPLES``, default 12 per operation, derandomized unless
``VGRID_FUZZ_RANDOM=1``; positive and negative data, then positive with the path parameters of a
real job, VWN and image) so the four runs take under 2 minutes together (95 s measured at load
average 17 on 2 cores).
"""
from __future__ import annotations

import os
import time

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable

from broker.api import create_app as broker_app
from broker.config import BrokerConfig
from broker.server import build_broker
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.pki import create_ca, issue_host, issue_user
from vgrid_runtime.proxy import create_proxy, write_proxy
from vgrid_runtime.tls import TLSFiles
from vgrid_runtime.voms import issue_ac
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app as ce_app
from vwn_agents.images.repository import ImageRepositoryConfig, create_app as repo_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app

from .pki_site import site_pki
from .pki_site import tls_fields as fields
from .waiting import wait_until

ADDR = {"broker": "127.0.19.1", "ce": "127.0.19.2", "node": "127.0.19.3", "repo": "127.0.19.4"}
EXAMPLES = int(os.environ.get("VGRID_FUZZ_EXAMPLES", "12"))
#: VGRID_FUZZ_RANDOM=1: new examples each run (a developer's hunt); CI replays the same ones
DERANDOMIZE = os.environ.get("VGRID_FUZZ_RANDOM", "") != "1"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, voms, dns, now = site_pki(d, ADDR)
    cred = issue_user(ca, "Alice", now=now)
    dns["alice"] = cred.dn
    write_proxy(d / "alice.proxy", create_proxy(cred, now, 3600,
                                                acs=[issue_ac(voms, "dteam", ["/dteam"], cred.cert, now, 3600)]))
    stranger = create_ca(dn="/DC=org/DC=elsewhere/CN=other CA", now=now)
    issue_host(stranger, "intruder", ["127.0.19.9"], now=now).save(d / "intruder.pem", d / "intruder.key")
    return d, dns


def session(d, name) -> requests.Session:
    key = None if name.endswith(".proxy") else str(d / f"{name}.key")
    cert = str(d / (name if name.endswith(".proxy") else f"{name}.pem"))
    return new_session(TLSFiles(cert=cert, key=key, cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir")))


@pytest.fixture(scope="module")
def site(pki, tmp_path_factory):
    d, dns = pki
    work = tmp_path_factory.mktemp("openapi-site")
    (work / "images").mkdir()
    (work / "images" / "tiny.img").write_bytes(bytes(range(256)) * 16)
    repo_cfg = ImageRepositoryConfig(images_dir=str(work / "images"), node_dns=[dns["node"]], ce_dns=[dns["ce"]],
                                     **fields(d, "repo"))
    repo = BackgroundServer(repo_app(repo_cfg), host=ADDR["repo"], tls=repo_cfg.tls_files())
    node_cfg = NodeAgentConfig(node="f1", cgroup="none", work_dir=str(work / "node"), ce_dns=[dns["ce"]],
                               disk_quota_mb=0, image_repository=repo.url, **fields(d, "node"))
    node = BackgroundServer(node_app(node_cfg), host=ADDR["node"], tls=node_cfg.tls_files())
    ce_cfg = CEAgentConfig(ce_id="ce.vgrid.local:8443/vgrid-vwn-fuzz", host="ce.vgrid.local", site="S",
                           queue="fuzz", nodes=[node.url], vos=["dteam"], broker_dns=[dns["broker"]],
                           state_dir=str(work / "ce"), **fields(d, "ce"))
    ce = BackgroundServer(ce_app(ce_cfg), host=ADDR["ce"], tls=ce_cfg.tls_files())
    b_cfg = BrokerConfig(state_dir=str(work / "broker"), ce_urls=[ce.url], ism_refresh_s=1.0,
                         match_interval_s=0.1, **fields(d, "broker"))
    broker = build_broker(b_cfg)
    app = broker_app(broker, tls=b_cfg.tls_files(), admins=b_cfg.admins)

    def on_bound(url):
        broker.settings.base_url = url
        broker.ism.start()
        broker.start()

    app.config["VGRID_ON_BOUND"] = on_bound
    bsrv = BackgroundServer(app, host=ADDR["broker"], tls=b_cfg.tls_files())
    urls = {"broker": bsrv.url, "ce": ce.url, "node": node.url, "repo": repo.url}
    # one running job, so the fuzz also reads and changes real records (path parameters below)
    alice = session(d, "alice.proxy")
    r = alice.post(f"{bsrv.url}/jobs", data={"jdl": '[ Executable = "/bin/sleep"; Arguments = "60"; ]',
                                             "filename": "fuzz.jdl"}, timeout=10)
    assert r.status_code == 201, r.text
    job = wait_until(lambda: (j := alice.get(f"{bsrv.url}/jobs/{r.json()['key']}", timeout=10).json())
                     and j["state"] == "Running" and j, "the fuzz site's job Running")
    KNOWN.update(broker={"key": job["key"]}, ce={"key": job["dispatch_key"]}, node={"vwn": job["vwn"]},
                 repo={"name": "tiny.img"})
    yield urls
    bsrv.close()
    broker.stop()
    broker.ism.stop()
    broker.store.close()
    ce.close()
    node.close()
    repo.close()


#: path parameters naming real things of the site (filled by the fixture): a job at the broker
#: and the CE, its VWN, an image
KNOWN: dict[str, dict[str, str]] = {}
#: who calls each service in the fuzz run: the identity its routes are for
CALLER = {"broker": "alice.proxy", "ce": "broker", "node": "ce", "repo": "node"}


def test_any_authenticated_caller_reads_the_document_and_no_certificate_is_refused(pki, site):
    d, _ = pki
    for svc, url in site.items():
        for who in ("alice.proxy", CALLER[svc]):
            r = session(d, who).get(f"{url}/openapi.json", timeout=10)
            assert r.status_code == 200, (svc, who, r.text)
            doc = r.json()
            assert doc["openapi"].startswith("3.1") and doc["paths"], svc
            assert doc["components"]["securitySchemes"]["mutualTLS"]["type"] == "mutualTLS"
        anon = requests.get(f"{url}/openapi.json", verify=str(d / "certs" / "ca.pem"), timeout=10)
        assert anon.status_code == 401 and anon.json()["error"]["reason"] == "no-certificate", svc
        # a certificate from a CA the site does not trust is refused in the handshake
        with pytest.raises(requests.exceptions.RequestException):
            r = requests.get(f"{url}/openapi.json", verify=str(d / "certs" / "ca.pem"), timeout=10,
                             cert=(str(d / "intruder.pem"), str(d / "intruder.key")))
            raise requests.exceptions.ConnectionError(f"answered {r.status_code}")


CHECKS = [schemathesis.checks.not_a_server_error, schemathesis.checks.status_code_conformance,
          schemathesis.checks.content_type_conformance, schemathesis.checks.response_schema_conformance]


def fuzz(d, url: str, who: str, examples: int, known: dict[str, str]) -> tuple[int, list[str]]:
    """Run schemathesis over every operation of the document at ``url``: positive and negative
    data, then (positive) with the path parameters of ``known`` where an operation's are all
    there; (requests sent, failures as ``"METHOD path (mode): message"``)."""
    http = session(d, who)
    doc = http.get(f"{url}/openapi.json", timeout=10).json()
    schema = schemathesis.openapi.from_dict(doc)
    sent, failures = [0], []
    for result in schema.get_all_operations():
        op = result.ok()
        names = {p.name for p in op.path_parameters}
        runs = [("positive", examples, {}), ("negative", max(2, examples // 2), {})]
        if names and names <= set(known):
            runs.append(("positive, known", max(2, examples // 2), {n: known[n] for n in names}))
        for label, n, params in runs:
            mode = schemathesis.GenerationMode.NEGATIVE if label == "negative" else schemathesis.GenerationMode.POSITIVE

            @settings(max_examples=n, deadline=None, database=None, derandomize=DERANDOMIZE,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
            @given(case=op.as_strategy(generation_mode=mode, path_parameters=params or None))
            def run(case):
                sent[0] += 1
                response = case.call(base_url=url, session=http, timeout=30)
                case.validate_response(response, checks=CHECKS)

            try:
                run()
            except Unsatisfiable:       # nothing to negate (no body, string path parameters)
                continue
            except Exception as exc:  # noqa: BLE001 - collect every operation's failure
                failures.append(f"{op.method.upper()} {op.path} ({label}): {exc}"[:3000])
    return sent[0], failures


@pytest.mark.timeout(900)          # the broker's run took 196 s at load 38 on 2 cores (40-55 s at 17)
@pytest.mark.parametrize("svc", ["repo", "node", "ce", "broker"])
def test_schemathesis_finds_no_5xx_and_no_answer_off_the_schema(pki, site, svc):
    d, _ = pki
    t0, c0 = time.monotonic(), time.process_time()
    sent, failures = fuzz(d, site[svc], CALLER[svc], EXAMPLES, KNOWN[svc])
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    print(f"schemathesis {svc}: {sent} requests, wall {wall:.1f} s, test-process CPU {cpu:.1f} s")
    assert sent >= 10
    assert not failures, "\n\n".join(failures)


def test_the_repository_metrics_are_for_monitors_and_itself_only(pki, site):
    """GET /metrics of the image repository (issue 17 image-transfer metrics) over TLS: its own
    host certificate reads it; a user, a node that may download images and no certificate do not."""
    d, _ = pki
    url = f"{site['repo']}/metrics"
    r = session(d, "repo").get(url, timeout=10)
    assert r.status_code == 200 and "vgrid_image_repo_served_bytes_total" in r.text
    for who in ("alice.proxy", "node"):
        r = session(d, who).get(url, timeout=10)
        assert r.status_code == 403 and r.json()["error"]["reason"] == "forbidden", who
    assert requests.get(url, verify=str(d / "certs" / "ca.pem"), timeout=10).status_code == 401


def test_conditional_answers_fit_the_documents(pki, site):
    """304 Not Modified (a job record's ETag at the broker, an image's at the repository) and a
    206 byte range are documented answers (schemathesis does not send these headers itself)."""
    d, _ = pki
    cases = [("broker", "/jobs/{key}", {"key": KNOWN["broker"]["key"]}, "alice.proxy", {}),
             ("repo", "/images/{name}", {"name": "tiny.img"}, "node", {}),
             ("repo", "/images/{name}", {"name": "tiny.img"}, "node", {"Range": "bytes=10-99"})]
    for svc, path, params, who, headers in cases:
        http = session(d, who)
        schema = schemathesis.openapi.from_dict(http.get(f"{site[svc]}/openapi.json", timeout=10).json())
        op = schema.find_operation_by_path("GET", path)
        first = op.Case(path_parameters=params, headers=headers).call(base_url=site[svc], session=http, timeout=10)
        assert first.status_code == (206 if headers else 200), (svc, first.status_code)
        op.Case(path_parameters=params, headers=headers).validate_response(first, checks=CHECKS)
        if headers:
            assert len(first.content) == 90
            continue
        etag = {k.lower(): v for k, v in first.headers.items()}["etag"]
        etag = etag[0] if isinstance(etag, list) else etag
        case = op.Case(path_parameters=params, headers={"If-None-Match": etag})
        again = case.call(base_url=site[svc], session=http, timeout=10)
        assert again.status_code == 304, (svc, again.status_code)
        case.validate_response(again, checks=CHECKS)
