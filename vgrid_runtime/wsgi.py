"""Serving a Flask app with a production WSGI server (cheroot), over HTTPS with mutual TLS.

Used by ``vgrid serve broker|ce|node`` and therefore by ``vgrid demo``. cheroot (CherryPy's
server) is chosen over waitress because it speaks TLS itself and hands the client's certificate
chain to the application (:mod:`vgrid_runtime.tls`) and keeps idle keep-alive connections out of
its worker threads. Its connection manager is replaced by
:class:`vgrid_runtime.connections.GuardedConnections`: TLS handshakes and request heads are read
without blocking, under the deadlines and the connection limit of a
:class:`vgrid_runtime.serving.ServeLimits`, so slow or stalled clients (slowloris) never hold a
worker thread.

Without ``tls`` a service speaks plain HTTP and may only bind to a loopback address
(:class:`ServeError` otherwise): nothing listens unauthenticated on a network.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import math
import os
import signal
import socket
import sys
import threading
from dataclasses import replace
from pathlib import Path

from cheroot import wsgi

from .connections import GuardedConnections, OneWriteGateway
from .serving import ServeLimits
from .tls import GridSSLAdapter, TLSFiles

log = logging.getLogger("vgrid.wsgi")


class ServeError(OSError):
    """The service cannot listen (address in use, permission denied, no TLS on a public
    address); str() says where and why."""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Server(wsgi.Server):
    """cheroot's WSGI server with SO_REUSEADDR also on port-0 binds: a service restarted after
    ``kill -9`` on the port it was given must not fail on its old connections in TIME_WAIT
    (Linux never lets two listeners share a port through SO_REUSEADDR alone); SO_REUSEPORT
    when asked, port 0 included (broker front ends, :mod:`broker.front_ends`)."""

    @classmethod
    def prepare_socket(cls, bind_addr, family, type, proto, nodelay, ssl_adapter, reuse_port=False):
        sock = super().prepare_socket(bind_addr, family, type, proto, nodelay, ssl_adapter)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:   # set here: cheroot refuses it on port 0, which the first process binds
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        return sock

    def error_log(self, msg="", level=logging.INFO, traceback=False):
        """cheroot's diagnostics (dropped connections, failed TLS handshakes) go to logging."""
        log.log(level, "%s", msg, exc_info=traceback)


def _limits(threads: int | None, timeout_s: float | None, limits: ServeLimits | None) -> ServeLimits:
    """``limits`` (default ServeLimits()), with the older ``threads``/``timeout_s`` arguments
    (idle timeout) applied when given."""
    limits = limits or ServeLimits()
    changes = {}
    if threads is not None:
        changes["threads"] = threads
    if timeout_s is not None:
        changes["idle_timeout_s"] = timeout_s
    return replace(limits, **changes) if changes else limits


def _server(app, host: str, port: int, tls: TLSFiles | None,
            limits: ServeLimits, reuse_port: bool = False) -> tuple[wsgi.Server, str]:
    if tls is None and not _is_loopback(host):
        raise ServeError(f"refusing to serve plain HTTP on {host}: configure TLS (tls_cert, "
                         "tls_key, cert_dir) or bind to 127.0.0.1")
    server = _Server((host, port), app, numthreads=limits.threads,
                     timeout=max(1, math.ceil(limits.idle_timeout_s)), server_name="vgrid",
                     request_queue_size=128, shutdown_timeout=5, reuse_port=reuse_port)
    # cheroot closes an answered connection when keep_alive_conn_limit (its default: 10)
    # connections are already idle: with more clients than that every request paid a new TLS
    # handshake (docs/benchmarks.md, "session 7: reads"). max_connections bounds them instead.
    server.keep_alive_conn_limit = limits.max_connections
    server.gateway = OneWriteGateway             # headers and a one-chunk body in one write
    if tls is not None:
        server.ssl_adapter = GridSSLAdapter(tls)
    try:
        server.prepare()
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {_bind_error(host, port) or exc}") from None
    stock, server._connections = server._connections, GuardedConnections(server, limits)
    stock._selector.close()
    app.config["VGRID_CONNECTIONS"] = server._connections      # its stats: GET /metrics
    scheme = "https" if tls is not None else "http"
    shown = f"[{host}]" if ":" in host else host
    return server, f"{scheme}://{shown}:{server.bind_addr[1]}"


