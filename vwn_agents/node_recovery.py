"""A node agent's restart: it adopts the VWNs its database says are active, never kills them.

For every VWN recorded as starting, running or suspended (``node_store``), the new agent:

* keeps its cgroups (the stale-cgroup sweep spares what a row claims, ``claimed``) in the node
  directory ``<node>-<earlier agent pid>`` they were made in, and its pool-account lease (its
  gridmapdir holder is renamed to the new agent's pid, ``leases``); a suspended VWN stays frozen
  (its freezer cgroup is set to the recorded state, ``node_suspend.adopt``);
* if the job wrapper never started (the agent died during stage-in), kills whatever may be in
  the VWN's cgroups and starts it again from the beginning;
* if the wrapper still runs -- same pid, same start time, in the VWN's cgroup
  (``vwn_process.is_wrapper``) -- adopts it: a monitor thread reads its output file and waits
  for its end through a pidfd, then stages out and reports as usual;
* if the wrapper ended while the agent was down, reports the VWN done with the exit code the
  wrapper wrote, or aborted (wrapper-error) when it wrote no result; when the agent had
  already recorded the VWN's outcome (it died while cleaning up), that outcome is reported.

The events it then sends (``running`` if missed, ``done``/``aborted``) go through the persistent
outbox, like those it had not delivered before it died. A second agent for the same node and
work directory refuses to start (``lock_node``): two agents must not adopt the same VWNs.
"""
from __future__ import annotations

import fcntl
import logging
from pathlib import Path
from typing import IO

from vgrid_runtime.outcomes import Outcome

from . import node_suspend
from .vwn_model import VWN
from .vwn_process import is_wrapper

log = logging.getLogger(__name__)


def lock_node(work_dir: Path, node: str) -> IO:
    """Hold ``<work_dir>/<node>.lock`` (flock) for the agent's life; the open file (close it
    to release; the kernel releases it on kill -9). RuntimeError if another agent holds it."""
    fh = open(work_dir / f"{node}.lock", "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise RuntimeError(f"another node agent {node} runs on {work_dir}") from None
    return fh


def claimed(active: list[VWN]) -> frozenset[str]:
    """``"<home>/<vwn>"`` of the active VWNs' cgroups (spared by ``cgroups.sweep_stale``)."""
    return frozenset(f"{v.home}/{v.vwn}" for v in active if v.home)


def leases(active: list[VWN]) -> list[tuple]:
    """``(owner, earlier agent pid, vwn, home)`` for ``confinement.Confinement(adopted=...)``."""
    return [(v.jail.owner, v.agent_pid, v.vwn, v.home) for v in active if v.jail is not None]


def resume(agent, active: list[VWN]) -> dict[str, int]:
    """Take over the active VWNs of an earlier agent (module doc) for ``agent`` (a
    ``node_agent.NodeAgent``); counts by decision."""
    counts = {"adopted": 0, "ended": 0, "restarted": 0}
    for v in active:
        if v.home and v.capped:
            agent.cg.adopt(v.vwn, v.home)
        if v.jail is not None:
            agent.conf.adopt(v.jail, v.home)
        node_suspend.adopt(agent, v)                 # frozen again if recorded suspended
        if v.wrapper_pid is None:
            agent.cg.kill(v.vwn)                     # a wrapper started but not recorded
            if v.jail is not None:
                agent.conf.kill(v.jail)
            counts["restarted"] += 1
        elif is_wrapper(v.wrapper_pid, v.wrapper_start, v.home if v.capped else None, v.vwn):
            v.adopted = True
            counts["adopted"] += 1
            if v.outcome is Outcome.CANCELLED:          # deleted, the agent died killing it
                v.cancelled = True
                agent._kill(v)
        else:
            counts["ended"] += 1
            v.cancelled = v.outcome is Outcome.CANCELLED
            v.end_recorded = v.outcome is not None      # recorded before the agent died
        agent._launch(v)
    if active:
        log.warning("node %s: restart: %d VWN(s) adopted, %d ended while the agent was down, "
                    "%d restarted before their job started", agent.config.node, counts["adopted"],
                    counts["ended"], counts["restarted"])
    return counts
