"""Connection hygiene of vgrid's HTTP server (vgrid_runtime.connections): slow or stalled clients
never hold a worker thread, on plain HTTP and over mutual TLS (issue 11, "Connection hygiene").

Real sockets on loopback against ``BackgroundServer``; credentials are made at test time. Every
wait has a deadline (tests/waiting.py); lower bounds on times are monotonic-clock facts that a
slow machine can only make larger.
"""
from __future__ import annotations

import socket
import ssl
import time

import pytest
import requests
from flask import Flask, jsonify, request
from hypothesis import given, settings
from hypothesis import strategies as st
from werkzeug.exceptions import RequestTimeout

from vgrid_cli.demo_pki import make_demo_pki
from vgrid_runtime.clock import WallClock
from vgrid_runtime.connections import _Feed
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.serving import ServeLimits
from vgrid_runtime.tls import PEER_CHAIN_KEY, IdentityCache, client_context
from vgrid_runtime.wsgi import BackgroundServer

from .waiting import SLACK, wait_until

STALLED = 150
PARTIAL = b"GET /whoami HTTP/1.1\r\nHost: x\r\nX-Slow: "


def app(tls=None) -> Flask:
    a = Flask("slowloris-test")
    cache = IdentityCache(tls) if tls else None

    @a.get("/whoami")
    def whoami():
        chain = request.environ.get(PEER_CHAIN_KEY) or []
        dn = cache.identify(chain, WallClock().now()).dn if chain and cache else None
        return jsonify({"dn": dn})

    @a.post("/echo")
    def echo():
        return jsonify({"n": len(request.get_data())})

    return a


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_demo_pki(tmp_path_factory.mktemp("pki"), ["svc"], WallClock().now())


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def stall(host: str, port: int, n: int, ctx=None, send_nothing=False) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection((host, port), timeout=30)
        if ctx is not None:
            s = ctx.wrap_socket(s, server_hostname=host)
        if not send_nothing:
            s.sendall(PARTIAL)
        socks.append(s)
    return socks


def closed_by_server(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1024) == b""
    except (BlockingIOError, ssl.SSLWantReadError):
        return False
    except OSError:
        return True


def test_150_stalled_plain_connections_do_not_lock_out_a_client():
    limits = ServeLimits(header_timeout_s=1.0)
    with BackgroundServer(app(), limits=limits) as srv:
        socks = stall("127.0.0.1", port_of(srv.url), STALLED)
        try:
            t0 = time.monotonic()
            r = requests.get(f"{srv.url}/whoami", timeout=5 * SLACK)
            assert r.status_code == 200 and r.json() == {"dn": None}
            assert time.monotonic() - t0 < 5 * SLACK
            # and the server closes them once their header deadline passed
            wait_until(lambda: all(closed_by_server(s) for s in socks),
                       "the server closing every stalled connection", timeout_s=30)
            assert srv.connections.stats["header_timeouts"] >= STALLED
        finally:
            for s in socks:
                s.close()


