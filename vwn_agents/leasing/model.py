"""The lease model: resource vectors, nodes, leases, and their states.

Terms follow Haizea 1.1 and seed 000 Section 6.1: a *lease* asks for N VMs, each with the same
per-VM resources, for a requested duration, with one disk image; it is an advance reservation
(exact start time), best-effort (queued, FCFS) or immediate (now or reject).

Resource vectors are tuples indexed by ``RESOURCE_TYPES``: CPU in hundredths of a core
(100 = one core, as Haizea), Memory in MB, Disk in MB, Net in Mb/s.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from vgrid_runtime.states import StateTable

from .requesttypes import RequestType, legacy_request_type

RESOURCE_TYPES = ("CPU", "Memory", "Disk", "Net")
CPU, MEM, DISK, NET = range(4)
RES_INDEX = {name.lower(): i for i, name in enumerate(RESOURCE_TYPES)}
RES_INDEX.update({"mem": MEM, "net (in)": NET, "net-in": NET, "network": NET})


def resource_vector(**amounts: float) -> tuple:
    """Build a resource vector from keyword amounts, e.g. ``resource_vector(cpu=100, memory=1024)``.

    Unknown names raise ValueError; negative amounts raise ValueError.
    """
    vec = [0, 0, 0, 0]
    for name, amount in amounts.items():
        idx = RES_INDEX.get(name.lower())
        if idx is None:
            raise ValueError(f"unknown resource type {name!r}; expected one of {RESOURCE_TYPES}")
        if amount < 0:
            raise ValueError(f"resource {name} must be >= 0, got {amount}")
        vec[idx] = amount
    return tuple(vec)


def vec_add(a: tuple, b: tuple) -> tuple:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3])


def vec_sub(a: tuple, b: tuple) -> tuple:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3])


def vec_scale(a: tuple, k: float) -> tuple:
    return (a[0] * k, a[1] * k, a[2] * k, a[3] * k)


def vec_fits(need: tuple, free: tuple) -> bool:
    return need[0] <= free[0] and need[1] <= free[1] and need[2] <= free[2] and need[3] <= free[3]


def vms_in(free: tuple, need: tuple) -> int:
    """How many VMs of ``need`` fit in ``free`` (resources with need 0 do not limit)."""
    best = None
    for f, n in zip(free, need):
        if n > 0:
            k = int(f // n) if f > 0 else 0
            best = k if best is None else min(best, k)
    return 1_000_000 if best is None else max(best, 0)


class LeaseType(enum.Enum):
    """Haizea's three lease types."""
    ADVANCE_RESERVATION = "AR"
    BEST_EFFORT = "BE"
    IMMEDIATE = "IM"


class LeaseState(enum.Enum):
    """Lease states (Haizea 1.1 names, simplified: Haizea's Ready, Resuming, Migrating and its
    three Suspended-* states are folded into Scheduled, Preparing and Suspended)."""
    PENDING = "Pending"
    QUEUED = "Queued"
    SCHEDULED = "Scheduled"
    PREPARING = "Preparing"
    ACTIVE = "Active"
    SUSPENDING = "Suspending"
    SUSPENDED = "Suspended"
    DONE = "Done"
    REJECTED = "Rejected"
    CANCELLED = "Cancelled"


TERMINAL_STATES = frozenset({LeaseState.DONE, LeaseState.REJECTED, LeaseState.CANCELLED})

L = LeaseState

#: The lease state machine (docs/leasing.md, "Lease states"); every change goes through
#: ``Lease.to`` (or ``Lease.checked`` for a slot-table transaction). Pending: submitted, not yet
#: decided. Queued: best-effort, waiting in the FCFS queue (and a serial request's parent).
#: Scheduled: its reservations are in the slot table. Preparing: resuming its VMs. Active: its
#: VMs run. Suspending -> Suspended: stopped with time left, back in the queue (Suspended ->
#: Scheduled when placed again). Active -> Queued: a preempted lease restarted from scratch.
#: Queued -> Active -> Done: a serial request's parent follows its one-VM children.
LEASE_STATES: StateTable[LeaseState] = StateTable("lease", LeaseState, {
    L.PENDING: {L.QUEUED, L.SCHEDULED, L.REJECTED, L.CANCELLED},
    L.QUEUED: {L.SCHEDULED, L.ACTIVE, L.DONE, L.CANCELLED},
    L.SCHEDULED: {L.QUEUED, L.SUSPENDED, L.PREPARING, L.ACTIVE, L.CANCELLED},
    L.PREPARING: {L.ACTIVE, L.DONE, L.CANCELLED},
    L.ACTIVE: {L.QUEUED, L.SUSPENDING, L.SUSPENDED, L.DONE, L.CANCELLED},
    L.SUSPENDING: {L.SUSPENDED, L.DONE, L.CANCELLED},
    L.SUSPENDED: {L.SCHEDULED, L.CANCELLED},
}, terminal=TERMINAL_STATES)


@dataclass
class Node:
    """A physical node: index in the site, name (P1, P2, ...) and capacity vector."""
    index: int
    name: str
    capacity: tuple


@dataclass
class Segment:
    """One running interval of a lease: [start, end) seconds on ``nodes`` (node index per VM);
    ``vnodes``: the same nodes per virtual node in Haizea 1.1's order (compat mode, rule 18;
    empty otherwise)."""
    start: float
    end: float
    nodes: tuple
    vnodes: tuple = ()


