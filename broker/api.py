"""The broker's HTTP API (WMProxy-like), a thin Flask adapter over :class:`broker.service.Broker`.

Contract: docs/architecture.md, "broker". Errors are JSON ``{"error": {"message", ...}}``; a JDL
syntax error answers 400 with ``file``, ``line`` and ``column``; nothing is stored.
"""
from __future__ import annotations

import logging
from typing import Any

from flask import Flask, jsonify, request, send_file
from werkzeug.exceptions import HTTPException

import jdl as jdlmod

from vgrid_runtime.authn import authorize, caller, install_authentication, refusal
from vgrid_runtime.httpjson import install_safe_json, limit_bodies
from vgrid_runtime.openapi import BodyError, check_route_body, install_openapi
from vgrid_runtime.storage import install_storage_errors
from vgrid_runtime.tls import TLSFiles

from . import authz, heartbeats, idempotency, listing, resubmission
from .api_models import SPEC
from .db import Job, StaleState, UnknownJob
from .records import RecordCache
from .transfers import BrokerError
from .service import Broker
from vgrid_runtime.job_states import IllegalTransition

log = logging.getLogger("vgrid.broker.api")


def job_json(broker: Broker, job: Job) -> dict[str, Any]:
    """The public record of a job (shape in docs/architecture.md)."""
    return {"id": broker.job_id(job.key), "key": job.key, "state": job.state.value,
            "ce": job.ce_id, "node": job.node, "vwn": job.vwn,
            "cpu_caps": [c[1] for c in job.cpu_caps], "cpu_caps_t": [c[0] for c in job.cpu_caps],
            "cpu_capped": job.cpu_capped, "cap_reason": job.cap_reason,
            "vwn_ended_at": job.vwn_ended_at,
            "exit_code": job.exit_code, "reason": job.reason,
            "outcome": job.outcome.value if job.outcome else None, "stdout_head": job.stdout_head,
            "submitted_at": job.submitted_at, "filename": job.filename,
            "kind": job.kind, "parent": broker.job_id(job.parent_key) if job.parent_key else None,
            "node_name": job.node_name,
            "depends_on": [broker.job_id(k) for k in job.depends_on],
            "owner": {"dn": job.owner_dn, "vo": job.owner_vo, "fqans": job.owner_fqans}
            if job.owner_dn else None,
            "attempt": job.attempt, "dispatch_key": job.dispatch_key,
            "deep_resubmissions": job.deep_count, "shallow_resubmissions": job.shallow_count,
            "failed_ces": job.failed_ces, "last_heard": job.last_heard,
            "stalled_from": job.stalled_from, "last_failure": job.last_failure,
            "history": job.history}


def jdl_error_json(exc: jdlmod.JDLError) -> dict[str, Any]:
    problems = getattr(exc, "problems", None)
    if problems:
        first = problems[0]
        return {"message": str(exc), "file": getattr(first, "filename", None),
                "line": getattr(first, "line", None), "column": getattr(first, "column", None),
                "problems": [{"file": getattr(p, "filename", None), "line": getattr(p, "line", None),
                              "column": getattr(p, "column", None),
                              "message": getattr(p, "message", str(p))} for p in problems]}
    return {"message": str(exc), "file": getattr(exc, "filename", None),
            "line": getattr(exc, "line", None), "column": getattr(exc, "column", None)}