def test_150_stalled_tls_connections_do_not_lock_out_a_client_and_identity_still_reaches_the_app(pki):
    tls = pki.host_credentials("svc")
    host = pki.address("svc")
    user = pki.user_credentials()
    with BackgroundServer(app(tls), host=host, tls=tls, limits=ServeLimits(header_timeout_s=2.0)) as srv:
        port = port_of(srv.url)
        socks = stall(host, port, STALLED // 2, ctx=client_context(user))          # mid-headers
        socks += stall(host, port, STALLED - STALLED // 2, send_nothing=True)      # no ClientHello
        try:
            session = new_session(user)
            r = session.get(f"{srv.url}/whoami", timeout=5 * SLACK)
            assert r.status_code == 200, r.text
            assert r.json()["dn"] == pki.user_dn
            session.close()
            wait_until(lambda: all(closed_by_server(s) for s in socks),
                       "the server closing every stalled TLS connection", timeout_s=30)
        finally:
            for s in socks:
                s.close()


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout():
    with BackgroundServer(app(), limits=ServeLimits(idle_timeout_s=1.0)) as srv:
        s = socket.create_connection(("127.0.0.1", port_of(srv.url)), timeout=10)
        # two pipelined requests in one write: both answered on the kept-alive connection
        s.sendall(b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\nGET /whoami HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while got.count(b'{"dn":null}') < 2:
            chunk = s.recv(4096)
            assert chunk, f"connection closed early: {got!r}"
            got += chunk
        answered = time.monotonic()
        s.settimeout(30 * SLACK)
        assert s.recv(1024) == b""                     # closed by the server, not by the timeout
        assert time.monotonic() - answered >= 0.9
        assert srv.connections.stats["idle_closed"] >= 1
        s.close()


def test_a_stalled_body_gets_408_and_frees_its_worker():
    with BackgroundServer(app(), limits=ServeLimits(threads=2, body_timeout_s=1.0)) as srv:
        port = port_of(srv.url)
        stallers = []
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", port), timeout=30 * SLACK)
            s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789")
            stallers.append(s)
        r = requests.post(f"{srv.url}/echo", data=b"x" * 1000, timeout=30 * SLACK)
        assert r.status_code == 200 and r.json() == {"n": 1000}
        for s in stallers:
            assert s.recv(1024).startswith(b"HTTP/1.1 408")
            s.close()


def test_at_max_connections_the_oldest_waiting_connection_is_closed():
    with BackgroundServer(app(), limits=ServeLimits(max_connections=20, header_timeout_s=60)) as srv:
        socks = stall("127.0.0.1", port_of(srv.url), 30)
        try:
            r = requests.get(f"{srv.url}/whoami", timeout=5 * SLACK)
            assert r.status_code == 200
            wait_until(lambda: sum(closed_by_server(s) for s in socks[:10]) == 10,
                       "the 10 oldest stalled connections closed")
            assert srv.connections.stats["evicted"] >= 10
            assert not any(closed_by_server(s) for s in socks[-5:])
        finally:
            for s in socks:
                s.close()


def test_plain_http_on_the_tls_port_is_told_so(pki):
    tls = pki.host_credentials("svc")
    host = pki.address("svc")
    with BackgroundServer(app(tls), host=host, tls=tls) as srv:
        s = socket.create_connection((host, port_of(srv.url)), timeout=10 * SLACK)
        s.sendall(b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
        s.close()
        assert answer.startswith(b"HTTP/1.1 400") and b"HTTPS only" in answer


def test_limits_are_validated():
    assert ServeLimits().problem() is None
    assert ServeLimits(threads=0).problem() == "field 'threads' must be >= 1"
    assert ServeLimits(header_timeout_s=0).problem() == "field 'header_timeout_s' must be > 0"
    assert ServeLimits(max_connections=0).problem() == "field 'max_connections' must be >= 1"


@settings(max_examples=60, deadline=None)
@given(head=st.binary(max_size=300), rest=st.binary(max_size=300),
       sizes=st.lists(st.integers(1, 64), min_size=1, max_size=20))
def test_the_feed_gives_the_buffered_head_then_the_socket_in_order(head, rest, sizes):
    a, b = socket.socketpair()
    try:
        feed = _Feed(a, per_read_s=5.0)
        feed.head += head
        feed.start(30.0)
        b.sendall(rest)
        b.shutdown(socket.SHUT_WR)
        out, i = bytearray(), 0
        while True:
            buf = bytearray(sizes[i % len(sizes)])
            i += 1
            n = feed.recv_into(memoryview(buf))
            if n == 0:
                break
            out += buf[:n]
        assert bytes(out) == head + rest
    finally:
        a.close()
        b.close()


def test_the_feed_past_its_deadline_takes_what_arrived_then_times_out_once():
    a, b = socket.socketpair()
    try:
        feed = _Feed(a, per_read_s=5.0)
        feed.start(0.0)                      # already late: nothing more may be waited for
        b.sendall(b"abc")
        buf = bytearray(10)
        assert feed.recv_into(memoryview(buf)) == 3 and bytes(buf[:3]) == b"abc"
        with pytest.raises(RequestTimeout):
            feed.recv_into(memoryview(buf))
        assert feed.recv_into(memoryview(buf)) == 0     # then end of input, never blocking
    finally:
        a.close()
        b.close()


def test_a_client_that_does_not_read_its_answer_frees_its_worker(monkeypatch):
    import vgrid_runtime.connections as connections
    monkeypatch.setattr(connections, "BODY_MIN_RATE", 1e12)   # no allowance for bytes sent
    a = app()

    @a.get("/big")
    def big():
        return a.response_class((b"z" * 65536 for _ in range(1024)), mimetype="application/octet-stream")

    with BackgroundServer(a, limits=ServeLimits(threads=1, body_timeout_s=1.0)) as srv:
        slow = socket.create_connection(("127.0.0.1", port_of(srv.url)), timeout=60 * SLACK)
        slow.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")          # and reads nothing
        r = requests.get(f"{srv.url}/whoami", timeout=30 * SLACK)      # the one worker is freed
        assert r.status_code == 200
        got = 0
        while True:                                   # cut off: far less than the 64 MB answer
            try:
                chunk = slow.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += len(chunk)
        assert got < 64 * 65536 * 1024 // 2
        slow.close()
