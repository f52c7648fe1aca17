"""cheroot's connection manager, hardened against slow clients (slowloris).

cheroot hands a connection to a worker thread as soon as it is readable, and the worker then
blocks reading the request line and headers, up to its per-read timeout per byte; it also does
the TLS handshake, blocking, in its one selector thread. 150 connections that send part of
their headers and stall therefore held all 8 workers, and one TCP connection that never sent a
ClientHello froze the whole server for a timeout (docs/benchmarks.md, "slowloris").

:class:`GuardedConnections` replaces cheroot's ``ConnectionManager`` (same interface) so that a
connection reaches a worker only with a complete request head:

- accepted sockets are non-blocking; the selector thread drives the TLS handshake
  (``do_handshake`` until it stops asking for data) and reads into a buffer until the blank line
  that ends the headers, for new and for kept-alive connections alike;
- a connection whose handshake and head are not complete ``header_timeout_s`` after it was
  accepted (kept-alive: after the first byte of its next request) is closed, as is one whose head
  exceeds ``MAX_HEAD_BYTES``;
- the worker then reads the buffered head and the body through :class:`_Feed`, whose deadline is
  ``body_timeout_s`` plus 1 s per ``BODY_MIN_RATE`` bytes received; past it (or after a read
  blocked ``idle_timeout_s``) the application's read raises werkzeug's ``RequestTimeout``, so
  the client gets a JSON 408 and the connection is closed;
- the answer is written through the same feed: a client that does not take it within
  ``body_timeout_s`` plus 1 s per ``BODY_MIN_RATE`` bytes is cut off (a slow reader);
- idle kept-alive connections are closed after ``idle_timeout_s``; when ``max_connections``
  connections wait (head incomplete or idle), a new one closes the oldest of them.

The peer's certificate chain still reaches the application as ``environ["vgrid.peer_chain"]``
(:class:`vgrid_runtime.tls.GridSSLAdapter.get_environ`, called once the handshake is done).
Idea: nginx's ``client_header_timeout`` and Apache's mod_reqtimeout (header/body deadlines with a
minimum rate). Uses cheroot internals (``ConnectionManager._selector``, ``_stop_requested``, ``_run``,
``HTTPConnection(server, sock, makefile)``; written against cheroot 11.1, so setup.py pins
``>=11.1,<12``): tests/test_wsgi_slowloris.py fails if a cheroot upgrade changes them.
"""
from __future__ import annotations

import logging
import selectors
import socket
import ssl
import time
from typing import Any

from cheroot import wsgi
from cheroot.connections import ConnectionManager, prevent_socket_inheritance
from cheroot.makefile import StreamReader, StreamWriter
from werkzeug.exceptions import RequestTimeout

from .handshakes import HandshakePool
from .serving import BODY_MIN_RATE, ServeLimits

log = logging.getLogger("vgrid.wsgi")

#: A request line plus headers larger than this closes the connection.
MAX_HEAD_BYTES = 64 * 1024
_NO_TLS_ANSWER = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                  b"Content-Length: 70\r\n\r\nThe client sent a plain HTTP request, but this "
                  b"server speaks HTTPS only.")


