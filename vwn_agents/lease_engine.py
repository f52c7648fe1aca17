"""The lease engine in live time, for a CE agent: jobs become leases on real node agents.

The same ``LeaseScheduler`` as in simulation, with a ``WallClock`` and ``NodeAgentEnactment``
(``node_enactment``: the node agents, called through ``node_client``). It lives outside
``leasing/`` because it is the CE agent's front end to the engine: job keys, node agent
bodies, events and URLs. How a CE agent uses it (it owns the HTTP front end; this class is thread-safe):

    engine = LeaseEngine([("http://127.0.0.1:8501", 1, 2048), ...], LeaseConfig(...))
    engine.start(interval_s=1.0)          # or call engine.tick() from its own loop
    engine.submit_job(key, body)          # body = the node agent's POST /vwns JSON for this job
    engine.job_event(event)               # every VWN event a node agent posts ("done"/"aborted"
                                          # end the lease early; others are ignored)
    engine.status(key)                    # {"lease_id","state","nodes","vwns","start_s","end_s"}
    engine.cancel(key)

By default a job is a best-effort lease of one VM (one node's CPU share of ``cpu`` = 100 per
core, ``memory_mb``) for ``duration_s`` (its wall-clock limit: when the reservation ends the
VWN is deleted). ``start_s`` makes it an advance reservation; ``immediate=True`` an immediate
lease. Preempted best-effort jobs are cancelled and requeued, unless ``suspend_vwns``: then a
suspendable lease's VWNs are frozen and thawed in place (``node_enactment``). Images are not
staged (``lease-preparation = unmanaged``: VWNs use the node's software) unless ``staging`` (an
``images.staging.LiveStaging``) is given: then the configuration's ``lease-preparation``
holds and the engine's transfers, pins and overlays are enacted on the node agents.

Every start attempt gets fresh VWN keys (``vwn_key``: ``<key>``, ``<key>-r2`` ...); ``job_of``
maps a node event's key back to the job. ``tick`` probes the node agents: one failing for
``node_down_after_s`` is marked down in the scheduler (``LeaseScheduler.set_node_down``) and up
again when it answers (docs/leasing.md, "Node down").
"""
from __future__ import annotations

import datetime
import itertools
import threading

from vgrid_runtime.clock import WallClock

from .leasing import frozenhold
from .leasing.config import LeaseConfig
from .leasing.model import Lease, LeaseState, LeaseType, Node, resource_vector
from .leasing.requesttypes import request_type as parse_request_type
from .leasing.scheduler import LeaseScheduler
from .node_enactment import NodeAgentEnactment


def lease_args_from_jdl(job) -> dict:
    """``submit_job`` keyword arguments from a ``jdl.JobDescription`` (docs/jdl.md, "vgrid
    extensions for leases"): ``CpuNumber``/``NodeNumber`` -> vms, ``VMMemory`` -> memory_mb,
    ``LeaseDuration`` -> duration_s, ``LeaseType`` "advance-reservation" with ``LeaseStart``
    (epoch seconds or ISO 8601) -> start_s, "immediate" -> immediate, ``PreemptionClass``
    "non-preemptable" -> preemptible=False (any other class: True) and request_type (seed 002
    Section 4.2), ``RequestOrigin`` "local" -> local=True, ``LeaseDeadline`` -> deadline_s,
    ``VMImage``/``VMImageSize`` -> image. Absent attributes are left to the engine's defaults (a
    one-VM best-effort lease). Raises ValueError for an unreadable LeaseStart or LeaseDeadline."""
    args: dict = {}
    vms = job.get("CpuNumber") or job.get("NodeNumber")
    if vms:
        args["vms"] = int(vms)
    for attr, name in (("VMMemory", "memory_mb"), ("LeaseDuration", "duration_s"), ("VMImageSize", "image_mb")):
        v = job.get(attr)
        if v is not None:
            args[name] = v
    if job.get("VMImage"):
        args["image_id"] = str(job.get("VMImage"))
    kind = (job.get("LeaseType") or "best-effort").lower()
    if kind == "advance-reservation":
        args["start_s"] = _epoch(job.get("LeaseStart"))
    elif kind == "immediate":
        args["immediate"] = True
    pclass = job.get("PreemptionClass")
    if pclass is not None:
        args["preemptible"] = str(pclass).lower() != "non-preemptable"
        args["request_type"] = str(pclass).lower()
    if str(job.get("RequestOrigin") or "external").lower() == "local":
        args["local"] = True
    if job.get("LeaseDeadline") is not None:
        args["deadline_s"] = _epoch(job.get("LeaseDeadline"), "LeaseDeadline")
    return args


