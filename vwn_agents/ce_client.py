"""The one client of the CE agent's job API (docs/architecture.md, "CE agent").

``CEAgentClient(base_url, session=None, timeout_s=10.0)``: ``submit`` (POST /jobs),
``submit_many`` (POST /jobs/bulk), ``jobs``
(GET /jobs), ``job`` (GET /jobs/<key>), ``cancel`` (POST /jobs/<key>/cancel), ``status``
(GET /status). Every failure raises ``CEAgentError`` with a ``kind``
(``vgrid_runtime.httpclient.ErrorKind``: unreachable, timeout, http, bad-answer) and the HTTP
``status`` when the CE agent answered. Used by the broker (dispatch, cancel, recovery).

The CE's GLUE endpoints (GET /glue, /glue2) are information-system endpoints read by
``infosys.sources`` (the ISM, the BDII feeder), which may not import ``vwn_agents``; events the
CE agent receives (POST /node-events) are delivered by the node agent's ``outbox``.
"""
from __future__ import annotations

from vgrid_runtime.httpclient import ErrorKind, ServiceClient, ServiceError

__all__ = ["CEAgentClient", "CEAgentError", "ErrorKind"]


class CEAgentError(ServiceError):
    """A CE agent call failed: ``kind``, ``status``, ``url``, ``body`` (``ServiceError``)."""


class CEAgentClient(ServiceClient):
    """Client of one CE agent at ``base_url``; ``timeout_s`` bounds each call (seconds).
    ``session``: a ``requests.Session`` to share (default: its own). Job records are
    ``{"key","job_id","state","node","node_url","vwn","cpu_caps","capped","cap_reason",
    "exit_code","reason","lease"}`` with a gLite ``state`` (Scheduled, Running, Done, Aborted,
    Cancelled)."""

    Error = CEAgentError

    def submit(self, body: dict) -> dict:
        """POST /jobs with ``{"job_id","key","jdl","filename","callback_url","input_sandbox",
        "output_upload_url"}``: 202 ``{"state","key"}`` (a repeated key answers the current
        state). Raises CEAgentError (HTTP 400 for bad JDL, with ``body["error"]``)."""
        return self._call("POST", "/jobs", json=body, required=("key",))

    def submit_many(self, bodies: list[dict]) -> list[dict]:
        """POST /jobs/bulk with ``{"jobs": bodies}`` (each a :meth:`submit` body): one result per
        body, in order, ``{"key","accepted","created","state"}`` or ``{"key","accepted": false,
        "outcome": "refused","status","error"}`` (``vwn_agents.ce_bulk``). Raises CEAgentError
        for the whole request (HTTP 403 not a broker of this CE; 404 a CE agent without the
        endpoint; unreachable, timeout) or an answer without one result per body."""
        answer = self._post_json_lean("/jobs/bulk", {"jobs": bodies}, required=("results",))
        results = answer["results"]
        if not isinstance(results, list) or len(results) != len(bodies) or \
                not all(isinstance(r, dict) for r in results):
            got = len(results) if isinstance(results, list) else type(results).__name__
            raise CEAgentError(ErrorKind.BAD_ANSWER, f"POST /jobs/bulk answered {got} results for "
                               f"{len(bodies)} jobs", f"{self.base_url}/jobs/bulk")
        return results

    def jobs(self) -> list[dict]:
        """GET /jobs: every job record at the CE, in arrival order. Raises CEAgentError."""
        return self._call("GET", "/jobs", answer=list)

    def job(self, key: str) -> dict:
        """GET /jobs/<key>: the job record. Raises CEAgentError (HTTP 404 for an unknown key)."""
        return self._call("GET", f"/jobs/{key}", required=("state",))

    def cancel(self, key: str) -> dict:
        """POST /jobs/<key>/cancel: kill the job's VWN; the record (state Cancelled). Raises
        CEAgentError (HTTP 409 if the job already ended, 404 for an unknown key)."""
        return self._call("POST", f"/jobs/{key}/cancel")

    def status(self) -> dict:
        """GET /status: ``{"ce_id","url","scheduler","capacity","nodes","jobs"}``. Raises
        CEAgentError."""
        return self._call("GET", "/status")

    def site(self) -> dict:
        """GET /site: nodes, their VWNs and image pools, and the slot table (``ce_site``; the
        brokers of the CE's ``broker_dns`` only). Raises CEAgentError (HTTP 403 for others)."""
        return self._call("GET", "/site", required=("nodes",))
