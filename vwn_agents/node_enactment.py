"""Real enactment of the lease engine on vgrid node agents (``leasing.enactment.Enactment``).

``NodeAgentEnactment`` turns the scheduler's VM starts and stops into node agent calls through
``node_client.NodeAgentClient`` (docs/architecture.md): ``POST {node}/vwns`` per VM to start,
``DELETE {node}/vwns/<vwn>`` to stop. With ``suspend=False`` (default) ``supports_suspend`` is
False and the scheduler cancels and requeues preempted leases instead. With ``suspend=True`` a
preempted suspendable lease's VWNs are frozen in place (``POST {node}/vwns/<vwn>/suspend`` when
its VM reservation ends, ``vms_paused``) and thawed when it resumes (``resume_vms``: ``/resume``;
the next ``start_vms`` of that lease then starts nothing, it already runs). A VWN that cannot be
frozen (no freezer, node down) is deleted, and a lease resumed on other nodes than its frozen
VWNs' (live migration: issue 14) has them deleted: either way it restarts in new VWNs.
Node-agent "done"/"aborted" events reach it through ``report_end(lease_id, time)``.
"""
from __future__ import annotations

import threading

from vgrid_runtime.httpclient import new_session

from .leasing.model import Lease
from .node_client import NodeAgentClient, NodeAgentError


