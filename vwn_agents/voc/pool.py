"""Per-VO pools of VOC nodes: VWNs that exist before jobs arrive and run only their VO's jobs.

A *VOC node* (seed 003, Section 3.3) is one VWN slot of the site given to one Virtual
Organization: booted by a ``VOCDriver`` (a VM under libvirt, a ready sandbox on a node agent
under the cgroup driver, a timer in the simulator), then idle or busy with exactly one job of its
VO, then gone (terminated by the watchdog, or lost: it died without telling anyone, Section 5.3).
The pool is the collector of the paper's Condor pool: only nodes that are ``idle`` are matched to
jobs, and a node leaves the pool the moment it is known dead (``lost``), so a job is never
matched to a node that no longer exists (the failure of Figure 12).

The pool never reads a clock: every call that changes time-dependent state takes ``now``
(seconds, any origin). Boot delays are measured (``ready`` minus ``boot``) per node, never
assumed by the pool.
"""
from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from vgrid_runtime.states import StateTable


class VOCNodeState(enum.StrEnum):
    """A VOC node's state; the value is what ``GET /status`` shows."""

    BOOTING = "booting"
    IDLE = "idle"
    BUSY = "busy"
    GONE = "gone"


N = VOCNodeState

#: Gone nodes kept for ``status`` (the oldest are forgotten).
GONE_KEPT = 1000

VOC_NODE_STATES: StateTable[VOCNodeState] = StateTable("VOC node", VOCNodeState, {
    N.BOOTING: {N.IDLE, N.GONE},
    N.IDLE: {N.BUSY, N.GONE},
    N.BUSY: {N.IDLE, N.GONE},
}, terminal={N.GONE})


@dataclass
class VOCNode:
    """One VOC node. ``slot`` is the driver's name of the VWN slot it occupies (e.g. a node
    agent URL and CPU index); ``booted_at``/``ready_at``/``gone_at`` in the pool's time (s);
    ``job`` the key of the job it runs (busy only); ``gone_reason`` ``terminated`` or
    ``lost: <why>``."""

    id: str
    vo: str
    slot: str
    booted_at: float
    state: VOCNodeState = VOCNodeState.BOOTING
    ready_at: float | None = None
    idle_since: float | None = None
    job: str | None = None
    gone_at: float | None = None
    gone_reason: str | None = None
    jobs_run: int = 0

    @property
    def boot_s(self) -> float | None:
        """The measured boot delay (s): from the boot request to the node joining the pool."""
        return None if self.ready_at is None else self.ready_at - self.booted_at

    def to(self, new: VOCNodeState) -> None:
        self.state = VOC_NODE_STATES.check(self.state, new, self.id)

    def record(self) -> dict:
        return {"id": self.id, "vo": self.vo, "slot": self.slot, "state": self.state.value,
                "booted_at": self.booted_at, "ready_at": self.ready_at, "boot_s": self.boot_s,
                "idle_since": self.idle_since, "job": self.job, "jobs_run": self.jobs_run,
                "gone_at": self.gone_at, "gone_reason": self.gone_reason}


class VOCDriver(Protocol):
    """What boots and stops VOC nodes: a VM driver (libvirt), the cgroup driver
    (``live.CgroupDriver``: a ready sandbox on a node agent) or the simulator's
    ``SimulatedDriver``.

    ``free_slots(busy)`` the slot names still free given the slots in use (best first);
    ``boot(node)`` starts booting ``node`` in ``node.slot`` and returns at once -- the driver
    later calls ``VOCPool.ready(node.id, now)`` (or ``lost`` when the boot failed);
    ``terminate(node)`` stops it cleanly (the job it runs, if any, is the caller's business).
    """

    def free_slots(self, busy: set[str]) -> Sequence[str]: ...

    def boot(self, node: VOCNode) -> None: ...

    def terminate(self, node: VOCNode) -> None: ...


@dataclass(frozen=True)
class VOView:
    """What the watchdog sees of one VO at one instant (counts of jobs and nodes).

    ``waiting``: jobs of the VO queued, not on a node; ``running``: jobs on a node; ``booting``,
    ``busy``: nodes; ``idle_since``: one entry per idle node, when it became idle (s), oldest
    first. The paper's "queue size" (condor_q: idle + running jobs) is ``queue``; the VOC size
    is ``size`` (every node not gone, booting included).
    """

    vo: str
    waiting: int = 0
    running: int = 0
    booting: int = 0
    busy: int = 0
    idle_since: tuple[float, ...] = ()

    @property
    def idle(self) -> int:
        return len(self.idle_since)

    @property
    def size(self) -> int:
        return self.booting + self.busy + self.idle

    @property
    def queue(self) -> int:
        return self.waiting + self.running


