"""Bulk dispatch at the CE agent: ``POST /jobs/bulk`` takes every job a broker chose for this CE
in one matcher pass (issue 12; contract in docs/architecture.md, "bulk dispatch").

Body ``{"jobs": [<POST /jobs body>, ...]}`` (at most :data:`MAX_JOBS` entries); the answer is
200 ``{"results": [...]}`` with one result per entry, in the same order:

- accepted: ``{"key", "accepted": true, "created": bool, "state"}``; ``created`` is false when
  the key (the dispatch key of one attempt) was accepted before: a repeated POST creates
  nothing twice (:meth:`CEAgent.submit` is idempotent on the key), so a broker that lost the
  answer simply posts again;
- refused: ``{"key", "accepted": false, "outcome": "refused", "status": 400, "error":
  {"message", ...}}`` for an entry that is malformed or whose JDL does not parse (the error
  names ``jobs[i]`` and the field, or the JDL's file:line:column). The other entries are
  accepted all the same: one bad job does not block its batch.

Authorization is that of ``POST /jobs``: the caller must be one of the CE's brokers
(``broker_dns``); a refused caller gets 403 for the whole request and nothing is stored.
"""
from __future__ import annotations

from flask import jsonify

from vgrid_runtime.config import ConfigError, load
from vgrid_runtime.httpjson import ApiError, json_body
from vgrid_runtime.outcomes import Outcome

from .ce_jobs import CEJob, CEJobState, JobRequest, parse_job_jdl

#: The most jobs one POST /jobs/bulk may carry (the broker sends at most 1,000).
MAX_JOBS = 10_000


def refused(key, status: int, message: str, **fields) -> dict:
    """The result of one refused entry (typed: ``outcome`` ``refused``)."""
    return {"key": key if isinstance(key, str) else None, "accepted": False,
            "outcome": Outcome.REFUSED.value, "status": status,
            "error": {"message": message, **fields}}


def submit_many(agent, entries: list) -> list[dict]:
    """Accept each entry of ``entries`` (POST /jobs bodies) on ``agent`` (a CEAgent); one
    result per entry, in order (see the module doc). As :meth:`CEAgent.submit` for each, except
    that the new jobs are stored in one transaction (before the answer) and the placer is
    woken once. Never raises for a bad entry."""
    results: list[dict | None] = [None] * len(entries)
    prepared = []
    for i, entry in enumerate(entries):           # parse outside the agent's lock
        key = entry.get("key") if isinstance(entry, dict) else None
        try:
            req = load(JobRequest, entry, f"POST /jobs/bulk: jobs[{i}]")
            if req.key in agent.jobs:
                prepared.append((i, req, None, None))
                continue
            desc = parse_job_jdl(req.jdl, req.filename)
            lease_req = agent.leases.lease_request(desc) if agent.leases else None
        except ConfigError as exc:
            results[i] = refused(key, 400, str(exc))
            continue
        except ApiError as exc:
            results[i] = refused(key, exc.status, f"jobs[{i}]: {exc}",
                                 **{k: v for k, v in exc.body.items() if k != "message"})
            continue
        prepared.append((i, req, desc, lease_req))
    new = []
    with agent._lock:
        for i, req, desc, lease_req in prepared:
            job = agent.jobs.get(req.key)
            created = job is None
            if created and desc is None:      # known when parsed, gone since: not expected
                results[i] = refused(req.key, 409, f"jobs[{i}]: job {req.key} changed meanwhile; post it again")
                continue
            if created:
                job = CEJob(req, desc, CEJobState.SCHEDULED, lease_req=lease_req, accepted=agent.clock.now())
                agent.jobs[req.key] = job
                new.append(job)
            results[i] = {"key": req.key, "accepted": True, "created": created, "state": job.state.value}
        try:
            agent.store.save_many(new)        # before the answer, one transaction
        except BaseException:                 # nothing stored: nothing accepted (a retry creates them)
            for job in new:
                agent.jobs.pop(job.request.key, None)
            raise
    if new:
        agent._wake.set()
    return results


def install(app, agent, from_broker) -> None:
    """Add ``POST /jobs/bulk`` to the CE agent's Flask ``app``; ``from_broker(what)`` is the
    authorization rule of ``POST /jobs`` (403 unless the caller is one of the CE's brokers)."""

    @app.post("/jobs/bulk")
    def post_jobs_bulk():
        from_broker("submit jobs")
        entries = json_body().get("jobs")
        if not isinstance(entries, list):
            raise ApiError(400, "POST /jobs/bulk: field 'jobs' must be a list of job requests",
                           field="jobs")
        if len(entries) > MAX_JOBS:
            raise ApiError(413, f"POST /jobs/bulk: at most {MAX_JOBS} jobs per request, got "
                           f"{len(entries)}", field="jobs")
        return jsonify({"results": submit_many(agent, entries)})
