"""A restarted CE agent re-learns its jobs: reload, adopt running leases, resynchronise.

On start the CE agent loads every job of its database (``ce_store``; the JDL of the jobs that
have not ended is parsed again). Then, in its placer thread and before it schedules anything,
``recover(agent)``:

1. asks each node agent that holds one of its active jobs for its VWNs (``GET /vwns``, once per
   node) and finds each job's VWN: by its VWN id, else by the VWN key of the job's last lease
   start attempt (``lease_engine.vwn_key(key, lease_attempts)``, written to the database
   before the ``POST /vwns``, so a start the agent did not see answered is found too);
2. with ``scheduler = "leases"``, records every job whose VWN exists -- or whose node agent does
   not answer -- as a running lease on its node (``LeaseEngine.adopt_job`` ->
   ``LeaseScheduler.adopt``: an active VM reservation from the lease's start for its
   duration), so the slot table is as before the restart and queued leases do not take those
   slots; the jobs without a VWN (queued, requeued, or a start that never reached the node)
   are submitted again by the placer loop as usual, with their earlier start attempts counted
   so their next VWN key is new to every node agent;
3. applies what happened while the agent was down, as the node agent's events would have:
   a VWN running -> ``running``; done/aborted/cancelled -> ``done``/``aborted`` with the exit
   code, reason and outcome of the VWN record (events to the broker); a VWN id the node agent no
   longer knows -> Aborted, ``Outcome.NODE_LOST``. A node agent that does not answer is left to
   the lost-node rule (``ce_heartbeats``): it may come back and report.
4. its jobs adopted so are *unverified* (``agent.unverified``): once their node agent is heard
   again, :func:`verify_unverified` (the placer loop, every tick) lists its VWNs and applies
   steps 1-3 to them: a job whose start never reached the node (no VWN id, its key not listed)
   is started again (``LeaseEngine.forget_job``, then submitted with a new VWN key; fair-share:
   placed again), a VWN id it no longer knows is Aborted (node lost). Without this a start that
   the old process wrote but the node never took would wait for a VWN that does not exist.

Nothing running is killed by a restart. Node agents' events that arrive meanwhile wait for the
end of ``recover`` (``CEAgent.ready``) and are then applied as usual.
"""
from __future__ import annotations

import logging

from vgrid_runtime.outcomes import Outcome

from .ce_jobs import ENDED, CEJobState
from .lease_engine import vwn_key
from .node_client import NodeAgentClient, NodeAgentError

log = logging.getLogger(__name__)

#: VWN states that still run (a suspended VWN is frozen, alive: adopted suspended).
ACTIVE_VWN = ("starting", "running", "suspended")


def recover(agent) -> dict:
    """Resynchronise ``agent`` (a ``CEAgent`` whose jobs were just loaded) with its node agents;
    returns counts ``{"adopted", "ended", "lost", "unreachable", "requeued"}``."""
    with agent._lock:
        active = [j for j in agent.jobs.values() if j.state not in ENDED]
    counts = {"adopted": 0, "ended": 0, "lost": 0, "unreachable": 0, "requeued": 0}
    if not active:
        return counts
    listings: dict[str, dict | None] = {}
    where: dict[str, str | None] = {}
    for job in active:
        url = _node_of(job)
        if url is None and (not agent.leases or job.lease_attempts):
            # fair-share: placed but the answer was not recorded; leases: a start on an unknown node
            wanted = _vwn_key(agent, job)
            url = next((u for u in agent.nodes if wanted in (_listing(agent, listings, u) or {}).get("by_key", {})),
                       None)
        elif url in agent.nodes:
            _listing(agent, listings, url)
        where[job.request.key] = url
    for job in active:
        url = where[job.request.key]
        if url is None or url not in agent.nodes:
            counts["requeued"] += _forget_start(agent, job)
            continue
        listing = listings.get(url)
        attempt = job.lease_attempts or 1
        if listing is None:
            _adopt(agent, job, url, job.vwn, attempt, None)
            with agent._lock:
                agent.unverified[job.request.key] = (url, agent.clock.now())
            counts["unreachable"] += 1
            continue
        verdict, rec = _verdict(agent, job, listing)
        if verdict == "lost":
            _lost(agent, job, url)
            counts["lost"] += 1
            continue
        if verdict == "again":
            counts["requeued"] += _forget_start(agent, job)
            continue
        _adopt(agent, job, url, rec.get("vwn"), attempt, rec.get("created"), rec.get("state") == "suspended")
        counts["adopted"] += 1
        counts["ended"] += _apply(agent, job, url, rec)
    log.info("recovery of %d active jobs: %s", len(active), counts)
    return counts


