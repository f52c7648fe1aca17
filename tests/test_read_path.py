"""The lean read path (broker.read_path): GET /jobs/<key> answered in front of Flask must answer
exactly what the Flask route answers -- status line, headers (but Date) and body, byte for byte
-- for 200, 304, 401, 403 and 404, over a real mutual-TLS server assembled as ``vgrid serve
broker`` assembles it (broker.server.build_app), and must count its answers in the request
metric. A hypothesis test drives both paths with random callers, keys and If-None-Match values.
"""
from __future__ import annotations

import http.client
import json
import ssl
from urllib.parse import urlencode

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from hypothesis import HealthCheck, given, settings, strategies as st

from broker.config import BrokerConfig
from broker.server import build_app, build_broker
from vgrid_runtime.clock import WallClock
from vgrid_runtime.pki import issue_user
from vgrid_runtime.proxy import create_proxy, write_proxy
from vgrid_runtime.tls import PEER_CHAIN_KEY, TLSFiles, client_context
from vgrid_runtime.voms import issue_ac
from vgrid_runtime.wsgi import BackgroundServer

from .pki_site import site_pki, tls_fields

JDL = '[ Executable = "/bin/true"; ]'
ADDR = {"broker": "127.0.11.1"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, voms, dns, now = site_pki(d, ADDR, ("dteam",))
    for name in ("alice", "bob", "carol", "stale"):
        cred = issue_user(ca, name.capitalize(), now=now)
        dns[name] = cred.dn
        # "stale": a valid proxy whose VOMS attribute certificate expired an hour ago: OpenSSL
        # accepts the chain, the broker's verification refuses it (403 "expired")
        ac = issue_ac(voms, "dteam", ["/dteam"], cred.cert, now - 7200 if name == "stale" else now, 3600)
        write_proxy(d / f"{name}.proxy", create_proxy(cred, now, 3600, acs=[ac]))
    work = tmp_path_factory.mktemp("broker")
    config = BrokerConfig(state_dir=str(work), admins=[dns["carol"]], matcher=False, **tls_fields(d, "broker"))
    broker = build_broker(config)
    app = build_app(broker, config)
    server = BackgroundServer(app, host=ADDR["broker"], tls=config.tls_files())
    broker.settings.base_url = server.url
    yield d, dns, app, server, broker
    server.close()
    broker.store.close()


class Conn:
    """One kept-alive TLS connection (``proxy`` None: no client certificate)."""

    def __init__(self, d, url: str, proxy: str | None) -> None:
        if proxy is None:
            ctx = ssl.create_default_context(cafile=str(d / "certs" / "ca.pem"))
        else:
            ctx = client_context(TLSFiles(cert=str(d / proxy), key=None, cert_dir=str(d / "certs"),
                                          voms_dir=str(d / "vomsdir")))
        host, port = url.split("//")[1].rsplit(":", 1)
        self.c = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)

    def raw(self, method: str, path: str, headers: dict | None = None, body=None):
        """(status, reason, headers without Date, body)."""
        self.c.request(method, path, body=body, headers=headers or {})
        r = self.c.getresponse()
        data = r.read()
        return r.status, r.reason, [(k, v) for k, v in r.getheaders() if k.lower() != "date"], data


def both(app, conn: Conn, path: str, headers: dict | None = None):
    """The answer through the lean path and through Flask alone; and whether the lean path
    answered it itself."""
    lean = app.config["VGRID_LEAN_READS"]
    before = lean.served
    fast = conn.raw("GET", path, headers)
    answered = lean.served == before + 1
    lean.enabled = False
    try:
        slow = conn.raw("GET", path, headers)
    finally:
        lean.enabled = True
    return fast, slow, answered


def _submit(d, url: str, proxy: str) -> str:
    status, _, _, data = Conn(d, url, proxy).raw(
        "POST", "/jobs", {"Content-Type": "application/x-www-form-urlencoded"},
        urlencode({"jdl": JDL, "filename": "r.jdl"}))
    assert status == 201, data
    return json.loads(data)["key"]


def test_lean_answers_equal_flasks_byte_for_byte(served):
    d, dns, app, server, broker = served
    key = _submit(d, server.url, "alice.proxy")
    alice, bob, carol = (Conn(d, server.url, f"{n}.proxy") for n in ("alice", "bob", "carol"))
    anonymous, stale = Conn(d, server.url, None), Conn(d, server.url, "stale.proxy")
    fast, slow, answered = both(app, alice, f"/jobs/{key}")
    assert fast == slow and fast[0] == 200 and answered and fast[3].startswith(b"{")
    tag = dict(fast[2])["ETag"]
    cases = [  # (connection, path, headers, status, the lean path answers it itself)
        (alice, f"/jobs/{key}", {"If-None-Match": tag}, 304, True),
        (alice, f"/jobs/{key}", {"If-None-Match": '"other"'}, 200, True),
        (alice, f"/jobs/{key}", {"If-None-Match": f"W/{tag}"}, 200, False),  # Flask parses these
        (alice, f"/jobs/{key}", {"If-None-Match": f'"x", {tag}'}, 304, False),
        (carol, f"/jobs/{key}", {}, 200, True),                              # an administrator
        (bob, f"/jobs/{key}", {}, 404, False),                               # not his: unknown
        (bob, f"/jobs/{key}", {"If-None-Match": tag}, 404, False),
        (alice, "/jobs/no-such-job", {}, 404, False),
        (anonymous, f"/jobs/{key}", {}, 401, False),
        (stale, f"/jobs/{key}", {}, 403, False),
        (alice, f"/jobs/{key}?x=1", {}, 200, False),
    ]
    for conn, path, headers, status, lean in cases:
        fast, slow, answered = both(app, conn, path, headers)
        assert fast == slow, (path, headers)
        assert fast[0] == status and answered is lean, (path, headers, fast)
    assert bob.raw("GET", f"/jobs/{key}")[3] == alice.raw("GET", "/jobs/" + key[:-1] + "X")[3] \
        .replace((key[:-1] + "X").encode(), key.encode())                    # the same 404 body
    # a change of the job is seen by the next lean read (the record is revalidated)
    broker.store.note(key, WallClock().now(), "changed")
    fast, slow, answered = both(app, alice, f"/jobs/{key}", {"If-None-Match": tag})
    assert fast == slow and fast[0] == 200 and answered and dict(fast[2])["ETag"] != tag


