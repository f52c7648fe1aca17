"""gLite job states and the one transition table of the broker.

States and their meaning follow the gLite Logging and Bookkeeping user guide: Submitted (accepted
by the WMProxy), Waiting (in the WM queue, waiting for a match), Ready (matched to a CE, being
transferred), Scheduled (accepted by the CE, waiting in its queue), Running, Done (ended, exit
code known), Aborted (the middleware gave up: reason), Cancelled (by the user), Cleared (output
retrieved, job purged). Any change not listed in :data:`TRANSITIONS` raises
:class:`IllegalTransition` — loudly, never a silent no-op.
"""
from __future__ import annotations

import enum


class JobState(str, enum.Enum):
    """A gLite job state; the value is the name gLite prints."""

    SUBMITTED = "Submitted"
    WAITING = "Waiting"
    READY = "Ready"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    DONE = "Done"
    ABORTED = "Aborted"
    CANCELLED = "Cancelled"
    CLEARED = "Cleared"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


S = JobState

#: The only legal state changes. Waiting is reachable again from Ready/Scheduled/Running: that is
#: a (shallow) resubmission after a failed dispatch or a lost CE. Waiting -> Running is the path
#: of a compound request's parent (collection, DAG, parametric), which is never matched itself
#: and runs when its first node does (broker/compound.py); CE events never move a Waiting job.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    S.SUBMITTED: frozenset({S.WAITING, S.ABORTED, S.CANCELLED}),
    S.WAITING: frozenset({S.READY, S.RUNNING, S.ABORTED, S.CANCELLED}),
    S.READY: frozenset({S.SCHEDULED, S.WAITING, S.ABORTED, S.CANCELLED}),
    S.SCHEDULED: frozenset({S.RUNNING, S.DONE, S.ABORTED, S.CANCELLED, S.WAITING}),
    S.RUNNING: frozenset({S.DONE, S.ABORTED, S.CANCELLED, S.WAITING}),
    S.DONE: frozenset({S.CLEARED}),
    S.ABORTED: frozenset({S.CLEARED}),
    S.CANCELLED: frozenset({S.CLEARED}),
    S.CLEARED: frozenset(),
}

#: States after which the job will not run any more.
ENDED: frozenset[JobState] = frozenset({S.DONE, S.ABORTED, S.CANCELLED, S.CLEARED})

#: States in which a CE agent holds the job.
AT_CE: frozenset[JobState] = frozenset({S.SCHEDULED, S.RUNNING})


class IllegalTransition(ValueError):
    """A state change the transition table does not allow (e.g. Done -> Running)."""

    def __init__(self, key: str, old: JobState, new: JobState) -> None:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[old])) or "none (final state)"
        super().__init__(f"job {key}: illegal transition {old.value} -> {new.value} "
                         f"(allowed from {old.value}: {allowed})")
        self.key, self.old, self.new = key, old, new


def check_transition(key: str, old: JobState, new: JobState) -> None:
    """Raise :class:`IllegalTransition` unless ``old -> new`` is in :data:`TRANSITIONS`."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(key, old, new)
