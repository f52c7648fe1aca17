"""A CE agent's Prometheus metrics (``GET /metrics``; plumbing in :mod:`vgrid_runtime.metrics`).

All read at scrape time from the agent's state (its jobs, node loads, lease engine, outbox):

* ``vgrid_ce_jobs{state}`` (gauge): the CE's jobs by state (Scheduled: accepted, no VWN yet;
  Running: its VWN runs; Done, Aborted, Cancelled), every state present;
* ``vgrid_ce_node_vwns{node}`` (gauge): VWNs of this CE's jobs active on each node agent (URL);
* ``vgrid_ce_vwn_cpu_cap{node, vwn}`` (gauge, CPU fraction of one core, e.g. 0.5): the last
  cap the node agent reported for each running VWN (C/(N+1), seed 004 Section 5.1);
* ``vgrid_ce_total_cpus``, ``vgrid_ce_free_cpus`` (gauges: GlueCEInfoTotalCPUs and
  GlueCEStateFreeCPUs as published);
* ``vgrid_ce_leases{state}`` (gauge, scheduler = leases only): the lease engine's job leases by
  lease state (Haizea's names, ``leasing.model.LeaseState``); ``vgrid_ce_lease_queue_length``
  (gauge): those waiting to start (Pending, Queued, Scheduled: reserved for later, Suspended);
* ``vgrid_outbox_pending``, ``vgrid_outbox_delivered_total``, ``vgrid_outbox_dropped_total{reason}``
  (the events to the brokers, :func:`vgrid_runtime.metrics.outbox_families`).

Who may scrape: the DNs in ``metrics_dns`` and the CE agent's own host certificate (the brokers
of ``broker_dns`` may not: they read ``/glue`` and ``/status``).
"""
from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from vgrid_runtime.metrics import gauge_by, install_metrics, may_scrape, outbox_families

from .ce_jobs import CEJobState
from .leasing.model import LeaseState

#: Lease states of a lease that waits to start (the CE's lease queue, FCFS and reservations).
WAITING_LEASES = (LeaseState.PENDING, LeaseState.QUEUED, LeaseState.SCHEDULED, LeaseState.SUSPENDED)


def _families(agent):
    yield gauge_by("vgrid_ce_jobs", "jobs at this CE by state", "state", agent.counts(),
                   [s.value for s in CEJobState])
    loads = GaugeMetricFamily("vgrid_ce_node_vwns", "VWNs of this CE's jobs active on each node "
                              "agent", labels=["node"])
    for load in agent.loads():
        loads.add_metric([load.url], load.vwns)
    yield loads
    caps = GaugeMetricFamily("vgrid_ce_vwn_cpu_cap", "CPU cap of each running VWN (fraction of "
                             "one core)", labels=["node", "vwn"])
    with agent._lock:
        running = [(j.node_url or j.node or "", j.vwn, j.cpu_caps[-1]) for j in agent.jobs.values()
                   if j.state is CEJobState.RUNNING and j.cpu_caps and j.vwn]
    for node, vwn, cap in running:
        caps.add_metric([node, vwn], float(cap[1] if isinstance(cap, (list, tuple)) else cap))
    yield caps
    free, _ = agent.free_and_ert()
    yield GaugeMetricFamily("vgrid_ce_total_cpus", "GlueCEInfoTotalCPUs", value=agent.total_cpus())
    yield GaugeMetricFamily("vgrid_ce_free_cpus", "GlueCEStateFreeCPUs", value=free)
    engine = agent.leases.engine if agent.leases else None
    if engine is not None:
        with engine._lock:
            leases: dict[str, int] = {}
            for lease in engine._by_key.values():
                leases[lease.state.value] = leases.get(lease.state.value, 0) + 1
        yield gauge_by("vgrid_ce_leases", "the lease engine's job leases by lease state", "state",
                       leases, [s.value for s in LeaseState])
        yield GaugeMetricFamily("vgrid_ce_lease_queue_length", "leases waiting to start (Pending, "
                                "Queued, Scheduled, Suspended)",
                                value=sum(leases.get(s.value, 0) for s in WAITING_LEASES))
    yield from outbox_families(agent.outbox.stats())


def install_ce_metrics(app, agent) -> None:
    """``GET /metrics`` on the CE agent's ``app`` (see module doc)."""
    install_metrics(app, lambda: _families(agent),
                    lambda who: may_scrape(who, agent.config.metrics_dns, (), agent.url))