def test_lean_answers_are_counted_in_the_request_metric(served):
    d, dns, app, server, broker = served
    key = _submit(d, server.url, "bob.proxy")
    registry = app.config["VGRID_METRICS"]
    labels = {"endpoint": "/jobs/<key>", "method": "GET", "status": "200"}

    def count() -> float:
        return registry.get_sample_value("vgrid_http_requests_total", labels) or 0.0
    before, served_before = count(), app.config["VGRID_LEAN_READS"].served
    bob = Conn(d, server.url, "bob.proxy")
    for _ in range(3):
        assert bob.raw("GET", f"/jobs/{key}")[0] == 200
    assert app.config["VGRID_LEAN_READS"].served == served_before + 3
    assert count() == before + 3


def _chain(d, proxy: str) -> list[bytes]:
    pems = (d / proxy).read_bytes()
    return [c.public_bytes(Encoding.DER) for c in x509.load_pem_x509_certificates(pems)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(who=st.sampled_from(["alice.proxy", "bob.proxy", "carol.proxy", "stale.proxy", None]),
       which=st.sampled_from(["alice", "bob", "missing", "empty", "sub"]),
       inm=st.one_of(st.none(), st.sampled_from(["tag", "other", "list", "weak", "star", "spaced", ""])),
       method=st.sampled_from(["GET", "GET", "HEAD", "POST"]))
def test_both_paths_agree_on_random_requests(served, who, which, inm, method):
    """Flask's test client (the same WSGI app): whatever the request, the lean path and Flask
    give the same status, headers and body."""
    d, dns, app, server, broker = served
    keys = app.config.setdefault("TEST_KEYS", {"alice": _submit(d, server.url, "alice.proxy"),
                                              "bob": _submit(d, server.url, "bob.proxy")})
    key = {"missing": "no-such-job", "empty": ""}.get(which, keys.get(which, keys["alice"]))
    path = f"/jobs/{key}/output" if which == "sub" else f"/jobs/{key}"
    env = {PEER_CHAIN_KEY: _chain(d, who)} if who else {}
    client = app.test_client()
    tag = client.get(f"/jobs/{keys['alice']}", environ_base={PEER_CHAIN_KEY: _chain(d, "alice.proxy")}) \
        .headers["ETag"]
    headers = {} if inm is None else {"If-None-Match": {
        "tag": tag, "other": '"0"', "list": f'"0", {tag}', "weak": f"W/{tag}", "star": "*",
        "spaced": f"  {tag} ", "": ""}[inm]}
    lean = app.config["VGRID_LEAN_READS"]

    def answer():
        r = client.open(path, method=method, headers=headers, environ_base=env)
        return r.status, sorted(r.headers.items()), r.data
    fast = answer()
    lean.enabled = False
    try:
        slow = answer()
    finally:
        lean.enabled = True
    assert fast == slow


def test_a_database_error_is_answered_by_flasks_handlers(served, monkeypatch):
    """A read that fails in the database is handed to Flask (503 JSON, no traceback) on both
    paths alike; the lean path answers nothing itself."""
    from sqlalchemy.exc import OperationalError
    d, dns, app, server, broker = served
    key = _submit(d, server.url, "alice.proxy")
    records = app.config["VGRID_RECORDS"]

    def failing(k):
        raise OperationalError("SELECT", {}, Exception("database is locked"))
    monkeypatch.setattr(records, "read", failing)
    fast, slow, answered = both(app, Conn(d, server.url, "alice.proxy"), f"/jobs/{key}")
    assert fast == slow and not answered
    assert fast[0] in (500, 503) and b"Traceback" not in fast[3] and fast[3].startswith(b'{"error"')


def test_plain_http_mode_answers_as_flask(tmp_path):
    """Without TLS (loopback development mode) every caller is anonymous and sees every job, on
    both paths; an app without authentication installed cannot get a lean path at all."""
    from flask import Flask

    from broker import read_path
    config = BrokerConfig(state_dir=str(tmp_path / "b"), matcher=False)
    broker = build_broker(config)
    try:
        broker.settings.base_url = "http://127.0.0.1:1"
        app = build_app(broker, config)
        client = app.test_client()
        key = client.post("/jobs", data={"jdl": JDL, "filename": "j.jdl"}).get_json()["key"]
        lean = app.config["VGRID_LEAN_READS"]
        for path in (f"/jobs/{key}", "/jobs/missing"):
            before = lean.served
            fast = client.get(path)
            lean.enabled = False
            slow = client.get(path)
            lean.enabled = True
            assert (fast.status, sorted(fast.headers.items()), fast.data) == \
                (slow.status, sorted(slow.headers.items()), slow.data)
            assert lean.served == before + (1 if path.endswith(key) else 0)
        with pytest.raises(KeyError):
            bare = Flask("bare")
            bare.config["VGRID_RECORDS"] = app.config["VGRID_RECORDS"]
            read_path.install(bare, broker, [])
    finally:
        broker.store.close()