def _epoch(value, name: str = "LeaseStart") -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        text = str(value).strip().replace("Z", "+00:00")
        dt = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{name} {value!r}: expected epoch seconds or ISO 8601") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return dt.timestamp()


def vwn_key(job_key: str, attempt: int, vm: int | None = None) -> str:
    """The key of a job's VWN at start attempt ``attempt`` (1, 2, ...): ``<key>`` first, then
    ``<key>-r2``, ``<key>-r3`` ...; ``-<vm>`` appended for VM ``vm`` of a multi-VM lease. Every
    attempt has its own key because a node agent treats a repeated key as the same VWN."""
    key = job_key if attempt <= 1 else f"{job_key}-r{attempt}"
    return key if vm is None else f"{key}-{vm}"


class LeaseEngine:
    """Live lease engine for a CE agent (see module doc).

    ``nodes``: ``[(node_agent_url, cpus, memory_mb)]``. ``node_down_after_s``: how long a node
    agent may fail before it is marked down; ``probe_timeout_s``: timeout of a probe;
    ``request_timeout_s``: timeout of a ``POST``/``DELETE /vwns`` (all seconds). Raises
    ValueError on an empty list.
    """

    def __init__(self, nodes: list[tuple[str, float, int]], config: LeaseConfig | None = None,
                 clock=None, session=None, default_duration_s: float = 86400.0,
                 node_down_after_s: float = 30.0, probe_timeout_s: float = 2.0,
                 request_timeout_s: float = 10.0, on_start=None, suspend_vwns: bool = False,
                 staging=None) -> None:
        if not nodes:
            raise ValueError("the lease engine needs at least one node agent")
        self.clock = clock or WallClock()
        self.config = config or LeaseConfig()
        if staging is None:       # images are staged live only with a LiveStaging (images/staging.py)
            self.config = self.config.with_options(lease_preparation="unmanaged")
        site = [Node(i, url, (int(round(cpus * 100)), int(mem), 10**12, 10**12))
                for i, (url, cpus, mem) in enumerate(nodes)]
        self._bodies: dict[int, dict] = {}
        self._vwn_keys: dict[str, tuple[str, int]] = {}  # VWN key -> (job key, start attempt)
        self.node_down_after_s = node_down_after_s
        self.probe_timeout_s = probe_timeout_s
        self.enactment = NodeAgentEnactment([url for url, _, _ in nodes], self._payload, session=session,
                                            timeout=request_timeout_s, suspend=suspend_vwns)
        self.scheduler = LeaseScheduler(site, self.config, self.clock, self.enactment)
        self.staging = staging
        if staging is not None:
            self.enactment.staging = staging
            staging.key_of = lambda lease_id: self._bodies.get(lease_id, {}).get("key")
            staging.clock = self.clock
        self.default_duration_s = default_duration_s
        self.on_start = on_start        # on_start(job key, attempt, node URL): before each POST /vwns
        self._ids = itertools.count(1)
        self._by_key: dict[str, Lease] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _payload(self, lease: Lease, vm: int) -> dict:
        body = dict(self._bodies[lease.id])
        job_key = body["key"]
        body["key"] = vwn_key(job_key, self.enactment.attempts.get(lease.id, 1), vm if lease.n_vms > 1 else None)
        self._vwn_keys[body["key"]] = (job_key, self.enactment.attempts.get(lease.id, 1))
        if self.on_start is not None:
            node = lease.mapping[vm] if vm < len(lease.mapping) else None
            self.on_start(job_key, self.enactment.attempts.get(lease.id, 1),
                          None if node is None else self.enactment.node_urls[node])
        return body

    def job_of(self, vwn_key_: str) -> tuple[str, bool] | None:
        """``(job key, current)`` of a VWN key this engine gave a node agent, or None. ``current``
        is False for the VWN of an earlier start attempt, and for the VWN of a lease that was
        stopped and waits in the queue to restart (preempted or re-queued): its events are stale."""
        with self._lock:
            found = self._vwn_keys.get(vwn_key_)
            if found is None:
                return None
            job_key, attempt = found
            lease = self._by_key.get(job_key)
            if lease is None:             # forgotten (forget_job) and not submitted again yet
                return job_key, False
            current = (attempt == self.enactment.attempts.get(lease.id, 0)
                       and (lease.state not in (LeaseState.QUEUED, LeaseState.SCHEDULED, LeaseState.SUSPENDED)
                            or self.enactment.keeps_vms(lease.id)))
            return job_key, current

    def job_key(self, lease_id: int) -> str | None:
        """The job key of lease ``lease_id`` (None for a lease this engine did not make)."""
        return self._bodies.get(lease_id, {}).get("key")

    def submit_job(self, key: str, body: dict, vms: int = 1, cpu: int = 100, memory_mb: int = 512,
                   duration_s: float | None = None, start_s: float | None = None,
                   immediate: bool = False, preemptible: bool | None = None,
                   image_id: str = "node-software", image_mb: float = 0.0,
                   request_type: str | None = None, local: bool = False,
                   deadline_s: float | None = None, attempts: int = 0) -> dict:
        """Make a lease for job ``key`` (idempotent on ``key``) and schedule what is due now.
        Returns ``status(key)``. ``lease_args_from_jdl(job)`` gives the keyword arguments of a
        job with the vgrid JDL lease attributes; ``request_type`` is a seed 002 short name
        (``leasing.requesttypes``), ``local`` p(L) = 0, ``deadline_s`` clock seconds.
        ``attempts``: start attempts the job's lease already made before a restart of the CE
        agent (its next VWN key is attempt + 1, a key no node agent has seen). ValueError for an
        unknown request type, a local request that is not non-preemptable, or a deadline before
        start + duration."""
        with self._lock:
            if key not in self._by_key:
                now = self.clock.now()
                ltype = (LeaseType.ADVANCE_RESERVATION if start_s is not None else
                         LeaseType.IMMEDIATE if immediate else LeaseType.BEST_EFFORT)
                if preemptible is None:
                    preemptible = ltype is LeaseType.BEST_EFFORT
                lease = Lease(next(self._ids), ltype, now, duration_s or self.default_duration_s, vms,
                              resource_vector(cpu=cpu, memory=memory_mb), image_id, image_mb,
                              preemptible=preemptible, requested_start_s=start_s,
                              request_type=parse_request_type(request_type) if request_type else None,
                              local=local, deadline_s=deadline_s)
                self._bodies[lease.id] = dict(body, key=key)
                self._by_key[key] = lease
                if attempts:
                    self.enactment.attempts[lease.id] = attempts
                self.scheduler.submit(lease)
                try:
                    self.scheduler.process(now)
                finally:
                    self._staged(now)
            return self.status(key)

    def _staged(self, now: float) -> None:
        """Live staging's follow-up of a scheduling pass: undelivered pulls, changed pins."""
        if self.staging is not None:
            self.staging.retry(self.enactment, now)
            self.staging.sync_pins(self.enactment, self.scheduler.pools, now)

    def adopt_job(self, key: str, body: dict, node_url: str, vwn: str | None, start_s: float,
                  attempt: int, vms: int = 1, cpu: int = 100, memory_mb: int = 512,
                  duration_s: float | None = None, start_s_requested: float | None = None,
                  immediate: bool = False, preemptible: bool | None = None,
                  image_id: str = "node-software", image_mb: float = 0.0,
                  request_type: str | None = None, local: bool = False,
                  deadline_s: float | None = None, suspended_ran_s: float | None = None) -> dict:
        """Record job ``key``'s lease as running since ``start_s`` (clock s) in VWN ``vwn`` (None
        when not known yet: ``note_vwn``) on ``node_url``, started at attempt ``attempt``
        (its VWN key is ``vwn_key(key, attempt)``): a restarted CE agent re-learning the VWNs
        that kept running (``LeaseScheduler.adopt``; the other arguments as ``submit_job``,
        ``start_s_requested`` = its ``start_s``). ``suspended_ran_s``: the VWN is frozen
        (suspended in place) after its lease ran that many seconds: the lease is adopted
        suspended, its memory held, and its resumption scheduled (``frozenhold.adopt_suspended``).
        Idempotent on ``key``; returns ``status(key)``.
        ValueError for a node URL that is not one of the engine's."""
        with self._lock:
            if key not in self._by_key:
                node = self.enactment.node_urls.index(node_url)
                ltype = (LeaseType.ADVANCE_RESERVATION if start_s_requested is not None else
                         LeaseType.IMMEDIATE if immediate else LeaseType.BEST_EFFORT)
                lease = Lease(next(self._ids), ltype, start_s, duration_s or self.default_duration_s, vms,
                              resource_vector(cpu=cpu, memory=memory_mb), image_id, image_mb,
                              preemptible=ltype is LeaseType.BEST_EFFORT if preemptible is None else preemptible,
                              requested_start_s=start_s_requested,
                              request_type=parse_request_type(request_type) if request_type else None,
                              local=local, deadline_s=deadline_s)
                self._bodies[lease.id] = dict(body, key=key)
                self._by_key[key] = lease
                self.enactment.attempts[lease.id] = attempt
                self._vwn_keys[vwn_key(key, attempt)] = (key, attempt)
                if vwn:
                    self.enactment.vwns[lease.id] = [(node, vwn)]
                if suspended_ran_s is not None and vwn:
                    self.enactment.frozen.add(lease.id)
                    frozenhold.adopt_suspended(self.scheduler, lease, (node,), start_s, suspended_ran_s,
                                               self.clock.now())
                else:
                    self.scheduler.adopt(lease, (node,), start_s)
            return self.status(key)

    def forget_job(self, key: str) -> None:
        """Drop job ``key``'s lease, adopted as running by a restarted CE agent whose node agent
        did not answer then and, answering now, does not list the VWN of its last start attempt
        N: the start never reached the node. The lease is cancelled (no VWN to delete; its slots
        are free) and forgotten, so ``submit_job(key, ..., attempts=N)`` makes it anew (its next
        VWN key is attempt N + 1). Nothing happens for an unknown key."""
        with self._lock:
            lease = self._by_key.pop(key, None)
            if lease is not None:
                self.scheduler.cancel(lease.id)

    def ran_s(self, key: str) -> float | None:
        """Seconds job ``key``'s lease has run so far (its ended VM reservations), or None."""
        with self._lock:
            lease = self._by_key.get(key)
            return None if lease is None else lease.time_run

    def note_vwn(self, key: str, vwn: str) -> None:
        """Job ``key``'s running lease runs in VWN ``vwn`` (learnt from its ``running`` event
        after an adoption without a VWN id), so stopping the lease deletes it."""
        with self._lock:
            lease = self._by_key.get(key)
            if lease is not None and lease.state is LeaseState.ACTIVE and lease.id not in self.enactment.vwns \
                    and lease.mapping:
                self.enactment.vwns[lease.id] = [(lease.mapping[0], vwn)]

    def mark_down(self, node_url: str) -> None:
        """Mark a node down now (the CE agent found it lost), as ``probe_nodes`` does after
        ``node_down_after_s``; it is marked up when it answers a probe again."""
        with self._lock:
            node = self.enactment.node_urls.index(node_url)
            self.enactment.failing_since.setdefault(node, self.clock.now())
            self.scheduler.set_node_down(node, True, self.clock.now())

    def job_event(self, event: dict) -> None:
        """A VWN event from a node agent; "done" and "aborted" end the job's lease."""
        if event.get("event") not in ("done", "aborted"):
            return
        with self._lock:
            found = self.job_of(str(event.get("key", "")))
            if found is None or not found[1]:
                return
            lease = self._by_key[found[0]]
            if lease.done:
                return
            self.enactment.report_end(lease.id, min(float(event.get("time") or self.clock.now()), self.clock.now()))
            self.scheduler.process(self.clock.now())

    def tick(self) -> None:
        """Probe the node agents (``probe_nodes``), then start and end what is due now (call
        every second or so). Raises the first ``NodeAgentError`` of a start that failed (the
        other starts were made; the failed one is retried on the next tick)."""
        self.probe_nodes()
        with self._lock:
            try:
                self.scheduler.process(self.clock.now())
            finally:                      # a failed start must not hold back pulls and pins
                self._staged(self.clock.now())

    def probe_nodes(self) -> None:
        """``GET {node}/status`` on every node agent (timeout ``probe_timeout_s``, outside the
        engine lock). A node failing (connection error, timeout, 5xx) for ``node_down_after_s``
        s or more -- counted from its first failed probe or start -- is marked down in the
        scheduler (``LeaseScheduler.set_node_down``: not offered to new leases, its leases that
        have not started are requeued onto the others); a down node that answers is marked up."""
        answers = [(node, self.enactment.probe(node, self.probe_timeout_s))
                   for node in range(len(self.enactment.node_urls))]
        with self._lock:
            now = self.clock.now()
            if self.enactment.rates is not None:      # measured rates (rate_feedback)
                self.enactment.rates.apply(self.scheduler, self.config)
            for node, ok in answers:
                self.enactment.answered(node, ok, now)
                since = self.enactment.failing_since.get(node)
                down = since is not None and now - since >= self.node_down_after_s - 1e-9
                if ok or down:
                    self.scheduler.set_node_down(node, down, now)

    def suspension(self) -> dict:
        """``NodeAgentEnactment.suspension``: per node URL, whether suspensions freeze VWNs."""
        with self._lock:
            return self.enactment.suspension()

    def nodes_up(self) -> list[tuple[str, bool]]:
        """``[(node agent URL, up)]`` in configuration order (up: not marked down)."""
        with self._lock:
            down = self.scheduler.st.down
            return [(url, i not in down) for i, url in enumerate(self.enactment.node_urls)]

    def cancel(self, key: str) -> dict:
        """Cancel a job's lease (its VWNs are deleted). KeyError if the key is unknown."""
        with self._lock:
            self.scheduler.cancel(self._by_key[key].id)
            self.scheduler.process(self.clock.now())
            return self.status(key)

    def status(self, key: str) -> dict:
        """``{"lease_id","state","nodes","vwns","start_s","end_s","reason","start_error","attempts"}``
        (start_error: why the last start attempt failed, None after a start; attempts: start
        attempts so far); KeyError if unknown."""
        with self._lock:
            lease = self._by_key[key]
            vwns = self.enactment.vwns.get(lease.id, [])
            nodes = sorted({self.scheduler.nodes[n].name for n in lease.mapping}) if lease.mapping else []
            return {"lease_id": lease.id, "state": lease.state.value, "nodes": nodes,
                    "vwns": [v for _, v in vwns], "start_s": lease.start_s, "end_s": lease.end_s,
                    "reason": lease.reject_reason, "start_error": self.enactment.start_errors.get(lease.id),
                    "attempts": self.enactment.attempts.get(lease.id, 0),
                    "frozen": lease.id in self.enactment.frozen,
                    "vms_kept": self.enactment.keeps_vms(lease.id)}

    def slot_table(self, history_s: float = 600.0) -> dict:
        """The slot table and the run segments of the last ``history_s`` s as JSON, for the
        dashboard (``slot_view.slot_view``; CE agent ``GET /site``)."""
        from .slot_view import slot_view
        return slot_view(self, self.clock.now(), history_s)

    def staging_report(self) -> list[dict]:
        """Per image transfer and node: scheduled vs actual start/end, bytes, hit
        (``images.staging.LiveStaging.report``); [] without live staging. Calls the node agents."""
        return self.staging.report(self.enactment) if self.staging is not None else []

    def outlook(self, cpu: int = 100, memory_mb: int = 512, duration_s: float | None = None) -> dict:
        """What one more one-VM best-effort lease (``cpu`` hundredths of a core, ``memory_mb``
        MB, ``duration_s`` s, default the engine's) would get if it were submitted now, without
        submitting it: ``{"start_s": its earliest start (clock seconds) or None when no node
        can ever host it, "free_now": how many such VMs could start now}``. The queued leases
        are placed first (FCFS, each at its earliest start) inside a slot-table transaction
        that is rolled back. Used by the CE agent for GlueCEStateEstimatedResponseTime and
        GlueCEStateFreeCPUs."""
        from .leasing.besteffort import place_besteffort
        with self._lock:
            sched, now = self.scheduler, self.clock.now()
            need = resource_vector(cpu=cpu, memory=memory_mb)
            length = duration_s or self.default_duration_s
            tx = sched.st.begin()
            # what-if placements are rolled back, so never logged (DecisionLog writes on commit);
            # without the log they are not explained either (its cost per queued lease)
            decisions, sched.decisions = sched.decisions, None
            try:
                for lease in list(sched.queue):
                    place_besteffort(sched, lease, now, allow_future=True)
                free = sched.mapper.count_now(need, now, length)
                found = sched.mapper.earliest(need, 1, length, now)
            finally:
                sched.st.rollback(tx)
                sched.decisions = decisions
            return {"start_s": None if found is None else float(found[0]), "free_now": int(free)}

    def start(self, interval_s: float = 1.0) -> None:
        """Run ``tick()`` every ``interval_s`` seconds in a daemon thread until ``stop()``."""
        def loop():
            while not self._stop.wait(interval_s):
                try:
                    self.tick()
                except Exception:  # a node agent being down must not kill the ticker
                    continue
        self._thread = threading.Thread(target=loop, name="lease-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
