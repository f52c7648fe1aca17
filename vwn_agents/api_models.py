"""The HTTP APIs of the CE agent and the node agent as models and routes
(:mod:`vgrid_runtime.openapi`): ``GET /openapi.json`` of each and the validation of their JSON
bodies (contracts: docs/architecture.md; rendered in docs/api.md).

The dataclass bodies (``JobRequest``, ``VWNRequest``, ``PullRequest``, ``PinsBody``,
``OverlayBody``) are the very classes :func:`vgrid_runtime.httpjson.parse_body` loads; the other
JSON bodies are the pydantic models below, which :func:`vgrid_runtime.httpjson.json_body`
validates (400 naming the field). Answers are described with ``extra="allow"``. The image
repository's are in :mod:`vwn_agents.images.repo_api`.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vgrid_runtime.openapi import ApiSpec, Op, install_openapi  # noqa: F401  (for the apps)

from .ce_jobs import JobRequest
from .images.node_routes import OverlayBody, PinsBody
from .images.pool_model import PullRequest
from .node_migration import CompleteBody, MigrationIn
from .node_voc import VOCBoot
from .vwn_model import VWNRequest


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Body(BaseModel):
    """A request body: strict types, other fields ignored."""

    model_config = ConfigDict(extra="allow", strict=True)


# -- CE agent ----------------------------------------------------------------------------------

class Accepted(_Open):
    """202 of POST /jobs: the job is Scheduled at the CE."""

    state: str
    key: str


class BulkBody(_Body):
    """Body of POST /jobs/bulk: POST /jobs bodies, each checked on its own (one bad entry is
    refused in its result, the others accepted)."""

    jobs: list[Any] = Field(description="POST /jobs bodies (JobRequest)")


class BulkAnswer(_Open):
    """One result per entry, in order: ``{"key","accepted": true,"created","state"}`` or
    ``{"key","accepted": false,"outcome": "refused","status","error"}``."""

    results: list[dict[str, Any]]


class CEJobRecord(_Open):
    """A job at the CE (``CEPublishing.record``); ``lease``: the lease request and its state
    (scheduler = leases), else null."""

    key: str
    job_id: str
    state: str
    node: str | None
    node_url: str | None
    vwn: str | None
    cpu_caps: list[Any]
    capped: bool | None
    cap_reason: str | None
    exit_code: int | None
    reason: str | None
    outcome: str | None
    lease: dict[str, Any] | None


class NodeEvent(_Body):
    """A node agent's event about a VWN (contract 1)."""

    key: str = Field(description="the VWN request's key (the job's dispatch key)")
    event: str = Field(description="running | caps | done | aborted | suspended | resumed")
    vwn: str | None = None
    node: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    outcome: str | None = None
    cpu_caps: list[list[float]] | None = None
    capped: bool | None = None
    cap_reason: str | None = None
    time: float | None = None


class NodeVWN(_Body):
    key: str | None = None
    vwn: str | None = None
    state: str | None = None


class NodeHeartbeat(_Body):
    """A node agent's heartbeat (contract 4)."""

    node: str = Field(description="the node agent's URL")
    interval_s: float | None = None
    time: float | None = None
    vwns: list[NodeVWN]


class UnknownVWNs(_Open):
    unknown: list[str]


class CECapacity(_Open):
    total_cpus: int = Field(description="GlueCEInfoTotalCPUs")
    free_cpus: int = Field(description="GlueCEStateFreeCPUs (leases: VWN slots a new job could take now)")
    ert_s: float = Field(description="GlueCEStateEstimatedResponseTime (s)")


class CENode(_Open):
    url: str
    vwns: int
    up: bool
    heard_age_s: float | None = Field(description="s since the node's last heartbeat")
    lost: bool
    limit_s: float | None


class CEStatus(_Open):
    """GET /status of a CE agent (``CEPublishing.status``)."""

    ce_id: str
    url: str | None
    scheduler: str = Field(description="fair-share | leases")
    capacity: CECapacity
    nodes: list[CENode]
    jobs: dict[str, int] = Field(description="jobs by gLite state")
    heartbeats: dict[str, Any]
    lost_nodes: list[str]
    ready: bool = Field(description="false while resynchronising after a restart")
    suspension: dict[str, Any]


class CESiteNode(_Open):
    """One node of ``GET /site`` (``ce_site.node_view``)."""

    url: str
    up: bool
    status: dict[str, Any] | None = Field(description="the node's GET /status without outbox and heartbeat")
    vwns: list[dict[str, Any]] = Field(description="active VWN records and the last ended ones")
    images: dict[str, Any] | list[Any] | None = Field(description="the node's GET /images, or {error}")
    error: str | None


class CESite(_Open):
    """GET /site of a CE agent (``ce_site.site_document``): the dashboard's site view."""

    ce_id: str
    url: str | None
    scheduler: str
    now: float = Field(description="the CE agent's clock, s")
    vwns_per_node: int | None
    nodes: list[CESiteNode]
    slots: dict[str, Any] | None = Field(description="slot_view document; null without a lease engine")