def verify_unverified(agent) -> dict:
    """Step 4 of the module doc: for each job adopted while its node agent did not answer
    (``agent.unverified``: key -> (node URL, clock s of the adoption)) whose node agent has
    been heard of since (``agent.beats.node_heard``), list the node's VWNs and resolve the job;
    returns counts ``{"adopted", "ended", "lost", "restarted"}``. Jobs that ended meanwhile (an
    event, node lost) are dropped; a node that still does not answer is asked again later."""
    counts = {"adopted": 0, "ended": 0, "lost": 0, "restarted": 0}
    with agent._lock:
        due = [(key, url) for key, (url, since) in agent.unverified.items()
               if agent.beats.node_heard.get(url, since) > since]
    listings: dict[str, dict | None] = {}
    for key, url in due:
        with agent._lock:
            job = agent.jobs.get(key)
            if job is None or job.state in ENDED or job.node_url != url:
                agent.unverified.pop(key, None)
                continue
        listing = _listing(agent, listings, url)
        if listing is None:                  # asked again once the node is heard of again
            with agent._lock:
                agent.unverified[key] = (url, agent.clock.now())
            continue
        with agent._lock:
            agent.unverified.pop(key, None)
        verdict, rec = _verdict(agent, job, listing)
        if verdict == "lost":
            _lost(agent, job, url, "when it answered again after the CE agent's restart")
            if agent.leases:
                agent._cancel_lease(key)
            counts["lost"] += 1
        elif verdict == "again":
            _restart(agent, job, url)
            counts["restarted"] += 1
        else:
            if not job.vwn and rec.get("vwn"):
                with agent._lock:
                    job.vwn = rec["vwn"]
                    agent._save(job)
                if agent.leases and agent.leases.engine is not None:
                    agent.leases.engine.note_vwn(key, rec["vwn"])
            counts["adopted"] += 1
            counts["ended"] += _apply(agent, job, url, rec)
    if due:
        log.info("verified %d job(s) adopted while their node agent did not answer: %s", len(due), counts)
    return counts


def _verdict(agent, job, listing: dict) -> tuple[str, dict | None]:
    """What a node agent's listing says of ``job``: ``("lost", None)`` -- its VWN id is not
    listed; ``("again", rec or None)`` -- the start never reached the node, or its VWN was
    deleted when the lease was preempted (requeued): start again, in a VWN with a new key;
    ``("found", rec)`` -- the VWN record to apply."""
    rec = listing["by_vwn"].get(job.vwn) if job.vwn else None
    rec = rec or listing["by_key"].get(_vwn_key(agent, job))
    if rec is None and job.vwn:
        return "lost", None
    if rec is None or (rec.get("state") == "cancelled" and job.state is CEJobState.SCHEDULED):
        return "again", rec
    return "found", rec


def _restart(agent, job, url: str) -> None:
    """The job's start never reached node agent ``url``: drop the adopted lease and let the
    placer loop start it again (a new VWN key: its attempts are kept)."""
    if agent.leases and agent.leases.engine is not None:
        agent.leases.engine.forget_job(job.request.key)
    with agent._lock:
        job.node_url, job.vwn, job.lease_start, job.lease_node = None, None, None, None
        job.lease_attempts = job.lease_attempts or 1     # the unlisted key's attempt: the next is new
        job.in_engine = False
        job.note(Outcome.NOT_STARTED, f"not started yet: node agent {url}, back after the CE agent's "
                                      f"restart, never received start attempt {job.lease_attempts or 1}; "
                                      "started again")
        agent._save(job)
    agent._wake.set()


