"""Configuration of the lease engine: one declarative schema for defaults, validation and docs.

Option names are Haizea 1.1's where Haizea has the option (sections ``[scheduling]``,
``[deploy-imagetransfer]``, ``[simulation]``, ``[general]``); options Haizea lacks are marked
"vgrid" in their documentation. Files are TOML (``load_config(path)``); a flat mapping of option
names works too (``LeaseConfig.from_mapping``). ``docs/leasing.md`` lists every option; it is
generated from ``OPTIONS`` by ``options_markdown()``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vgrid_runtime.config import read_toml


class ConfigError(ValueError):
    """A bad option: the message names the file, section and option."""


@dataclass(frozen=True)
class Option:
    name: str
    section: str
    type: type
    default: object
    doc: str
    choices: tuple = ()
    minimum: float | None = None


OPTIONS: tuple[Option, ...] = (
    Option("lease-preparation", "general", str, "unmanaged",
           "How images reach nodes: `unmanaged` (predeployed, no transfers) or `imagetransfer` "
           "(scheduled transfers from the image repository, seed 000 Section 6.2).",
           ("unmanaged", "imagetransfer")),
    Option("compat", "general", str, "none",
           "vgrid: `haizea-1.1` selects Haizea 1.1's behaviour wherever vgrid deliberately "
           "differs (re-evaluation after a premature end, AR victim order and 7-day aging, "
           "preemption of a reservation that has not started, AR node order, overhead "
           "estimates; `compat.py`, docs/leasing.md "
           "'Haizea-compatible mode'); on by default for Haizea INI files, `none` for vgrid TOML.",
           ("none", "haizea-1.1")),
    Option("backfilling", "scheduling", str, "aggressive",
           "Best-effort backfilling: `off` (strict FCFS), `aggressive` (one future reservation), "
           "`conservative` (every queued lease gets one) or `intermediate` (see "
           "`backfilling-reservations`).", ("off", "aggressive", "conservative", "intermediate")),
    Option("backfilling-reservations", "scheduling", int, 1,
           "Number of future reservations with `backfilling = intermediate`.", minimum=1),
    Option("besteffort-mode", "scheduling", str, "parallel",
           "vgrid: `parallel` (all VMs of a lease start together, as Haizea) or `serial` (each VM "
           "is scheduled on its own, as seeds 000/001).", ("parallel", "serial")),
    Option("suspension", "scheduling", str, "all",
           "Which best-effort leases may be suspended: `none` (preempted leases are cancelled "
           "and requeued), `serial-only` (one-VM leases) or `all`.", ("none", "serial-only", "all")),
    Option("suspend-rate", "scheduling", float, 32.0,
           "MB of VM memory suspended per second; a VM takes ceil(memory / rate) s (seed 002 "
           "policies: B of eq. (3), memory / B s, no rounding; 6.36 MB/s in its Section 7.2).",
           minimum=1e-9),
    Option("resume-rate", "scheduling", float, 32.0,
           "MB of VM memory resumed per second; a VM takes ceil(memory / rate) s (seed 002 "
           "policies: r of eq. (4); 8.12 MB/s in its Section 7.2).", minimum=1e-9),
    Option("suspendresume-exclusion", "scheduling", str, "local",
           "`local`: one VM at a time per node is suspended/resumed; `global`: one VM at a time "
           "on the whole site (shared storage).", ("local", "global")),
    Option("scheduling-threshold-factor", "scheduling", float, 1.0,
           "A lease that will be suspended is only started if it can run for at least "
           "(suspend [+ resume] time) x (1 + factor).", minimum=0.0),
    # Haizea 1.1 options (issue 16; their effects: vwn_agents/leasing/haizea_options.py)
    Option("override-suspend-time", "scheduling", float, -1.0,
           "Seconds to suspend one VM, instead of ceil(memory / suspend-rate); -1 = computed "
           "(Haizea 1.1: also the whole lease's estimate for the scheduling threshold).", minimum=-1.0),
    Option("override-resume-time", "scheduling", float, -1.0,
           "Seconds to resume one VM, instead of ceil(memory / resume-rate); -1 = computed "
           "(Haizea 1.1: also the whole lease's estimate when it is placed).", minimum=-1.0),
    Option("enactment-overhead", "scheduling", float, 0.0,
           "Seconds to send one enactment command: added to every VM's suspend and resume time "
           "and, per VM, to the shutdown time (Haizea 1.1).", minimum=0.0),
    Option("shutdown-time", "scheduling", float, 0.0,
           "Seconds reserved at the end of every lease's VM reservation to shut its VMs down "
           "(plus `enactment-overhead` per VM); a lease that ends early skips it (Haizea 1.1).",
           minimum=0.0),
    Option("force-scheduling-threshold", "scheduling", float, -1.0,
           "Seconds: the scheduling threshold of a lease that will be suspended, instead of one "
           "computed from its overheads; -1 = computed. Never below its suspension time "
           "+ 1 s (Haizea 1.1 would raise an inconsistent-schedule error there).", minimum=-1.0),
    Option("policy-admission", "scheduling", str, "accept-all",
           "Lease admission before scheduling: `accept-all`, or `no-ARs` (advance reservations "
           "are rejected; Haizea 1.1's two built-in policies).", ("accept-all", "no-ARs")),
    Option("force-imagetransfer-time", "deploy-imagetransfer", float, -1.0,
           "Seconds every image transfer takes, whatever its size and bandwidth; -1 = "
           "image size / bandwidth (Haizea 1.1, for tests).", minimum=-1.0),
    Option("override-memory", "tracefile", float, -1.0,
           "MB of memory per VM given to every lease when a simulation starts, instead of the "
           "trace's; -1 = the trace's (Haizea 1.1's tracefile frontend).", minimum=-1.0),
    Option("stop-when-time", "simulation", float, -1.0,
           "Seconds after the trace's start at which `stop-when = exact` stops the simulation "
           "(Haizea files: DD:HH:MM:SS).", minimum=-1.0),
    Option("status-message-interval", "simulation", float, 0.0,
           "Minutes of simulated time between status messages (leases queued, running, done) on "
           "`vgrid simulate`'s standard error; 0 = none (Haizea 1.1).", minimum=0.0),
    Option("migration", "scheduling", str, "yes",
           "Resuming a suspended lease on other nodes: `no`, `yes` (transfer memory and disk "
           "image), `yes-notransfer` (no transfer time).", ("no", "yes", "yes-notransfer")),
    Option("policy-preemption", "scheduling", str, "ar-preempts-everything",
           "`ar-preempts-everything` (ARs may suspend best-effort leases; most recently started "
           "first) or `no-preemption` (an AR that does not fit is rejected); the classes in "
           "`preemption.POLICIES`. vgrid, seed 002 Section 6: `nop` (no preemption), `mov` "
           "(eq. (9), minimum overhead), `mlip` (eq. (10), minimum leases involved) or `moml` "
           "(Algorithm 1) choose among candidate sets of external leases for local requests and "
           "time suspensions with eq. (5)-(8); the classes in `candidatepolicy.POLICIES`.",
           ("ar-preempts-everything", "no-preemption", "nop", "mov", "mlip", "moml")),
    Option("pause-time", "scheduling", float, 0.005,
           "vgrid: t_p, seconds to pause (or unpause) one VM before its suspension (seed 002 eq. "
           "(5)-(6); 5 ms in its Section 7.2).", minimum=0.0),
    Option("rescheduling-time", "scheduling", float, 2.3,
           "vgrid: delta, seconds to reschedule one preempted lease (seed 002 eq. (5); 2.3 s in "
           "its Section 7.2).", minimum=0.0),
    Option("cancel-time", "scheduling", float, 0.0,
           "vgrid: seconds to stop the VMs of a cancelled lease (seed 002 Section 5: negligible).",
           minimum=0.0),
    Option("migration-bandwidth", "scheduling", float, 12.5,
           "vgrid: b, MB/s to copy a suspended VM's memory image to another host (seed 002 eq. "
           "(8); 100 Mb/s = 12.5 MB/s in its Section 7.2).", minimum=1e-9),
    Option("migration-transfer", "scheduling", str, "link",
           "vgrid: how `migration = yes` moves a resumed lease's memory (and disk) images: `link` "
           "(vgrid's default: every moved VM's images one after another over the best-effort "
           "image link, `imagetransfer-bandwidth`) or `node-to-node` (Haizea 1.1 / HPDC'08: each "
           "node's own NIC at `migration-bandwidth` MB/s, disjoint source/destination pairs in "
           "parallel rounds; docs/experiments/hpdc08.md).", ("link", "node-to-node")),
    Option("preemption-order", "scheduling", str, "latest-start",
           "vgrid: the order in which `ar-preempts-everything` preempts best-effort leases: "
           "`latest-start` (vgrid: leases not started first, then the most recently started) or "
           "`oldest-submission` (what Haizea 1.1's mapper does: it pops the least preemptable, "
           "i.e. the earliest submitted, lease first).", ("latest-start", "oldest-submission")),
    Option("preemption-horizon", "scheduling", float, 0.0,
           "vgrid: seconds; a best-effort lease submitted this long or longer before an AR's start "
           "is never preempted by it (Haizea 1.1's aging: 604800 = 7 days); 0 = no horizon.",
           minimum=0.0),
    Option("max-candidate-sets", "scheduling", int, 10000,
           "vgrid: at most this many candidate sets (seed 002 eq. (1)-(2)) are enumerated for one "
           "local request; beyond it the greedy sets of every policy are added (docs/leasing.md).",
           minimum=1),
    Option("max-candidate-leases", "scheduling", int, 40,
           "vgrid: candidate sets are built from at most this many preemptable leases, the "
           "cheapest per VM (seed 002 eq. (7)) first; the others are left out.", minimum=1),
    Option("policy-host-selection", "scheduling", str, "greedy",
           "`greedy`: prefer nodes with the image (reuse), then nodes hosting more VMs; the "
           "classes in `hostselection.POLICIES`.", ("greedy",)),
    Option("transfer-mechanism", "deploy-imagetransfer", str, "unicast",
           "`unicast` (one transfer per node) or `multicast` (one transfer per image for all "
           "nodes of a lease).", ("unicast", "multicast")),
    Option("ar-transfer-strategy", "deploy-imagetransfer", str, "edf-jit",
           "vgrid: AR image staging: `edf` (seed 000 Algorithm 2), `edf-jit` (Algorithm 3), or the "
           "naive `job-style`, `jit`, `aggressive` of seed 000 Section 8.1 (no admission test).",
           ("edf", "edf-jit", "job-style", "jit", "aggressive")),
    Option("avoid-redundant-transfers", "deploy-imagetransfer", bool, True,
           "Piggyback on scheduled transfers of the same image to the same node (seed 000 6.3.1)."),
    Option("multicast-join", "deploy-imagetransfer", bool, False,
           "vgrid (Haizea 1.1's multicast with `avoid-redundant-transfers`): a best-effort lease's "
           "nodes join a best-effort multicast of the same image that has not started, on any "
           "node, and get the image when it ends, instead of a transfer of their own "
           "(`multicastjoin.py`). Only with `transfer-mechanism = multicast` and "
           "`avoid-redundant-transfers`; on for Haizea INI files, off by default."),
    Option("besteffort-staging-attempts", "deploy-imagetransfer", int, 0,
           "vgrid: placements tried for a best-effort lease whose image transfers (one per node, "
           "back to back in the FIFO queue) end after the start first assumed; each retry waits "
           "for the nodes' real ready time. 0 = one more than the number of nodes (a multi-node "
           "lease on an idle site needs that many, the default; with fewer it can stay queued until the next event, "
           "or for ever if none comes: seed 000 Traces III/IV).", minimum=0),
    Option("diskimage-reuse", "deploy-imagetransfer", str, "image-caches",
           "`none` (every lease gets its own transfer, deleted at its end) or `image-caches` "
           "(per-node image pools, seed 000 Algorithm 4).", ("none", "image-caches")),
    Option("diskimage-cache-size", "deploy-imagetransfer", float, 0.0,
           "Image pool size per node in MB; 0 = unlimited. Unused images are evicted (least "
           "recently used first) to make room.", minimum=0.0),
    Option("diskimage-cache-full", "deploy-imagetransfer", str, "fail",
           "vgrid: what a placement does when an image finds no room in a node's pool even after "
           "evicting every unpinned image: `fail` (vgrid's default: the placement fails and the "
           "lease waits for the next queue pass; an AR is rejected) or `uncached` (Haizea 1.1's "
           "`_add_diskimages`: the lease gets its own copy outside the pool, deleted when it ends, "
           "and the pool is unchanged; on for Haizea INI files). See docs/leasing.md.",
           ("fail", "uncached")),
    Option("diskimage-cache-expire", "deploy-imagetransfer", bool, False,
           "vgrid: remove an image from the pool at its expiration time (strict Algorithm 4) "
           "instead of keeping it until evicted."),
    Option("diskimage-copy", "deploy-imagetransfer", str, "cow",
           "vgrid: VMs use the pool image by copy-on-write (`cow`) or through a full local copy "
           "(`copy`, takes image size / `diskimage-copy-rate` s before the VM starts).", ("cow", "copy")),
    Option("diskimage-copy-rate", "deploy-imagetransfer", float, 100.0,
           "vgrid: local copy speed in MB/s for `diskimage-copy = copy`.", minimum=1e-9),
    Option("imagetransfer-bandwidth", "simulation", float, 100.0,
           "Bandwidth of the image repository in Mb/s (Haizea's unit: 100 = 12.5 MB/s).", minimum=1e-9),
    Option("imagetransfer-link", "simulation", str, "separate",
           "vgrid: `separate` links for AR and best-effort transfers (seed 000's assumption) or one "
           "`shared` link (best-effort transfers fill gaps between AR transfers).", ("separate", "shared")),
    Option("imagetransfer-bandwidth-ar", "simulation", float, 0.0,
           "vgrid: bandwidth in Mb/s reserved for AR transfers (0 = imagetransfer-bandwidth). "
           "AR and best-effort transfers use separate links (seed 000's assumption).", minimum=0.0),
    Option("imagetransfer-bandwidth-be", "simulation", float, 0.0,
           "vgrid: bandwidth in Mb/s for best-effort transfers (0 = imagetransfer-bandwidth).", minimum=0.0),
    Option("stop-when", "simulation", str, "all-leases-done",
           "`all-leases-done`, `besteffort-done` (stop when the queue and all best-effort leases "
           "are done), `besteffort-submitted` (when every best-effort lease has been submitted) "
           "or `exact` (at `stop-when-time`); Haizea 1.1's four.",
           ("all-leases-done", "besteffort-done", "besteffort-submitted", "exact")),
    Option("add-overhead", "tracefile", str, "none",
           "Which leases get `runtime-slowdown-overhead` and `bootshutdown-overhead` added to their "
           "durations when a simulation starts: `none`, `besteffort` or `all` (Haizea's tracefile "
           "frontend; `tracefile.apply_overheads`).", ("none", "besteffort", "all")),
    Option("runtime-slowdown-overhead", "tracefile", float, 0.0,
           "Percent by which a VM runs slower than the bare machine: requested and real durations "
           "grow by this percentage, rounded to the second (HPDC'08: 5). Haizea 1.1 scales only "
           "the requested duration (docs/leasing.md).", minimum=0.0),
    Option("runtime-slowdown-rule", "tracefile", str, "vm-slower",
           "vgrid: how `runtime-slowdown-overhead` applies: `vm-slower` (vgrid: requested and real "
           "durations both grow, the VM runs slower) or `haizea` (Haizea 1.1's `incr_by_percent`: "
           "the requested duration becomes round(real x (1 + pct)) when the real one is known, "
           "round(requested x (1 + pct)) otherwise; the real one stays). Haizea files default "
           "to `haizea`.", ("vm-slower", "haizea")),
    Option("bootshutdown-overhead", "tracefile", float, 0.0,
           "Seconds added to every lease's requested and real duration for booting and shutting "
           "down its VMs (HPDC'08: 20).", minimum=0.0),
)

_BY_NAME = {o.name: o for o in OPTIONS}


#: ``[general] compat`` value selecting Haizea 1.1's behaviour (``compat.py``, ``compat_staging.py``).
HAIZEA_11 = "haizea-1.1"
#: Version of the Haizea-compatible rules: bump it with any change to what compat mode schedules
#: (compat.py, compat_staging.py, ...). Sweep keys of compat runs include it, so a store
#: recomputes exactly those runs (``sweepspec.SimRun.key``); own-mode keys do not change.
COMPAT_RULES = 11


def haizea(cfg) -> bool:
    """Whether ``cfg`` (a LeaseConfig) selects Haizea 1.1's behaviour (``compat = "haizea-1.1"``)."""
    return cfg.compat == HAIZEA_11


