"""Live suspend and resume of a VWN by its node agent (docs/vwn.md, "Suspend and resume").

``POST /vwns/<vwn>/suspend`` freezes the VWN's cgroup (``freezer``): the job wrapper, the job and
its children stop where they are and use no CPU; ``POST /vwns/<vwn>/resume`` thaws it and they
continue from there (nothing restarts). Only the CE agents' DNs may call them (the rule of
DELETE /vwns/<vwn>). Answers: 200 and the VWN record (a repeated suspend of a suspended VWN, or
resume of a running one, changes nothing: 200 too); 404 unknown VWN; 409 a VWN that is not
running (suspend) or not suspended (resume), e.g. starting or ended; 501 this node has no
freezer (``reason`` says why); 503 the kernel did not freeze it in time (it was thawed again).

State: running -> suspended -> running (``vwn_states``), recorded in the node database before the
answer, so a restarted agent adopts a suspended VWN as suspended (``adopt`` re-applies the
recorded state to the cgroup: the database is the truth). Events ``suspended`` / ``resumed`` go
to the VWN's ``callback_url`` (the CE agent) through the outbox. CPU share: a suspended VWN is not
one of the N of C/(N+1); on suspend the others are readjusted to C/n (n without it), on resume
every sharing VWN, it included, to C/n again (``caps`` events as for any readjustment).
"""
from __future__ import annotations

import logging

from flask import jsonify

from vgrid_runtime.httpjson import ApiError

from . import fairshare
from .cgroups import CgroupError
from .freezer import Freezer, open_freezer as _open
from .vwn_states import VWNState

log = logging.getLogger(__name__)


def open_freezer(config, cpu, adopted: list) -> Freezer:
    """The node's ``freezer.Freezer`` (``config``: NodeAgentConfig; ``cpu``: its CPU driver;
    ``adopted``: the VWNs a restarted agent adopts, whose freezer cgroups
    ``<node>-<agent pid>/<vwn>`` the stale sweep spares -- uncapped ones too)."""
    keep = frozenset(f"{config.node}-{v.agent_pid}/{v.vwn}" for v in adopted if v.agent_pid)
    return _open(config.node, config.cgroup, config.cgroup_parent, cpu, keep=keep)


def remove(agent, v) -> None:
    """Remove ``v``'s freezer cgroup once it ended; never raises (logged)."""
    try:
        agent.fz.remove(v.vwn)
    except (CgroupError, OSError) as exc:
        log.warning("%s: %s", v.vwn, exc)
    agent.fz.missing.pop(v.vwn, None)


def close(agent) -> None:
    """Remove the node's freezer directory at shutdown; never raises (logged)."""
    try:
        agent.fz.close()
    except (CgroupError, OSError) as exc:
        log.warning("node %s: %s", agent.config.node, exc)


def create(agent, v) -> None:
    """Make ``v``'s freezer cgroup (at POST /vwns); a failure only makes it unsuspendable."""
    try:
        agent.fz.create(v.vwn)
    except CgroupError as exc:
        agent.fz.missing[v.vwn] = f"freezer cgroup not created: {exc}"
        log.warning("%s: %s", v.vwn, agent.fz.missing[v.vwn])


def procs_files(agent, v) -> list[str]:
    """The freezer's ``cgroup.procs`` files the wrapper of ``v`` joins (v1), else []."""
    return [] if v.vwn in agent.fz.missing else agent.fz.procs_files(v.vwn)


def adopt(agent, v) -> None:
    """After a restart: ``v`` (adopted, its wrapper alive) gets the freezer state its record
    says -- frozen when suspended, thawed when running (the agent may have died between the
    cgroup write and the database write). Never raises."""
    if not agent.fz.available or v.vwn in agent.fz.missing:
        return
    agent.fz.adopt(v.vwn, f"{agent.config.node}-{v.agent_pid}" if v.agent_pid else None)
    try:
        if v.state is VWNState.SUSPENDED:
            agent.fz.freeze(v.vwn)
        else:
            agent.fz.thaw(v.vwn)
    except (CgroupError, OSError) as exc:
        log.warning("%s: cannot restore its recorded state %s: %s", v.vwn, v.state.value, exc)


def _check(agent, v, want: VWNState) -> bool:
    """False when ``v`` already is ``want`` (nothing to do); ApiError when it cannot go there."""
    if v.state is want:
        return False
    source = VWNState.RUNNING if want is VWNState.SUSPENDED else VWNState.SUSPENDED
    verb = "suspend" if want is VWNState.SUSPENDED else "resume"
    if v.state is not source or v.cancelled or agent._stopping:
        raise ApiError(409, f"cannot {verb} VWN {v.vwn}: it is {v.state.value}"
                            f"{' (being cancelled)' if v.cancelled else ''}", vwn=v.vwn)
    why = agent.fz.reason if not agent.fz.available else agent.fz.missing.get(v.vwn)
    if why:
        raise ApiError(501, f"cannot {verb} VWN {v.vwn} on node {agent.config.node}: {why}", vwn=v.vwn)
    return True


def suspend(agent, vwn: str):
    """Freeze VWN ``vwn`` (module doc); its record. ApiError 404/409/501/503."""
    v = agent.get(vwn)
    with agent._lock:
        if not _check(agent, v, VWNState.SUSPENDED):
            return v
        try:
            agent.fz.freeze(v.vwn)
        except (CgroupError, OSError) as exc:
            raise ApiError(503, f"cannot suspend VWN {vwn}: {exc}", vwn=vwn) from None
        v.to(VWNState.SUSPENDED)
        agent._save(v)
        agent._emit(v, "suspended")
        agent._readjust(fairshare.equal_shares(agent.config.capacity, len(agent.sharing())))
        return v


def resume(agent, vwn: str):
    """Thaw VWN ``vwn`` (module doc); its record. ApiError 404/409/501/503."""
    v = agent.get(vwn)
    with agent._lock:
        if not _check(agent, v, VWNState.RUNNING):
            return v
        v.to(VWNState.RUNNING)                 # counted again: its share is set before it runs
        agent._readjust(fairshare.equal_shares(agent.config.capacity, len(agent.sharing())))
        try:
            agent.fz.thaw(v.vwn)
        except (CgroupError, OSError) as exc:
            v.to(VWNState.SUSPENDED)           # still frozen: put it back as it is
            agent._readjust(fairshare.equal_shares(agent.config.capacity, len(agent.sharing())))
            raise ApiError(503, f"cannot resume VWN {vwn}: {exc}", vwn=vwn) from None
        agent._save(v)
        agent._emit(v, "resumed")
        return v


def install_routes(app, agent, from_ce) -> None:
    """POST /vwns/<vwn>/suspend and /resume on the node agent's Flask ``app``."""

    @app.post("/vwns/<vwn>/suspend")
    def suspend_vwn(vwn):
        from_ce(f"suspend VWN {vwn}")
        return jsonify(suspend(agent, vwn).record())

    @app.post("/vwns/<vwn>/resume")
    def resume_vwn(vwn):
        from_ce(f"resume VWN {vwn}")
        return jsonify(resume(agent, vwn).record())
