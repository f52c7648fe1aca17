"""The gateway's HTTP API (a Flask blueprint on the broker's app), docs/architecture.md
"Federation".

Peers only (the caller's host certificate serves a configured peer's URL and has its DN):

* ``GET /federation/glue``: the aggregate CE published to that peer (:mod:`.glue`);
* ``POST /federation/delegations``: a delegation request ``{"id","csr"}`` for a forward;
* ``POST /federation/jobs``: a forwarded job (the CE agent's dispatch body plus ``origin``,
  ``gateways``, ``hops``, ``delegation_id``, ``proxy``) -> 202 ``{"key","state","id"}``;
* ``GET /federation/jobs/<origin dispatch key>``, ``POST .../cancel``: as a CE agent answers.

Users (a proxy): ``POST /delegations`` -> ``{"id","csr"}``, ``PUT /delegations/<id>``
``{"proxy": PEM chain}`` -> 201 ``{"dn","vo","not_after"}``: the proxy this broker signs
forwarded jobs' proxies from.

A received job becomes an *external* request here (seed 002 Section 2.1, p(L) = 1): its JDL gets
``RequestOrigin = "external"`` (the CE agent's lease engine makes it an external lease,
preemptible by local requests under the seed 002 policies), ``VgridGateways`` and
``VgridHops``; it belongs to the user of the delegated proxy. Every URL of the body (callback,
heartbeat, output upload, input sandbox) must be under the forwarding peer's URL: the gateway
talks back to the origin only. Refusals (JSON ``error.reason``): 400 ``bad-request`` (a field,
named), 403 ``forbidden`` (not a peer), ``no-delegation`` (no or an invalid delegated proxy), ``vo``
(a VO not accepted from that peer); 409 ``loop`` (this gateway already passed) or ``hops``
(more than ``federation_max_hops``); 429 ``share`` (the peer's share of CPUs is in use);
502 ``sandbox`` (the origin's input sandbox could not be fetched).
"""
from __future__ import annotations

import os
import tempfile

from flask import Blueprint, jsonify, request

import jdl as jdlmod
from vgrid_runtime.authn import Caller, authorize, caller
from vgrid_runtime.pki import CredentialError
from vgrid_runtime.httpclient import ServiceError
from vgrid_runtime.openapi import BodyError, validate_body
from vwn_agents.sandbox import SandboxClient, SandboxError

from ..api_models import ForwardedJob
from ..transfers import BrokerError, safe_name
from .delegations import UnknownDelegation
from .glue import render
from .received import Received

#: gLite job state at the peer -> the CE agent job state reported to the origin.
CE_STATE = {"Submitted": "Scheduled", "Waiting": "Scheduled", "Ready": "Scheduled",
            "Scheduled": "Scheduled", "Running": "Running", "Stalled": "Running", "Done": "Done",
            "Aborted": "Aborted", "Cancelled": "Cancelled", "Cleared": "Done"}


def refuse(status: int, message: str, reason: str, **details):
    return jsonify({"error": {"message": message, "reason": reason, **details}}), status


def external_jdl(desc, gateways: list[str], hops: int) -> str:
    """The JDL text of a received job: ``RequestOrigin = "external"``, ``VgridGateways``,
    ``VgridHops``, and ``RetryCount = 0; ShallowRetryCount = 0``: the origin's resubmission
    rules apply, not the peer's -- a failure here (a local request preempted it, its node was
    lost) is reported to the origin, which resubmits or ends it (later definitions replace
    earlier ones: ClassAd semantics)."""
    text = jdlmod.to_jdl(desc).rstrip()
    assert text.endswith("]")
    gw = ", ".join('"' + g.replace("\\", "\\\\").replace('"', '\\"') + '"' for g in gateways)
    extra = (f'  RequestOrigin = "external";\n  VgridGateways = {{ {gw} }};\n  VgridHops = {int(hops)};\n'
             '  RetryCount = 0;\n  ShallowRetryCount = 0;\n')
    return text[:-1] + extra + "]\n"


def ce_record(broker, rec: Received) -> dict:
    """The CE-agent-shaped record of a received job (``GET /federation/jobs/<key>``)."""
    job = broker.get(rec.key)
    return {"key": rec.origin_key, "job_id": rec.origin_id, "state": CE_STATE[job.state.value],
            "node": job.node, "node_url": None, "vwn": job.vwn, "cpu_caps": [c[1] for c in job.cpu_caps],
            "capped": job.cpu_capped, "cap_reason": job.cap_reason, "exit_code": job.exit_code,
            "reason": job.reason, "outcome": job.outcome.value if job.outcome else None,
            "lease": None, "peer_id": broker.job_id(job.key), "peer_ce": job.ce_id}


