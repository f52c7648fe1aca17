"""Prometheus metrics of a vgrid service: ``GET /metrics``, who may scrape, and the shared series.

Every service (broker, CE agent, node agent) serves ``GET /metrics`` in the Prometheus text
exposition format (prometheus-client). Each app has its own ``CollectorRegistry`` (several
services may share one process in tests and in ``vgrid demo``). Most series are read from the
service's existing state at scrape time by custom collectors (``prometheus_client.registry.
Collector``: a ``collect()`` yielding metric families); counters are kept in memory only for
events that leave no stored trace. The shared series, from :func:`install_metrics`:

* ``vgrid_http_requests_total{endpoint, method, status}`` (counter): every answered request,
  ``endpoint`` the Flask rule (``/jobs/<key>``, so job keys never become label values) or
  ``<unmatched>``, ``method`` one of the HTTP methods or ``OTHER``; refusals (401/403) included;
* ``vgrid_tls_handshake_failures_total`` (counter) and ``vgrid_connections_closed_total{reason}``
  (counter: ``header_timeouts``, ``idle_closed``, ``evicted``, ``too_large``): read from the
  server's :class:`vgrid_runtime.connections.GuardedConnections` ``stats``, which drives every
  handshake itself (``app.config["VGRID_CONNECTIONS"]``, set by :mod:`vgrid_runtime.wsgi`);
  absent before the app is served.

Who may scrape (:func:`may_scrape`): the DNs in the service's ``metrics_dns``
(:class:`MetricsOptions`, the monitoring identity, e.g. Prometheus's client certificate), the
service's administrators (the broker's ``admins``), and the service itself (a host certificate
valid for its own URL: its operators on the host holding the host credential); anyone in
plain-HTTP mode, as every endpoint there. Anyone else gets 403 (docs/security.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from flask import Flask, Response, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .authn import Caller, authorize, caller


@dataclass(kw_only=True)
class MetricsOptions:
    """The metrics fields of a service configuration (a mixin, like TLSOptions)."""

    metrics_dns: list[str] = field(default_factory=list, metadata={
        "help": "DNs (monitoring identities, e.g. the client certificate Prometheus scrapes "
                "with) that may GET /metrics besides the service's administrators and its own "
                "host certificate (TLS mode; in plain-HTTP mode anyone on loopback may)"})


def may_scrape(who: Caller, monitors: Iterable[str] = (), admins: Iterable[str] = (),
               own_url: str | None = None) -> bool:
    """``GET /metrics``: a monitoring DN, an administrator, or the service's own host
    certificate (valid for ``own_url``); anyone in plain-HTTP mode (no identity)."""
    if who.identity is None:
        return True
    return who.is_one_of(list(monitors)) or who.is_one_of(list(admins)) or who.serves(own_url)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


class FunctionCollector(Collector):
    """A collector whose ``collect()`` is ``fn()`` (an iterable of metric families), read at
    scrape time; an exception in ``fn`` propagates (the scrape answers 500, logged)."""

    def __init__(self, fn: Callable[[], Iterable]) -> None:
        self.fn = fn

    def collect(self):
        yield from self.fn()


def _connection_families(app: Flask):
    conns = app.config.get("VGRID_CONNECTIONS")
    if conns is None:
        return
    stats = dict(conns.stats)
    yield CounterMetricFamily("vgrid_tls_handshake_failures", "TLS handshakes that failed "
                              "(untrusted, expired or no certificate refused by OpenSSL, plain HTTP "
                              "on the TLS port, protocol errors); timeouts are in "
                              "vgrid_connections_closed_total{reason=\"header_timeouts\"}",
                              value=stats.pop("tls_handshake_failures", 0))
    closed = CounterMetricFamily("vgrid_connections_closed", "connections the server closed "
                                 "before or between requests, by reason", labels=["reason"])
    for reason, n in sorted(stats.items()):
        closed.add_metric([reason], n)
    yield closed


def install_metrics(app: Flask, collect: Callable[[], Iterable], allowed: Callable[[Caller], bool],
                    registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """Add ``GET /metrics`` to ``app`` and count its requests; returns the app's registry.

    ``collect``: the service's own metric families, read at each scrape; ``allowed(caller)``:
    the scrape rule (:func:`may_scrape` with the service's lists). The registry is also
    ``app.config["VGRID_METRICS"]`` (a service registers its in-memory counters there)."""
    registry = registry or CollectorRegistry(auto_describe=False)
    requests_total = Counter("vgrid_http_requests", "HTTP requests answered, by endpoint (Flask "
                             "rule), method and status", ["endpoint", "method", "status"],
                             registry=registry)
    registry.register(FunctionCollector(lambda: _connection_families(app)))
    registry.register(FunctionCollector(collect))
    app.config["VGRID_METRICS"] = registry
    app.config["VGRID_REQUESTS_TOTAL"] = requests_total   # lean paths count here too

    @app.after_request
    def _count(resp):
        rule = request.url_rule.rule if request.url_rule is not None else "<unmatched>"
        method = request.method if request.method in _METHODS else "OTHER"   # bounded labels
        requests_total.labels(rule, method, str(resp.status_code)).inc()
        return resp

    @app.get("/metrics")
    def metrics():
        authorize(lambda: allowed(caller()), "read the metrics (not a monitoring identity, an "
                  "administrator or this service)")
        return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

    return registry


def gauge_by(name: str, doc: str, label: str, counts: dict[str, float],
             every: Iterable[str] = ()) -> GaugeMetricFamily:
    """A gauge family ``name{label}`` from ``counts``; the values in ``every`` are present
    with 0 when missing (so a state that empties shows 0, not a vanished series)."""
    g = GaugeMetricFamily(name, doc, labels=[label])
    for key in sorted(set(every) | set(counts)):
        g.add_metric([key], counts.get(key, 0))
    return g


#: The reasons an outbox drops an event (``vwn_agents.outbox``): always exported, 0 when none.
OUTBOX_DROP_REASONS = ("refused", "bad-url", "gave-up", "overflow")


def outbox_families(stats: dict):
    """``vgrid_outbox_pending`` (gauge: events queued, not yet delivered),
    ``vgrid_outbox_delivered_total`` and ``vgrid_outbox_dropped_total{reason}`` (counters, since
    the service started) from an outbox's ``stats()``."""
    yield GaugeMetricFamily("vgrid_outbox_pending", "events queued in the outbox, not yet delivered",
                            value=stats["pending"])
    yield CounterMetricFamily("vgrid_outbox_delivered", "events the outbox delivered",
                              value=stats.get("delivered", 0))
    dropped = CounterMetricFamily("vgrid_outbox_dropped", "events the outbox dropped, by reason",
                                  labels=["reason"])
    counts = stats.get("dropped", {})
    for reason in sorted(set(OUTBOX_DROP_REASONS) | set(counts)):
        dropped.add_metric([reason], counts.get(reason, 0))
    yield dropped
