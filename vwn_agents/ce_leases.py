"""The CE agent's lease scheduling (``scheduler = "leases"``): every job becomes a lease.

A job is a one-VM lease in the live lease engine (``vwn_agents.lease_engine.LeaseEngine``,
docs/leasing.md) over the CE's node agents. Its kind and size come from the JDL lease
attributes (docs/jdl.md, "vgrid extensions for leases"): best-effort by default,
``LeaseType = "advance-reservation"`` with ``LeaseStart``, ``"immediate"``; ``LeaseDuration``
(else the CE's ``max_wallclock_s``) is the reservation, and the VWN is deleted when it ends.

VWN fair share (seed 004, Sections 5.1 and 6.2.2, "at most K VWNs, then a queue"): a job lease
asks for 1/K of a node's CPU units (K = ``vwns_per_node``) and, without ``VMMemory``, 1/K of its
memory, so at most K VWNs run on a node and further jobs wait in the engine's queue; the node
agent still caps the VWNs that run at C/n of the node, so fewer than K jobs get more each.

``LeaseScheduling`` is the CE agent's adapter: ``lease_request`` (JDL -> request, 400 naming the
attribute for what the CE cannot honour), ``submit``, ``tick`` (start/end what is due), ``view``
(the lease as ``GET /jobs/<key>`` shows it), ``outcome`` (what happened to a lease that ended
without a node event, as an ``Outcome`` code and a reason: rejected, killed at its wall-clock
limit, preempted), ``glue_numbers``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from vgrid_runtime.httpjson import ApiError
from vgrid_runtime.outcomes import Outcome
from .leasing.config import LeaseConfig, load_config
from .lease_engine import LeaseEngine, lease_args_from_jdl
from .leasing.model import LeaseState
from .images.staging import image_name, image_size_mb, image_staging
from .ce_migration import LeaseMigration
from .rate_feedback import MeasuredRates

#: GlueCEStateEstimatedResponseTime when no job could ever start here (gLite's "infinite").
ERT_INFINITE_S = 2146660842

#: Lease-engine options the CE agent sets: without ``suspend_vwns`` preempted leases are not
#: suspended (their VWNs are deleted and restarted); with it a suspended lease resumes where its
#: frozen VWNs are (no migration), unless ``migrate_vwns`` (``ce_migration``: cold migration).
LIVE_OVERRIDES = {"suspension": "none"}
SUSPEND_OVERRIDES = {"migration": "no"}

#: The reason of a job whose preempted lease goes back to the queue (``Outcome.REQUEUED``).
REQUEUED_REASON = ("preempted by an advance reservation: its VWN was deleted; it restarts in a new VWN "
                   "when its lease starts again")


@dataclass(frozen=True)
class JobLeaseRequest:
    """The lease of one job: ``kind`` "best-effort" | "advance-reservation" | "immediate";
    ``cpu`` in hundredths of a core, ``memory_mb`` MB, ``duration_s`` s (``duration_from`` says
    whether it is the JDL's LeaseDuration or the CE's max_wallclock_s), ``start_s`` clock seconds
    (ARs), ``preemptible``, ``image`` (VMImage: staged live to the node's image pool when the CE
    has an ``image_repository``, else recorded only), ``image_mb`` (VMImageSize, else the
    repository's size) and ``restarts`` (PreemptionClass "suspendable" or "migratable": a
    preempted job goes back to the queue and restarts in a new VWN; "cancellable": it is aborted);
    ``request_type`` (PreemptionClass, seed 002 Section 4.2), ``local`` (RequestOrigin "local")
    and ``deadline_s`` (LeaseDeadline, clock seconds) for the engine's seed 002 policies."""

    kind: str
    cpu: int
    memory_mb: int
    duration_s: float
    duration_from: str
    start_s: float | None = None
    preemptible: bool = False
    image: str | None = None
    image_mb: float = 0.0
    restarts: bool = False
    request_type: str | None = None
    local: bool = False
    deadline_s: float | None = None

    def engine_args(self) -> dict:
        """``LeaseEngine.submit_job`` keyword arguments (one VM)."""
        return {"vms": 1, "cpu": self.cpu, "memory_mb": self.memory_mb, "duration_s": self.duration_s,
                "start_s": self.start_s, "immediate": self.kind == "immediate",
                "preemptible": self.preemptible, "image_id": self.image or "node-software",
                "image_mb": self.image_mb, "request_type": self.request_type, "local": self.local,
                "deadline_s": self.deadline_s}

    def to_json(self) -> dict:
        return {"type": self.kind, "cpu": self.cpu, "memory_mb": self.memory_mb,
                "duration_s": self.duration_s, "duration_from": self.duration_from,
                "requested_start_s": self.start_s, "preemptible": self.preemptible,
                "image": self.image, "image_mb": self.image_mb, "restarts": self.restarts,
                "request_type": self.request_type, "origin": "local" if self.local else "external",
                "deadline_s": self.deadline_s}


