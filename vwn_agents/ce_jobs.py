"""The jobs a CE agent holds: the broker's request, the parsed JDL, the gLite state the CE sees.

Job states here are the gLite ones the CE can see: Scheduled (accepted, no VWN running yet) ->
Running -> Done | Aborted | Cancelled.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .ce_leases import JobLeaseRequest
from vgrid_runtime.httpjson import ApiError

ENDED = {"Done", "Aborted", "Cancelled"}
EVENT_STATE = {"running": "Running", "done": "Done", "aborted": "Aborted"}


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


@dataclass
class CEJob:
    """A job at this CE."""

    request: JobRequest
    desc: object                      # jdl.JobDescription
    state: str
    node: str | None = None           # node name (from its events)
    node_url: str | None = None
    vwn: str | None = None
    cpu_caps: list = field(default_factory=list)
    capped: bool | None = None
    cap_reason: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    lease_req: JobLeaseRequest | None = None   # scheduler = leases
    in_engine: bool = False                    # its lease was submitted to the engine

    def record(self) -> dict:
        return {"key": self.request.key, "job_id": self.request.job_id, "state": self.state,
                "node": self.node, "node_url": self.node_url, "vwn": self.vwn,
                "cpu_caps": self.cpu_caps, "capped": self.capped, "cap_reason": self.cap_reason,
                "exit_code": self.exit_code, "reason": self.reason}


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
