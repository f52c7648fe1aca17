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

from .waiting import wait_until


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
            for i, c in enumerate(conns):
                assert _read(c)[0] == 200
                wait_until(lambda: len(srv.connections._waiting()) >= min(i + 1, 3),
                           "the answered connection waiting idle")
            assert len(srv.connections._waiting()) <= 3 and srv.connections.stats["evicted"] >= 3
        finally:
            for c in conns:
                c.close()


def _answers_app() -> Flask:
    a = Flask("one-write-test")

    @a.get("/json")
    def as_json():
        return {"x": "y" * 300}

    @a.get("/empty")
    def empty():
        return "", 204

    @a.get("/stream")
    def stream():
        return a.response_class((part for part in (b"ab", b"cd", b"ef")), mimetype="text/plain")

    return a


def test_an_answer_with_a_one_chunk_body_leaves_in_one_send(monkeypatch):
    """Status line, headers and a body of its Content-Length go out in one socket write
    (vgrid_runtime.connections.OneWriteGateway); other answers are still whole and correct."""
    from vgrid_runtime import connections
    sends: list[bytes] = []
    real = connections._Feed._send

    def counted(self, data, flags=0):
        sends.append(bytes(data))
        return real(self, data, flags)
    monkeypatch.setattr(connections._Feed, "_send", counted)
    with BackgroundServer(_answers_app()) as srv:
        host, port = "127.0.0.1", int(srv.url.rsplit(":", 1)[1])
        c = http.client.HTTPConnection(host, port, timeout=30)
        try:
            for path, status, body in (("/json", 200, None), ("/empty", 204, b""),
                                       ("/stream", 200, b"abcdef"), ("/json", 200, None)):
                sends.clear()
                c.request("GET", path)
                r = c.getresponse()
                got = r.read()
                assert r.status == status and (body is None or got == body), (path, got)
                if path == "/json":
                    assert got == b'{"x":"' + b"y" * 300 + b'"}\n'
                    assert len(sends) == 1 and sends[0].startswith(b"HTTP/1.1 200 OK\r\n") \
                        and sends[0].endswith(got)
        finally:
            c.close()