class _Feed:
    """The socket as a connection's worker sees it (cheroot's ``rfile`` and ``wfile`` are made
    over it): reads give the bytes the selector thread already received, then the socket's,
    and reads and writes have deadlines that grow with the bytes moved (``budget`` None: no
    deadline). Everything else is the socket's."""

    def __init__(self, sock, per_read_s: float) -> None:
        self.sock = sock
        self.head = bytearray()
        self.budget: float | None = None     # seconds, from the worker's first socket read
        self.deadline: float | None = None
        self.send_deadline: float | None = None
        self.expired = False
        self.per_read_s = per_read_s
        self.hold_next = False               # keep the next write for the one after it
        self.held = b""

    def start(self, budget_s: float) -> None:
        """A new request: its socket reads must end ``budget_s`` seconds (plus the rate
        allowance) after the first of them (a request waiting for a free worker is not late),
        and the client must take the answer within ``budget_s`` (plus the rate allowance) of
        its first write."""
        self.budget, self.deadline, self.send_deadline, self.expired = budget_s, None, None, False

    def send(self, data, flags: int = 0) -> int:
        """One write of the answer; ``socket.timeout`` once the client has not taken it in time
        (a slow reader: cheroot then closes the connection and the worker is free). With
        ``hold_next`` set (:class:`OneWriteGateway`), the write is kept and goes out with the
        next one (one TLS record and one system call for the status line and headers and the
        body after them)."""
        if self.hold_next:
            self.hold_next, self.held = False, bytes(data)
            return len(data)
        if self.held:
            out, self.held = self.held + bytes(data), b""
            self._send_all(out, flags)
            return len(data)
        return self._send(data, flags)

    def flush_held(self) -> None:
        """Send a kept write that no later write took along (an answer that ended early)."""
        self.hold_next = False
        out, self.held = self.held, b""
        self._send_all(out)

    def _send_all(self, out: bytes, flags: int = 0) -> None:
        """All of ``out``, in as many ``_send`` calls as the socket takes."""
        sent = 0
        while sent < len(out):
            sent += self._send(out[sent:], flags)

    def _send(self, data, flags: int = 0) -> int:
        if self.budget is None:
            return self.sock.send(data, flags)
        if self.send_deadline is None:
            self.send_deadline = time.monotonic() + self.budget
        left = self.send_deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        self.sock.settimeout(min(left, self.per_read_s))
        try:
            n = self.sock.send(data, flags)
        finally:
            self.sock.settimeout(self.per_read_s)
        self.send_deadline += n / BODY_MIN_RATE
        return n

    def recv_into(self, buf, nbytes: int = 0) -> int:
        if self.head:
            n = min(len(buf), len(self.head), nbytes or len(buf))
            buf[:n] = self.head[:n]
            del self.head[:n]
            return n
        if self.expired:
            return 0        # end of input: cheroot closes the connection after the answer
        if self.deadline is None and self.budget is not None:
            self.deadline = time.monotonic() + self.budget
        left = self.deadline - time.monotonic() if self.deadline is not None else self.per_read_s
        try:
            # past the deadline, data already received is still taken (non-blocking read)
            self.sock.settimeout(min(max(left, 0.0), self.per_read_s))
            n = self.sock.recv_into(buf, nbytes)
        except (socket.timeout, BlockingIOError, ssl.SSLWantReadError):
            # the application reading the body sees a 408 (its JSON error handlers answer it);
            # later reads see the end of the input, so nothing blocks on this client again
            self.expired = True
            raise RequestTimeout("the request body did not arrive in time (body_timeout_s)") from None
        finally:
            self.sock.settimeout(self.per_read_s)   # writes keep the per-operation timeout
        if self.deadline is not None:
            self.deadline += n / BODY_MIN_RATE
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class _Pending:
    """A connection whose request head the selector thread is reading."""

    __slots__ = ("sock", "addr", "deadline", "buf", "handshaking", "ssl_env", "conn", "events",
                 "since", "queued_at", "pool_wait_s", "outcome")

    def __init__(self, sock, addr, deadline: float, handshaking: bool, conn=None) -> None:
        self.sock, self.addr, self.deadline = sock, addr, deadline
        self.buf = bytearray()
        self.handshaking = handshaking
        self.ssl_env: dict = {}
        self.conn = conn                 # the HTTPConnection of a kept-alive connection
        self.events = 0                  # what it is registered for in the selector (0: not)
        self.since = time.monotonic()

    def close(self) -> None:
        try:
            if self.conn is not None:
                self.conn.close()
            else:
                self.sock.close()
        except OSError:
            pass


class OneWriteGateway(wsgi.Gateway_10):
    """cheroot's WSGI 1.0 gateway, except that an answer whose body is one chunk of its
    declared ``Content-Length`` (every JSON answer) leaves in one write: the status line and
    headers are held by the connection's :class:`_Feed` and sent with the body, one TLS record
    and one ``send`` instead of two (each ``send`` on loopback also runs the receiver's TCP
    path; docs/benchmarks.md, "session 7: reads"). Anything else is written as cheroot does."""

    def write(self, chunk):
        feed = getattr(self.req.conn, "_vgrid_feed", None)
        if feed is None or self.req.sent_headers or self.remaining_bytes_out != len(chunk):
            return super().write(chunk)
        feed.hold_next = True
        try:
            return super().write(chunk)
        finally:
            if feed.hold_next or feed.held:     # the body's write did not happen
                feed.flush_held()


def _head_complete(buf: bytearray) -> bool:
    return b"\r\n\r\n" in buf or b"\n\n" in buf