@dataclass(eq=False)
class Lease:
    """A lease request and its run-time record.

    Request fields: ``id``, ``type``, ``submit_s``, ``duration_s`` (requested, s), ``n_vms``,
    ``per_vm`` (resource vector per VM), ``image_id``, ``image_mb``, ``preemptible``,
    ``requested_start_s`` (ARs only), ``real_duration_s`` (premature end; None = runs the
    requested duration). Seed 002 (Section 4.2): ``request_type`` (None: derived from
    ``preemptible``, see ``requesttypes.legacy_request_type``), ``local`` (p(L) = 0; a local
    request must be Deadline-Constraint-Non-Preemptable, ValueError otherwise) and
    ``deadline_s`` (optional, s). The ready time is ``requested_start_s`` for ARs and
    ``submit_s`` otherwise. Run-time fields are filled in by the scheduler and accounting;
    ``preemptions`` counts the times a local request preempted the lease and ``overhead_s``
    sums their overhead h(L) (seed 002 eq. (7)-(8)).
    """
    id: int
    type: LeaseType
    submit_s: float
    duration_s: float
    n_vms: int
    per_vm: tuple
    image_id: str = "none.img"
    image_mb: float = 0.0
    preemptible: bool = True
    requested_start_s: float | None = None
    real_duration_s: float | None = None
    parent_id: int | None = None
    request_type: RequestType | None = None
    local: bool = False
    deadline_s: float | None = None
    # run time
    state: LeaseState = LeaseState.PENDING
    time_run: float = 0.0
    segments: list = field(default_factory=list)
    suspensions: int = 0
    transfers: int = 0
    mb_transferred: float = 0.0
    start_s: float | None = None
    end_s: float | None = None
    mapping: tuple = ()  # node index per VM of the last scheduled VM reservation
    # compat haizea-1.1 (rule 24): where a suspended lease's images are after migration rounds
    # that ended since its last segment: (len(segments) then, disk node per virtual node,
    # memory node per virtual node); () = on the last segment's nodes
    migrated: tuple = ()
    reject_reason: str = ""
    cancel_at_end: bool = False
    restart_at_end: bool = False  # compat haizea-1.1: a cancel starts it again from scratch (new start)
    ar_on_time: bool | None = None  # ARs: started at the requested time with images present
    preemptions: int = 0
    overhead_s: float = 0.0
    terminate_at_end: bool = False  # a preempted Best-Effort-Cancellable lease: Cancelled at its VM end

    def __post_init__(self) -> None:
        if self.n_vms < 1:
            raise ValueError(f"lease {self.id}: number of VMs must be >= 1, got {self.n_vms}")
        if self.duration_s <= 0:
            raise ValueError(f"lease {self.id}: duration must be > 0 s, got {self.duration_s}")
        if self.type is LeaseType.ADVANCE_RESERVATION and self.requested_start_s is None:
            raise ValueError(f"lease {self.id}: an advance reservation needs a start time")
        if self.request_type is None:
            self.request_type = (RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE if self.local else
                                 legacy_request_type(self.type is LeaseType.BEST_EFFORT, self.preemptible))
        elif self.local and self.request_type is not RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE:
            raise ValueError(f"lease {self.id}: a local request is Deadline-Constraint-Non-Preemptable "
                             f"(seed 002 Section 4.2), not {self.request_type.paper_name}")
        if self.local:
            self.preemptible = False
        if self.deadline_s is not None and self.deadline_s < self.ready_s + self.duration_s:
            raise ValueError(f"lease {self.id}: deadline {self.deadline_s:g} s is before ready time + "
                             f"duration ({self.ready_s + self.duration_s:g} s)")

    @property
    def ready_s(self) -> float:
        """Ready time (s): the requested start of an AR, the submission time otherwise."""
        return self.requested_start_s if self.requested_start_s is not None else self.submit_s

    @property
    def external(self) -> bool:
        """p(L) = 1 (seed 002 Section 2.1)."""
        return not self.local

    @property
    def preemptable(self) -> bool:
        """Whether a local request may preempt this lease (seed 002 Section 4.2, eq. (1)):
        external and of a preemptable request type."""
        return not self.local and self.request_type.preemptable

    @property
    def effective_duration_s(self) -> float:
        """The time the lease actually runs: min(real duration, requested duration)."""
        if self.real_duration_s is None:
            return self.duration_s
        return min(self.real_duration_s, self.duration_s)

    @property
    def remaining_s(self) -> float:
        """Requested time still to run (what the scheduler must reserve)."""
        return max(self.duration_s - self.time_run, 0.0)

    @property
    def real_remaining_s(self) -> float:
        """Time the lease will really still run before it ends (premature end included)."""
        return max(self.effective_duration_s - self.time_run, 0.0)

    @property
    def is_ar(self) -> bool:
        return self.type is LeaseType.ADVANCE_RESERVATION

    @property
    def is_be(self) -> bool:
        return self.type is LeaseType.BEST_EFFORT

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    def to(self, new: LeaseState) -> None:
        """Change the state through ``LEASE_STATES``; IllegalTransition (naming the lease id,
        old and new state) for a change the table does not list."""
        self.state = LEASE_STATES.transition(self.state, new, self.id)

    def checked(self, new: LeaseState) -> LeaseState:
        """``new`` if the change to it is legal (IllegalTransition otherwise), for
        ``SlotTable.set(lease, "state", lease.checked(new))`` inside a transaction."""
        return LEASE_STATES.check(self.state, new, self.id)