def lease_request_from_json(d: dict) -> JobLeaseRequest:
    """The ``JobLeaseRequest`` of ``JobLeaseRequest.to_json()`` (the CE agent's database)."""
    return JobLeaseRequest(d["type"], int(d["cpu"]), int(d["memory_mb"]), float(d["duration_s"]),
                           d["duration_from"], d.get("requested_start_s"), bool(d.get("preemptible")),
                           d.get("image"), float(d.get("image_mb") or 0.0), bool(d.get("restarts")),
                           d.get("request_type"), d.get("origin") == "local", d.get("deadline_s"))


def vwn_slot_units(cpus_per_node: int, vwns_per_node: int) -> int:
    """CPU units (hundredths of a core) one job lease asks for: floor(cpus x 100 / K).
    The engine's node capacity is K times this, so exactly K job leases fit on a node.
    ValueError when K exceeds the node's CPU units."""
    units = (cpus_per_node * 100) // vwns_per_node
    if units < 1:
        raise ValueError(f"vwns_per_node = {vwns_per_node} is more than {cpus_per_node * 100} "
                         "(a VWN needs at least 1/100 of a core)")
    return units


def _bad(desc, name: str, message: str) -> ApiError:
    d = desc.ad.attrs.get(name.lower())
    line = getattr(getattr(d, "expr", None), "line", None)
    column = getattr(getattr(d, "expr", None), "column", None)
    where = f"{desc.filename}:{line}:{column}: " if line else f"{desc.filename}: "
    return ApiError(400, where + message, file=desc.filename, line=line, column=column, field=name)


