"""The VWN state table of a node agent (docs/architecture.md, "State tables"; docs/vwn.md).

A VWN is ``starting`` from POST /vwns until the job wrapper reports the job's pid, then
``running``; it ends ``done`` (the job exited, exit code known), ``aborted`` (the wrapper failed
or the node agent shut down: reason and outcome say which) or ``cancelled`` (DELETE /vwns/<vwn>).
A VWN can end while still starting (the wrapper failed before the job ran, or it was deleted).
A running VWN can be ``suspended`` (POST /vwns/<vwn>/suspend: its cgroup frozen, ``freezer``) and
``running`` again (POST /vwns/<vwn>/resume); a suspended VWN can be cancelled or end (its
processes killed, or the agent shut down).
"""
from __future__ import annotations

import enum

from vgrid_runtime.states import StateTable


class VWNState(enum.StrEnum):
    """A VWN state; the value is the name the node agent's JSON carries."""

    STARTING = "starting"
    RUNNING = "running"
    SUSPENDED = "suspended"
    DONE = "done"
    ABORTED = "aborted"
    CANCELLED = "cancelled"


V = VWNState

VWN_STATES: StateTable[VWNState] = StateTable("VWN", VWNState, {
    V.STARTING: {V.RUNNING, V.DONE, V.ABORTED, V.CANCELLED},
    V.RUNNING: {V.SUSPENDED, V.DONE, V.ABORTED, V.CANCELLED},
    V.SUSPENDED: {V.RUNNING, V.DONE, V.ABORTED, V.CANCELLED},
}, terminal={V.DONE, V.ABORTED, V.CANCELLED})

#: States of a VWN that has not ended (its processes exist or will; adopted after a restart).
ACTIVE: frozenset[VWNState] = frozenset({V.STARTING, V.RUNNING, V.SUSPENDED})

#: States in which the VWN holds a share of the node's CPU (N in C/(N+1)): a suspended VWN
#: uses no CPU and does not count; the others are readjusted when it is suspended or resumed.
SHARING: frozenset[VWNState] = frozenset({V.STARTING, V.RUNNING})