def create_app(broker: Broker, tls: TLSFiles | None = None, admins: list[str] = (),
               records_size: int = 10_000) -> Flask:
    """The WMProxy-like Flask app over ``broker`` (routes and shapes: docs/architecture.md).

    ``tls``: the broker's credential and trust; every request then needs a client certificate
    (:mod:`vgrid_runtime.authn`) and the rules of :mod:`broker.authz` apply (``admins``: DNs
    that see every job); ``records_size``: job records kept rendered for status reads
    (:mod:`broker.records`). Errors answer JSON ``{"error": {"message", ...}}``: 400 for a JDL
    error (with file, line, column) or bad request, 401/403 for a caller without a valid
    certificate or not allowed, 404 for an unknown job (``GET /jobs/<key>``: also for
    another user's job), 409 for an illegal state change or an
    output file written twice or an ``Idempotency-Key`` reused for another JDL, 507 when the state
    directory or database is full (nothing of the request stored), 503 when the database cannot
    be written or another broker process changed the job first (``reason: retry``),
    500 (no traceback) for anything unexpected (:mod:`vgrid_runtime.storage`).
    """
    app = Flask("vgrid.broker")
    app.config["VGRID_BROKER"] = broker
    install_safe_json(app)
    limit_bodies(app)                            # 413 above the limit, 400 for too deep JSON
    install_authentication(app, tls, broker.clock)
    install_storage_errors(app, "broker", broker.sandbox_dir.parent)  # 507 disk full, 503, 500
    install_openapi(app, SPEC)                   # GET /openapi.json; body models (api_models)
    admins = list(admins)

    checked = check_route_body                   # the route's body model (api_models): BodyError -> 400
    def owned(key: str, what: str):
        """The job ``key`` if the caller may see it (owner or admin), else 403."""
        job = broker.get(key)
        authorize(authz.may_see(caller(), job, admins), f"{what} job {key} (not theirs)")
        return job

    def error(message: str, status: int, **details: Any):
        return jsonify({"error": {"message": message, **details}}), status

    @app.errorhandler(jdlmod.JDLError)
    def _jdl_error(exc):
        return jsonify({"error": jdl_error_json(exc)}), 400

    @app.errorhandler(BrokerError)
    def _broker_error(exc: BrokerError):
        return error(str(exc), exc.status, **exc.details)

    @app.errorhandler(idempotency.IdempotencyError)
    def _idempotency(exc: idempotency.IdempotencyError):
        return error(str(exc), exc.status, **exc.details)

    @app.errorhandler(BodyError)
    def _body_error(exc: BodyError):
        return error(str(exc), 400, field=exc.field)

    @app.errorhandler(UnknownJob)
    def _unknown(exc):
        return error(f"unknown job {exc.args[0]}", 404)

    @app.errorhandler(authz.NotAllowed)
    def _not_allowed(exc):
        return refusal(403, f"{caller().dn} may not {exc}", "forbidden")

    @app.errorhandler(StaleState)
    def _stale(exc):   # another process changed the job first (broker.front_ends): retry
        return error(str(exc), 503, reason="retry")

    @app.errorhandler(IllegalTransition)
    def _illegal(exc):
        return error(str(exc), 409)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        return error(exc.description or exc.name, exc.code or 500)

    @app.errorhandler(Exception)
    def _internal(exc):
        log.exception("internal error")
        return error(f"internal error: {exc.__class__.__name__}", 500)

    @app.post("/jobs")
    def submit():
        text = request.form.get("jdl")
        if text is None:
            body = checked(request.get_json(silent=True)) or {}
            text = body.get("jdl") if isinstance(body, dict) else None
            filename = (body.get("filename") if isinstance(body, dict) else None) or "<submitted>"
        else:
            filename = request.form.get("filename") or "<submitted>"
        if not isinstance(text, str):
            return error("the request has no 'jdl' field", 400, field="jdl")
        files = {f.filename: f.read() for f in request.files.getlist("isb") if f.filename}
        job, created = broker.submit_once(text, filename, files, who=caller(),
                                          idempotency_key=request.headers.get(idempotency.HEADER))
        return (jsonify({"id": broker.job_id(job.key), "key": job.key, "state": job.state.value}),
                201 if created else 200)

    @app.errorhandler(listing.BadQuery)
    def _bad_query(exc: listing.BadQuery):
        return error(str(exc), 400, field=exc.field)

    @app.get("/jobs")
    def list_jobs():
        """One page (broker.listing): ``{"jobs": [...], "next": cursor | null}``."""
        q = listing.parse_query(request.args, broker.key_of)
        owner = authz.listing_filter(caller(), admins, q.owner)
        jobs, last = broker.jobs_page(states=q.states, owner_dn=owner, since=q.since,
                                      keys=q.keys, after=q.after, limit=q.limit)
        return jsonify({"jobs": [job_json(broker, j) for j in jobs],
                        "next": listing.encode_cursor(*last) if last else None})

    records = RecordCache(broker.store, lambda job: app.json.dumps(
        job_json(broker, job), separators=(",", ":")).encode() + b"\n", size=records_size)
    app.config["VGRID_RECORDS"] = records

    @app.get("/jobs/<key>")
    def get_job(key: str):
        """The job record with a strong ETag (a hash of the record): 304 on If-None-Match.
        Rendered once per change of the job (broker.records); another user's job answers the
        404 of an unknown job (its existence is not revealed, nor its tag)."""
        record = records.read(key)
        if not authz.may_see_owned(caller(), record.owner_dn, admins):
            raise UnknownJob(key)
        if record.etag in request.if_none_match:     # RFC 9110 13.1.2 (weak comparison)
            resp = app.response_class(status=304)
        else:
            resp = app.response_class(record.body, mimetype="application/json")
        resp.set_etag(record.etag)
        return resp

    @app.post("/jobs/<key>/cancel")
    def cancel(key: str):
        owned(key, "cancel")
        return jsonify(job_json(broker, broker.cancel(key)))

    @app.post("/jobs/<key>/events")
    def events(key: str):
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return error("event body must be a JSON object", 400)
        def rule() -> bool:   # read the job only when there is a caller to check
            job, who = broker.get(key), caller()
            return authz.may_report(who, job) or (broker.past_attempt(job, body) and authz.is_service(who))

        authorize(rule, f"post events of job {key} (not the CE agent it was dispatched to)")
        checked(body)
        try:
            return jsonify(job_json(broker, broker.handle_event(key, body)))
        except resubmission.PastAttempt as past:   # contract 7: nothing applied
            return jsonify({"ignored": "past attempt", "key": past.key, "current": past.current})

    @app.post("/heartbeats")
    def heartbeats_in():
        """A CE agent's heartbeat (broker.heartbeats); 200 ``{"unknown": [dispatch keys]}``."""
        body = request.get_json(silent=True)
        url = body.get("url") if isinstance(body, dict) else None
        authorize(authz.may_heartbeat(caller(), url if isinstance(url, str) else None),
                  f"post heartbeats for CE agent {url!r} (its certificate does not serve that URL)")
        return jsonify({"unknown": heartbeats.receive(broker, checked(body))})

    @app.get("/jobs/<key>/output")
    def output_list(key: str):
        owned(key, "list the output of")
        return jsonify({"files": broker.output_files(key)})

    @app.get("/jobs/<key>/output/<name>")
    def output_get(key: str, name: str):
        owned(key, "download the output of")
        files = broker.output_files(key)
        if name not in files:
            return error(f"no output file {name!r} for job {key}", 404)
        return send_file(broker.output_dir(key) / name, as_attachment=True, download_name=name)

    @app.put("/jobs/<key>/output/<name>")
    def output_put(key: str, name: str):
        authorize(lambda: authz.may_transfer(caller(), broker.get(key)),
                  f"upload output of job {key} (not its CE or node agent)")
        broker.store_output(key, name, request.get_data())
        return jsonify({"stored": name}), 201

    def by_capability(key: str, token: str, what: str):
        """Sandbox transfers through the URLs handed to the CE agent at dispatch: the token
        must match and the caller must be a service (a host certificate), not a user."""
        job = broker.get(key)
        who = caller()
        authorize(broker.valid_token(key, token) and (who.identity is None or bool(who.identity.hosts)),
                  f"{what} job {key} (wrong sandbox capability or not a service)")
        return job

    @app.get("/jobs/<key>/sandbox/<token>/input/<name>")
    def sandbox_input(key: str, token: str, name: str):
        by_capability(key, token, "download the input sandbox of")
        return send_file(broker.input_path(key, name), as_attachment=True, download_name=name)

    @app.put("/jobs/<key>/sandbox/<token>/output/<name>")
    def sandbox_output(key: str, token: str, name: str):
        by_capability(key, token, "upload the output sandbox of")
        broker.store_output(key, name, request.get_data())
        return jsonify({"stored": name}), 201

    @app.post("/jobs/<key>/clear")
    def clear(key: str):
        owned(key, "clear")
        return jsonify(job_json(broker, broker.clear(key)))

    @app.get("/jobs/<key>/input/<name>")
    def input_get(key: str, name: str):
        job = broker.get(key)
        authorize(authz.may_transfer(caller(), job) or authz.may_see(caller(), job, admins),
                  f"download the input sandbox of job {key}")
        return send_file(broker.input_path(key, name), as_attachment=True, download_name=name)

    @app.post("/list-match")
    def list_match():
        body = checked(request.get_json(silent=True)) or {}
        text = body.get("jdl") if isinstance(body, dict) else None
        if not isinstance(text, str):
            return error("the request has no 'jdl' field", 400, field="jdl")
        result = broker.list_match(text, body.get("filename") or "<list-match>")
        return jsonify(result.to_json())

    @app.get("/ism")
    def ism():
        """The ISM as ``vgrid info --json`` shows it (with the blacklist in force), plus the raw
        CE ads and the feedback counters; ``?vo=VO`` keeps the CEs that admit that VO."""
        from infosys.summary import snapshot_summary
        snap = broker.ism.snapshot()
        now = broker.clock.now()
        doc = snapshot_summary(snap, now, request.args.get("vo"),
                               blacklist=broker.ism.blacklist_entries(now))
        doc.update(now=now, taken_at=snap.taken_at, ads=list(snap.ads),
                   dispatched_since_refresh=broker.ism.feedback.snapshot())
        return jsonify(doc)

    @app.get("/health")
    def health():
        return jsonify({"ok": True})

    from .dashboard import install as install_dashboard
    install_dashboard(app, broker, admins)       # GET /dashboard/... (HTML views, issue 17)

    return app