class GuardedConnections(ConnectionManager):
    """cheroot's ``ConnectionManager`` reading request heads in the selector thread under
    ``limits`` (:class:`vgrid_runtime.serving.ServeLimits`); see the module docstring.
    ``stats`` counts ``header_timeouts``, ``idle_closed``, ``evicted``, ``too_large``,
    ``tls_handshake_failures`` (read by :mod:`vgrid_runtime.metrics`)."""

    def __init__(self, server, limits: ServeLimits) -> None:
        super().__init__(server)
        self.limits = limits
        self.stats = {"header_timeouts": 0, "idle_closed": 0, "evicted": 0, "too_large": 0,
                      "tls_handshake_failures": 0}
        self._pool: HandshakePool | None = None     # TLS handshake steps (vgrid_runtime.handshakes)
        if server.ssl_adapter is not None and limits.handshake_threads > 0:
            self._pool = HandshakePool(limits.handshake_threads, self._handshake)
            self._selector.register(self._pool.wake_socket.fileno(), selectors.EVENT_READ,
                                    data=self._pool)

    def close(self) -> None:
        if self._pool is not None:
            self._selector.unregister(self._pool.wake_socket.fileno())
            self._pool.close()
        super().close()

    # -- selector bookkeeping -------------------------------------------------------------------
    def _watch(self, p: _Pending, events: int) -> None:
        if p.events == events:
            return
        if p.events:
            self._selector.unregister(p.sock.fileno())
        self._selector.register(p.sock.fileno(), events, data=p)
        p.events = events

    def _forget(self, p: _Pending) -> None:
        if p.events:
            self._selector.unregister(p.sock.fileno())
            p.events = 0

    def _drop(self, p: _Pending, why: str, counter: str | None = None) -> None:
        self._forget(p)
        p.close()
        if counter:
            self.stats[counter] += 1
        log.info("closed a connection from %s: %s", p.addr, why)

    def _waiting(self) -> list[tuple[int, Any]]:
        return [(fd, c) for fd, c in list(self._selector.connections)
                if c is not self.server and c is not self._pool]

    # -- accepting and reading heads ------------------------------------------------------------
    def _from_server_socket(self, server_socket):
        try:
            s, addr = server_socket.accept()
        except OSError:                      # nothing to accept after all, or a reset
            return None
        prevent_socket_inheritance(s)
        s.setblocking(False)
        adapter = self.server.ssl_adapter
        if adapter is not None:
            s = adapter.context.wrap_socket(s, server_side=True, do_handshake_on_connect=False)
        self._make_room()
        p = _Pending(s, addr, time.monotonic() + self.limits.header_timeout_s, adapter is not None)
        if self._pool is not None:
            self._watch(p, selectors.EVENT_READ)   # its ClientHello first, then the pool
        else:
            self._advance(p)
        return None                          # handed to a worker by _advance when complete

    def _make_room(self) -> None:
        waiting = self._waiting()
        if len(waiting) < self.limits.max_connections:
            return
        fd, oldest = min(waiting, key=lambda w: getattr(w[1], "since", None)
                         or getattr(w[1], "_vgrid_idle_since", 0.0))
        self._selector.unregister(fd)
        self.stats["evicted"] += 1
        log.warning("max_connections (%d) reached: closing the oldest waiting connection",
                    self.limits.max_connections)
        oldest.close()
        if isinstance(oldest, _Pending):
            oldest.events = 0

    def _advance(self, p: _Pending) -> None:
        """Progress the handshake and the head as far as the socket allows without blocking
        (a handshake step goes to the pool when there is one)."""
        try:
            if p.handshaking:
                if self._pool is not None:
                    self._forget(p)
                    self._pool.submit(p)
                    return
                self._handshake(p)
            while not _head_complete(p.buf):
                chunk = p.sock.recv(65536)
                if not chunk:
                    self._drop(p, "closed by the client before its request head")
                    return
                p.buf += chunk
                if len(p.buf) > MAX_HEAD_BYTES:
                    self._drop(p, f"request head larger than {MAX_HEAD_BYTES} bytes", "too_large")
                    return
        except OSError as exc:     # ssl.SSLError and BlockingIOError are OSErrors
            self._failed(p, exc)
            return
        self._handoff(p)

    def _handshake(self, p: _Pending) -> None:
        """One non-blocking handshake step (selector or pool thread); raises as
        ``do_handshake`` does (SSLWantReadError: the peer owes bytes)."""
        p.sock.do_handshake()
        p.ssl_env = self.server.ssl_adapter.get_environ(p.sock)
        p.handshaking = False

    def _from_pool(self) -> None:
        """Connections whose handshake step ended in the pool: go on in the selector thread;
        the time they queued in the pool is added to their deadline (our backlog)."""
        for p in self._pool.finished():
            p.deadline += p.pool_wait_s
            if p.outcome is None:
                self._advance(p)
            elif isinstance(p.outcome, OSError):
                self._failed(p, p.outcome)
            else:
                self._drop(p, f"TLS handshake failed: {type(p.outcome).__name__}: {p.outcome}",
                           "tls_handshake_failures")

    def _failed(self, p: _Pending, exc: OSError) -> None:
        """A handshake or head read that could not go on: wait for the socket, or close."""
        if isinstance(exc, (ssl.SSLWantReadError, BlockingIOError)):
            self._watch(p, selectors.EVENT_READ)
        elif isinstance(exc, ssl.SSLWantWriteError):
            self._watch(p, selectors.EVENT_WRITE)
        elif isinstance(exc, ssl.SSLError):
            if "http request" in str(exc).lower():   # plain HTTP on the TLS port: say so
                try:
                    while socket.socket.recv(p.sock, 65536):   # unread input would make close() a reset
                        pass
                except OSError:
                    pass
                try:
                    socket.socket.send(p.sock, _NO_TLS_ANSWER)
                    socket.socket.shutdown(p.sock, socket.SHUT_WR)
                except OSError:
                    pass
            self._drop(p, f"TLS handshake failed: {exc.reason or exc}", "tls_handshake_failures")
        else:
            self._drop(p, f"{type(exc).__name__}: {exc}")

    def _handoff(self, p: _Pending) -> None:
        """A complete head: give the connection to a worker, the head buffered in its feed."""
        self._forget(p)
        p.sock.settimeout(self.server.timeout)
        conn = p.conn
        if conn is None:
            feed = _Feed(p.sock, float(self.server.timeout))

            def makefile(sock, mode="r", bufsize=8192):
                return StreamReader(feed, mode, bufsize) if "r" in mode else StreamWriter(feed, mode, bufsize)

            conn = self.server.ConnectionClass(self.server, p.sock, makefile)
            conn.remote_addr, conn.remote_port = p.addr[0], p.addr[1]
            conn.ssl_env = p.ssl_env
            conn._vgrid_feed = feed
        feed = conn._vgrid_feed
        feed.head += p.buf
        feed.start(self.limits.body_timeout_s)
        self.server.process_conn(conn)

    # -- kept-alive connections -----------------------------------------------------------------
    def put(self, conn) -> None:
        """A worker is done with ``conn`` and keeps it alive: wait for its next request."""
        conn._vgrid_idle_since = time.monotonic()
        pending_tls = isinstance(conn.socket, ssl.SSLSocket) and conn.socket.pending()
        if conn.rfile.has_data() or conn._vgrid_feed.head or pending_tls:   # pipelined
            conn._vgrid_feed.start(self.limits.header_timeout_s)
            self.server.process_conn(conn)
        else:
            self._selector.register(conn.socket.fileno(), selectors.EVENT_READ, data=conn)

    def _resume(self, fd: int, conn) -> None:
        """A kept-alive connection is readable: read its next head here, not in a worker."""
        self._selector.unregister(fd)
        conn.socket.setblocking(False)
        p = _Pending(conn.socket, (conn.remote_addr, conn.remote_port),
                     time.monotonic() + self.limits.header_timeout_s, False, conn=conn)
        self._advance(p)

    @property
    def can_add_keepalive_connection(self) -> bool:
        """Whether an answered connection may stay open: fewer than the server's
        ``keep_alive_conn_limit`` (``max_connections``, :mod:`vgrid_runtime.wsgi`) connections
        wait in the selector (idle or reading a head; counted in O(1) from the selector's size,
        asked once per answer)."""
        limit = self.server.keep_alive_conn_limit
        if limit is None:
            return True
        return len(self._selector) - 1 - (self._pool is not None) < limit

    # -- the loop -------------------------------------------------------------------------------
    def _run(self, expiration_interval: float) -> None:
        last = time.monotonic()
        while not self._stop_requested:
            try:
                ready = list(self._selector.select(timeout=expiration_interval))
            except OSError:
                self._remove_invalid_sockets()
                continue
            for fd, item in ready:
                if item is self.server:
                    self._from_server_socket(self.server.socket)
                elif item is self._pool and item is not None:
                    self._from_pool()
                elif isinstance(item, _Pending):
                    self._advance(item)
                else:
                    self._resume(fd, item)
            now = time.monotonic()
            if now - last >= expiration_interval:
                self._expire_all(now)
                last = now

    def _expire_all(self, now: float) -> None:
        for fd, item in self._waiting():
            if isinstance(item, _Pending):
                if now >= item.deadline:
                    what = "TLS handshake" if item.handshaking else "request head"
                    self._drop(item, f"{what} not complete within header_timeout_s "
                                     f"({self.limits.header_timeout_s:g} s)", "header_timeouts")
            elif now - getattr(item, "_vgrid_idle_since", now) >= self.limits.idle_timeout_s:
                self._selector.unregister(fd)
                self.stats["idle_closed"] += 1
                item.close()
