"""Mutual TLS on real loopback sockets: the server sees the caller's verified identity.

Credentials are made at test time (nothing is shipped) with the wall clock, because OpenSSL
checks validity against the real time during the handshake.
"""
from __future__ import annotations

import pytest
import requests
from flask import Flask, jsonify, request

from vgrid_runtime.clock import WallClock
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.pki import CredentialError, create_ca, issue_host, issue_user
from vgrid_runtime.proxy import create_proxy, write_proxy
from vgrid_runtime.tls import PEER_CHAIN_KEY, IdentityCache, TLSFiles
from vgrid_runtime.voms import issue_ac
from vgrid_runtime.wsgi import BackgroundServer, ServeError


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    now = WallClock().now()
    ca, other = create_ca(now=now), create_ca("/DC=org/DC=other/CN=other CA", now=now)
    (d / "certs").mkdir()
    (d / "certs" / "vgrid.pem").write_bytes(ca.cert_pem())
    (d / "vomsdir" / "dteam").mkdir(parents=True)
    voms = issue_host(ca, "voms.vgrid.local", now=now)
    (d / "vomsdir" / "dteam" / "voms.pem").write_bytes(voms.cert_pem())
    issue_host(ca, "localhost", ["127.0.0.1"], now=now).save(d / "hostcert.pem", d / "hostkey.pem")
    issue_host(ca, "elsewhere", ["10.9.9.9"], now=now).save(d / "badhost.pem", d / "badhostkey.pem")
    alice = issue_user(ca, "Alice", now=now)
    write_proxy(d / "alice.proxy", create_proxy(alice, now, 3600, acs=[
        issue_ac(voms, "dteam", ["/dteam"], alice.cert, now, 3600)]))
    write_proxy(d / "alice.expired", create_proxy(alice, now - 7200, 3600))
    mallory = issue_user(other, "Mallory", now=now)
    write_proxy(d / "mallory.proxy", create_proxy(mallory, now, 3600))
    return d


def files(d, cert, key=None):
    return TLSFiles(cert=str(d / cert), key=str(d / key) if key else None, cert_dir=str(d / "certs"),
                    voms_dir=str(d / "vomsdir"))


def whoami_app(server_files: TLSFiles) -> Flask:
    app = Flask("whoami")
    cache, clock = IdentityCache(server_files), WallClock()

    @app.get("/whoami")
    def whoami():
        chain = request.environ.get(PEER_CHAIN_KEY) or []
        if not chain:
            return jsonify({"error": {"message": "a client certificate is required"}}), 401
        try:
            ident = cache.identify(chain, clock.now())
        except CredentialError as exc:
            return jsonify({"error": {"message": str(exc), "reason": exc.reason}}), 403
        return jsonify({"dn": ident.dn, "vo": ident.vo, "fqans": list(ident.fqans),
                        "proxy_depth": ident.proxy_depth})

    return app


@pytest.fixture(scope="module")
def server(grid):
    sf = files(grid, "hostcert.pem", "hostkey.pem")
    with BackgroundServer(whoami_app(sf), tls=sf) as srv:
        yield srv


def test_a_proxy_is_seen_as_its_user_with_vo_attributes(grid, server):
    assert server.url.startswith("https://127.0.0.1:")
    s = new_session(files(grid, "alice.proxy"))
    for _ in range(2):                                     # the second one from the cache
        r = s.get(f"{server.url}/whoami", timeout=10)
        assert r.status_code == 200, r.text
        assert r.json() == {"dn": "/DC=org/DC=vgrid/OU=users/CN=Alice", "vo": "dteam",
                            "fqans": ["/dteam"], "proxy_depth": 1}


def test_a_service_calls_with_its_host_certificate(grid, server):
    r = new_session(files(grid, "hostcert.pem", "hostkey.pem")).get(f"{server.url}/whoami", timeout=10)
    assert r.json()["dn"] == "/DC=org/DC=vgrid/OU=hosts/CN=localhost" and r.json()["vo"] is None


def test_no_client_certificate_is_a_json_401(grid, server):
    s = requests.Session()
    r = s.get(f"{server.url}/whoami", verify=str(grid / "certs" / "vgrid.pem"), timeout=10)
    assert r.status_code == 401 and "client certificate" in r.json()["error"]["message"]


@pytest.mark.parametrize("cred", ["mallory.proxy", "alice.expired"])
def test_untrusted_or_expired_credentials_fail_the_handshake(grid, server, cred):
    with pytest.raises(requests.exceptions.SSLError):
        new_session(files(grid, cred)).get(f"{server.url}/whoami", timeout=10)


def test_the_client_checks_the_servers_name(grid):
    sf = files(grid, "badhost.pem", "badhostkey.pem")
    with BackgroundServer(whoami_app(sf), tls=sf) as srv:
        with pytest.raises(requests.exceptions.SSLError):
            new_session(files(grid, "alice.proxy")).get(f"{srv.url}/whoami", timeout=10)


def test_plain_http_is_refused_off_loopback(grid):
    with pytest.raises(ServeError, match="refusing to serve plain HTTP on 0.0.0.0"):
        BackgroundServer(Flask("x"), host="0.0.0.0")
    sf = files(grid, "hostcert.pem", "hostkey.pem")
    with BackgroundServer(Flask("y"), host="0.0.0.0", tls=sf) as srv:
        assert srv.url.startswith("https://0.0.0.0:")


def test_unreadable_service_credentials_are_a_clear_error(grid, tmp_path):
    with pytest.raises(CredentialError, match="cannot load the service certificate"):
        BackgroundServer(Flask("z"), tls=TLSFiles(str(tmp_path / "none.pem"), None, str(grid / "certs")))
    with pytest.raises(CredentialError, match="trusted certificate directory does not exist"):
        new_session(TLSFiles(str(grid / "alice.proxy"), None, str(tmp_path / "nocerts")))
