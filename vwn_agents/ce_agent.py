"""The CE agent: the site service of one CE queue in front of its node agents.

It accepts jobs from the broker (POST /jobs, idempotent on the job key), parses their JDL once
(``jdl.parse_jdl``), and runs each in a VWN on one of its node agents. ``scheduler = "leases"``
(default): every job becomes a one-VM lease in the lease engine (``ce_leases``: best-effort, or
what the JDL lease attributes ask for; at most ``vwns_per_node`` VWNs per node, then a queue).
``scheduler = "fair-share"``: no admission control, each job is placed at once on the node chosen
by a placement policy (default: the node with the fewest VWNs, ``placement.fewest_vwns``).
It tracks each job through the node agent's VWN events
(POST /node-events), forwards every state change to the broker's ``callback_url`` through an
``Outbox``, cancels on request, and publishes its state as GLUE 1.3 LDIF (GET /glue, via
``infosys.gip.render_glue13``) and GLUE 2.0 LDIF (GET /glue2, ``render_glue2``). HTTP contract: docs/architecture.md, "CE agent".

Job states here are the gLite ones the CE can see, changed only through ``ce_jobs.CE_JOB_STATES``:
Scheduled (accepted, no VWN running yet) -> Running -> Done | Aborted | Cancelled (and Running ->
Scheduled for a preempted job that restarts). Every decision branches on ``Outcome`` codes, never
on the wording of a reason. Configuration: ``ce_config.CEAgentConfig``.

State: every job is a row of the agent's database (``ce_store``), written before POST /jobs
answers and on every change; the events to the broker go through a persistent outbox in the same
database. A restart reloads the jobs and resynchronises with the node agents (``ce_recovery``)
before it schedules anything. Heartbeats in and out and lost nodes: ``ce_heartbeats``.
"""
from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from pathlib import Path

from flask import Flask, Response, jsonify, request

from vgrid_runtime.clock import Clock, WallClock
from vgrid_runtime.authn import authorize, caller, install_authentication
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.sqldb import open_engine, sqlite_url

from . import ce_bulk, ce_reconcile, ce_site
from .ce_config import CEAgentConfig
from .ce_heartbeats import CEHeartbeats, loopback
from .api_models import CE_SPEC, install_openapi
from .ce_metrics import install_ce_metrics
from .ce_publish import CEPublishing
from .ce_recovery import recover, verify_unverified
from .ce_store import CEStore, open_outbox
from .ce_jobs import ENDED, EVENT_STATE, CEJob, CEJobState, JobRequest, parse_job_jdl  # noqa: F401  (re-exported)
from .ce_leases import LeaseScheduling
from vgrid_runtime.httpjson import ApiError, install_error_handlers, json_body, parse_body
from vgrid_runtime.outcomes import PENDING, Outcome
from .node_client import NodeAgentClient, NodeAgentError
from .placement import PLACEMENTS, NodeLoad
from .voc.live import VOCScheduling

__all__ = ["CEAgent", "CEAgentConfig", "create_app"]

log = logging.getLogger(__name__)