class LeaseScheduling:
    """The lease engine behind one CE agent (see module doc). Thread-safe (the engine locks);
    the CE agent never calls it while holding its own lock."""

    def __init__(self, config, clock, nodes: list[str], session=None, on_start=None) -> None:
        self.k = config.vwns_per_node
        self.slot = vwn_slot_units(config.cpus_per_node, self.k)
        self.ram_mb = config.ram_mb
        self.default_memory_mb = max(1, config.ram_mb // self.k)
        self.max_wallclock_s = config.max_wallclock_s
        self.boot_lead = float(getattr(config, "vm_boot_lead_s", 0.0))
        base = load_config(config.lease_config) if config.lease_config else LeaseConfig()
        suspend = self.suspend_vwns = bool(getattr(config, "suspend_vwns", True))
        migrate = self.migrate_vwns = suspend and bool(getattr(config, "migrate_vwns", False))
        lease_cfg = base if migrate else base.with_options(**(SUSPEND_OVERRIDES if suspend else LIVE_OVERRIDES))
        site = [(url, self.slot * self.k / 100.0, config.ram_mb) for url in nodes]
        self.images, staging = image_staging(config, session)   # live staging (images/staging.py)
        if staging is not None:
            lease_cfg = lease_cfg.with_options(lease_preparation="imagetransfer")
        probe_s = min(config.node_timeout_s, max(0.2, config.node_down_after_s / 2))
        self.engine = LeaseEngine(site, lease_cfg, clock, session=session,
                                  default_duration_s=config.max_wallclock_s,
                                  node_down_after_s=config.node_down_after_s,
                                  probe_timeout_s=probe_s,
                                  request_timeout_s=config.node_timeout_s,
                                  on_start=on_start, suspend_vwns=suspend, staging=staging) if site else None
        self.clock = clock
        self.rates = MeasuredRates() if getattr(config, "measured_rates", True) and suspend else None
        self.migration = (LeaseMigration(lease_cfg, self.rates, config.migration_attempts, timeout_s=
                                         config.migration_timeout_s) if migrate else None)
        if self.engine is not None:
            self.engine.enactment.rates, self.engine.enactment.migration = self.rates, self.migration
        self.decision_sink = None             # decision_log: why each lease went where (decision_file)
        if self.engine is not None and getattr(config, "decision_log", ""):
            from .decision_file import attach
            try:
                self.decision_sink = attach(self.engine, config.decision_log, config.decision_log_max_mb)
            except OSError as exc:
                raise ValueError(f"field 'decision_log': {config.decision_log}: {exc.strerror}") from None

    def close(self) -> None:
        """Close the decision log (the engine itself holds nothing to release)."""
        if self.decision_sink is not None:
            self.decision_sink.close()

    # -- requests ---------------------------------------------------------------------------------

    def lease_request(self, desc) -> JobLeaseRequest:
        """The lease of a parsed job. Raises ApiError 400 naming the attribute (and its position)
        for values the jdl package accepts but this CE cannot honour: LeaseDuration above the
        CE's max_wallclock_s, VMMemory above a node's memory, an unreadable or past LeaseStart."""
        try:
            args = lease_args_from_jdl(desc)
        except ValueError as exc:
            raise _bad(desc, str(exc).split(" ", 1)[0], str(exc)) from None
        kind = str(desc.get("LeaseType") or "best-effort").lower()
        duration = args.get("duration_s")
        if duration is not None and duration > self.max_wallclock_s:
            raise _bad(desc, "LeaseDuration", f"LeaseDuration {duration} s is more than this CE's "
                       f"GlueCEPolicyMaxWallClockTime ({self.max_wallclock_s} s)")
        memory = args.get("memory_mb")
        if memory is not None and memory > self.ram_mb:
            raise _bad(desc, "VMMemory", f"VMMemory {memory} MB is more than a node's memory "
                       f"({self.ram_mb} MB, GlueHostMainMemoryRAMSize)")
        if args.get("image_id") and self.images is not None:   # staged from the CE's repository
            args["image_id"] = image_name(args["image_id"])
            if not args.get("image_mb"):
                args["image_mb"] = image_size_mb(self.images, desc, args["image_id"], _bad)
        start = args.get("start_s")
        if start is not None and start < self.clock.now():
            raise _bad(desc, "LeaseStart", f"LeaseStart {desc.get('LeaseStart')!r} is in the past")
        length = float(duration or self.max_wallclock_s)
        if start is not None:                      # VMs booted at LeaseStart (vm_boot_lead_s)
            early = max(self.clock.now(), start - self.boot_lead_s())
            start, length = early, length + (start - early)
        preemptible = args.get("preemptible", False) and kind == "best-effort"
        restarts = preemptible and str(desc.get("PreemptionClass") or "").lower() in ("suspendable", "migratable")
        deadline = args.get("deadline_s")
        if deadline is not None and deadline < (start if start is not None else self.clock.now()) + length:
            raise _bad(desc, "LeaseDeadline", f"LeaseDeadline {desc.get('LeaseDeadline')!r} is before the "
                       f"lease's start + duration ({length:g} s)")
        return JobLeaseRequest(kind, self.slot, int(memory or self.default_memory_mb), length,
                               "LeaseDuration" if duration is not None else "max_wallclock_s",
                               start, preemptible, args.get("image_id"), float(args.get("image_mb") or 0.0),
                               restarts, args.get("request_type"), bool(args.get("local")), deadline)

    def boot_lead_s(self) -> float:
        """How long before its LeaseStart an advance reservation's lease starts (s): the CE's
        ``vm_boot_lead_s``, or with -1 the longest boot its node agents measured (their GET /status
        ``driver.max_boot_s``; 0 before any)."""
        if self.boot_lead >= 0 or self.engine is None:
            return max(0.0, self.boot_lead)
        return max(self.engine.enactment.boot_s.values(), default=0.0)

    def submit(self, key: str, body: dict, req: JobLeaseRequest, attempts: int = 0) -> dict:
        """Submit the job's lease (idempotent on key; ``attempts``: start attempts made before a
        restart). A node agent's HTTP error propagates (the lease stays due, retried by ``tick``)."""
        return self.engine.submit_job(key, body, attempts=attempts, **req.engine_args())

    def known(self, key: str) -> bool:
        try:
            self.engine.status(key)
            return True
        except KeyError:
            return False

    def job_of(self, vwn_key: str) -> tuple[str, bool] | None:
        """``(job key, current)`` of a VWN key the engine gave a node agent (``<key>``,
        ``<key>-r2`` ...), or None; ``LeaseEngine.job_of``."""
        return self.engine.job_of(vwn_key) if self.engine is not None else None

    def suspension(self) -> dict:
        """``{"suspend_vwns": bool, "nodes": {url: {"freezer","live","reason"}}}`` for GET /status."""
        out = {"suspend_vwns": self.suspend_vwns, "migrate_vwns": self.migrate_vwns,
               "nodes": self.engine.suspension() if self.engine is not None else {}}
        if self.rates is not None and self.engine is not None:
            out["rates"] = self.rates.view(self.engine.config)
        if self.migration is not None:
            out["migrations"] = self.migration.view()
        return out

    def ran_s(self, key: str) -> float | None:
        """Seconds job ``key``'s lease has run (``Lease.time_run``), None if unknown."""
        return self.engine.ran_s(key) if self.engine is not None else None

    def nodes_up(self) -> dict[str, bool]:
        """Node agent URL -> up (False while the engine has the node marked down)."""
        return dict(self.engine.nodes_up()) if self.engine is not None else {}

    # -- state -----------------------------------------------------------------------------------

    def view(self, key: str) -> dict | None:
        """``{"id","state","start_s","end_s","nodes","vwns","reason","start_error","attempts"}`` of
        the job's lease (start/end in clock seconds, nodes = node agent URLs, start_error = why
        its last start attempt failed, attempts = start attempts so far), or None."""
        if self.engine is None:
            return None
        try:
            st = self.engine.status(key)
        except KeyError:
            return None
        return {"id": st["lease_id"], "state": st["state"], "start_s": st["start_s"],
                "end_s": st["end_s"], "nodes": st["nodes"], "vwns": st["vwns"],
                "reason": st["reason"] or None, "start_error": st["start_error"],
                "attempts": st["attempts"], "frozen": st.get("frozen", False),
                "vms_kept": st.get("vms_kept", False),
                "migration_failed": self.migration.failed.get(st["lease_id"]) if self.migration else None}

    @staticmethod
    def outcome(req: JobLeaseRequest, st: dict) -> tuple[Outcome, str] | None:
        """Why a job whose lease is in ``st`` (``view``) must end now without a node event, as
        ``(code, reason)``, or None. Rejected: ``LEASE_REJECTED``; Done at its planned end:
        ``WALLCLOCK_LIMIT`` (killed at the wall-clock limit); started and back in the queue:
        ``PREEMPTED`` (by an advance reservation); cancelled by the engine with a reason (a
        Best-Effort-Cancellable lease a local request preempted, seed 002): ``PREEMPTED``."""
        state = LeaseState(st["state"])
        if st.get("migration_failed"):
            return Outcome.MIGRATION_FAILED, st["migration_failed"]
        if state is LeaseState.REJECTED:
            if req.kind == "immediate":
                return Outcome.LEASE_REJECTED, ("immediate lease rejected: it cannot start now (every "
                                                "node already runs its VWNs or is reserved)")
            if req.kind == "advance-reservation":
                return Outcome.LEASE_REJECTED, f"advance reservation rejected: {st['reason']}"
            return Outcome.LEASE_REJECTED, f"lease rejected: {st['reason']}"
        if state is LeaseState.DONE and st["start_s"] is not None and st["end_s"] is not None \
                and st["end_s"] - st["start_s"] >= req.duration_s - 1e-3:
            limit = "LeaseDuration" if req.duration_from == "LeaseDuration" else "the CE's max_wallclock_s"
            return Outcome.WALLCLOCK_LIMIT, (f"killed at its wall-clock limit: the lease's {req.duration_s:g} s "
                                             f"({limit}) ended and its VWN was deleted")
        if state is LeaseState.CANCELLED and st["reason"]:   # the engine's, not the job's cancel (seed 002:
            return Outcome.PREEMPTED, f"{st['reason']}: its VWN was deleted"   # a local request, issue 15)
        if st["start_s"] is not None and state in (LeaseState.QUEUED, LeaseState.SCHEDULED,
                                                  LeaseState.SUSPENDED) and not st.get("vms_kept"):
            return Outcome.PREEMPTED, "preempted by an advance reservation: its VWN was deleted"
        return None

    def glue_numbers(self) -> tuple[int, int]:
        """(free VWN slots now, estimated response time in s) for a new best-effort job with
        the default size: from ``LeaseEngine.outlook`` (the queue is placed first)."""
        if self.engine is None:
            return 0, ERT_INFINITE_S
        out = self.engine.outlook(self.slot, self.default_memory_mb, self.max_wallclock_s)
        if out["start_s"] is None:
            return out["free_now"], ERT_INFINITE_S
        return out["free_now"], max(0, math.ceil(out["start_s"] - self.clock.now() - 1e-6))
