"""A node agent's stop (SIGTERM/SIGINT, ``NodeAgent.shutdown``): bounded, timed, never waiting
on peers that are gone.

The steps, each logged with its duration (``node N stop: <step> in S s``, and the total):

1. ``kill``: mark the agent stopping, kill every running VWN's process tree;
2. ``monitors``: join the VWNs' monitor threads (each records its VWN ``aborted``
   ``node-shutdown`` and posts the event) within one shared ``MONITOR_JOIN_S``, not one each;
3. ``heartbeats``, ``zygote``, ``spares``: stop the loops and the spare quota file systems;
4. ``outbox``: the event outbox's last delivery, ``Outbox.drain(deliver_s)``: one attempt per
   job, no retry -- a CE agent already stopped (connection refused) costs one failed attempt,
   and what is not delivered stays in ``node.db`` for the next start (nothing is lost); then the
   sender threads get ``SENDERS_JOIN_S``;
5. ``cleanup``: cgroups, freezer, confinement, database, node lock, an own temporary work dir.

The sum of the bounds (``MONITOR_JOIN_S`` 8 + heartbeat join 6 + zygote 5 + spares 5 +
``deliver_s`` 3 + ``SENDERS_JOIN_S`` 2 = 29 s, each reached only by a step that hangs) stays below ``vgrid_cli.services.STOP_GRACE_S`` (30 s), after
which a group's service is SIGKILLed (docs/operations.md, "Stopping a site").
"""
from __future__ import annotations

import logging
import shutil
import time

from . import cgroups, node_suspend

log = logging.getLogger("vwn_agents.node_agent")

#: All monitor threads together get this long to record their VWN's end (s).
MONITOR_JOIN_S = 8.0
#: The outbox's sender threads get this long to finish an in-flight request (s).
SENDERS_JOIN_S = 2.0


class _Steps:
    """Logs each step's duration (wall seconds of ``time.monotonic``: not scheduling time)."""

    def __init__(self, node: str) -> None:
        self.node, self.t0 = node, time.monotonic()
        self.last = self.t0

    def done(self, step: str, detail: str = "") -> None:
        now = time.monotonic()
        log.info("node %s stop: %s in %.2f s%s", self.node, step, now - self.last,
                 f" ({detail})" if detail else "")
        self.last = now

    def total(self) -> float:
        return time.monotonic() - self.t0


def shutdown(agent, deliver_s: float = 3.0) -> float:
    """Stop ``agent`` (a ``NodeAgent``) as the module doc says; returns the seconds it took."""
    steps = _Steps(agent.config.node)
    with agent._lock:
        agent._stopping = True
        running = agent.active()
    for v in running:
        agent._kill(v)
    steps.done("kill", f"{len(running)} VWN(s)")
    deadline = time.monotonic() + MONITOR_JOIN_S
    for v in running:
        if v.monitor is not None:
            v.monitor.join(timeout=max(0.0, deadline - time.monotonic()))
    late = [v.vwn for v in running if v.monitor is not None and v.monitor.is_alive()]
    steps.done("monitors", f"still running: {', '.join(late)}" if late else "")
    agent.heartbeats.close()
    steps.done("heartbeats")
    if agent.zygote is not None:
        agent.zygote.close()
        steps.done("zygote")
    agent.conf.stop()
    steps.done("spares")
    left = agent.outbox.drain(deliver_s)
    agent.outbox.close(SENDERS_JOIN_S)
    steps.done("outbox", f"{left} event(s) kept for the next start" if left else "all delivered")
    try:
        agent.cg.close()
    except (cgroups.CgroupError, OSError) as exc:
        log.warning("node %s: %s", agent.config.node, exc)
    node_suspend.close(agent)
    agent.conf.shutdown()
    agent.engine.dispose()
    agent._node_lock.close()
    if agent._own_work_dir and not agent.config.keep_workdirs:
        shutil.rmtree(agent.work_dir, ignore_errors=True)
    steps.done("cleanup")
    total = steps.total()
    log.info("node %s stopped in %.2f s", agent.config.node, total)
    return total
