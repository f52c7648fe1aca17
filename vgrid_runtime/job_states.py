"""gLite job states and their one transition table (the broker's job state machine).

States and their meaning follow the gLite Logging and Bookkeeping user guide: Submitted (accepted
by the WMProxy), Waiting (in the WM queue, waiting for a match), Ready (matched to a CE, being
transferred), Scheduled (accepted by the CE, waiting in its queue), Running, Done (ended, exit
code known), Aborted (the middleware gave up: reason), Cancelled (by the user), Cleared (output
retrieved, job purged). Stalled is DIRAC's term (not gLite's): a Scheduled or Running job whose CE
has not heard of it for 3 heartbeat intervals (``broker.heartbeats``); it returns to the state it
came from when heard again, or is resubmitted (Waiting) or Aborted (outcome ``stalled``). Any change not listed in :data:`TRANSITIONS` raises
:class:`IllegalTransition` -- loudly, never a silent no-op.

It lives in ``vgrid_runtime`` because the broker (``broker.db``, ``broker.service``) and the CE
agent (``vwn_agents.ce_jobs``, whose own table is over a subset of these names) both use it.
"""
from __future__ import annotations

import enum

from .states import IllegalTransition, StateTable

__all__ = ["JobState", "JOB_STATES", "TRANSITIONS", "ENDED", "AT_CE", "IllegalTransition",
           "check_transition"]


class JobState(enum.StrEnum):
    """A gLite job state; the value is the name gLite prints."""

    SUBMITTED = "Submitted"
    WAITING = "Waiting"
    READY = "Ready"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    STALLED = "Stalled"
    DONE = "Done"
    ABORTED = "Aborted"
    CANCELLED = "Cancelled"
    CLEARED = "Cleared"


S = JobState

#: The broker's job state machine. Waiting is reachable again from Ready/Scheduled/Running: that
#: is a resubmission (gLite deep or shallow, ``broker.resubmission``) or a failed dispatch.
#: Scheduled/Running -> Stalled -> back, or on to Waiting/Aborted (``broker.heartbeats``). Waiting -> Running is the
#: path of a compound request's parent (collection, DAG, parametric), which is never matched
#: itself and runs when its first node does (broker/compound.py); CE events never move a Waiting
#: job. Done, Aborted and Cancelled are terminal except for Cleared (output retrieved).
JOB_STATES: StateTable[JobState] = StateTable("job", JobState, {
    S.SUBMITTED: {S.WAITING, S.ABORTED, S.CANCELLED},
    S.WAITING: {S.READY, S.RUNNING, S.ABORTED, S.CANCELLED},
    S.READY: {S.SCHEDULED, S.WAITING, S.ABORTED, S.CANCELLED},
    S.SCHEDULED: {S.RUNNING, S.DONE, S.ABORTED, S.CANCELLED, S.WAITING, S.STALLED},
    S.RUNNING: {S.DONE, S.ABORTED, S.CANCELLED, S.WAITING, S.STALLED},
    S.STALLED: {S.SCHEDULED, S.RUNNING, S.DONE, S.ABORTED, S.CANCELLED, S.WAITING},
    S.DONE: {S.CLEARED},
    S.ABORTED: {S.CLEARED},
    S.CANCELLED: {S.CLEARED},
    S.CLEARED: set(),
}, terminal={S.DONE, S.ABORTED, S.CANCELLED, S.CLEARED}, terminal_exits={S.CLEARED})

#: The only legal state changes (``JOB_STATES.transitions``).
TRANSITIONS: dict[JobState, frozenset[JobState]] = JOB_STATES.transitions

#: States after which the job will not run any more.
ENDED: frozenset[JobState] = JOB_STATES.terminal

#: States in which a CE agent holds the job (Stalled: it may still hold it).
AT_CE: frozenset[JobState] = frozenset({S.SCHEDULED, S.RUNNING, S.STALLED})


def check_transition(key: str, old: JobState, new: JobState) -> None:
    """Raise :class:`IllegalTransition` (entity "job", subject ``key``) unless ``old -> new`` is
    in :data:`TRANSITIONS`."""
    JOB_STATES.check(old, new, key)