_BROKER = "the CE's brokers (broker_dns)"
_CE_OPS = [
    Op("POST", "/jobs", "accept a job from a broker", _BROKER, {202: Accepted}, body=JobRequest,
       errors={400: "bad field or JDL error (file, line, column)", 503: "not stored"}),
    Op("POST", "/jobs/bulk", "accept a matcher pass's jobs at once", _BROKER, {200: BulkAnswer},
       body=BulkBody, errors={400: "field 'jobs' is not a list", 413: "too many jobs"}),
    Op("GET", "/jobs", "every job record", _BROKER, {200: list[CEJobRecord]}),
    Op("GET", "/jobs/{key}", "one job record", _BROKER, {200: CEJobRecord}, errors={404: "unknown job"}),
    Op("POST", "/jobs/{key}/cancel", "cancel a job (its VWN is deleted)", _BROKER, {200: CEJobRecord},
       errors={404: "unknown job", 409: "already ended"}),
    Op("POST", "/node-events", "a node agent's VWN event", "a node agent of this CE", {200: CEJobRecord},
       body=NodeEvent, errors={400: "bad field", 404: "unknown job", 409: "another VWN",
                               503: "resynchronising after a restart"}),
    Op("POST", "/node-heartbeats", "a node agent's heartbeat", "the node agent whose URL its certificate "
       "serves (plain HTTP: loopback)", {200: UnknownVWNs}, body=NodeHeartbeat,
       errors={400: "bad field", 503: "resynchronising after a restart"}),
    Op("GET", "/glue", "the CE's GLUE 1.3 LDIF", "any authenticated caller", {200: "text"}),
    Op("GET", "/glue2", "the CE's GLUE 2.0 LDIF", "any authenticated caller", {200: "text"}),
    Op("GET", "/status", "capacity, nodes, job counts, heartbeats, suspension", "any authenticated caller",
       {200: CEStatus}),
    Op("GET", "/site", "nodes, VWNs, image pools and the slot table (the dashboard's site view)",
       "the CE's brokers (broker_dns), the CE's own host certificate", {200: CESite},
       errors={403: "not a broker of this CE"}),
    Op("GET", "/openapi.json", "this document", "any authenticated caller", {200: None}),
    Op("GET", "/metrics", "Prometheus metrics (text format)", "metrics_dns, the CE's own host certificate",
       {200: "text"}),
]
CE_SPEC = ApiSpec(title="vgrid CE agent", ops=_CE_OPS,
                  description="A computing element: accepts jobs from brokers, places them on its nodes' "
                              "VWNs (fair share or leases), publishes GLUE (docs/architecture.md).")

# -- node agent --------------------------------------------------------------------------------


class VWNCreated(_Open):
    vwn: str
    cpu_cap: float | None
    capped: bool | None
    cap_reason: str | None
    state: str


class VWNRecord(_Open):
    """A VWN's record (``vwn_model.VWN.record``; caps are ``[clock s, CPU fraction]``)."""

    vwn: str
    job_id: str
    key: str
    state: str
    pid: int | None
    cpu_cap: float | None
    cpu_caps: list[Any]
    capped: bool | None
    cap_reason: str | None
    exit_code: int | None
    reason: str | None
    outcome: str | None
    created: float | None
    ended: float | None
    cpu_time_s: float | None
    adopted: bool | None


class PullAnswer(_Open):
    """202 of POST /images/pulls; ``hit``: READY already, nothing transferred."""

    image: str
    state: str
    hit: bool
    transfer: dict[str, Any] | None


class PoolView(_Open):
    """The node's image pool (``ImagePool.view``; sizes in MB)."""

    capacity_mb: float
    used_mb: float
    images: list[dict[str, Any]]
    transfers: list[dict[str, Any]]


class Overlay(_Open):
    path: str
    backing: str
    format: str


class NodeStatus(_Open):
    """GET /status of a node agent; ``outbox`` and ``heartbeat`` only for its CE agents."""

    node: str
    capacity: float = Field(description="C: the CPU capacity shared by the VWNs (cores)")
    vwns: int = Field(description="active VWNs")
    adopted: int = Field(description="VWNs adopted after a restart")
    driver: dict[str, Any]
    cgroup: dict[str, Any]
    confinement: dict[str, Any]
    freezer: dict[str, Any]
    outbox: dict[str, Any] | None = None
    heartbeat: dict[str, Any] | None = None


_CE = "the node's CE agents (ce_dns)"
class Handover(_Open):
    """POST /vwns/{vwn}/handover: the manifest of a saved VM (``node_migration.handover``)."""

    vwn: str
    node: str
    dir: str
    token: str = Field(description="one-time capability for GET .../handover/files/{name}")
    files: list[dict[str, Any]] = Field(description='[{"name", "size", "sha256"}]')
    request: dict[str, Any]
    memory_mb: int | None
    save: dict[str, Any] | None


class MigrationDone(_Open):
    """POST /vwns/migrations: the restored VWN and the measured copy and restore."""

    vwn: str
    node: str
    copy_s: float
    bytes: int
    mb: float
    copy_mb_s: float | None
    restore_s: float
    restore_mb_s: float | None


