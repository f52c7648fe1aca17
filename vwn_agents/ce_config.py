"""The CE agent's configuration schema (``CEAgentConfig``: TOML table or dict; docs/vwn.md).

Every option with its default and help text; ``validate`` names the offending field. Loaded by
``vgrid serve ce --config FILE.toml`` (``vgrid_cli/services.py``) and by ``vwn_agents.ce_agent``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from vgrid_runtime.authn import TLSOptions
from vgrid_runtime.metrics import MetricsOptions
from vgrid_runtime.serving import ServeOptions
from vgrid_runtime.config import ConfigSchema
from .outbox_config import OutboxOptions
from .placement import PLACEMENTS


@dataclass
class CEAgentConfig(ConfigSchema, TLSOptions, ServeOptions, MetricsOptions, OutboxOptions):
    """Configuration of one CE agent (TOML table or dict; see docs/vwn.md)."""

    SOURCE = "CE agent config"

    ce_id: str = field(metadata={"help": "GlueCEUniqueID, host:port/vgrid-<lrms>-<queue>"})
    host: str = field(metadata={"help": "GlueCEInfoHostName"})
    site: str = field(metadata={"help": "site name (Mds-Vo-name, GlueSiteUniqueID)"})
    queue: str = field(metadata={"help": "GlueCEName"})
    nodes: list[str] = field(metadata={"help": "base URLs of the CE's node agents"})
    cpus_per_node: int = field(default=1, metadata={"help": "CPUs per node (GlueCEInfoTotalCPUs = nodes x this)"})
    si00: int = field(default=1000, metadata={"help": "GlueHostBenchmarkSI00 of one CPU"})
    ram_mb: int = field(default=1024, metadata={"help": "GlueHostMainMemoryRAMSize (MB)"})
    max_wallclock_s: int = field(default=86400, metadata={"help": "GlueCEPolicyMaxWallClockTime (s)"})
    vos: list[str] = field(default_factory=list, metadata={"help": "VOs allowed (GlueCEAccessControlBaseRule VO:<vo>)"})
    lrms_type: str = field(default="vgrid-vwn", metadata={"help": "GlueCEInfoLRMSType"})
    status: str = field(default="Production", metadata={"help": "GlueCEStateStatus"})
    placement: str = field(default="fewest-vwns", metadata={"help": "placement policy name (fair-share scheduler)"})
    scheduler: str = field(default="leases", metadata={
        "help": "leases (every job is a lease in the lease engine, queued when its node's VWN slots are taken), "
                "fair-share (every job gets a VWN at once, no admission control) or voc (per-VO clusters of "
                "VWN slots sized by the VOC watchdog, seed 003; docs/vwn.md)"})
    vwns_per_node: int = field(default=4, metadata={
        "help": "K: VWN slots per node with scheduler = leases (a job lease asks for 1/K of a node)"})
    lease_tick_s: float = field(default=0.25, metadata={"help": "how often the lease engine starts/ends what is due (s)"})
    lease_config: str | None = field(default=None, metadata={
        "help": "lease engine options (TOML, docs/leasing.md); suspension is none when suspend_vwns = false"})
    suspend_vwns: bool = field(default=True, metadata={
        "help": "scheduler = leases: a preempted suspendable lease's VWNs are frozen on their node "
                "and thawed when it resumes, instead of deleted and restarted; on a node agent "
                "without a freezer they are deleted and restarted (GET /status \"suspension\" says "
                "which nodes and why; docs/vwn.md); migration is then off (see migrate_vwns). false: always delete"})
    migrate_vwns: bool = field(default=False, metadata={
        "help": "scheduler = leases with suspend_vwns: a suspended lease may resume on other nodes by "
                "cold migration of its VMs (libvirt node agents; the lease configuration's migration "
                "option decides, default yes); false: it resumes where it was suspended (docs/vwn.md)"})
    migration_attempts: int = field(default=3, metadata={
        "help": "tries of one VM's cold migration (handover + copy) before the job is Aborted with "
                "outcome migration-failed"})
    migration_timeout_s: float = field(default=600.0, metadata={
        "help": "bound of one migration call to a node agent, the copy and the restore included (s)"})
    measured_rates: bool = field(default=True, metadata={
        "help": "scheduler = leases: plan suspensions, resumptions and migrations with the rates the "
                "node agents measured (GET /status driver; the slowest node's, smoothed), else the "
                "lease configuration's (docs/leasing.md, \"Measured rates\")"})
    vm_boot_lead_s: float = field(default=0.0, metadata={
        "help": "scheduler = leases: an advance reservation's VMs start this many seconds before its "
                "LeaseStart (its lease starts earlier and lasts as much longer) so that they have booted "
                "at LeaseStart (libvirt nodes under TCG: 10-20 s); -1 = the longest boot the node agents "
                "measured (GET /status driver.max_boot_s; 0 before any boot); docs/vwn.md"})
    decision_log: str = field(default="", metadata={
        "help": "scheduler = leases: a file to which the lease engine writes one JSON line per scheduling "
                "decision (placed, accepted, preempted, rejected: why a job's lease went where it did, with "
                "its job key; docs/vwn.md, \"Decision log\"); empty = off"})
    decision_log_max_mb: float = field(default=10.0, metadata={
        "help": "the decision log is renamed to <decision_log>.1 when it would grow past this (MB, > 0)"})
    voc_policy: str = field(default="damped", metadata={
        "help": "scheduler = voc: the watchdog's sizing policy, greedy (seed 003 Section 5.2.2) or damped"})
    voc_interval_s: float = field(default=10.0, metadata={"help": "scheduler = voc: watchdog interval (s, > 0)"})
    voc_growth_limit: int = field(default=8, metadata={
        "help": "scheduler = voc, damped: most nodes booted per VO per interval (0 = no limit)"})
    voc_keep_warm_s: float = field(default=120.0, metadata={
        "help": "scheduler = voc, damped: an idle VOC node is kept this long before it is terminated (s)"})
    voc_driver: str = field(default="cgroup", metadata={
        "help": "scheduler = voc: what a VOC node is -- cgroup (a ready sandbox slot on a node agent; the "
                "job runs in a cgroup VWN) or libvirt (a VM booted on a node agent with driver = libvirt "
                "that runs the VO's jobs one after another; docs/vwn.md, \"VOC VMs\")"})
    voc_images: list[str] = field(default_factory=list, metadata={
        "help": "scheduler = voc, voc_driver = libvirt: the VOs' images, \"vo=image\" each (an image name of the "
                "node agents' image_repository): a VOC VM of that VO boots with an overlay of it at /image; "
                "the CE agent asks the node agent to pull it first"})
    voc_boot_timeout_s: float = field(default=300.0, metadata={
        "help": "scheduler = voc, voc_driver = libvirt: a VOC VM not booted after this long is lost (s, > 0)"})
    voc_hysteresis: int = field(default=1, metadata={
        "help": "scheduler = voc, damped: grow only when the queue exceeds the VOC size by more than this "
                "many jobs; keep this many nodes beyond the queue while it is not empty"})
    image_repository: str = field(default="", metadata={
        "help": "scheduler = leases: URL of the image repository (vgrid serve images); when set, VMImage "
                "leases are staged live (lease-preparation = imagetransfer: node agents pull at the "
                "engine's scheduled start and rate; docs/vwn.md) and a VMImage without VMImageSize "
                "takes the repository's size"})
    bind: str = field(default="127.0.0.1", metadata={"help": "listen address"})
    port: int = field(default=0, metadata={"help": "listen port (0 = a free port)"})
    public_url: str | None = field(default=None, metadata={
        "help": "this agent's URL for node callbacks and GlueCEInfoContactString (default: the bound URL)"})
    node_timeout_s: float = field(default=10.0, metadata={"help": "timeout of one node agent request (s)"})
    node_down_after_s: float = field(default=30.0, metadata={
        "help": "scheduler = leases: a node agent failing (connection error, timeout, 5xx) this long is "
                "marked down -- no new leases, its unstarted leases go to the other nodes -- until it answers (s)"})
    retry_s: float = field(default=2.0, metadata={"help": "delay before retrying an unplaced job (s)"})
    retry_initial_s: float = field(default=0.2, metadata={"help": "first event retry delay (s)"})
    retry_max_s: float = field(default=10.0, metadata={"help": "largest event retry delay (s)"})
    broker_dns: list[str] = field(default_factory=list, metadata={
        "help": "DNs of the brokers that may submit, read and cancel jobs here (TLS mode)"})
    max_body_mb: float = field(default=16.0, metadata={"help": "largest request body (MB)"})
    state_dir: str | None = field(default=None, metadata={
        "help": "directory of the CE agent's state (its database ce.db); default: a temporary directory "
                "removed at shutdown, i.e. nothing survives a restart (vgrid serve ce and the demo set one)"})
    db_url: str = field(default="", metadata={
        "help": "SQLAlchemy URL of the CE agent's database (e.g. postgresql+psycopg2://...); "
                "empty = the SQLite file <state_dir>/ce.db"})
    heartbeat_s: float = field(default=10.0, metadata={
        "help": "how often the CE agent POSTs its heartbeat to every broker heartbeat_url its jobs came "
                "with (s; 0 = off)"})
    node_lost_s: float = field(default=0.0, metadata={
        "help": "a node agent not heard of (no heartbeat, event or answer) this long is lost: its active "
                "jobs end Aborted, outcome node-lost (s; 0 = 3 x the node's heartbeat interval_s, or 30 s "
                "while it has never sent one)"})

    def validate(self) -> str | None:
        if self.outbox_problem():
            return self.outbox_problem()
        if self.tls_problem():
            return self.tls_problem()
        if self.serve_problem():
            return self.serve_problem()
        if self.placement not in PLACEMENTS:
            return f"field 'placement': unknown policy {self.placement!r} (known: {', '.join(PLACEMENTS)})"
        if self.cpus_per_node < 1:
            return f"field 'cpus_per_node': must be >= 1, got {self.cpus_per_node}"
        if self.scheduler not in ("leases", "fair-share", "voc"):
            return f"field 'scheduler': must be 'leases', 'fair-share' or 'voc', got {self.scheduler!r}"
        if self.vm_boot_lead_s < 0 and self.vm_boot_lead_s != -1:
            return f"field 'vm_boot_lead_s': must be >= 0 (s) or -1 (measured), got {self.vm_boot_lead_s}"
        if self.voc_driver not in ("cgroup", "libvirt"):
            return f"field 'voc_driver': must be 'cgroup' or 'libvirt', got {self.voc_driver!r}"
        for i, item in enumerate(self.voc_images):
            vo, _, image = item.partition("=")
            if not vo or not image:
                return f"field 'voc_images[{i}]': expected \"vo=image\", got {item!r}"
        if self.voc_boot_timeout_s <= 0:
            return f"field 'voc_boot_timeout_s': must be > 0 (s), got {self.voc_boot_timeout_s}"
        if self.voc_interval_s <= 0:
            return f"field 'voc_interval_s': must be > 0, got {self.voc_interval_s}"
        for name in ("voc_growth_limit", "voc_keep_warm_s", "voc_hysteresis"):
            if getattr(self, name) < 0:
                return f"field '{name}': must be >= 0, got {getattr(self, name)}"
        from .voc.policies import POLICIES
        if self.voc_policy not in POLICIES:
            return f"field 'voc_policy': unknown VOC policy {self.voc_policy!r} (known: {', '.join(POLICIES)})"
        if not 1 <= self.vwns_per_node <= 100 * self.cpus_per_node:
            return (f"field 'vwns_per_node': must be between 1 and {100 * self.cpus_per_node} "
                    f"(1/100 of a core per VWN), got {self.vwns_per_node}")
        if self.vwns_per_node > self.ram_mb:
            return (f"field 'vwns_per_node': {self.vwns_per_node} VWNs need at least 1 MB each, "
                    f"ram_mb is {self.ram_mb}")
        if self.node_down_after_s <= 0:
            return f"field 'node_down_after_s': must be > 0, got {self.node_down_after_s}"
        for name in ("heartbeat_s", "node_lost_s"):
            if getattr(self, name) < 0:
                return f"field '{name}': must be >= 0, got {getattr(self, name)}"
        if self.decision_log_max_mb <= 0:
            return f"field 'decision_log_max_mb': must be > 0 (MB), got {self.decision_log_max_mb}"
        if self.decision_log and not os.path.isdir(os.path.dirname(os.path.abspath(self.decision_log))):
            return f"field 'decision_log': directory of {self.decision_log!r} does not exist"
        if self.lease_tick_s <= 0:
            return f"field 'lease_tick_s': must be > 0, got {self.lease_tick_s}"
        if self.lease_config:
            from .leasing.config import load_config
            try:
                load_config(self.lease_config)
            except ValueError as exc:      # leasing.ConfigError: names the file and the option
                return f"field 'lease_config': {exc}"
        if self.status not in ("Production", "Queueing", "Draining", "Closed"):
            return f"field 'status': must be a GlueCEStateStatus value, got {self.status!r}"
        return None
