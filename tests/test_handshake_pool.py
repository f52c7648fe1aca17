"""TLS handshakes off the selector thread (vgrid_runtime.handshakes, issue 12).

Real sockets on loopback over mutual TLS against ``BackgroundServer``: many clients shaking
hands at once all get their answer with their identity, the handshakes run in the pool's
threads, a client stalled half-way through its handshake is still closed at its deadline
(slowloris protection kept), and the pool hands back what a step raised.
"""
from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from vgrid_cli.demo_pki import make_demo_pki
from vgrid_runtime.clock import WallClock
from vgrid_runtime.handshakes import HandshakePool
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.serving import ServeLimits
from vgrid_runtime.wsgi import BackgroundServer

from .test_wsgi_slowloris import app, closed_by_server, port_of
from .waiting import SLACK, wait_until


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_demo_pki(tmp_path_factory.mktemp("pki"), ["svc"], WallClock().now())


def test_concurrent_handshakes_run_in_the_pool_and_every_client_is_identified(pki):
    tls, host, user = pki.host_credentials("svc"), pki.address("svc"), pki.user_credentials()
    seen: set[str] = set()
    real = None
    with BackgroundServer(app(tls), host=host, tls=tls, limits=ServeLimits(handshake_threads=3)) as srv:
        mgr = srv.connections
        real = mgr._handshake

        def spy(p):
            seen.add(threading.current_thread().name)
            return real(p)

        mgr._handshake = spy
        mgr._pool._step = spy

        def one(_i):
            s = new_session(user)
            try:
                r = s.get(f"{srv.url}/whoami", timeout=30 * SLACK)
                return r.status_code, r.json().get("dn")
            finally:
                s.close()

        with ThreadPoolExecutor(24) as ex:
            answers = list(ex.map(one, range(48)))
        assert answers == [(200, pki.user_dn)] * 48
        assert mgr.stats["tls_handshake_failures"] == 0
    assert seen and all(name.startswith("vgrid-tls-") for name in seen)


def test_a_handshake_stalled_half_way_is_closed_at_its_deadline(pki):
    """A client that sends the first bytes of a ClientHello and stops: the pool's step gets
    SSLWantReadError, the connection waits in the selector and is closed after
    header_timeout_s, while another client is served meanwhile."""
    tls, host, user = pki.host_credentials("svc"), pki.address("svc"), pki.user_credentials()
    limits = ServeLimits(header_timeout_s=1.5, handshake_threads=2)
    with BackgroundServer(app(tls), host=host, tls=tls, limits=limits) as srv:
        stalled = []
        for _ in range(10):
            s = socket.create_connection((host, port_of(srv.url)), timeout=30)
            s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")   # a truncated ClientHello
            stalled.append(s)
        began = time.monotonic()
        try:
            session = new_session(user)
            assert session.get(f"{srv.url}/whoami", timeout=5 * SLACK).json()["dn"] == pki.user_dn
            session.close()
            wait_until(lambda: all(closed_by_server(s) for s in stalled),
                       "the server closing the stalled handshakes", timeout_s=30)
            assert time.monotonic() - began >= 1.0          # not before (most of) their deadline
            assert srv.connections.stats["header_timeouts"] >= 10
        finally:
            for s in stalled:
                s.close()


class _Item:
    pass


def test_the_pool_hands_back_each_outcome_and_its_wait():
    def step(item):
        if item.fail:
            raise ValueError("bad")

    pool = HandshakePool(2, step, name="test-pool")
    try:
        items = []
        for i in range(6):
            it = _Item()
            it.fail = i % 2 == 1
            items.append(it)
            pool.submit(it)
        got: list = []
        wait_until(lambda: got.extend(pool.finished()) or len(got) == 6, "six finished steps", timeout_s=10)
        assert {id(i) for i in got} == {id(i) for i in items}
        for it in got:
            assert (it.outcome is None) == (not it.fail)
            assert isinstance(it.outcome, ValueError) or not it.fail
            assert it.pool_wait_s >= 0
    finally:
        pool.close()


def test_zero_handshake_threads_keeps_the_selector_doing_them(pki):
    tls, host, user = pki.host_credentials("svc"), pki.address("svc"), pki.user_credentials()
    with BackgroundServer(app(tls), host=host, tls=tls, limits=ServeLimits(handshake_threads=0)) as srv:
        assert srv.connections._pool is None
        s = new_session(user)
        assert s.get(f"{srv.url}/whoami", timeout=5 * SLACK).json()["dn"] == pki.user_dn
        s.close()
    assert ServeLimits(handshake_threads=-1).problem() == "field 'handshake_threads' must be >= 0"