class VOCVM(_Open):
    """A VOC VM of the node (``node_voc``): ``state`` booting, ready or lost; ``boot_s`` measured (s)."""

    node: str
    vo: str | None
    state: str
    image: str | None = None
    boot_s: float | None
    why: str | None
    jobs: int


class VOCVMs(_Open):
    """GET /voc/vms."""

    vms: list[VOCVM]


class VOCGone(_Open):
    """DELETE /voc/vms/{node_id}."""

    node: str
    state: str


_NODE_OPS = [
    Op("POST", "/vwns", "start a VWN (C/(N+1) cap)", _CE, {201: VWNCreated, 200: VWNCreated}, body=VWNRequest,
       errors={400: "bad field", 409: "image not-ready, or voc_node: not-libvirt / voc-node-not-ready (code)",
               503: "not stored", 507: "disk full"}),
    Op("GET", "/vwns", "every VWN record", _CE, {200: list[VWNRecord]}),
    Op("GET", "/vwns/{vwn}", "one VWN record", _CE, {200: VWNRecord}, errors={404: "unknown VWN"}),
    Op("DELETE", "/vwns/{vwn}", "kill a VWN", _CE, {200: VWNRecord}, errors={404: "unknown VWN"}),
    Op("POST", "/vwns/{vwn}/suspend", "freeze a VWN", _CE, {200: VWNRecord},
       errors={404: "unknown VWN", 409: "not running", 501: "no freezer", 503: "freeze failed"}),
    Op("POST", "/vwns/{vwn}/resume", "thaw a VWN", _CE, {200: VWNRecord},
       errors={404: "unknown VWN", 409: "not suspended", 501: "no freezer", 503: "thaw failed"}),
    Op("POST", "/images/pulls", "pull an image into the pool", _CE, {202: PullAnswer}, body=PullRequest,
       errors={400: "bad field or image name", 404: "unknown image", 409: "pinned or not ready",
               501: "no image_repository configured"}),
    Op("GET", "/images", "the image pool", _CE, {200: PoolView}),
    Op("PUT", "/images/pins", "replace the pins", _CE, {200: PoolView}, body=PinsBody,
       errors={400: "bad field"}),
    Op("POST", "/images/{name}/overlays", "a copy-on-write overlay of a READY image for a VWN", _CE,
       {201: Overlay}, body=OverlayBody, errors={400: "bad field", 404: "unknown image",
                                                 409: "not ready (code not-ready)"}),
    Op("DELETE", "/images/overlays/{vwn}", "remove a VWN's overlay", _CE, {200: PoolView}),
    Op("POST", "/vwns/{vwn}/handover", "save a libvirt VWN and offer its files for a cold migration", _CE,
       {200: Handover}, errors={404: "unknown VWN", 409: "not-libvirt or not-running (code)",
                                503: "the save failed"}),
    Op("GET", "/vwns/{vwn}/handover/files/{name}", "one file of a handover (Range: 206), throttled",
       "a host of the site's CA presenting the handover's token (X-Vgrid-Handover)",
       {200: "binary", 206: "binary"}, errors={403: "no or wrong token", 404: "unknown VWN or file"}),
    Op("POST", "/vwns/{vwn}/handover/complete", "end the source VWN: it runs on another node now", _CE,
       {200: VWNRecord}, body=CompleteBody, errors={400: "bad field", 404: "unknown VWN",
                                                    409: "not-libvirt (code)"}),
    Op("POST", "/vwns/migrations", "pull a handed-over VWN's files, check them, restore the VM here", _CE,
       {201: MigrationDone}, body=MigrationIn,
       errors={400: "bad field", 409: "not-libvirt or no-image-pool (code)", 422: "checksum-mismatch",
               502: "source-failed", 503: "restore-failed or image-unavailable (code)"}),
    Op("POST", "/voc/vms", "boot a VM serving a VO's jobs (a VOC node; idempotent on node)", _CE,
       {202: VOCVM}, body=VOCBoot,
       errors={400: "bad field", 409: "not-libvirt, not-ready, no-image-pool (code)", 500: "overlay-failed"}),
    Op("GET", "/voc/vms", "the node's VOC VMs (a gone domain is lost at once)", _CE, {200: VOCVMs}),
    Op("DELETE", "/voc/vms/{node_id}", "power a VOC VM off and forget it (idempotent)", _CE, {200: VOCGone}),
    Op("GET", "/status", "capacity, VWNs, driver, cgroup, freezer (outbox and heartbeat: CE agents only)",
       "any authenticated caller", {200: NodeStatus}),
    Op("GET", "/openapi.json", "this document", "any authenticated caller", {200: None}),
    Op("GET", "/metrics", "Prometheus metrics (text format)", "metrics_dns, the node's own host certificate",
       {200: "text"}),
]
NODE_SPEC = ApiSpec(title="vgrid node agent", ops=_NODE_OPS,
                    description="A worker node: runs each job in a CPU-capped virtual worker node (cgroup "
                                "or libvirt VM), keeps an image pool (docs/vwn.md).")
