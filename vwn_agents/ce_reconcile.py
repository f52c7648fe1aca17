"""The CE agent's reconciliation of jobs with their leases (``scheduler = leases``).

Each lease tick, :func:`reconcile` reads the lease engine's view of every job in it and brings
the job in line (``ce_agent.CEAgent._lease_loop``); the outcomes are typed
(``vgrid_runtime.outcomes.Outcome``) and reach the broker through the agent's outbox.
"""
from __future__ import annotations

import logging

from vgrid_runtime.outcomes import Outcome

from .ce_jobs import ENDED, CEJob, CEJobState
from .ce_leases import REQUEUED_REASON
from .node_client import NodeAgentClient, NodeAgentError
from .vwn_states import VWNState

log = logging.getLogger("vwn_agents.ce_agent")


def reconcile(agent, job: CEJob) -> None:
    """Bring ``job`` (``scheduler = leases``) in line with its lease's view: the node it runs on,
    why it has not started, and how it ended without a node event (rejected, wall-clock limit,
    preempted, migration failed): Aborted with the typed outcome, or Scheduled again for a
    suspendable/migratable lease (``requeued``). Never holds the agent's lock while calling the
    engine or a node agent."""
    key = job.request.key
    view = agent.leases.view(key)
    if view is None:
        return
    if view["state"] == "Active" and view["nodes"] and job.node_url != view["nodes"][0]:
        with agent._lock:
            job.node_url, job.lease_start = view["nodes"][0], view["start_s"]
            agent._save(job)
    if view["start_error"] and view["nodes"] and not view["vwns"]:
        with agent._lock:
            if job.state is CEJobState.SCHEDULED:        # the node agent did not take it
                job.note(Outcome.NOT_STARTED,
                         f"not started yet: node agent {view['nodes'][0]} did not take the VWN "
                         f"(retried every {agent.config.lease_tick_s:g} s): {view['start_error']}")
    ended = agent.leases.outcome(job.lease_req, view)
    if ended is None:
        return
    code, reason = ended
    if code is Outcome.WALLCLOCK_LIMIT and vwn_finished(agent, job):
        return                          # it ended by itself at the limit: its event is on the way
    if code is Outcome.PREEMPTED and job.lease_req.restarts:
        requeued(agent, job)             # suspendable/migratable: a new VWN when it starts again
        return
    if code in (Outcome.PREEMPTED, Outcome.MIGRATION_FAILED):
        agent._cancel_lease(key)         # cancellable, or its VM could not move: the job ends here
    with agent._lock:
        if job.state in ENDED:
            return
        job.to(CEJobState.ABORTED)
        job.note(code, reason)
        agent._save(job)
        agent._forward(job, "aborted", agent.clock.now())
    log.info("%s: %s", key, reason)

def requeued(agent, job: CEJob) -> None:
    """The job's lease was stopped and waits to start again: the job is Scheduled without
    a VWN (``Outcome.REQUEUED``) until its next VWN (key ``<key>-r2`` ...) reports running."""
    with agent._lock:
        if job.state is not CEJobState.RUNNING:
            return
        job.to(CEJobState.SCHEDULED)
        job.vwn, job.node, job.node_url, job.lease_node = None, None, None, None
        job.cpu_caps, job.capped, job.cap_reason = [], None, None
        job.lease_start = None
        job.note(Outcome.REQUEUED, REQUEUED_REASON)
        agent._save(job)
        agent._forward(job, "requeued", agent.clock.now())     # a history note at the broker
    log.info("%s: %s", job.request.key, job.reason)

def vwn_finished(agent, job: CEJob) -> bool:
    """Whether the job's VWN ended by itself (done/aborted) rather than being deleted."""
    if not (job.vwn and job.node_url):
        return False
    try:
        record = NodeAgentClient(job.node_url, agent.http, agent.config.node_timeout_s).vwn(job.vwn)
        return record.get("state") in (VWNState.DONE.value, VWNState.ABORTED.value)
    except NodeAgentError:
        return False
