"""The one client of the node agent's HTTP API (docs/architecture.md, "node agent").

``NodeAgentClient(base_url, session=None, timeout_s=10.0)``: ``create_vwn`` (POST /vwns),
``vwns`` (GET /vwns), ``vwn`` (GET /vwns/<vwn>), ``delete_vwn`` (DELETE /vwns/<vwn>),
``suspend_vwn`` / ``resume_vwn`` (POST /vwns/<vwn>/suspend, /resume), ``status`` (GET /status); the image pool: ``pull_image``, ``images``, ``set_image_pins``, ``make_overlay``. Every failure raises ``NodeAgentError`` with a ``kind``
(``vgrid_runtime.httpclient.ErrorKind``: unreachable, timeout, http, bad-answer) and the HTTP
``status`` when the node agent answered. Used by the CE agent (fair-share placement, cancel)
and by ``node_enactment.NodeAgentEnactment`` (the lease engine's nodes).
"""
from __future__ import annotations

from typing import TypedDict

from vgrid_runtime.httpclient import ErrorKind, ServiceClient, ServiceError

__all__ = ["ErrorKind", "NodeAgentClient", "NodeAgentError", "VWNCreated", "VWNRecord"]


class NodeAgentError(ServiceError):
    """A node agent call failed: ``kind``, ``status``, ``url``, ``body`` (``ServiceError``)."""


class VWNCreated(TypedDict, total=False):
    """Answer of POST /vwns: ``vwn`` id, ``cpu_cap`` (fraction of the node), ``capped``,
    ``cap_reason``, ``state``."""

    vwn: str
    cpu_cap: float
    capped: bool
    cap_reason: str | None
    state: str


class VWNRecord(TypedDict, total=False):
    """A VWN record: ``state`` is starting | running | suspended | done | aborted | cancelled; ``created``,
    ``ended`` in clock seconds, ``cpu_time_s`` in seconds, ``cpu_caps`` ``[[t, fraction], ...]``."""

    vwn: str
    job_id: str
    key: str
    state: str
    pid: int | None
    cpu_cap: float
    cpu_caps: list
    capped: bool
    cap_reason: str | None
    exit_code: int | None
    reason: str | None
    created: float
    ended: float | None
    cpu_time_s: float | None


