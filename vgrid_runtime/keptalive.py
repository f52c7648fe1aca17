"""Kept-alive HTTP/1.1 connections for the broker's bulk dispatch POSTs (issue 12, session 7).

A matcher pass against 1,000 CEs sends ~324 ``POST /jobs/bulk`` requests. Through
``requests`` each cost ~0.6-1 ms of broker CPU whatever its size (request preparation, hooks,
the adapter, urllib3's pool, header objects); :class:`KeptAlive` sends the same request with
``http.client`` over a connection kept alive per ``(scheme, host, port)`` and reused across
passes: the request head is one preformatted string, the body bytes are encoded by the caller
once, the answer is read whole. TLS is exactly the ``ssl.SSLContext`` given (the service
clients' mutual-TLS context from :func:`vgrid_runtime.tls.client_context`: the server's
certificate and host name are checked, our credential presented), as with requests.

Used only by :class:`vgrid_runtime.httpclient.ServiceClient` (its ``_post_json_lean``), which
maps the errors raised here to its typed ``ServiceError``; nothing else sends HTTP through it.

Errors: :class:`LeanError` with ``kind`` ``"timeout"`` or ``"unreachable"`` and ``cause``
(the name requests would give: ``ConnectTimeout``, ``ReadTimeout``, ``SSLError``,
``ConnectionError``), so receivers branch on the same codes for either transport.

Stale connections: a kept-alive connection the server closed meanwhile (idle timeout) fails on
its next request before any answer (reset, EOF, a TLS EOF); the request is then sent once more
on a fresh connection.
Only idempotent requests may come here (a bulk dispatch is idempotent by its dispatch keys:
contract 7), so a repeat never creates anything twice.
"""
from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections import OrderedDict
from urllib.parse import urlsplit

#: Idle connections kept per (scheme, host, port); more concurrent senders open more, closed after use.
MAX_IDLE_PER_HOST = 8
#: Idle connections kept in all (a broker dispatches to thousands of CEs, each its own host:
#: beyond this the least recently used idle connection is closed, so file descriptors stay bounded).
MAX_IDLE_TOTAL = 256


class LeanError(Exception):
    """A request through :class:`KeptAlive` got no answer. ``kind``: ``"timeout"`` (connect
    or read) or ``"unreachable"`` (refused, reset, unknown host, TLS failure); ``cause``: the
    requests-style name of the error (``ConnectTimeout``, ``ReadTimeout``, ``SSLError``,
    ``ConnectionError``)."""

    def __init__(self, kind: str, cause: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.cause = cause


class KeptAlive:
    """A pool of kept-alive ``http.client`` connections, per ``(scheme, host, port)``;
    ``context``: the ``ssl.SSLContext`` of every ``https://`` connection (None: a default
    verifying context). Thread-safe: a connection serves one request at a time; at most
    ``max_idle_per_host`` idle ones are kept per host and ``max_idle`` in all (the least
    recently used one is closed first)."""

    def __init__(self, context: ssl.SSLContext | None = None, max_idle: int = MAX_IDLE_TOTAL,
                 max_idle_per_host: int = MAX_IDLE_PER_HOST) -> None:
        self.context = context
        self.max_idle = max_idle
        self.max_idle_per_host = max_idle_per_host
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._lru: OrderedDict[int, tuple[tuple[str, str, int], http.client.HTTPConnection]] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0          # connections made since start (a test reads it: reuse)

    def post_json(self, url: str, body: bytes, timeout_s: float,
                  headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """POST ``body`` (JSON bytes) to ``url``; ``(status, answer bytes)``. ``timeout_s``
        bounds the connect and each read (seconds). Raises :class:`LeanError` (no answer) or
        ValueError (a URL that is neither http nor https)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        where = (parts.scheme, parts.hostname, port)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        head = {"Content-Type": "application/json", "Accept": "application/json",
                "Content-Length": str(len(body)), **(headers or {})}
        for attempt in (0, 1):
            conn, reused = self._take(where, timeout_s)
            try:
                conn.request("POST", target, body, head)
                answer = conn.getresponse()
                data = answer.read()
            except (socket.timeout, TimeoutError) as exc:
                started = conn.sock is not None or reused
                conn.close()
                raise LeanError("timeout", "ReadTimeout" if started else "ConnectTimeout",
                                f"{url}: no answer within {timeout_s:g} s ({exc})") from exc
            except (OSError, http.client.HTTPException) as exc:   # ssl.SSLError is an OSError
                conn.close()
                if reused and attempt == 0:      # the server closed a kept-alive connection (a TLS EOF too)
                    continue
                if isinstance(exc, ssl.SSLError):
                    raise LeanError("unreachable", "SSLError", f"{url}: TLS failed: {exc}") from exc
                raise LeanError("unreachable", "ConnectionError",
                                f"{url}: {type(exc).__name__}: {exc}") from exc
            if answer.will_close:
                conn.close()
            else:
                self._give(where, conn)
            return answer.status, data
        raise AssertionError("unreachable")   # the loop returns or raises

    def _take(self, where: tuple[str, str, int], timeout_s: float) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            idle = self._idle.get(where)
            if idle:
                conn = idle.pop()
                del self._lru[id(conn)]
                conn.timeout = timeout_s
                if conn.sock is not None:
                    conn.sock.settimeout(timeout_s)
                return conn, True
            self.opened += 1
        scheme, host, port = where
        if scheme == "https":
            ctx = self.context or ssl.create_default_context()
            return http.client.HTTPSConnection(host, port, timeout=timeout_s, context=ctx), False
        return http.client.HTTPConnection(host, port, timeout=timeout_s), False

    def _give(self, where: tuple[str, str, int], conn: http.client.HTTPConnection) -> None:
        evicted = conn
        with self._lock:
            idle = self._idle.setdefault(where, [])
            if len(idle) < self.max_idle_per_host:
                idle.append(conn)
                self._lru[id(conn)] = (where, conn)
                evicted = None
                if len(self._lru) > self.max_idle:
                    _, (old_where, evicted) = self._lru.popitem(last=False)
                    self._idle[old_where].remove(evicted)
                    if not self._idle[old_where]:
                        del self._idle[old_where]
        if evicted is not None:
            evicted.close()

    def idle(self) -> int:
        """How many idle connections are kept now."""
        with self._lock:
            return len(self._lru)

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, {}
            self._lru.clear()
        for conns in idle.values():
            for c in conns:
                c.close()
