"""The node agent's configuration schema (docs/vwn.md, "Node agent configuration")."""
from __future__ import annotations

from dataclasses import dataclass, field

from vgrid_runtime.authn import TLSOptions
from vgrid_runtime.metrics import MetricsOptions
from vgrid_runtime.serving import ServeOptions
from vgrid_runtime.config import ConfigSchema
from .outbox_config import OutboxOptions


@dataclass
class NodeAgentConfig(ConfigSchema, TLSOptions, ServeOptions, MetricsOptions, OutboxOptions):
    """Configuration of one node agent (TOML table or dict; see docs/vwn.md)."""

    SOURCE = "node agent config"

    node: str = field(metadata={"help": "node name, used in VWN ids vwn-<node>-<n>"})
    capacity: float = field(default=1.0, metadata={
        "help": "C: CPU capacity shared by the node's VWNs, in fractions of one core"})
    bind: str = field(default="127.0.0.1", metadata={"help": "listen address"})
    port: int = field(default=0, metadata={"help": "listen port (0 = a free port)"})
    work_dir: str | None = field(default=None, metadata={
        "help": "directory for VWN work directories (default: a new temporary directory)"})
    keep_workdirs: bool = field(default=False, metadata={
        "help": "keep each VWN's directory (spec, result, job work dir) after it ends"})
    cgroup: str = field(default="auto", metadata={"help": "auto | v2 | v1 | none"})
    cgroup_parent: str = field(default="vgrid", metadata={
        "help": "parent cgroup; a VWN is <parent>/<node>-<agent pid>/<vwn>"})
    python: str | None = field(default=None, metadata={
        "help": "Python interpreter for the job wrapper (default: the agent's)"})
    transfer_patience_s: float = field(default=300.0, metadata={
        "help": "how long the node agent retries a transiently failing sandbox download or upload (s)"})
    jobs_dir: str | None = field(default=None, metadata={
        "help": "root of the job work directories (default: <work_dir>/jobs, or a new "
                "temporary directory when pool accounts cannot reach work_dir)"})
    map_file: str | None = field(default=None, metadata={
        "help": "grid-mapfile style DN/FQAN -> pool account map (default: none, the rules below)"})
    vo_pools: bool = field(default=True, metadata={
        "help": "an owner of VO v without a map line gets pool .v"})
    default_pool: str = field(default=".vgrid", metadata={
        "help": "pool of owners nothing else maps, and of VWNs without owner"})
    pool_size: int = field(default=50, metadata={"help": "accounts per pool (<pool>001...)"})
    gridmapdir: str = field(default="/var/lib/vgrid/gridmapdir", metadata={
        "help": "host-wide directory of pool account leases (hard links)"})
    memory_per_vwn_mb: int = field(default=1024, metadata={
        "help": "memory limit of a VWN whose job states none (MB; 0 = none)"})
    pids_max: int = field(default=512, metadata={"help": "tasks per VWN (pids.max; 0 = none)"})
    disk_quota_mb: int = field(default=1024, metadata={
        "help": "disk quota of a work directory, a loop-mounted ext4 image (MB; 0 = none)"})
    spare_disk_images: int = field(default=2, metadata={
        "help": "quota file systems made and mounted ahead, so a VWN's start skips mkfs.ext4 and "
                "mount (0..16; 0 = none); docs/vwn.md \"Spare quota file systems\""})
    wrapper_start: str = field(default="zygote", metadata={
        "help": "how a job wrapper starts: zygote (forked by a preforked root process per node "
                "agent, no exec per job) | exec (sh, setpriv, python -S per job); docs/vwn.md"})
    max_sandbox_mb: float = field(default=100.0, metadata={
        "help": "largest input, and output, sandbox of a job (MB, each in total)"})
    max_body_mb: float = field(default=16.0, metadata={"help": "largest request body (MB)"})
    retry_initial_s: float = field(default=0.2, metadata={"help": "first event retry delay (s)"})
    retry_max_s: float = field(default=10.0, metadata={"help": "largest event retry delay (s)"})
    db_url: str = field(default="", metadata={
        "help": "database of the node's VWNs and undelivered events: a SQLAlchemy URL, or \"\" "
                "for the SQLite file <work_dir>/node.db"})
    heartbeat_s: float = field(default=10.0, metadata={
        "help": "interval of the heartbeats to the CE agents' heartbeat_url (s; 0 = off)"})
    keep_ended_s: float = field(default=604800.0, metadata={
        "help": "ended VWNs older than this are dropped from the database at start (s)"})
    url: str = field(default="", metadata={
        "help": "this node agent's URL as its CE agents call it, sent in heartbeats (\"\": the "
                "URL the CE agent used in its VWN request)"})

    driver: str = field(default="cgroup", metadata={
        "help": "what a VWN is: cgroup (a process tree in cgroups) | libvirt (a qemu VM; docs/vwn.md)"})
    libvirt_uri: str = field(default="qemu:///system", metadata={"help": "libvirt URI (driver libvirt)"})
    vm_dir: str = field(default="/var/lib/vgrid/vms", metadata={
        "help": "VM files (memory images, channels) go to <vm_dir>/<node>/<vwn> (driver libvirt; "
                "every ancestor must be traversable by the qemu account)"})
    guest_cache: str = field(default="/var/cache/vgrid/guest", metadata={
        "help": "where the test guest (kernel + busybox initramfs) is built once (driver libvirt)"})
    guest: str = field(default="busybox", metadata={
        "help": "the libvirt VWNs' guest: busybox (shell jobs; kernel + busybox initramfs built at first use) | "
                "debian (python3 and systemd: `vgrid guest build-debian`, built into guest_cache at the agent's "
                "start when not cached, from this machine's configured Debian mirror; each VM boots from its own "
                "qcow2 overlay of the root disk; no pool image disk yet) (driver libvirt)"})
    vm_accel: str = field(default="auto", metadata={
        "help": "auto (probe KVM, else TCG) | kvm | tcg (driver libvirt)"})
    kvm_probe_s: float = field(default=10.0, metadata={
        "help": "how long the KVM probe boot may take before TCG is used (s)"})
    vm_memory_mb: int = field(default=256, metadata={
        "help": "memory of a VM whose job states no VMMemory (MB; at least 128)"})
    image_repository: str = field(default="", metadata={
        "help": "URL of the image repository (vgrid serve images) VM images are pulled from (\"\" = none)"})
    image_pool_dir: str | None = field(default=None, metadata={
        "help": "the node's image pool directory (default <work_dir>/images)"})
    image_pool_mb: float = field(default=0.0, metadata={
        "help": "image pool size limit (MB = 10^6 bytes; 0 = unlimited); unpinned images are evicted LRU"})
    image_pull_patience_s: float = field(default=60.0, metadata={
        "help": "how long a broken image download is retried (resumed by Range) before it fails (s)"})

    migration_serve_mb_s: float = field(default=0.0, metadata={
        "help": "rate at which a suspended VM's files are served to the node taking it over in a cold "
                "migration (MB/s = 10^6 bytes/s; 0 = unlimited; seed 002's migration bandwidth b)"})
    migration_pull_timeout_s: float = field(default=30.0, metadata={
        "help": "a migration copy from the source node fails when no byte arrives for this long (s)"})
    migration_image_wait_s: float = field(default=600.0, metadata={
        "help": "how long a node taking over a migrated VM waits for the VM's pooled image to arrive in "
                "its own pool (pulled from its image_repository unless already there) before it answers "
                "503 image-unavailable (s; the CE agent retries)"})

    ce_dns: list[str] = field(default_factory=list, metadata={
        "help": "DNs of the CE agents that may create, read and delete VWNs here (TLS mode)"})

    def validate(self) -> str | None:
        if self.outbox_problem():
            return self.outbox_problem()
        if self.tls_problem():
            return self.tls_problem()
        if self.serve_problem():
            return self.serve_problem()
        if not self.node or "/" in self.node:
            return "field 'node': must be a non-empty name without '/'"
        if not self.capacity > 0:
            return f"field 'capacity': must be > 0 (CPU fraction), got {self.capacity}"
        if self.cgroup not in ("auto", "v1", "v2", "none"):
            return f"field 'cgroup': must be auto, v1, v2 or none, got {self.cgroup!r}"
        if self.driver not in ("cgroup", "libvirt"):
            return f"field 'driver': must be cgroup or libvirt, got {self.driver!r}"
        if self.guest not in ("busybox", "debian"):
            return f"field 'guest': must be busybox or debian, got {self.guest!r}"
        if self.vm_accel not in ("auto", "kvm", "tcg"):
            return f"field 'vm_accel': must be auto, kvm or tcg, got {self.vm_accel!r}"
        if self.vm_memory_mb < 1 or not self.kvm_probe_s > 0:
            return "fields 'vm_memory_mb', 'kvm_probe_s': must be > 0"
        if not 1 <= self.pool_size <= 999:
            return f"field 'pool_size': must be 1..999, got {self.pool_size}"
        if self.wrapper_start not in ("zygote", "exec"):
            return f"field 'wrapper_start': must be zygote or exec, got {self.wrapper_start!r}"
        if not 0 <= self.spare_disk_images <= 16:
            return f"field 'spare_disk_images': must be 0..16, got {self.spare_disk_images}"
        for name in ("memory_per_vwn_mb", "pids_max", "disk_quota_mb"):
            if getattr(self, name) < 0:
                return f"field '{name}': must be >= 0 (0 = no limit), got {getattr(self, name)}"
        if self.heartbeat_s < 0:
            return f"field 'heartbeat_s': must be >= 0, got {self.heartbeat_s}"
        if self.image_pool_mb < 0 or not self.image_pull_patience_s > 0:
            return "field 'image_pool_mb': must be >= 0 (0 = unlimited); 'image_pull_patience_s': must be > 0"
        if not self.max_sandbox_mb > 0 or not self.max_body_mb > 0:
            return "fields 'max_sandbox_mb', 'max_body_mb': must be > 0"
        return None
