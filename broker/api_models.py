"""The broker's HTTP API as models (pydantic v2) and routes: ``GET /openapi.json`` and the
validation of its JSON request bodies (:mod:`vgrid_runtime.openapi`; contract:
docs/architecture.md "broker"; rendered in docs/api.md).

Answers are described with ``extra="allow"`` (a new field is not a breaking change); request
bodies name the fields the broker reads, with their types, so a wrong type is a 400 naming the
field before any of it is applied.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vgrid_runtime.openapi import ApiSpec, Op


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Body(BaseModel):
    """A request body: strict types (no "1" for 1, no true for 1), other fields ignored."""

    model_config = ConfigDict(extra="allow", strict=True)


class Owner(_Open):
    """Who a job belongs to (from the submitter's proxy)."""

    dn: str
    vo: str | None = None
    fqans: list[str] = []


class JobRecord(_Open):
    """The public record of a job (``broker.api.job_json``; times in clock seconds)."""

    id: str
    key: str
    state: str = Field(description="gLite state: Submitted, Waiting, Ready, Scheduled, Running, "
                                   "Done, Aborted, Cancelled, Cleared, Stalled")
    ce: str | None
    node: str | None
    vwn: str | None
    cpu_caps: list[float] = Field(description="CPU caps (fraction of a CPU) over time")
    cpu_caps_t: list[float] = Field(description="the clock seconds of each cap")
    cpu_capped: bool | None
    cap_reason: str | None
    vwn_ended_at: float | None
    exit_code: int | None
    reason: str | None
    outcome: str | None = Field(description="typed reason (vgrid_runtime.outcomes.Outcome)")
    stdout_head: str | None
    submitted_at: float
    filename: str | None
    kind: str | None
    parent: str | None
    node_name: str | None
    depends_on: list[str]
    owner: Owner | None
    attempt: int
    dispatch_key: str | None
    deep_resubmissions: int
    shallow_resubmissions: int
    failed_ces: list[str]
    last_heard: float | None
    stalled_from: str | None
    last_failure: str | None
    history: list[dict[str, Any]]


class Submitted(_Open):
    """Answer of POST /jobs: 201 created, 200 an ``Idempotency-Key`` seen before."""

    id: str
    key: str
    state: str


class JobPage(_Open):
    """One page of GET /jobs; ``next``: the cursor of the following page (``?after=``)."""

    jobs: list[JobRecord]
    next: str | None


class SubmitBody(_Body):
    """JSON body of POST /jobs (a multipart form with the same fields, plus ``isb`` files, is
    also accepted)."""

    jdl: str = Field(description="the JDL text")
    filename: str | None = Field(None, description="the JDL file's name (errors name it)")


class ListMatchBody(SubmitBody):
    """Body of POST /list-match."""


class ListMatch(_Open):
    """The CEs a JDL matches, best first (broker.matchmaker ``to_json``)."""

    policy: str
    ces: list[dict[str, Any]]


class Event(_Body):
    """A CE agent's event about a job (contract 2, docs/architecture.md)."""

    event: str = Field(description="running | caps | done | aborted | suspended | resumed")
    key: str | None = Field(None, description="the dispatch key of the attempt it is about")
    node: str | None = None
    vwn: str | None = None
    node_url: str | None = None
    cap_reason: str | None = None
    cpu_caps: list[list[float]] | None = Field(None, description="[[clock s, cap], ...]")
    capped: bool | None = None
    exit_code: int | None = None
    reason: str | None = None
    outcome: str | None = None
    time: float | None = None
    note_id: str | None = Field(None, description="a peer gateway's note (suspended | resumed | requeued): "
                                                  "recorded once per id (broker.federation.notes)")


class EventAnswer(_Open):
    """The job record after the event, or ``{"ignored", "key", "current"}`` for a past attempt."""

    ignored: str | None = None


class HeartbeatJob(_Body):
    key: str
    silent_s: float | None = None


class Heartbeat(_Body):
    """A CE agent's heartbeat (contract 3): who, where, how often (s) and its jobs."""

    ce: str
    url: str
    interval_s: float
    jobs: list[HeartbeatJob] | None = None


class Unknown(_Open):
    """Dispatch keys (or VWN ids) the receiver does not know as running there."""

    unknown: list[str]


class OutputFiles(_Open):
    files: list[str]


class Stored(_Open):
    stored: str


class ISMView(_Open):
    """GET /ism: ``vgrid info --json`` of the broker's ISM (infosys.summary) plus the raw ads."""

    stale: bool = Field(description="a source failed at the last refresh")
    age_s: float = Field(description="s since the oldest data was fetched")
    rejected: list[dict[str, Any]]
    ces: list[dict[str, Any]]
    blacklist: list[dict[str, Any]] | None = None
    now: float
    taken_at: float | None
    ads: list[dict[str, Any]] = Field(description="the CE ads (GLUE attributes)")
    dispatched_since_refresh: dict[str, Any] = Field(description="feedback counters per CE")


class Health(_Open):
    ok: bool


class Delegation(_Open):
    """A delegation request: its id and the certificate request (PEM) to sign."""

    id: str
    csr: str


class DelegatedProxy(_Body):
    proxy: str = Field(description="the signed proxy chain (PEM)")


class ForwardedJob(_Body):
    """Body of POST /federation/jobs (a peer gateway forwarding a job, issue 15)."""

    job_id: str
    key: str
    jdl: str
    callback_url: str
    filename: str | None = None
    input_sandbox: list[dict[str, Any]] = []
    gateways: list[str] = []
    hops: int = 1


_JOB = "the job's owner or an administrator (broker `admins`)"
_SERVICE = "a service (host certificate)"
_QUERY = {"state": ({"type": "string"}, "comma-separated gLite states"),
          "owner": ({"type": "string"}, "a DN (administrators only; others see their own jobs)"),
          "since": ({"type": "number"}, "submitted at or after (clock s)"),
          "ids": ({"type": "string"}, "comma-separated job ids or keys"),
          "after": ({"type": "string"}, "the cursor of the previous page"),
          "limit": ({"type": "integer"}, "page size")}

SPEC = ApiSpec(
    title="vgrid broker (WMProxy-like)",
    description="Submission, status, output and the ISM of the vgrid broker; CE agents post "
                "events and heartbeats; peer gateways forward jobs (docs/architecture.md).",
    ops=[
        Op("POST", "/jobs", "submit a JDL (job, collection, parametric, DAG)",
           "any user with a VOMS proxy of the JDL's VirtualOrganisation", {201: Submitted, 200: Submitted},
           body=SubmitBody, form=True,
           errors={400: "JDL error (file, line, column) or a bad field", 409: "Idempotency-Key reused "
                   "for another JDL", 413: "body too large", 503: "database unavailable",
                   507: "disk or database full"}),
        Op("GET", "/jobs", "list jobs, one page", "any user (their own jobs; administrators: all)",
           {200: JobPage}, errors={400: "a bad query parameter (field named)"}, query=_QUERY),
        Op("GET", "/jobs/{key}", "a job's record (ETag; 304 on If-None-Match)", _JOB, {200: JobRecord, 304: "empty"},
           errors={404: "unknown job"}),
        Op("POST", "/jobs/{key}/cancel", "cancel a job", _JOB, {200: JobRecord},
           errors={404: "unknown job", 409: "the job has ended"}),
        Op("POST", "/jobs/{key}/clear", "clear an ended job's output", _JOB, {200: JobRecord},
           errors={404: "unknown job", 409: "the job has not ended"}),
        Op("POST", "/jobs/{key}/events", "a CE agent's event about the job",
           "the CE agent the job was dispatched to (or a service, for a past attempt)",
           {200: EventAnswer}, body=Event, errors={400: "bad event", 404: "unknown job",
                                                    409: "illegal state change",
                                                    503: "retry: another broker process changed "
                                                         "the job first (front_ends)"}),
        Op("POST", "/heartbeats", "a CE agent's heartbeat", "the CE agent whose URL its certificate serves",
           {200: Unknown}, body=Heartbeat, errors={400: "bad heartbeat (field named)"}),
        Op("GET", "/jobs/{key}/output", "names of the job's output files", _JOB, {200: OutputFiles},
           errors={404: "unknown job"}),
        Op("GET", "/jobs/{key}/output/{name}", "download an output file", _JOB, {200: "binary"},
           errors={404: "unknown job or file"}),
        Op("PUT", "/jobs/{key}/output/{name}", "upload an output file", "the job's CE or node agent",
           {201: Stored}, raw=True, errors={400: "bad name", 404: "unknown job", 409: "written twice"}),
        Op("GET", "/jobs/{key}/sandbox/{token}/input/{name}", "download an input sandbox file "
           "(capability URL)", f"{_SERVICE} holding the job's sandbox token", {200: "binary"},
           errors={404: "unknown job or file"}),
        Op("PUT", "/jobs/{key}/sandbox/{token}/output/{name}", "upload an output sandbox file "
           "(capability URL)", f"{_SERVICE} holding the job's sandbox token", {201: Stored}, raw=True,
           errors={400: "bad name", 404: "unknown job", 409: "written twice"}),
        Op("GET", "/jobs/{key}/input/{name}", "download an input sandbox file",
           "the job's CE or node agent, its owner or an administrator", {200: "binary"},
           errors={404: "unknown job or file"}),
        Op("POST", "/list-match", "the CEs a JDL matches, best first", "any authenticated caller",
           {200: ListMatch}, body=ListMatchBody, errors={400: "JDL error or a bad field"}),
        Op("GET", "/ism", "the information supermarket (vgrid info --json, plus raw ads)",
           "any authenticated caller", {200: ISMView}, query={"vo": ({"type": "string"}, "keep CEs admitting VO")}),
        Op("GET", "/health", "liveness", "any authenticated caller", {200: Health}),
        Op("GET", "/openapi.json", "this document", "any authenticated caller", {200: None}),
        Op("GET", "/metrics", "Prometheus metrics (text format)",
           "monitoring DNs (metrics_dns), administrators, the broker's own host certificate", {200: "text"}),
        # federation gateway (broker.federation.gateway; present when peers are configured)
        Op("GET", "/federation/glue", "the GLUE the gateway publishes to a peer", "a configured peer gateway",
           {200: "text"}),
        Op("POST", "/federation/delegations", "a delegation request for a peer", "a configured peer gateway",
           {201: Delegation}),
        Op("POST", "/federation/jobs", "receive a forwarded job", "a configured peer gateway",
           {202: None, 200: None}, body=ForwardedJob,
           errors={400: "bad field", 409: "loop or too many hops", 429: "the peer's share is in use",
                   502: "input sandbox not fetched"}),
        Op("GET", "/federation/jobs/{key}", "a forwarded job's CE-shaped record", "the peer that forwarded it",
           {200: None}, errors={404: "unknown forwarded job"}),
        Op("POST", "/federation/jobs/{key}/cancel", "cancel a forwarded job", "the peer that forwarded it",
           {200: None}, errors={404: "unknown forwarded job"}),
        Op("POST", "/delegations", "a delegation request for the caller", "a user with a proxy",
           {201: Delegation}, errors={400: "plain-HTTP mode"}),
        Op("PUT", "/delegations/{did}", "complete a delegation with the signed proxy", "the user who asked",
           {201: None}, body=DelegatedProxy, errors={400: "bad field", 404: "unknown delegation"}),
    ])