def _bind_error(host: str, port: int) -> str | None:
    """Why binding (host, port) fails, from the OS (cheroot folds it into a longer message)."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _bound(app, url: str) -> None:
    app.config["VGRID_URL"] = url
    on_bound = app.config.get("VGRID_ON_BOUND")
    if on_bound:
        on_bound(url)


def serve(app, host: str = "127.0.0.1", port: int = 0, ready_file: str | None = None,
          threads: int | None = None, on_stop=None, tls: TLSFiles | None = None,
          timeout_s: float | None = None, limits: ServeLimits | None = None,
          reuse_port: bool = False) -> None:
    """Serve ``app`` until SIGTERM/SIGINT.

    ``port=0`` takes a free port. Once the socket is bound, ``ready_file`` (if given) is written
    atomically with ``{"url": "http(s)://host:port", "pid": pid}`` so a parent process can find
    the service. ``on_stop`` (callable, no arguments) runs before the process exits; when not
    given, ``app.config["VGRID_ON_STOP"]`` is used (the node and CE agents set it to their
    shutdown). ``tls``: serve HTTPS with client certificates. ``limits``: threads, deadlines and
    the connection limit (:class:`vgrid_runtime.serving.ServeLimits`, default its defaults);
    ``threads`` and ``timeout_s`` (the idle timeout, seconds) override them when given.
    ``reuse_port``: bind with SO_REUSEPORT, so that other processes of the same user binding
    the same address with it share the port (the kernel spreads new connections over them).
    Raises ServeError when it cannot listen.
    """
    if on_stop is None:
        on_stop = app.config.get("VGRID_ON_STOP")
    server, url = _server(app, host, port, tls, _limits(threads, timeout_s, limits), reuse_port)
    _bound(app, url)
    if ready_file:
        tmp = Path(ready_file).with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}))
        os.replace(tmp, ready_file)
    def _stop(signum, frame):  # noqa: ARG001 - signal handler signature
        # stop() joins the server's threads and waits for its loop, which runs in this (the
        # main) thread under the handler: it must run in another thread, serve() then returns.
        threading.Thread(target=server.stop, name="vgrid-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"serving on {url}", flush=True)
    try:
        server.serve()
    finally:
        try:
            if on_stop:
                on_stop()
        finally:
            server.stop()
    sys.exit(0)


class BackgroundServer:
    """``app`` served in a daemon thread (tests, embedded use); ``.url``, ``.close()``;
    ``.connections`` is its :class:`~vgrid_runtime.connections.GuardedConnections` (``stats``).

    Sets ``app.config["VGRID_URL"]`` (and calls ``VGRID_ON_BOUND``) like ``serve`` does.
    ``close()`` stops the server and then calls ``app.config["VGRID_ON_STOP"]`` if set.
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, threads: int | None = None,
                 tls: TLSFiles | None = None, timeout_s: float | None = None,
                 limits: ServeLimits | None = None) -> None:
        self.app = app
        self.server, self.url = _server(app, host, port, tls, _limits(threads, timeout_s, limits))
        _bound(app, self.url)
        self.connections = self.server._connections
        self.thread = threading.Thread(target=self.server.serve, name=f"cheroot {self.url}",
                                       daemon=True)
        self.thread.start()

    def close(self, stop_app: bool = True) -> None:
        """Stop serving; then run the app's ``VGRID_ON_STOP`` (unless ``stop_app`` is False)."""
        self.server.stop()
        self.thread.join(timeout=10)
        if stop_app and self.app.config.get("VGRID_ON_STOP"):
            self.app.config["VGRID_ON_STOP"]()

    def __enter__(self) -> "BackgroundServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
