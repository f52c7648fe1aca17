"""``GET /site`` of a CE agent: its nodes, their VWNs and image pools, and the lease engine's
slot table in one read-only document, for the broker's dashboard (issue 17, "Site view").

Who may read it: the brokers of ``broker_dns`` (the same rule as the job API: the document names
job keys) and the CE agent's own host certificate; anyone else gets 403. The broker decides what
each of its users may see of it (``broker.dashboard``). Answer::

    {"ce_id", "url", "scheduler", "now": s, "vwns_per_node",
     "nodes": [{"url", "up", "status": node GET /status (without outbox and heartbeat) | null,
                "vwns": [VWN records],
                "images": node GET /images | null, "error": str | null}],
     "slots": vwn_agents.slot_view document | null (scheduler = fair-share: no lease engine)}

A node's ``vwns`` are its active VWNs and the ``ENDED_KEPT`` that ended last (records of
``GET /vwns``: state, ``cpu_caps`` [[t, fraction of a core]], limits, driver in ``status``).
The CE agent asks its node agents with its own credential (they list it in ``ce_dns``), each
with ``node_timeout_s``; a node that does not answer is listed with ``error`` (the message).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from flask import jsonify

from vgrid_runtime.authn import caller

from .node_client import NodeAgentClient, NodeAgentError

#: Ended VWNs kept per node in the document (most recent first by end time).
ENDED_KEPT = 8
#: Seconds of slot-table history (ended run segments) the document carries.
HISTORY_S = 900.0


def node_view(agent, url: str, up: bool) -> dict:
    """One node's entry of the document (see module doc); never raises for a node's failure."""
    client = NodeAgentClient(url, agent.http, agent.config.node_timeout_s)
    out = {"url": url, "up": up, "status": None, "vwns": [], "images": None, "error": None}
    try:
        status = client.status()     # the node's outbox and heartbeats are the CE's business
        out["status"] = {k: v for k, v in status.items() if k not in ("outbox", "heartbeat")}
        records = client.vwns()
    except NodeAgentError as exc:
        out["error"] = str(exc)
        return out
    active = [r for r in records if r.get("ended") is None]
    ended = sorted((r for r in records if r.get("ended") is not None), key=lambda r: -r["ended"])
    out["vwns"] = active + ended[:ENDED_KEPT]
    try:
        out["images"] = client.images()
    except NodeAgentError as exc:   # no image pool on this node (501) or it failed: say so
        out["images"] = {"error": str(exc)}
    return out


def site_document(agent) -> dict:
    """The ``GET /site`` document of ``agent`` (a ``ce_agent.CEAgent``)."""
    now = agent.clock.now()
    up = agent.leases.nodes_up() if agent.leases else {}
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(agent.nodes)))) as pool:
        nodes = list(pool.map(lambda u: node_view(agent, u, up.get(u, True)), agent.nodes))
    engine = agent.leases.engine if agent.leases else None
    return {"ce_id": agent.config.ce_id, "url": agent.url, "scheduler": agent.config.scheduler,
            "now": now, "vwns_per_node": agent.config.vwns_per_node, "nodes": nodes,
            "slots": engine.slot_table(HISTORY_S) if engine is not None else None}


def install(app, agent, from_broker) -> None:
    """Add ``GET /site`` to the CE agent's app; ``from_broker(what)`` is its broker rule."""

    @app.get("/site")
    def site():
        if not caller().serves(agent.url):
            from_broker("read the site view (nodes, VWNs, slot table)")
        return jsonify(site_document(agent))
