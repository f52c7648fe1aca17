"""TLS handshakes off the selector thread: a small bounded pool (issue 12, "Reads that scale").

:class:`vgrid_runtime.connections.GuardedConnections` reads every request head in one selector
thread. Doing the TLS handshakes there too (a server signature, the client's certificate chain
verified by OpenSSL: milliseconds of CPU each) made that thread the bottleneck when 100 clients
connected at once on a busy host: it fell ``header_timeout_s`` behind and closed connections as
if their peers were slowloris clients (docs/benchmarks.md, "broker submission").

Here the handshake *steps* run in ``threads`` worker threads (OpenSSL releases the interpreter
lock while it computes, so several handshakes proceed on several cores). A step never blocks:
the socket is non-blocking, so a peer that stalls mid-handshake makes ``do_handshake`` raise
``SSLWantReadError`` at once, the connection goes back to the selector and waits for its bytes
there, under its ``header_timeout_s`` deadline as before (slowloris protection kept). What the
pool did (success or the exception) comes back to the selector thread through a queue and a
socketpair that wakes its ``select``. The time a connection waited in the pool's queue is our
backlog, not the peer's delay: it is added to the connection's deadline.

Bounded: the queue holds only connections the manager accepted, at most ``max_connections``.
Idea: nginx's and HAProxy's separation of accept/handshake work from request processing.
"""
from __future__ import annotations

import collections
import queue
import socket
import threading
import time
from typing import Any, Callable


class HandshakePool:
    """``threads`` daemon threads running ``step(item)`` (one non-blocking handshake step, it
    may raise) for items put with :meth:`submit`; finished items, with ``item.outcome`` set to
    None or the exception raised and ``item.pool_wait_s`` to the seconds it waited in the
    queue, are returned by :meth:`finished` in the selector thread, which watches
    :attr:`wake_socket` (readable when some are ready)."""

    def __init__(self, threads: int, step: Callable[[Any], None], name: str = "vgrid-tls") -> None:
        self._step = step
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._done: collections.deque = collections.deque()
        self.wake_socket, self._wake_w = socket.socketpair()
        self.wake_socket.setblocking(False)
        self._wake_w.setblocking(False)
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]
        for t in self._threads:
            t.start()

    def submit(self, item: Any) -> None:
        """Queue one handshake step of ``item`` (its socket must not be in the selector)."""
        item.queued_at = time.monotonic()
        self._queue.put(item)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            item.pool_wait_s = time.monotonic() - item.queued_at
            try:
                self._step(item)
                item.outcome = None
            except Exception as exc:   # noqa: BLE001 - handed back to the selector thread
                item.outcome = exc
            self._done.append(item)
            try:
                self._wake_w.send(b"\0")
            except (BlockingIOError, OSError):   # full (it is awake anyway) or closing
                pass

    def finished(self) -> list[Any]:
        """The items whose step ended since the last call (selector thread)."""
        try:
            while self.wake_socket.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        out = []
        while self._done:
            out.append(self._done.popleft())
        return out

    def close(self) -> None:
        """Stop the threads (after their current step) and close the wake sockets."""
        for _ in self._threads:
            self._queue.put(None)
        for s in (self.wake_socket, self._wake_w):
            try:
                s.close()
            except OSError:
                pass