class NodeAgentClient(ServiceClient):
    """Client of one node agent at ``base_url``; ``timeout_s`` bounds each call (seconds).
    ``session``: a ``requests.Session`` to share (default: its own)."""

    Error = NodeAgentError

    def create_vwn(self, body: dict) -> VWNCreated:
        """POST /vwns with the VWN request ``body`` (docs/architecture.md: job_id, key,
        executable, ...). 201 for a new VWN, 200 for a repeated ``key`` (the existing VWN).
        Raises NodeAgentError (HTTP 400 for a bad body; BAD_ANSWER without ``vwn``)."""
        return self._call("POST", "/vwns", json=body, required=("vwn",))

    def vwns(self) -> list[VWNRecord]:
        """GET /vwns: every VWN of the node. Raises NodeAgentError."""
        return self._call("GET", "/vwns", answer=list)

    def vwn(self, vwn: str) -> VWNRecord:
        """GET /vwns/<vwn>. Raises NodeAgentError (HTTP 404 for an unknown VWN)."""
        return self._call("GET", f"/vwns/{vwn}", required=("state",))

    def delete_vwn(self, vwn: str) -> VWNRecord:
        """DELETE /vwns/<vwn>: kill its process tree, remove its cgroup; the record (state
        cancelled unless it had ended). Raises NodeAgentError (HTTP 404 for an unknown VWN)."""
        return self._call("DELETE", f"/vwns/{vwn}")

    def suspend_vwn(self, vwn: str) -> VWNRecord:
        """POST /vwns/<vwn>/suspend: freeze the VWN's cgroup (state suspended; 200 also when it
        already was). Raises NodeAgentError: HTTP 404 unknown VWN, 409 not running, 501 no
        freezer on the node, 503 not frozen in time."""
        return self._call("POST", f"/vwns/{vwn}/suspend", required=("state",))

    def resume_vwn(self, vwn: str) -> VWNRecord:
        """POST /vwns/<vwn>/resume: thaw the VWN's cgroup (state running; 200 also when it
        already was). Raises NodeAgentError: HTTP 404, 409 not suspended, 501, 503."""
        return self._call("POST", f"/vwns/{vwn}/resume", required=("state",))

    def status(self, timeout_s: float | None = None) -> dict:
        """GET /status: ``{"node","capacity","vwns","cgroup":{...}}``; ``timeout_s`` overrides
        the client's (a liveness probe). Raises NodeAgentError."""
        return self._call("GET", "/status", timeout_s=timeout_s)

    # -- image pool (vwn_agents/images/node_routes.py) -------------------------------------------

    def pull_image(self, body: dict) -> dict:
        """POST /images/pulls (``images.pool.PullRequest`` fields: image, transfer, rate_mbs,
        pins, scheduled_start, scheduled_end, sha256) -> ``{"image","state","hit","transfer"}``.
        Raises NodeAgentError (HTTP 400 bad name, 501 no repository configured)."""
        return self._call("POST", "/images/pulls", json=body, required=("image", "state"))

    def images(self) -> dict:
        """GET /images: the node's pool ``{"capacity_mb","used_mb","images","transfers"}``."""
        return self._call("GET", "/images", required=("images", "transfers"))

    def set_image_pins(self, pins: dict) -> dict:
        """PUT /images/pins ``{image: [lease keys]}`` (replaces every pin) -> the pool view."""
        return self._call("PUT", "/images/pins", json={"pins": pins}, required=("images",))

    def make_overlay(self, image: str, vwn: str) -> dict:
        """POST /images/<image>/overlays -> ``{"path","backing","format"}`` (a qcow2 overlay on
        the pool's image). Raises NodeAgentError (HTTP 409 not ready)."""
        return self._call("POST", f"/images/{image}/overlays", json={"vwn": vwn}, required=("path",))

    def delete_overlay(self, vwn: str) -> dict:
        """DELETE /images/overlays/<vwn>: remove that VWN's overlay -> the pool view."""
        return self._call("DELETE", f"/images/overlays/{vwn}", required=("images",))

    # -- cold migration of libvirt VWNs (vwn_agents/node_migration.py) -----------------------------

    def handover(self, vwn: str, timeout_s: float | None = None) -> dict:
        """POST /vwns/<vwn>/handover: suspend the VWN to disk (if it runs) and offer its files ->
        ``{"vwn","node","dir","token","files":[{"name","size","sha256"}],"request","save"}``.
        Raises NodeAgentError (404 unknown, 409 not running/suspended or not a libvirt VWN)."""
        return self._call("POST", f"/vwns/{vwn}/handover", json={}, timeout_s=timeout_s,
                          required=("token", "files", "request"))

    def migrate_in(self, body: dict, timeout_s: float | None = None) -> dict:
        """POST /vwns/migrations (``node_migration.MigrationIn``): pull a handed-over VWN's files
        from its source node, check them, restore the VM here -> ``{"vwn","copy_s","restore_s",
        "mb","bytes"}``. Raises NodeAgentError (409 not libvirt, 502 the source failed, 422 a
        checksum mismatch, 503 libvirt failed)."""
        return self._call("POST", "/vwns/migrations", json=body, timeout_s=timeout_s, required=("vwn",))

    def complete_handover(self, vwn: str, node: str, new_vwn: str) -> dict:
        """POST /vwns/<vwn>/handover/complete: the VWN now runs on ``node`` as ``new_vwn``; the
        source ends its record (cancelled, "migrated to ...") and removes its files."""
        return self._call("POST", f"/vwns/{vwn}/handover/complete", json={"node": node, "vwn": new_vwn})

    def open_handover_file(self, vwn: str, name: str, token: str, offset: int = 0,
                           chunk_bytes: int = 1 << 20):
        """GET /vwns/<vwn>/handover/files/<name> with the handover's token, from byte ``offset``
        -> ``(status, headers, chunks)`` as ``ServiceClient._get_stream`` (206 from ``offset``)."""
        headers = {"X-Vgrid-Handover": token}
        if offset > 0:
            headers["Range"] = f"bytes={offset}-"
        return self._get_stream(f"/vwns/{vwn}/handover/files/{name}", headers=headers,
                                chunk_bytes=chunk_bytes)
