"""Enactment: what the scheduler's decisions do to nodes, simulated or real.

The scheduler calls an ``Enactment`` (the interface this module defines; the lease engine knows
nothing else of nodes) when reservations start and end; it reads back ``pop_events(now)`` --
leases that ended before their reservation did (premature ends) -- and ``next_event_time()``.

* ``SimulatedNodes`` (a ``Simulated...`` stand-in, because a 144-node cluster cannot exist on
  one machine): keeps the VMs of every node as records, checks at every start that no node
  holds more than its capacity (``OverCommitError``), and ends a lease when it has run its
  real duration (the trace's run time), which is how premature ends reach the scheduler.
* Real nodes are enacted outside the lease engine: ``vwn_agents.node_enactment.
  NodeAgentEnactment`` drives vgrid node agents over HTTP (through ``vwn_agents.node_client``).
"""
from __future__ import annotations

import heapq
from typing import Protocol, runtime_checkable

from .mapper import vm_use
from .model import Lease, Node, vec_add, vec_sub


@runtime_checkable
class Enactment(Protocol):
    """What the scheduler needs of nodes (``LeaseScheduler(nodes, config, clock, enactment)``).
    Times are clock seconds; ``mapping[vm]`` is the site node index of VM ``vm`` of a lease.
    A start that raises is retried by the scheduler on its next ``process`` (the first error
    goes to its caller)."""

    supports_suspend: bool  # False: the scheduler cancels and requeues preempted leases

    def start_vms(self, lease: Lease, mapping: tuple, now: float, planned_end: float) -> None:
        """Start the lease's VMs on their nodes; its reservation ends at ``planned_end``."""

    def vms_paused(self, lease: Lease, now: float) -> None:
        """The VM reservation ended before the lease did (a suspension follows)."""

    def stop_vms(self, lease: Lease, now: float) -> None:
        """Stop the lease's VMs (its reservation ended, or it was cancelled or preempted)."""

    def suspended(self, lease: Lease, now: float) -> None:
        """The lease's VMs are suspended to disk (their resources are free)."""

    def resume_vms(self, lease: Lease, mapping: tuple, now: float) -> None:
        """Resume the lease's suspended VMs on ``mapping``."""

    def start_transfer(self, res, now: float) -> None:
        """An image transfer reservation starts."""

    def next_event_time(self) -> float:
        """When the next premature end is due (inf: none)."""

    def pop_events(self, now: float) -> list[tuple[float, int]]:
        """``[(time, lease id)]`` of the leases that ended by themselves up to ``now``."""


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
        """The VM reservation ended before the lease did (a suspension follows): the paused
        VMs use no CPU; their memory stays held until ``suspended`` (seed 002 Section 5)."""
        self._token[lease.id] = self._token.get(lease.id, 0) + 1
        use = self.held.get(lease.id)
        if use:
            kept = {node: (0, vec[1], 0, 0) for node, vec in use.items()}
            for node, vec in use.items():
                self.usage[node] = vec_add(vec_sub(self.usage[node], vec), kept[node])
            self.held[lease.id] = kept

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