class NodeAgentEnactment:
    """Real enactment on vgrid node agents over HTTP (see module doc).

    ``node_urls[i]`` is the base URL of the node agent of site node i (the list may be changed
    in place: clients are made per URL); ``payload(lease, vm)`` returns the ``POST /vwns`` body
    for VM number ``vm`` of a lease (the CE agent builds it from the job); ``session`` is a
    ``requests.Session`` shared by the node clients; ``timeout`` bounds each call (seconds).
    A failed start raises ``NodeAgentError`` to the caller of the scheduler.
    """

    def __init__(self, node_urls: list[str], payload, session=None, timeout: float = 10.0,
                 suspend: bool = False) -> None:
        self.supports_suspend = suspend
        self.suspends_in_place = suspend  # frozen VWNs keep their memory (leasing.frozenhold)
        self.frozen: set[int] = set()     # leases whose VWNs are suspended (frozen) on their nodes
        self.resumed: set[int] = set()    # leases thawed by resume_vms, not yet "started" again
        self.freezers: dict[int, dict] = {}  # node -> its GET /status "freezer" {"version","reason"}
        self.boot_s: dict[int, float] = {}   # node -> its GET /status driver.max_boot_s (s)
        self.node_urls = node_urls
        self.payload = payload
        self.session = session or new_session()
        self.timeout = timeout
        self._clients: dict[str, NodeAgentClient] = {}
        self.vwns: dict[int, list[tuple[int, str]]] = {}
        self.attempts: dict[int, int] = {}          # lease id -> start attempts so far
        self.failing_since: dict[int, float] = {}   # node -> clock s of its first unanswered call
        self.last_answer: dict[int, float] = {}     # node -> clock s of its last answer
        self.start_errors: dict[int, str] = {}      # lease id -> why its last start attempt failed
        self._ended: list[tuple[float, int]] = []
        self._lock = threading.Lock()
        self.staging = None    # images.staging.LiveStaging: live image transfers and overlays, or None
        self.migration = None  # ce_migration.LeaseMigration: cold migration of suspended VMs, or None
        self.rates = None      # rate_feedback.MeasuredRates: rates read from the nodes' GET /status, or None
        self.abandoned: set[int] = set()   # leases whose migration failed: never started again

    def client(self, node: int) -> NodeAgentClient:
        """The client of site node ``node``'s agent (at its current URL)."""
        url = self.node_urls[node]
        if url not in self._clients:
            self._clients[url] = NodeAgentClient(url, session=self.session, timeout_s=self.timeout)
        return self._clients[url]

    def start_vms(self, lease: Lease, mapping: tuple, now: float, planned_end: float) -> None:
        """POST one VWN per VM; each call is a new start attempt (``attempts[lease.id]`` + 1,
        which ``payload`` reads to give the VWNs fresh keys). No answer, a timeout or a 5xx
        marks the node failing since ``now`` (``failing_since``); an answer clears it. Raises
        NodeAgentError (its text is kept in ``start_errors[lease.id]``)."""
        if lease.id in self.resumed:               # thawed by resume_vms: it runs already
            self.resumed.discard(lease.id)
            return
        if lease.id in self.abandoned:             # its migration failed: it ends (ce_migration)
            self.report_end(lease.id, now)
            return
        self.attempts[lease.id] = self.attempts.get(lease.id, 0) + 1
        started = []
        for vm, node in enumerate(mapping):
            try:
                body = self.payload(lease, vm)
                if self.staging is not None:               # the VM's disk: an overlay on the pooled image
                    body["image"] = self.staging.before_vm(self, lease, node, body["key"])
                info = self.client(node).create_vwn(body)
            except NodeAgentError as exc:
                self.answered(node, exc.answered, now)
                self.start_errors[lease.id] = str(exc)
                raise
            self.answered(node, True, now)
            started.append((node, info["vwn"]))
        self.vwns[lease.id] = started
        self.start_errors.pop(lease.id, None)

    def answered(self, node: int, ok: bool, now: float) -> None:
        """Record whether node ``node`` answered (``ok``) or failed at ``now`` (clock s)."""
        if ok:
            self.failing_since.pop(node, None)
            self.last_answer[node] = now
        else:
            self.failing_since.setdefault(node, now)

    def probe(self, node: int, timeout_s: float) -> bool:
        """``GET {node}/status`` within ``timeout_s`` seconds: True when the node agent answers
        below 500 (it is up), False for no answer, a timeout or a 5xx."""
        try:
            st = self.client(node).status(timeout_s=timeout_s)
        except NodeAgentError as exc:
            return exc.answered
        if isinstance(st, dict) and isinstance(st.get("freezer"), dict):
            self.freezers[node] = st["freezer"]
        if self.rates is not None:
            self.rates.observe_status(self.node_urls[node], st)
        drv = (st.get("driver") or {}) if isinstance(st, dict) else {}
        boot = drv.get("max_boot_s") or drv.get("last_boot_s")
        if isinstance(boot, (int, float)):
            self.boot_s[node] = float(boot)        # a libvirt node's measured boot (ce_leases lead)
        return True

    def can_freeze(self, node: int) -> bool:
        """False when node ``node``'s agent said it has no freezer (its last ``probe``)."""
        return (self.freezers.get(node) or {}).get("version") != "none"

    def suspension(self) -> dict:
        """``{url: {"freezer": "v1"|"v2"|"none"|"unknown", "live": bool, "reason": str|None}}``:
        whether a preempted suspendable lease's VWNs are frozen on each node (live) or deleted
        and restarted, and why (``suspend_vwns`` off, no freezer on the node)."""
        out = {}
        for i, url in enumerate(self.node_urls):
            fz = self.freezers.get(i) or {}
            version = fz.get("version", "unknown")
            reason = (None if self.supports_suspend and version != "none" else
                      "suspend_vwns = false: preempted leases are deleted and restarted"
                      if not self.supports_suspend else f"the node agent has no freezer: {fz.get('reason')}")
            out[url] = {"freezer": version, "live": reason is None, "reason": reason}
        return out

    def stop_vms(self, lease: Lease, now: float) -> None:
        self.frozen.discard(lease.id)
        self.resumed.discard(lease.id)
        for node, vwn in self.vwns.pop(lease.id, []):
            try:
                self.client(node).delete_vwn(vwn)
            except NodeAgentError as exc:
                if exc.status is None:  # its node is unreachable: the VWN is gone from the engine's view
                    self.failing_since.setdefault(node, now)
        if self.staging is not None:
            self.staging.after_stop(self, lease, now)

    def vms_paused(self, lease: Lease, now: float) -> None:
        """Freeze the lease's VWNs (``suspend``), else delete them (module doc)."""
        held = self.vwns.get(lease.id, [])
        if not self.supports_suspend or not all(self.can_freeze(node) for node, _ in held):
            self.stop_vms(lease, now)              # no freezer there: deleted, restarted later
            return
        for node, vwn in held:
            try:
                self.client(node).suspend_vwn(vwn)
            except NodeAgentError as exc:
                self.answered(node, exc.answered, now)
                self.stop_vms(lease, now)          # not frozen: it restarts when resumed
                return
        self.frozen.add(lease.id)

    def suspended(self, lease: Lease, now: float) -> None:
        pass                                       # frozen VWNs stay where they are

    def keeps_vms(self, lease_id: int) -> bool:
        """Whether the lease's VMs exist on nodes while the engine has it waiting (queued,
        scheduled or suspended): frozen in place, or thawed or migrated before its resumption
        reservation starts. Such a lease is not stopped: its VWNs' events are current."""
        return lease_id in self.frozen or lease_id in self.resumed

    def holds_memory(self, lease: Lease) -> bool:
        """Whether the suspended lease's VWNs are frozen on their nodes (their memory in use)."""
        return lease.id in self.frozen

    def resume_vms(self, lease: Lease, mapping: tuple, now: float) -> None:
        """Thaw the lease's frozen VWNs when ``mapping`` is where they are; otherwise delete
        them (module doc). Never raises (a failure deletes them: start_vms starts new ones)."""
        if lease.id not in self.frozen:
            return
        held = self.vwns.get(lease.id, [])
        if tuple(node for node, _ in held) != tuple(mapping):
            if self.migration is not None and len(held) == len(mapping):
                self._migrate(lease, held, mapping, now)
            else:
                self.stop_vms(lease, now)
            return
        for node, vwn in held:
            try:
                self.client(node).resume_vwn(vwn)
            except NodeAgentError as exc:
                self.answered(node, exc.answered, now)
                self.stop_vms(lease, now)
                return
        self.frozen.discard(lease.id)
        self.resumed.add(lease.id)

    def migrate_vms(self, lease: Lease, mapping: tuple, now: float, planned_s: float = 0.0) -> None:
        """The lease's migration reservation starts (``planned_s`` long): move its suspended VMs
        to ``mapping`` now (cold migration, ``ce_migration``) when it has a migrator. Never raises."""
        held = self.vwns.get(lease.id, [])
        if self.migration is None or lease.id not in self.frozen or len(held) != len(mapping) \
                or tuple(node for node, _ in held) == tuple(mapping):
            return
        self.migration.planned[lease.id] = planned_s
        self._migrate(lease, held, mapping, now)

    def _migrate(self, lease: Lease, held: list, mapping: tuple, now: float) -> None:
        """Cold migration of the lease's suspended VMs (``ce_migration``); a refusal deletes
        them (restart in new VWNs), a failure too and ends the lease (``abandoned``)."""
        from .ce_migration import MigrationFailed, MigrationRefused
        try:
            self.vwns[lease.id] = self.migration.migrate(self, lease, held, mapping)
        except MigrationRefused as exc:
            self.start_errors[lease.id] = str(exc)
            self.stop_vms(lease, now)
            return
        except MigrationFailed as exc:
            self.migration.failed[lease.id] = str(exc)
            self.abandoned.add(lease.id)
            self.stop_vms(lease, now)
            return
        self.frozen.discard(lease.id)
        self.resumed.add(lease.id)

    def start_transfer(self, res, now: float) -> None:
        """An image transfer starts: with ``staging`` its nodes pull the image (never raises)."""
        if self.staging is not None:
            self.staging.start_transfer(self, res, now)

    def report_end(self, lease_id: int, time: float) -> None:
        """A node agent reported the lease's VM done (thread-safe)."""
        with self._lock:
            self._ended.append((time, lease_id))

    def next_event_time(self) -> float:
        with self._lock:
            return min((t for t, _ in self._ended), default=float("inf"))

    def pop_events(self, now: float) -> list[tuple[float, int]]:
        with self._lock:
            out, self._ended = self._ended, []
        return [(min(t, now), lid) for t, lid in out]