def _listing(agent, listings: dict, url: str) -> dict | None:
    """The VWNs of node agent ``url`` by key and by id (one ``GET /vwns`` per node), or None
    when it does not answer."""
    if url not in listings:
        try:
            records = NodeAgentClient(url, agent.http, agent.config.node_timeout_s).vwns()
            listings[url] = {"by_key": {r.get("key"): r for r in records},
                             "by_vwn": {r.get("vwn"): r for r in records}}
            agent.beats.heard_node(url)
        except NodeAgentError as exc:
            log.warning("recovery: node agent %s: %s (its jobs wait for it or for node_lost_s)", url, exc)
            listings[url] = None
    return listings[url]


def _vwn_key(agent, job) -> str:
    """The key of the job's latest VWN: its lease's last start attempt, or the job key."""
    return vwn_key(job.request.key, job.lease_attempts or 1) if agent.leases else job.request.key


def _node_of(job) -> str | None:
    return job.node_url or (job.lease_node if job.lease_attempts else None)


def _forget_start(agent, job) -> int:
    """A job with no VWN anywhere: the placer loop (re)starts it."""
    with agent._lock:
        job.node_url, job.vwn = None, None
        agent._save(job)
    return 1


def _adopt(agent, job, url: str, vwn: str | None, attempt: int, created: float | None,
           frozen: bool = False) -> None:
    with agent._lock:
        job.node_url = url
        job.vwn = job.vwn or vwn
        if job.lease_start is None:
            job.lease_start = created if created is not None else agent.clock.now()
        agent._save(job)
        agent.beats.vwn_heard[job.request.key] = agent.clock.now()
        body = agent._vwn_body(job)
    if agent.leases and agent.leases.engine is not None and job.lease_req is not None:
        args = job.lease_req.engine_args()
        args["start_s_requested"] = args.pop("start_s")
        if frozen and job.vwn:      # suspended in place: resumed when the engine schedules it
            args["suspended_ran_s"] = job.lease_ran_s if job.lease_ran_s is not None else 0.0
        agent.leases.engine.adopt_job(job.request.key, body, url, job.vwn, job.lease_start, attempt, **args)
        with agent._lock:
            job.in_engine = True


def _lost(agent, job, url: str, when: str = "when the CE agent restarted") -> None:
    with agent._lock:
        job.to(CEJobState.ABORTED)
        job.note(Outcome.NODE_LOST, f"node lost: node agent {url} no longer knows VWN {job.vwn} "
                                    f"(found {when})")
        agent._save(job)
        agent._forward(job, "aborted", agent.clock.now())


def _apply(agent, job, url: str, rec: dict) -> int:
    """Apply the VWN record ``rec`` as the node agent's events would have; 1 if the job ended."""
    state = rec.get("state")
    base = {"job_id": job.request.job_id, "key": rec.get("key"), "vwn": rec.get("vwn"),
            "cpu_caps": rec.get("cpu_caps") or job.cpu_caps, "capped": rec.get("capped"),
            "cap_reason": rec.get("cap_reason")}
    if state in ACTIVE_VWN:
        if state == "running" and job.state is CEJobState.SCHEDULED:
            agent.node_event({**base, "event": "running", "time": rec.get("created")})
        return 0
    kind = "done" if state == "done" else "aborted"
    agent.node_event({**base, "event": kind, "exit_code": rec.get("exit_code"),
                      "reason": rec.get("reason") or f"its VWN was {state} on node agent {url}",
                      "outcome": rec.get("outcome") or (Outcome.CANCELLED.value if state == "cancelled" else None),
                      "time": rec.get("ended")})
    return 1
