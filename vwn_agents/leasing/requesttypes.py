"""Request and lease types of seed 002 (Section 4.2) and the local/external category p(L).

Seed 002 extends a request with a *request type*, mapped to the *lease type* of its lease:

* ``BEST_EFFORT_CANCELLABLE``: scheduled any time after its ready time; preempting it
  terminates it (no duration, no deadline guaranteed);
* ``BEST_EFFORT_SUSPENDABLE``: suspended when preempted and rescheduled later for the
  remainder (duration guaranteed, not a deadline);
* ``DEADLINE_CONSTRAINT_MIGRATABLE``: duration and deadline guaranteed; when preempted its VMs
  are suspended, moved and resumed (seed 002 eq. (8));
* ``DEADLINE_CONSTRAINT_NON_PREEMPTABLE``: never preempted.

p(L) (Section 2.1) is 1 for an external request (from the grid) and 0 for a local one. Local
requests are all deadline-constrained non-preemptable and may preempt external leases only;
external requests may have any type. The JDL's ``PreemptionClass`` values and LWF's
``request-type`` attribute use the short names ``cancellable``, ``suspendable``,
``migratable`` and ``non-preemptable`` (``REQUEST_TYPE_NAMES``).
"""
from __future__ import annotations

import enum


class RequestType(enum.Enum):
    """The four request/lease types of seed 002 Section 4.2 (value: the short name)."""
    BEST_EFFORT_CANCELLABLE = "cancellable"
    BEST_EFFORT_SUSPENDABLE = "suspendable"
    DEADLINE_CONSTRAINT_MIGRATABLE = "migratable"
    DEADLINE_CONSTRAINT_NON_PREEMPTABLE = "non-preemptable"

    @property
    def preemptable(self) -> bool:
        """Whether a lease of this type may be preempted at all."""
        return self is not RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE

    @property
    def best_effort(self) -> bool:
        """Best-effort types: no deadline (scheduled any time after the ready time)."""
        return self in (RequestType.BEST_EFFORT_CANCELLABLE, RequestType.BEST_EFFORT_SUSPENDABLE)

    @property
    def paper_name(self) -> str:
        """The name seed 002 uses, e.g. ``Best-Effort-Cancellable``."""
        return PAPER_NAMES[self]


PAPER_NAMES = {
    RequestType.BEST_EFFORT_CANCELLABLE: "Best-Effort-Cancellable",
    RequestType.BEST_EFFORT_SUSPENDABLE: "Best-Effort-Suspendable",
    RequestType.DEADLINE_CONSTRAINT_MIGRATABLE: "Deadline-Constraint-Migratable",
    RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE: "Deadline-Constraint-Non-Preemptable",
}

#: Short names (JDL ``PreemptionClass``, LWF ``request-type``) in seed 002's order.
REQUEST_TYPE_NAMES = tuple(t.value for t in RequestType)

#: The category values of p(L) (seed 002 Section 2.1).
LOCAL, EXTERNAL = 0, 1
ORIGIN_NAMES = {"local": LOCAL, "external": EXTERNAL}


def request_type(name: str) -> RequestType:
    """The RequestType of a short name (``suspendable``) or paper name
    (``Best-Effort-Suspendable``), case-insensitive. ValueError listing the choices otherwise."""
    text = (name or "").strip().lower()
    for t in RequestType:
        if text in (t.value, t.paper_name.lower()):
            return t
    raise ValueError(f"request type {name!r}; expected one of {', '.join(REQUEST_TYPE_NAMES)}")


def origin(name: str) -> int:
    """p(L) of ``local`` (0) or ``external`` (1), case-insensitive; ValueError otherwise."""
    try:
        return ORIGIN_NAMES[(name or "").strip().lower()]
    except KeyError:
        raise ValueError(f"request origin {name!r}; expected local or external") from None


def legacy_request_type(best_effort: bool, preemptible: bool) -> RequestType:
    """The type of a lease described only by the older boolean ``preemptible``: a preemptible
    best-effort lease is Best-Effort-Suspendable (Haizea suspends it), anything else
    Deadline-Constraint-Non-Preemptable."""
    if best_effort and preemptible:
        return RequestType.BEST_EFFORT_SUSPENDABLE
    return RequestType.DEADLINE_CONSTRAINT_NON_PREEMPTABLE
