"""The node agent's heartbeats to its CE agents (docs/architecture.md, contracts 3 and 4).

A VWN request may carry ``heartbeat_url`` (``<ce>/node-heartbeats``); the node agent records it
(``node_store``, table ``heartbeat_targets``, with the URL the CE agent called the node agent by:
``node`` in the heartbeat, or the ``url`` config option when set) and its ``heartbeats.Heartbeats``
loop POSTs, every ``heartbeat_s``, to each target::

    {"node": <node agent URL>, "interval_s": float, "time": t,
     "vwns": [{"key", "vwn", "state"}]}      # active VWNs whose request named that target

The answer ``{"unknown": [vwn ids]}`` lists VWNs the CE agent does not consider active on this
node: they are killed (reason ``UNKNOWN_REASON``, outcome ``cancelled``, no event), unless they
were created less than one heartbeat interval ago (the CE may not have recorded them yet).
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

UNKNOWN_REASON = "the CE agent no longer knows this VWN"


def add_target(agent, url: str, node_url: str | None) -> None:
    """Heartbeat to ``url`` from now on; ``node_url``: how its CE agent calls ``agent``."""
    node_url = agent.config.url or node_url
    if agent._node_urls.get(url, "") != node_url:
        agent._node_urls[url] = node_url
        try:
            agent.store.add_target(url, node_url, agent.clock.now())
        except Exception as exc:  # noqa: BLE001 - heartbeats still go while the agent runs
            log.error("node %s: cannot record heartbeat target %s: %s", agent.config.node, url, exc)
    agent.heartbeats.add(url)


def body(agent, url: str) -> dict:
    """The heartbeat to target ``url`` (module doc)."""
    with agent._lock:
        vwns = [{"key": v.request.key, "vwn": v.vwn, "state": v.state.value}
                for v in agent.active() if v.request.heartbeat_url == url]
    return {"node": agent._node_urls.get(url) or agent.config.url or None,
            "interval_s": agent.config.heartbeat_s, "time": agent.clock.now(), "vwns": vwns}


def kill_unknown(agent, url: str, sent: dict, unknown: list) -> None:
    """Kill the VWNs the receiver ``url`` no longer knows: only those listed in ``sent`` and
    older than one heartbeat interval (module doc)."""
    listed = {e["vwn"] for e in sent["vwns"]}
    now = agent.clock.now()
    for vwn in unknown:
        if not isinstance(vwn, str) or vwn not in listed:
            continue
        v = agent.vwns.get(vwn)
        if v is None or not v.active or now - v.created < agent.config.heartbeat_s:
            continue
        log.warning("%s (%s): %s (%s); killing it", vwn, v.request.key, UNKNOWN_REASON, url)
        agent.delete_vwn(vwn, UNKNOWN_REASON)