class LeaseConfig:
    """Validated option values; attribute access uses underscores (``cfg.suspend_rate``)."""

    def __init__(self, values: dict | None = None, source: str = "<config>") -> None:
        self._values = {o.name: o.default for o in OPTIONS}
        for name, value in (values or {}).items():
            self._set(name, value, source)

    @classmethod
    def from_mapping(cls, values: dict, source: str = "<config>") -> "LeaseConfig":
        return cls(values, source)

    def _set(self, name: str, value, source: str) -> None:
        opt = _BY_NAME.get(name)
        if opt is None:
            raise ConfigError(f"{source}: unknown option {name!r}")
        if opt.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if opt.type is bool and isinstance(value, str):
            value = {"true": True, "false": False}.get(value.lower(), value)
        if not isinstance(value, opt.type) or (opt.type is int and isinstance(value, bool)):
            raise ConfigError(f"{source}: [{opt.section}] {name} must be {opt.type.__name__}, got {value!r}")
        if opt.choices and value not in opt.choices:
            raise ConfigError(f"{source}: [{opt.section}] {name} = {value!r}; expected one of {', '.join(opt.choices)}")
        if opt.minimum is not None and value < opt.minimum:
            raise ConfigError(f"{source}: [{opt.section}] {name} must be >= {opt.minimum}, got {value!r}")
        self._values[name] = value
        self.__dict__.pop(name.replace("-", "_"), None)   # a value __getattr__ kept

    def with_options(self, **overrides) -> "LeaseConfig":
        """A copy with some options changed (underscores or dashes in names)."""
        vals = dict(self._values)
        new = LeaseConfig()
        new.__dict__.clear()
        new._values = vals
        for k, v in overrides.items():
            new._set(k.replace("_", "-"), v, "<override>")
        return new

    def get(self, name: str):
        return self._values[name]

    def __getattr__(self, attr: str):
        """An option's value by its name with underscores; kept as an instance attribute, so the
        next read is a plain one (``_set`` drops it): ``cfg.compat`` was read per lease and
        pass, 3-4 % of a VM-REUSE run's samples (issue 16, session 10)."""
        name = attr.replace("_", "-")
        try:
            value = self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(attr) from None
        self.__dict__[attr] = value
        return value

    def as_dict(self) -> dict:
        return dict(self._values)

    @property
    def max_future_reservations(self) -> float:
        return {"off": 0, "aggressive": 1, "conservative": float("inf"),
                "intermediate": self.backfilling_reservations}[self.backfilling]

    def link_bandwidth_mbs(self, link: str) -> float:
        """Bandwidth of the AR (``"ar"``) or best-effort (``"be"``) link in MB/s."""
        if self.imagetransfer_link == "shared":
            return self.imagetransfer_bandwidth / 8.0
        mbps = self.imagetransfer_bandwidth_ar if link.startswith("ar") else self.imagetransfer_bandwidth_be
        return (mbps or self.imagetransfer_bandwidth) / 8.0


def load_config(path: str | Path) -> LeaseConfig:
    """Read a TOML file with Haizea-style sections; raises ConfigError naming the file and line."""
    p = Path(path)
    data = read_toml(p, ConfigError)
    flat = {}
    for section, body in data.items():
        if not isinstance(body, dict):
            flat[section] = body
            continue
        for name, value in body.items():
            opt = _BY_NAME.get(name)
            if opt is not None and opt.section != section:
                raise ConfigError(f"{p}: option {name!r} belongs in [{opt.section}], not [{section}]")
            flat[name] = value
    cfg = LeaseConfig(flat, str(p))
    if cfg.stop_when == "exact" and cfg.stop_when_time < 0:
        raise ConfigError(f"{p}: [simulation] stop-when = 'exact' needs stop-when-time (seconds)")
    return cfg


def options_markdown() -> str:
    """The option table for docs/leasing.md."""
    lines = ["| section | option | default | meaning |", "|---|---|---|---|"]
    for o in OPTIONS:
        lines.append(f"| {o.section} | `{o.name}` | `{o.default}` | {o.doc} |")
    return "\n".join(lines)