def blueprint(fed) -> Blueprint:
    """The routes of the module doc for federation ``fed``."""
    bp = Blueprint("federation", __name__)
    broker = fed.broker

    def peer_or_403(body: dict | None = None):
        peer = fed.peers.calling(caller())
        if peer is None and caller().identity is None and isinstance(body, dict):
            peer = next((p for p in fed.peers.list if p.base == str(body.get("origin", "")).rstrip("/")), None)
        authorize(peer is not None, "use the federation gateway (not a configured peer)")
        if peer is None:   # plain-HTTP mode: the origin must be named
            raise BrokerError("plain-HTTP mode: 'origin' must name a configured peer", status=403, field="origin")
        return peer

    @bp.get("/federation/glue")
    def glue():
        peer = peer_or_403()
        text = render(broker.ism.snapshot().ads, fed.peers, peer, broker.settings.base_url,
                      fed.received.used_cpus(peer.name))
        return text, 200, {"Content-Type": "text/plain; charset=utf-8"}

    @bp.post("/federation/delegations")
    def peer_delegation():
        peer = peer_or_403(request.get_json(silent=True))
        did, csr = fed.delegations.request(f"peer:{peer.name}")
        return jsonify({"id": did, "csr": csr.decode()}), 201

    @bp.post("/federation/jobs")
    def receive():
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return refuse(400, "a forwarded job must be a JSON object", "bad-request")
        peer = peer_or_403(body)
        for name in ("job_id", "key", "jdl", "callback_url"):
            if not isinstance(body.get(name), str) or not body[name]:
                return refuse(400, f"field {name!r} must be a non-empty string", "bad-request", field=name)
        items = body.get("input_sandbox") or []
        if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("url"), str)
                                                  and isinstance(i.get("name"), str) for i in items):
            return refuse(400, "field 'input_sandbox' must be a list of {name, url}", "bad-request",
                          field="input_sandbox")
        # the gateway talks back only to the origin: every URL of the job must be the peer's
        urls = {"callback_url": body["callback_url"], "heartbeat_url": body.get("heartbeat_url"),
                "output_upload_url": body.get("output_upload_url"),
                **{f"input_sandbox[{i}]": it["url"] for i, it in enumerate(items)}}
        for name, url in urls.items():
            if url is not None and not (isinstance(url, str) and url.startswith(peer.base + "/")):
                return refuse(400, f"field {name!r} must be a URL of peer {peer.name} ({peer.base}/...)",
                              "bad-request", field=name)
        gateways, hops = body.get("gateways") or [], body.get("hops", 1)
        if not isinstance(gateways, list) or not isinstance(hops, int) or isinstance(hops, bool):
            return refuse(400, "fields 'gateways' (list) and 'hops' (integer) are required", "bad-request",
                          field="gateways")
        try:                                 # the rest of the body's types (broker.api_models)
            validate_body(ForwardedJob, body, "POST /federation/jobs")
        except BodyError as exc:
            return refuse(400, str(exc), "bad-request", field=exc.field)
        done = fed.received.by_origin(peer.name, body["key"])
        if done is not None:
            return jsonify({"key": done.origin_key, "state": CE_STATE[broker.get(done.key).state.value],
                            "id": broker.job_id(done.key)}), 200
        own = broker.settings.base_url.rstrip("/")
        if own in [str(g).rstrip("/") for g in gateways]:
            return refuse(409, f"loop: job {body['job_id']} already passed gateway {own} "
                          f"(gateways: {', '.join(map(str, gateways))})", "loop")
        if hops > fed.max_hops:
            return refuse(409, f"job {body['job_id']} was forwarded {hops} times, more than "
                          f"federation_max_hops = {fed.max_hops}", "hops")
        who, cred = Caller(None), None
        if fed.tls is not None:
            if not body.get("delegation_id") or not isinstance(body.get("proxy"), str):
                return refuse(403, "a forwarded job needs a delegated proxy of its owner", "no-delegation")
            try:
                cred, ident = fed.delegations.complete(
                    str(body["delegation_id"]), f"peer:{peer.name}", body["proxy"].encode(),
                    fed.tls.trusted_cas(), broker.clock.now(), fed.vomsdir)
            except (UnknownDelegation, CredentialError) as exc:
                return refuse(403, f"delegated proxy refused: {exc}", "no-delegation")
            who = Caller(ident)
            vo = ident.vo
        else:
            vo = (body.get("owner") or {}).get("vo")
        if not peer.accepts(vo) and (vo is not None or fed.tls is not None):
            return refuse(403, f"jobs of VO {vo!r} are not accepted from peer {peer.name}", "vo")
        desc = jdlmod.parse_jdl(body["jdl"], body.get("filename") or "forwarded.jdl", local_files=False)
        cpus = int(desc.get("CpuNumber") or 1)
        used = fed.received.used_cpus(peer.name)
        if used + cpus > peer.share_cpus:
            return refuse(429, f"peer {peer.name}'s share of {peer.share_cpus} CPUs is in use "
                          f"({used} held, {cpus} asked)", "share")
        try:
            files = fetch_inputs(fed, items)
        except (ServiceError, SandboxError) as exc:
            brief = exc.brief() if isinstance(exc, ServiceError) else str(exc)
            return refuse(502, f"input sandbox not fetched from the origin: {brief}", "sandbox")
        text = external_jdl(desc, [str(g) for g in gateways], hops)
        job, _ = broker.submit_once(text, body.get("filename") or "forwarded.jdl", files, who,
                                    idempotency_key=f"fed-{peer.name}-{body['key']}"[:128])
        if cred is not None:
            fed.delegations.save_job(job.key, cred)
        now = broker.clock.now()
        fed.received.add(Received(job.key, peer.name, body["key"], body["job_id"], body["callback_url"],
                                  body.get("heartbeat_url"), body.get("output_upload_url"),
                                  [str(g) for g in gateways], hops, cpus, "Scheduled", now))
        broker.store.note(job.key, now, f"received through gateway {own} from peer {peer.name} "
                          f"({peer.base}) for job {body['job_id']}; gateways passed: "
                          f"{', '.join(map(str, gateways))}")
        return jsonify({"key": body["key"], "state": "Scheduled", "id": broker.job_id(job.key)}), 202

    def received_of(key: str):
        peer = peer_or_403()
        rec = fed.received.by_origin(peer.name, key)
        if rec is None:
            raise BrokerError(f"unknown forwarded job {key} of peer {peer.name}", status=404)
        return rec

    @bp.get("/federation/jobs/<key>")
    def forwarded(key: str):
        return jsonify(ce_record(broker, received_of(key)))

    @bp.post("/federation/jobs/<key>/cancel")
    def cancel(key: str):
        rec = received_of(key)
        fed.received.set_relayed(rec.key, "Cancelled")   # the origin knows: nothing to report
        broker.cancel(rec.key)
        return jsonify(ce_record(broker, rec))

    @bp.post("/delegations")
    def user_delegation():
        who = caller()
        authorize(who.identity is not None and who.identity.proxy_depth > 0,
                  "delegate without a proxy")
        if who.identity is None:
            raise BrokerError("delegation needs mutual TLS", status=400)
        did, csr = fed.delegations.request(who.dn)
        return jsonify({"id": did, "csr": csr.decode()}), 201

    @bp.put("/delegations/<did>")
    def user_delegation_done(did: str):
        who = caller()
        body = request.get_json(silent=True)
        if who.identity is None:
            raise BrokerError("delegation needs mutual TLS", status=400)
        if not isinstance(body, dict) or not isinstance(body.get("proxy"), str):
            return refuse(400, "field 'proxy' (PEM chain) is required", "bad-request", field="proxy")
        try:
            cred, ident = fed.delegations.complete(did, who.dn, body["proxy"].encode(), fed.tls.trusted_cas(),
                                                   broker.clock.now(), fed.vomsdir)
        except UnknownDelegation:
            raise BrokerError(f"no delegation request {did} of {who.dn}", status=404) from None
        except CredentialError as exc:
            return refuse(403, f"delegated proxy refused: {exc}", "no-delegation")
        if ident.dn != who.dn or ident.limited:
            return refuse(403, f"a delegated proxy of {ident.dn} (limited: {ident.limited}) "
                          f"cannot be {who.dn}'s", "no-delegation")
        fed.delegations.save_user(who.dn, cred)
        return jsonify({"dn": ident.dn, "vo": ident.vo, "not_after": ident.not_after}), 201

    return bp


def fetch_inputs(fed, items: list[dict]) -> dict[str, bytes]:
    """The input sandbox files of a forwarded job, fetched from the origin's capability URLs
    (:class:`vwn_agents.sandbox.SandboxClient` on the broker's mutual-TLS session)."""
    client = SandboxClient(session=fed.broker.http, timeout_s=fed.timeout_s)
    out = {}
    for item in items:
        fd, path = tempfile.mkstemp(prefix="vgrid-fed-")
        try:
            client.download(item["url"], fd, fed.max_input_bytes)
            os.lseek(fd, 0, 0)
            with os.fdopen(fd, "rb", closefd=False) as f:
                out[safe_name(item["name"])] = f.read()
        finally:
            os.close(fd)
            os.unlink(path)
    return out

