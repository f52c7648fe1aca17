"""The jobs a CE agent holds: the broker's request, the parsed JDL, the gLite state the CE sees.

Job states here are the gLite ones the CE can see (``CEJobState``, table ``CE_JOB_STATES``):
Scheduled (accepted, no VWN running yet) -> Running -> Done | Aborted | Cancelled, and
Running -> Scheduled when the lease of a suspendable/migratable job is preempted: its VWN was
deleted and the job waits for its lease to start again in a new VWN (``Outcome.REQUEUED``).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .ce_leases import JobLeaseRequest
from vgrid_runtime.httpjson import ApiError
from vgrid_runtime.job_states import JobState
from vgrid_runtime.outcomes import Outcome
from vgrid_runtime.states import StateTable


class CEJobState(enum.StrEnum):
    """A job's state at a CE; the values are the gLite names (``JobState``) the CE reports."""

    SCHEDULED = JobState.SCHEDULED.value
    RUNNING = JobState.RUNNING.value
    DONE = JobState.DONE.value
    ABORTED = JobState.ABORTED.value
    CANCELLED = JobState.CANCELLED.value


C = CEJobState

#: The CE agent's job state machine. Scheduled -> Done/Aborted: the VWN ended before its
#: ``running`` event was applied (e.g. the wrapper failed at once). Running -> Scheduled is the
#: requeue of a preempted suspendable/migratable lease (its job restarts in a new VWN).
CE_JOB_STATES: StateTable[CEJobState] = StateTable("CE job", CEJobState, {
    C.SCHEDULED: {C.RUNNING, C.DONE, C.ABORTED, C.CANCELLED},
    C.RUNNING: {C.DONE, C.ABORTED, C.CANCELLED, C.SCHEDULED},
}, terminal={C.DONE, C.ABORTED, C.CANCELLED})

ENDED = CE_JOB_STATES.terminal
#: The state a node agent's VWN event moves the job to.
EVENT_STATE = {"running": C.RUNNING, "done": C.DONE, "aborted": C.ABORTED}


@dataclass
class JobRequest:
    """Body of POST /jobs (from the broker)."""

    job_id: str
    key: str
    jdl: str
    filename: str = "<jdl>"
    callback_url: str | None = None
    input_sandbox: list[dict] = field(default_factory=list)
    output_upload_url: str | None = None
    owner: dict | None = None         # {"dn", "vo", "fqans"}: passed to the node agent (pool account)
    heartbeat_url: str | None = None  # <broker>/heartbeats (contract 3; helper 2 heartbeats to it)


@dataclass
class CEJob:
    """A job at this CE."""

    request: JobRequest
    desc: object                      # jdl.JobDescription
    state: CEJobState                 # change it with to()
    node: str | None = None           # node name (from its events)
    node_url: str | None = None
    vwn: str | None = None
    cpu_caps: list = field(default_factory=list)
    capped: bool | None = None
    cap_reason: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    outcome: Outcome | None = None    # the code behind reason (pending or final)
    lease_req: JobLeaseRequest | None = None   # scheduler = leases
    in_engine: bool = False                    # its lease was submitted to the engine
    lease_attempts: int = 0                    # start attempts of its lease so far (VWN keys)
    lease_node: str | None = None              # node agent URL of the last start attempt
    lease_start: float | None = None           # clock s its running lease started
    lease_ran_s: float | None = None           # s its lease had run when its VWN was frozen (suspended)
    accepted: float | None = None              # clock s POST /jobs accepted it

    def to(self, new: CEJobState) -> None:
        """Change the state through ``CE_JOB_STATES`` (IllegalTransition if not allowed)."""
        self.state = CE_JOB_STATES.transition(self.state, new, self.request.key)

    def note(self, outcome: Outcome | None, reason: str | None) -> None:
        """Set why the job is where it is: the code and the words for people."""
        self.outcome, self.reason = outcome, reason

    def record(self) -> dict:
        return {"key": self.request.key, "job_id": self.request.job_id, "state": self.state.value,
                "node": self.node, "node_url": self.node_url, "vwn": self.vwn,
                "cpu_caps": self.cpu_caps, "capped": self.capped, "cap_reason": self.cap_reason,
                "exit_code": self.exit_code, "reason": self.reason,
                "outcome": self.outcome.value if self.outcome else None}


def parse_job_jdl(text: str, filename: str):
    """``jdl.parse_jdl`` with its errors turned into ApiError 400 naming file:line:column."""
    import jdl
    try:
        desc = jdl.parse_jdl(text, filename)
    except jdl.JDLSyntaxError as exc:
        raise ApiError(400, str(exc), file=exc.filename, line=exc.line, column=exc.column) from None
    except jdl.JDLValidationError as exc:
        problems = [p.to_json() for p in exc.problems]
        first = exc.problems[0] if exc.problems else None
        raise ApiError(400, str(exc), file=filename, problems=problems,
                       line=first.line if first else None,
                       column=first.column if first else None) from None
    if not desc.executable:
        raise ApiError(400, f"{filename}: the JDL has no Executable", file=filename)
    return desc
