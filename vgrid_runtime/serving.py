"""The connection limits of a vgrid service's HTTP server, and the config fields that set them.

Every service (broker, CE agent, node agent) takes the fields of :class:`ServeOptions` at the top
level of its TOML file; :func:`vgrid_runtime.wsgi.serve` enforces them
(:mod:`vgrid_runtime.connections`, docs/operations.md "Connection limits").
"""
from __future__ import annotations

from dataclasses import dataclass, field

#: A request body must arrive at this rate (bytes per second) once its ``body_timeout_s``
#: allowance is used up (each byte received extends the deadline by 1/BODY_MIN_RATE s).
BODY_MIN_RATE = 100_000


@dataclass(frozen=True)
class ServeLimits:
    """How long and how many (seconds, counts).

    ``threads``: worker threads running requests; ``header_timeout_s``: the TLS handshake, the
    request line and every header must have arrived this long after the connection was accepted
    (or, on a kept-alive connection, after the first byte of the next request), else the
    connection is closed, never having occupied a worker; ``body_timeout_s``: the time a worker
    waits for a request body, plus 1 s per BODY_MIN_RATE bytes received (408 past it), and
    the time the client has to take the answer, plus 1 s per BODY_MIN_RATE bytes sent;
    ``idle_timeout_s``: a kept-alive connection without a request for this long is closed (also
    the time one socket read or write of a worker may block); ``max_connections``: connections
    waiting for their request head or idle between requests; at the limit a new connection
    closes the oldest of them; ``handshake_threads``: threads doing TLS handshake steps beside
    the selector thread (:mod:`vgrid_runtime.handshakes`; 0: in the selector thread)."""

    threads: int = 8
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 10.0
    max_connections: int = 1000
    handshake_threads: int = 4

    def problem(self) -> str | None:
        """A description of an invalid value, or None."""
        if self.threads < 1:
            return "field 'threads' must be >= 1"
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s"):
            if getattr(self, name) <= 0:
                return f"field {name!r} must be > 0"
        if self.max_connections < 1:
            return "field 'max_connections' must be >= 1"
        if self.handshake_threads < 0:
            return "field 'handshake_threads' must be >= 0"
        return None


_D = ServeLimits()


@dataclass(kw_only=True)
class ServeOptions:
    """The connection-limit fields of a service configuration (a mixin, like TLSOptions)."""

    threads: int = field(default=_D.threads, metadata={
        "help": "worker threads running requests"})
    header_timeout_s: float = field(default=_D.header_timeout_s, metadata={
        "help": "seconds a new connection (or a kept-alive one, from the first byte of its next "
                "request) has to complete its TLS handshake and send every header; then closed"})
    body_timeout_s: float = field(default=_D.body_timeout_s, metadata={
        "help": "seconds a worker waits for a request body, plus 1 s per 100 kB received (408); "
                "the same for the client to take the answer"})
    idle_timeout_s: float = field(default=_D.idle_timeout_s, metadata={
        "help": "seconds a kept-alive connection may stay idle before it is closed"})
    max_connections: int = field(default=_D.max_connections, metadata={
        "help": "connections waiting for a request head or idle; a new one beyond closes the oldest"})
    handshake_threads: int = field(default=_D.handshake_threads, metadata={
        "help": "threads doing TLS handshakes beside the thread that reads request heads "
                "(0: that thread does them)"})

    def serve_limits(self) -> ServeLimits:
        return ServeLimits(threads=self.threads, header_timeout_s=self.header_timeout_s,
                           body_timeout_s=self.body_timeout_s, idle_timeout_s=self.idle_timeout_s,
                           max_connections=self.max_connections,
                           handshake_threads=self.handshake_threads)

    def serve_problem(self) -> str | None:
        """A configuration error of these fields, or None (call from ``validate``)."""
        return self.serve_limits().problem()
