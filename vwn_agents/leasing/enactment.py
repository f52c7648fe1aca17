"""Enactment: what the scheduler's decisions do to nodes, simulated or real.

The scheduler calls an ``Enactment`` when reservations start and end; it reads back
``pop_events(now)`` -- leases that ended before their reservation did (premature ends) --
and ``next_event_time()``.

* ``SimulatedNodes`` (a ``Simulated...`` stand-in, because a 144-node cluster cannot exist on
  one machine): keeps the VMs of every node as records, checks at every start that no node
  holds more than its capacity (``OverCommitError``), and ends a lease when it has run its
  real duration (the trace's run time), which is how premature ends reach the scheduler.
* ``NodeAgentEnactment``: drives vgrid node agents over HTTP (docs/architecture.md):
  ``POST {node}/vwns`` per VM to start, ``DELETE {node}/vwns/<vwn>`` to stop. The node agent
  API has no suspend/resume, so ``supports_suspend`` is False and the scheduler cancels and
  requeues preempted leases instead. Node-agent "done"/"aborted" events reach it through
  ``report_end(lease_id, time)``.
"""
from __future__ import annotations

import heapq
import threading

from .mapper import vm_use
from .model import Lease, Node, vec_add, vec_sub


class OverCommitError(RuntimeError):
    """A node was asked to hold more than its capacity (a scheduler bug)."""


class SimulatedNodes:
    """Simulated nodes (see module doc). ``usage[node]`` is the resource vector in use."""

    supports_suspend = True

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.usage = [(0, 0, 0, 0) for _ in nodes]
        self.held: dict[int, dict] = {}
        self._events: list = []
        self._token: dict[int, int] = {}
        self.peak_vms = 0

    def _hold(self, lease: Lease, mapping: tuple, now: float) -> None:
        if lease.id in self.held:
            return
        use = vm_use(mapping, lease.per_vm)
        for node, vec in use.items():
            new = vec_add(self.usage[node], vec)
            cap = self.nodes[node].capacity
            if any(u > c + 1e-9 for u, c in zip(new, cap)):
                raise OverCommitError(f"t={now:g}s node {self.nodes[node].name}: lease {lease.id} needs {vec}, "
                                      f"in use {self.usage[node]}, capacity {cap}")
            self.usage[node] = new
        self.held[lease.id] = use

    def _release(self, lease: Lease) -> None:
        use = self.held.pop(lease.id, None)
        for node, vec in (use or {}).items():
            self.usage[node] = vec_sub(self.usage[node], vec)

    def start_vms(self, lease: Lease, mapping: tuple, now: float, planned_end: float) -> None:
        self._hold(lease, mapping, now)
        token = self._token.get(lease.id, 0) + 1
        self._token[lease.id] = token
        real_end = now + lease.real_remaining_s
        if real_end < planned_end - 1e-9:
            heapq.heappush(self._events, (real_end, lease.id, token))

    def vms_paused(self, lease: Lease, now: float) -> None:
        """The VM reservation ended before the lease did (a suspension follows)."""
        self._token[lease.id] = self._token.get(lease.id, 0) + 1

    def stop_vms(self, lease: Lease, now: float) -> None:
        self._token[lease.id] = self._token.get(lease.id, 0) + 1
        self._release(lease)

    def suspended(self, lease: Lease, now: float) -> None:
        self._release(lease)

    def resume_vms(self, lease: Lease, mapping: tuple, now: float) -> None:
        self._hold(lease, mapping, now)

    def start_transfer(self, res, now: float) -> None:
        pass

    def next_event_time(self) -> float:
        while self._events:
            t, lid, token = self._events[0]
            if self._token.get(lid) == token:
                return t
            heapq.heappop(self._events)
        return float("inf")

    def pop_events(self, now: float) -> list[tuple[float, int]]:
        out = []
        while self._events and self._events[0][0] <= now:
            t, lid, token = heapq.heappop(self._events)
            if self._token.get(lid) == token:
                out.append((t, lid))
        return out


class NodeAgentEnactment:
    """Real enactment on vgrid node agents over HTTP (see module doc).

    ``node_urls[i]`` is the base URL of the node agent of site node i; ``payload(lease, vm)``
    returns the ``POST /vwns`` body for VM number ``vm`` of a lease (the CE agent builds it
    from the job); ``session`` is a ``requests.Session``. HTTP errors raise
    ``requests.RequestException`` to the caller of the scheduler.
    """

    supports_suspend = False

    def __init__(self, node_urls: list[str], payload, session=None, timeout: float = 10.0) -> None:
        import requests
        self.node_urls = node_urls
        self.payload = payload
        self.session = session or requests.Session()
        self.timeout = timeout
        self.vwns: dict[int, list[tuple[int, str]]] = {}
        self.attempts: dict[int, int] = {}          # lease id -> start attempts so far
        self.failing_since: dict[int, float] = {}   # node -> clock s of its first unanswered call
        self.start_errors: dict[int, str] = {}      # lease id -> why its last start attempt failed
        self._ended: list[tuple[float, int]] = []
        self._lock = threading.Lock()

    def start_vms(self, lease: Lease, mapping: tuple, now: float, planned_end: float) -> None:
        """POST one VWN per VM; each call is a new start attempt (``attempts[lease.id]`` + 1,
        which ``payload`` reads to give the VWNs fresh keys). A connection error, timeout or
        5xx marks the node failing since ``now`` (``failing_since``); an answer clears it."""
        self.attempts[lease.id] = self.attempts.get(lease.id, 0) + 1
        started = []
        for vm, node in enumerate(mapping):
            try:
                r = self.session.post(f"{self.node_urls[node]}/vwns", json=self.payload(lease, vm),
                                      timeout=self.timeout)
            except Exception as exc:
                self.failing_since.setdefault(node, now)
                self.start_errors[lease.id] = f"{type(exc).__name__}: {exc}"
                raise
            self.answered(node, r.status_code < 500, now)
            if r.status_code >= 300:
                self.start_errors[lease.id] = f"HTTP {r.status_code} {r.text[:200]}"
            r.raise_for_status()
            started.append((node, r.json()["vwn"]))
        self.vwns[lease.id] = started
        self.start_errors.pop(lease.id, None)

    def answered(self, node: int, ok: bool, now: float) -> None:
        """Record whether node ``node`` answered (``ok``) or failed at ``now`` (clock s)."""
        if ok:
            self.failing_since.pop(node, None)
        else:
            self.failing_since.setdefault(node, now)

    def stop_vms(self, lease: Lease, now: float) -> None:
        for node, vwn in self.vwns.pop(lease.id, []):
            try:
                self.session.delete(f"{self.node_urls[node]}/vwns/{vwn}", timeout=self.timeout)
            except Exception:  # its node is unreachable: the VWN is gone from the engine's view
                self.failing_since.setdefault(node, now)

    def vms_paused(self, lease: Lease, now: float) -> None:
        self.stop_vms(lease, now)

    def suspended(self, lease: Lease, now: float) -> None:
        pass

    def resume_vms(self, lease: Lease, mapping: tuple, now: float) -> None:
        raise NotImplementedError("node agents cannot resume VMs")

    def start_transfer(self, res, now: float) -> None:
        pass

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