@dataclass
class VOCPool:
    """The site's VOC nodes, per VO, on at most ``slots`` VWN slots (the physical capacity).

    Raises ``KeyError`` for an unknown node id; ``IllegalTransition`` for a change the node
    state table does not allow (e.g. claiming a booting node).
    """

    slots: int
    driver: VOCDriver
    nodes: dict[str, VOCNode] = field(default_factory=dict)
    gone: list[VOCNode] = field(default_factory=list)
    boots: int = 0
    _serial: int = 0

    # -- the watchdog's side ----------------------------------------------------------------------

    def live(self, vo: str | None = None) -> list[VOCNode]:
        """The nodes not gone (of ``vo``), in boot order."""
        return [n for n in self.nodes.values() if vo is None or n.vo == vo]

    @property
    def free(self) -> int:
        """Slots no VOC node holds."""
        return max(0, self.slots - len(self.nodes))

    def boot(self, vo: str, now: float) -> VOCNode | None:
        """Start booting one node for ``vo`` in the driver's best free slot; None when every slot
        is taken."""
        if self.free <= 0:
            return None
        free = self.driver.free_slots({n.slot for n in self.nodes.values()})
        if not free:
            return None
        self._serial += 1
        node = VOCNode(f"voc-{vo}-{self._serial}", vo, free[0], booted_at=now)
        self.nodes[node.id] = node
        self.boots += 1
        self.driver.boot(node)
        return node

    def adopt(self, vo: str, slot: str, job: str, now: float) -> VOCNode:
        """Record a node found running ``job`` (a CE agent restarted): busy at once, no boot
        counted, no driver call."""
        self._serial += 1
        node = VOCNode(f"voc-{vo}-{self._serial}", vo, slot, booted_at=now, ready_at=now)
        node.to(VOCNodeState.IDLE)
        node.to(VOCNodeState.BUSY)
        node.job, node.jobs_run = job, 1
        self.nodes[node.id] = node
        return node

    @property
    def serial(self) -> int:
        """The number of the last node id given (ids are ``voc-<vo>-<serial>``)."""
        return self._serial

    def restore(self, nodes: Sequence[VOCNode], serial: int, boots: int) -> None:
        """Put back the nodes a restarted CE agent stored (``voc.store``), as they were: no
        boot counted, no driver call; later ids continue after ``serial``."""
        for node in nodes:
            self.nodes[node.id] = node
        self._serial, self.boots = max(self._serial, serial), max(self.boots, boots)

    def terminate(self, node_id: str, now: float) -> VOCNode:
        """Stop an idle or booting node cleanly (the watchdog shrinking a VOC). A busy node is
        never terminated: ValueError."""
        node = self.nodes[node_id]
        if node.state is VOCNodeState.BUSY:
            raise ValueError(f"VOC node {node_id} runs job {node.job}: not terminated")
        self._gone(node, now, "terminated")
        self.driver.terminate(node)
        return node

    # -- the driver's side -------------------------------------------------------------------------

    def ready(self, node_id: str, now: float) -> VOCNode | None:
        """The node finished booting and joins the pool (idle); None if it is gone meanwhile."""
        node = self.nodes.get(node_id)
        if node is None:
            return None
        node.to(VOCNodeState.IDLE)
        node.ready_at = node.idle_since = now
        return node

    def lost(self, node_id: str, now: float, why: str) -> str | None:
        """The node died uncleanly (killed VM or process, wall-time limit, preemption, a failed
        boot): it leaves the pool at once. Returns the key of the job it was running, if any
        (the caller ends or requeues that job). Unknown or already gone: None."""
        node = self.nodes.get(node_id)
        if node is None:
            return None
        job = node.job
        self._gone(node, now, f"lost: {why}")
        return job

    # -- the matchmaker's side ---------------------------------------------------------------------

    def claim(self, vo: str, job: str, now: float) -> VOCNode | None:
        """Give job ``job`` an idle node of its VO (the one idle longest); None when there is none."""
        idle = [n for n in self.nodes.values() if n.vo == vo and n.state is VOCNodeState.IDLE]
        if not idle:
            return None
        node = min(idle, key=lambda n: (n.idle_since, n.id))
        node.to(VOCNodeState.BUSY)
        node.job, node.idle_since = job, None
        node.jobs_run += 1
        return node

    def release(self, node_id: str, now: float) -> VOCNode | None:
        """The node's job ended (or was never started there): the node is idle again."""
        node = self.nodes.get(node_id)
        if node is None or node.state is not VOCNodeState.BUSY:
            return None
        node.to(VOCNodeState.IDLE)
        node.job, node.idle_since = None, now
        return node

    def node_of(self, job: str) -> VOCNode | None:
        return next((n for n in self.nodes.values() if n.job == job), None)

    # -- views -----------------------------------------------------------------------------------

    def view(self, vo: str, waiting: int, running: int) -> VOView:
        nodes = self.live(vo)
        return VOView(vo, waiting, running,
                      booting=sum(n.state is VOCNodeState.BOOTING for n in nodes),
                      busy=sum(n.state is VOCNodeState.BUSY for n in nodes),
                      idle_since=tuple(sorted(n.idle_since for n in nodes if n.state is VOCNodeState.IDLE)))

    def status(self) -> dict:
        """``{"slots", "free", "boots", "nodes": [...], "gone": [last 50]}``."""
        return {"slots": self.slots, "free": self.free, "boots": self.boots,
                "nodes": [n.record() for n in self.nodes.values()],
                "gone": [n.record() for n in self.gone[-50:]]}

    def _gone(self, node: VOCNode, now: float, reason: str) -> None:
        node.to(VOCNodeState.GONE)
        node.gone_at, node.gone_reason = now, reason
        del self.nodes[node.id]
        self.gone.append(node)
        del self.gone[:-GONE_KEPT]
