"""Kept-alive connections stay open under many clients (vgrid_runtime.wsgi, .connections; issue 12,
"Reads that scale"). cheroot closes an answered connection once ``keep_alive_conn_limit`` (10 by
default) connections are idle, so every client beyond the tenth paid a new (TLS) connection per
request; vgrid's servers allow ``max_connections`` instead. Real sockets on loopback.
"""
from __future__ import annotations

import http.client

from flask import Flask

from vgrid_runtime.serving import ServeLimits
from vgrid_runtime.wsgi import BackgroundServer


def _app() -> Flask:
    a = Flask("keepalive-test")

    @a.get("/ping")
    def ping():
        return "pong"

    return a


def _read(conn: http.client.HTTPConnection) -> tuple[int, str | None]:
    conn.request("GET", "/ping")
    r = conn.getresponse()
    assert r.read() == b"pong"
    return r.status, r.getheader("Connection")


def test_forty_idle_clients_all_keep_their_connections():
    with BackgroundServer(_app(), limits=ServeLimits(max_connections=100)) as srv:
        host, port = "127.0.0.1", int(srv.url.rsplit(":", 1)[1])
        conns = [http.client.HTTPConnection(host, port, timeout=30) for _ in range(40)]
        try:
            for c in conns:                       # every connection answered, then idle
                assert _read(c) == (200, None)
            ports = [c.sock.getsockname()[1] for c in conns]
            for c in conns:                       # 39 idle beside it: still kept alive
                assert _read(c) == (200, None)
            assert [c.sock.getsockname()[1] for c in conns] == ports   # no reconnection
        finally:
            for c in conns:
                c.close()


def test_max_connections_still_bounds_the_kept_alive_ones():
    with BackgroundServer(_app(), limits=ServeLimits(max_connections=3)) as srv:
        host, port = "127.0.0.1", int(srv.url.rsplit(":", 1)[1])
        conns = [http.client.HTTPConnection(host, port, timeout=30) for _ in range(6)]
        try:
            for c in conns:
                assert _read(c)[0] == 200
            waiting = [c for _, c in srv.connections._waiting()]
            assert len(waiting) <= 3 and srv.connections.stats["evicted"] >= 3   # oldest closed
        finally:
            for c in conns:
                c.close()