class CEAgent(CEPublishing):
    """The CE agent's logic (no HTTP)."""

    def __init__(self, config: CEAgentConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or WallClock()
        self.place = PLACEMENTS[config.placement]
        self.nodes = [u.rstrip("/") for u in config.nodes]
        self.jobs: dict[str, CEJob] = {}
        self.url: str | None = config.public_url
        tls = config.tls_files()
        self._tmp_state = None if config.state_dir or config.db_url else tempfile.mkdtemp(prefix="vgrid-ce-")
        self.state_dir = Path(config.state_dir or self._tmp_state or ".")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.db = open_engine(config.db_url or sqlite_url(self.state_dir / "ce.db"))
        self.store = CEStore(self.db)
        self.outbox = open_outbox(config, tls, self.db)
        self.http = new_session(tls)    # shared by its NodeAgentClients and the lease engine
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.ready = threading.Event()  # set once the restart's recovery is over
        self.beats = CEHeartbeats(self)
        self.unverified: dict[str, tuple[str, float]] = {}   # ce_recovery: adopted, node silent then
        for job in self.store.load(lambda r: parse_job_jdl(r.jdl, r.filename)):
            self.jobs[job.request.key] = job
        self.leases = (LeaseScheduling(config, self.clock, self.nodes, self.http, self._lease_started)
                       if config.scheduler == "leases" else None)
        self.voc = VOCScheduling(self) if config.scheduler == "voc" else None
        self._tick_error: str | None = None
        loop = self._lease_loop if self.leases else self._place_loop
        self._placer = threading.Thread(target=loop, name="ce-placer", daemon=True)
        self._placer.start()

    # -- accepting and placing -------------------------------------------------------------------

    def submit(self, req: JobRequest) -> tuple[CEJob, bool]:
        """Accept a job (idempotent on key); returns (job, created). Placement is asynchronous."""
        with self._lock:
            if req.key in self.jobs:
                return self.jobs[req.key], False
        desc = parse_job_jdl(req.jdl, req.filename)
        lease_req = self.leases.lease_request(desc) if self.leases else None
        with self._lock:
            if req.key in self.jobs:
                return self.jobs[req.key], False
            job = CEJob(req, desc, CEJobState.SCHEDULED, lease_req=lease_req, accepted=self.clock.now())
            self.jobs[req.key] = job
            self._save(job)             # before the 202
        self._wake.set()
        return job, True

    def loads(self) -> list[NodeLoad]:
        """The CE's node agents with the number of its jobs active on each."""
        with self._lock:
            counts = {u: 0 for u in self.nodes}
            for j in self.jobs.values():
                if j.node_url in counts and j.state not in ENDED:
                    counts[j.node_url] += 1
            return [NodeLoad(u, i, counts[u]) for i, u in enumerate(self.nodes)]

    def _save(self, job: CEJob) -> None:
        """Write the job's row (call under ``_lock``, after every change)."""
        self.store.save(job)

    def _lease_started(self, key: str, attempt: int, node_url: str | None) -> None:
        """The lease engine is about to POST the VWN of start ``attempt`` of job ``key``."""
        with self._lock:
            job = self.jobs.get(key)
            if job is not None:
                job.lease_attempts, job.lease_node = attempt, node_url
                self._save(job)

    def _recover(self) -> None:
        try:
            recover(self)
        except Exception:       # the agent must serve anyway; what is left is logged
            log.exception("recovery after restart")
        finally:
            self.ready.set()
            self.beats.start()
            if self.voc:
                self.voc.start()

    def _verify(self) -> None:
        """Resolve the jobs adopted while their node agent did not answer, once it is heard
        again (``ce_recovery.verify_unverified``)."""
        if not self.unverified:
            return
        try:
            verify_unverified(self)
        except Exception:       # the loop must go on; the jobs stay unverified and are retried
            log.exception("verifying the jobs adopted after the restart")

    def _place_loop(self) -> None:
        self._recover()
        while not self._stop.is_set():
            self._wake.wait(self.config.retry_s)
            self._wake.clear()
            self._verify()
            with self._lock:
                pending = [j for j in self.jobs.values() if j.state is CEJobState.SCHEDULED and not j.vwn]
            for job in pending:
                if self._stop.is_set():
                    return
                self._place(job)

    # -- scheduler = leases -------------------------------------------------------------------------

    def _lease_loop(self) -> None:
        """Submit new jobs' leases, tick the engine, end the jobs whose leases ended without a
        node event (rejected, wall-clock limit, preempted). Never holds the CE lock while
        calling the engine or a node agent."""
        self._recover()
        while not self._stop.is_set():
            self._wake.wait(self.config.lease_tick_s)
            self._wake.clear()
            self._verify()
            with self._lock:
                new = [j for j in self.jobs.values() if j.state is CEJobState.SCHEDULED and not j.in_engine]
                if self.leases.engine is None:
                    for job in new:
                        job.note(Outcome.NOT_STARTED, "not started yet: the CE has no node agents")
                    continue
            for job in new:
                self._submit_lease(job)
            try:
                self.leases.engine.tick()
                self._tick_error = None
            except Exception as exc:  # a node agent is down: the engine retries on the next tick
                error = f"{type(exc).__name__}: {exc}"
                if error != self._tick_error:
                    log.warning("lease engine: %s (retried every %g s)", error, self.config.lease_tick_s)
                self._tick_error = error
            with self._lock:
                active = [j for j in self.jobs.values() if j.in_engine and j.state not in ENDED]
            for job in active:
                ce_reconcile.reconcile(self, job)

    def _submit_lease(self, job: CEJob) -> None:
        key = job.request.key
        try:
            self.leases.submit(key, self._vwn_body(job), job.lease_req, job.lease_attempts)
        except NodeAgentError as exc:   # the lease stays due; _reconcile gives the reason
            self._tick_error = f"{type(exc).__name__}: {exc}"
        known = self.leases.known(key)
        with self._lock:
            job.in_engine = known
            cancelled = job.state is CEJobState.CANCELLED
        if known and cancelled:
            self._cancel_lease(key)

    def _cancel_lease(self, key: str) -> None:
        try:
            self.leases.engine.cancel(key)
        except NodeAgentError as exc:
            log.warning("cancel of the lease of %s: %s", key, exc)

    # -- scheduler = fair-share ---------------------------------------------------------------------

    def _vwn_body(self, job: CEJob) -> dict:
        d, r = job.desc, job.request
        base = self.url or ""
        return {"job_id": r.job_id, "key": r.key, "executable": d.executable,
                "arguments": d.arguments or "", "environment": d.environment,
                "std_input": d.std_input, "std_output": d.std_output, "std_error": d.std_error,
                "input_sandbox": r.input_sandbox, "output_sandbox": d.output_sandbox,
                "output_upload_url": r.output_upload_url,
                "callback_url": f"{base}/node-events" if base else None,
                "heartbeat_url": f"{base}/node-heartbeats" if base else None,
                "owner": r.owner, "memory_mb": _memory_mb(d)}

    def _place(self, job: CEJob) -> bool:
        """Create the job's VWN on the best reachable node; False when none took it."""
        errors = []
        for node in self.voc.candidates(job) if self.voc else self.place(self.loads()):
            with self._lock:
                if job.state is not CEJobState.SCHEDULED or job.vwn:
                    return True
            try:
                body = self._vwn_body(job) | (self.voc.vwn_fields(job) if self.voc else {})
                info = NodeAgentClient(node.url, self.http, self.config.node_timeout_s).create_vwn(body)
            except NodeAgentError as exc:   # no answer: the error's class name; else HTTP <status> <text>
                errors.append(f"{node.url}: {exc.brief()}")
                if self.voc:
                    self.voc.failed(job, node.url, exc)
                continue
            with self._lock:
                job.node_url, job.vwn = node.url, info["vwn"]
                job.capped, job.cap_reason = info.get("capped"), info.get("cap_reason")
                cancelled = job.state is CEJobState.CANCELLED
                self._save(job)
            if cancelled:
                self._delete_vwn(job)
            return True
        if self.voc and not errors:
            return self.voc.waits(job)
        with self._lock:
            job.note(Outcome.NOT_PLACED, "not placed yet: " + ("; ".join(errors) or "the CE has no node agents"))
        log.warning("%s: %s", job.request.key, job.reason)
        return False

    # -- events ----------------------------------------------------------------------------------

    def node_event(self, event: dict) -> CEJob:
        """Apply a VWN event from a node agent and forward it to the broker."""
        key, kind = event.get("key"), event.get("event")
        if kind not in ("running", "caps", "done", "aborted", "suspended", "resumed"):
            raise ApiError(400, f"field 'event': unknown event {kind!r}", field="event")
        owner = self.leases.job_of(str(key)) if self.leases else None
        if owner is not None:           # a lease VWN: <key>, or <key>-r2 ... after a restart
            key, current = owner
            if not current:             # the VWN of an earlier start attempt: nothing to apply
                return self.get(key)
        ran = self.leases.ran_s(key) if self.leases and kind == "suspended" else None   # for a restart
        with self._lock:
            job = self.jobs.get(key)
            if job is None:
                raise ApiError(404, f"no job {key!r} at CE {self.config.ce_id}", key=key)
            moved = event.get("migrated_from") is not None and event.get("migrated_from") == job.vwn
            if job.vwn is not None and event.get("vwn") not in (None, job.vwn) and not moved:
                raise ApiError(409, f"job {key} runs in {job.vwn}, not {event.get('vwn')}", key=key)
            job.vwn = event.get("vwn") if moved else job.vwn or event.get("vwn")   # ce_migration
            job.node = event.get("node") or job.node
            for name in ("cpu_caps", "capped", "cap_reason"):
                if name in event:
                    setattr(job, name, event[name])
            self.beats.heard_job(job)
            if job.state in ENDED:
                self._save(job)
                return job                      # e.g. a late event of a cancelled job
            if kind in EVENT_STATE and EVENT_STATE[kind] is not job.state:   # a repeat changes nothing
                job.to(EVENT_STATE[kind])
            if kind in ("suspended", "resumed"):
                job.lease_ran_s = ran
            if kind == "running" and job.outcome in PENDING:
                job.note(None, None)            # it runs now: the earlier delay no longer applies
            if kind == "done":
                job.exit_code = event.get("exit_code")
                job.outcome = Outcome.parse(event.get("outcome")) or Outcome.EXIT
            if kind == "aborted":
                job.note(Outcome.parse(event.get("outcome")), event.get("reason"))
            self._save(job)
            self._forward(job, kind, event.get("time"))
        if self.voc and kind in ("done", "aborted"):
            self.voc.release(key)
        if self.leases and self.leases.engine and kind in ("done", "aborted"):
            try:
                self.leases.engine.job_event(event)     # the lease ends early: its slot frees
            except NodeAgentError as exc:    # starting a queued lease failed: retried
                log.warning("lease engine after %s of %s: %s", kind, key, exc)
        if self.leases and self.leases.engine and kind == "running" and job.vwn:
            self.leases.engine.note_vwn(key, job.vwn)
        return job

    def _forward(self, job: CEJob, kind: str, t: float | None) -> None:
        r = job.request
        if not r.callback_url:
            return
        event = {"job_id": r.job_id, "key": r.key, "ce": self.config.ce_id, "node": job.node,
                 "node_url": job.node_url,
                 "vwn": job.vwn, "event": kind, "exit_code": job.exit_code, "reason": job.reason,
                 "outcome": job.outcome.value if job.outcome else None,
                 "cpu_caps": job.cpu_caps, "capped": job.capped, "cap_reason": job.cap_reason,
                 "time": t if t is not None else self.clock.now()}
        self.outbox.post(r.callback_url, event, order_key=r.key)

    # -- cancel, state, shutdown -----------------------------------------------------------------

    def get(self, key: str) -> CEJob:
        with self._lock:
            if key not in self.jobs:
                raise ApiError(404, f"no job {key!r} at CE {self.config.ce_id}", key=key)
            return self.jobs[key]

    def cancel(self, key: str, reason: str = "cancelled") -> CEJob:
        """Kill the job's VWN (if placed); no event. 409 when the job has already ended."""
        job = self.get(key)
        with self._lock:
            if job.state in ENDED:
                raise ApiError(409, f"job {key} is already {job.state.value}", key=key, state=job.state.value)
            job.to(CEJobState.CANCELLED)
            job.note(Outcome.CANCELLED, reason)
            self._save(job)
            placed = job.vwn is not None
            in_engine = job.in_engine
        if in_engine:
            self._cancel_lease(key)     # queued: leaves the queue; running: its VWN is deleted
        elif placed and not self.leases:
            self._delete_vwn(job)
        if self.voc:
            self.voc.release(key)
        return job

    def _delete_vwn(self, job: CEJob) -> None:
        try:
            NodeAgentClient(job.node_url, self.http, self.config.node_timeout_s).delete_vwn(job.vwn)
        except NodeAgentError as exc:
            log.warning("cancel of %s on %s failed: %s", job.vwn, job.node_url, exc)

    def shutdown(self, flush_s: float = 3.0) -> None:
        """Stop placing, deliver pending events (one non-retrying attempt each within
        ``flush_s``: a broker already stopped is not waited for; the rest stays in ``ce.db``)."""
        self._stop.set()
        self._wake.set()
        self._placer.join(timeout=self.config.node_timeout_s + 1)
        if self.voc:
            self.voc.stop()
        self.beats.stop()
        left = self.outbox.drain(flush_s)
        self.outbox.close(2.0)
        log.info("CE %s stop: %s", self.config.ce_id,
                 f"{left} event(s) kept for the next start" if left else "every event delivered")
        if self.leases is not None:
            self.leases.close()
        self.http.close()
        self.store.close()
        if self._tmp_state:
            shutil.rmtree(self._tmp_state, ignore_errors=True)


def _memory_mb(desc) -> int | None:
    """The job's stated memory requirement (JDL ``VMMemory``, MB), None when it states none."""
    value = desc.get("VMMemory")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def create_app(config: CEAgentConfig, clock: Clock | None = None) -> Flask:
    """The CE agent's Flask app (HTTP contract: docs/architecture.md, "CE agent").

    ``app.config["VGRID_AGENT"]`` is the ``CEAgent``; ``VGRID_ON_STOP`` its shutdown; the agent's
    own URL (node callbacks, GlueCEInfoContactString) is ``config.public_url`` or the URL
    ``wsgi.serve`` binds (``VGRID_ON_BOUND``).
    """
    agent = CEAgent(config, clock or WallClock())
    app = Flask(f"vgrid-ce-{config.queue}")
    app.config["VGRID_AGENT"] = agent
    app.config["VGRID_ON_STOP"] = agent.shutdown
    if not config.public_url:
        app.config["VGRID_ON_BOUND"] = lambda url: setattr(agent, "url", url)
    install_error_handlers(app, max_body_bytes=int(config.max_body_mb * 1_000_000))
    install_authentication(app, config.tls_files(), agent.clock)
    me = caller

    def from_broker(what: str) -> None:       # jobs are the brokers' business only
        authorize(me().is_one_of(config.broker_dns), what)

    @app.post("/jobs")
    def post_job():
        from_broker("submit jobs")
        job, _ = agent.submit(parse_body(JobRequest, "POST /jobs"))
        return jsonify({"state": job.state.value, "key": job.request.key}), 202

    ce_bulk.install(app, agent, from_broker)    # POST /jobs/bulk: a matcher pass's jobs at once
    ce_site.install(app, agent, from_broker)    # GET /site: nodes, VWNs, slot table (dashboard)

    @app.get("/jobs")
    def list_jobs():
        from_broker("list jobs")
        return jsonify(agent.records())

    @app.get("/jobs/<key>")
    def get_job(key):
        from_broker(f"read job {key}")
        return jsonify(agent.record(agent.get(key)))

    @app.post("/jobs/<key>/cancel")
    def cancel_job(key):
        from_broker(f"cancel job {key}")
        return jsonify(agent.record(agent.cancel(key)))

    def recovered() -> None:     # node agents' outboxes retry a 503 until the restart's recovery is over
        if not agent.ready.wait(agent.config.node_timeout_s):
            raise ApiError(503, "the CE agent is resynchronising after a restart; retry")

    @app.post("/node-events")
    def node_events():
        authorize(any(me().serves(u) for u in agent.nodes), "post node events (not a node agent of this CE)")
        recovered()
        return jsonify(agent.record(agent.node_event(json_body())))

    @app.post("/node-heartbeats")
    def node_heartbeats():
        """Contract 4: the caller serves the ``node`` URL, one of this CE's nodes (plain HTTP:
        a loopback caller); answers ``{"unknown": [VWN ids]}``."""
        body = json_body()
        node = str(body.get("node") or "").rstrip("/")
        authorize(lambda: me().serves(node) and node in agent.nodes,
                  f"post node heartbeats for {node or 'no node'} (not a node agent of this CE)")
        if not me().authenticated and not loopback(request.remote_addr):
            raise ApiError(403, "plain-HTTP node heartbeats are accepted from loopback only")
        recovered()
        return jsonify(agent.beats.node_heartbeat(body))

    @app.get("/glue")
    def glue():
        from infosys.gip import render_glue13
        return Response(render_glue13(agent.ce_state()), mimetype="text/plain")

    @app.get("/glue2")
    def glue2():
        """The CE's GLUE 2.0 LDIF (ComputingService/Endpoint/Share, times in seconds)."""
        from infosys.gip import render_glue2
        return Response(render_glue2(agent.ce_state()), mimetype="text/plain")

    @app.get("/status")
    def status():
        return jsonify(agent.status())

    install_ce_metrics(app, agent)                   # GET /metrics (ce_metrics)
    install_openapi(app, CE_SPEC)                    # GET /openapi.json, body models (api_models)

    return app
