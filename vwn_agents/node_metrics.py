"""A node agent's Prometheus metrics (``GET /metrics``; plumbing in :mod:`vgrid_runtime.metrics`).

Read at scrape time from the agent's VWNs and outbox:

* ``vgrid_node_vwns{state}`` (gauge): the node's VWNs by state (starting, running, suspended,
  done, aborted, cancelled: ``vwn_states``), every state present;
* ``vgrid_node_vwn_cpu_cap{vwn}`` (gauge, CPU fraction of one core): the cap last set on each
  active VWN (C/(N+1), seed 004 Section 5.1; a suspended VWN keeps its last cap);
* ``vgrid_node_capacity_cpus`` (gauge): C, the CPU capacity shared by the VWNs (cores);
* ``vgrid_outbox_pending``, ``vgrid_outbox_delivered_total``, ``vgrid_outbox_dropped_total{reason}``
  (VWN events to the CE agents, :func:`vgrid_runtime.metrics.outbox_families`);
* the image pool's transfer families ``vgrid_image_*`` (:mod:`.images.metrics`).

Who may scrape: the DNs in ``metrics_dns`` and the node agent's own host certificate (its CE
agents, ``ce_dns``, read ``/status``).
"""
from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from vgrid_runtime.metrics import gauge_by, install_metrics, may_scrape, outbox_families

from .images.metrics import pool_families
from .vwn_states import VWNState


def _families(agent):
    with agent._lock:
        vwns = list(agent.vwns.values())
    counts: dict[str, int] = {}
    caps = GaugeMetricFamily("vgrid_node_vwn_cpu_cap", "CPU cap of each active VWN (fraction of "
                             "one core)", labels=["vwn"])
    for v in vwns:
        counts[v.state.value] = counts.get(v.state.value, 0) + 1
        if v.active and v.cpu_caps:
            caps.add_metric([v.vwn], float(v.cpu_caps[-1][1]))
    yield gauge_by("vgrid_node_vwns", "VWNs on this node by state", "state", counts,
                   [s.value for s in VWNState])
    yield caps
    yield GaugeMetricFamily("vgrid_node_capacity_cpus", "C: CPU capacity shared by the VWNs "
                            "(cores)", value=agent.config.capacity)
    yield from outbox_families(agent.outbox.stats())
    if getattr(agent, "images", None) is not None:
        yield from pool_families(agent.images)       # image transfers and the pool (images.metrics)


def install_node_metrics(app, agent) -> None:
    """``GET /metrics`` on the node agent's ``app`` (see module doc)."""
    install_metrics(app, lambda: _families(agent),
                    lambda who: may_scrape(who, agent.config.metrics_dns, (), app.config.get("VGRID_URL")))
