"""What a node agent knows of one VWN: the request (body of POST /vwns) and the VWN record.

``VWNRequest`` is the HTTP contract (docs/architecture.md, "node agent"); ``VWN`` the node agent's
record of one virtual worker node, persisted in its database (``node_store``) so that a restarted
agent adopts the VWN (docs/vwn.md, "Restart").
"""
from __future__ import annotations

import re
import subprocess
import threading
from dataclasses import dataclass, field

from vgrid_runtime.outcomes import Outcome

from .confinement import Jail
from .images.repository import NAME_RE as IMAGE_NAME

#: A VOC node id (``VWNRequest.voc_node``, ``node_voc``).
VOC_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,150}")
from .jobpaths import PathError, check_plain, check_relative
from .pool_accounts import Owner
from .vwn_states import ACTIVE, VWN_STATES, VWNState


@dataclass
class VWNRequest:
    """Body of POST /vwns (docs/architecture.md, node agent)."""

    job_id: str
    key: str
    executable: str
    arguments: str = ""
    environment: list[str] = field(default_factory=list)
    std_input: str | None = None
    std_output: str | None = None
    std_error: str | None = None
    input_sandbox: list[dict] = field(default_factory=list)
    output_sandbox: list[str] = field(default_factory=list)
    output_upload_url: str | None = None
    callback_url: str | None = None
    owner: dict | None = None        # {"dn", "vo", "fqans"}: who the job belongs to (pool account)
    memory_mb: int | None = None     # the job's memory requirement (MB), else the node's share
    heartbeat_url: str | None = None  # where the node heartbeats about this VWN (<ce>/node-heartbeats)
    image: str | None = None         # a VM image of the node's pool: the VWN's disk is an overlay on it
    voc_node: str | None = None      # run the job in this VOC node's running VM (node_voc, libvirt)

    def validate(self) -> str | None:
        if not self.key:
            return "field 'key': must not be empty"
        for i, item in enumerate(self.input_sandbox):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) \
                    or not isinstance(item.get("url"), str):
                return f"field 'input_sandbox[{i}]': expected {{\"name\": str, \"url\": str}}"
        try:
            Owner.from_json(self.owner)
            for name in ("std_input", "std_output", "std_error"):
                if getattr(self, name):
                    check_relative(getattr(self, name), f"field '{name}':")
            for i, name in enumerate(self.output_sandbox):
                check_relative(name, f"field 'output_sandbox[{i}]':")
            for i, item in enumerate(self.input_sandbox):
                check_plain(item["name"], f"field 'input_sandbox[{i}]':")
        except (PathError, ValueError) as exc:
            return str(exc)
        if self.memory_mb is not None and self.memory_mb < 1:
            return f"field 'memory_mb': must be >= 1 (MB), got {self.memory_mb}"
        if self.image is not None and not IMAGE_NAME.fullmatch(self.image):
            return "field 'image': an image name of the node's pool, [A-Za-z0-9][A-Za-z0-9._-]*"
        if self.voc_node is not None and (self.image is not None or not VOC_NODE.fullmatch(self.voc_node)):
            return "field 'voc_node': a VOC node id, [A-Za-z0-9][A-Za-z0-9._-]*, without 'image'"
        if self.heartbeat_url is not None and not self.heartbeat_url.startswith(("http://", "https://")):
            return "field 'heartbeat_url': must be an http:// or https:// URL"
        return None


@dataclass
class VWN:
    """One virtual worker node and its job."""

    vwn: str
    request: VWNRequest
    state: VWNState                  # vwn_states.VWN_STATES; change it with to()
    created: float
    capped: bool
    cap_reason: str | None
    cpu_caps: list[list[float]] = field(default_factory=list)
    pid: int | None = None           # the job's pid (once running)
    exit_code: int | None = None
    reason: str | None = None
    outcome: Outcome | None = None   # why it ended (with reason): EXIT, WRAPPER_ERROR, ...
    ended: float | None = None
    cpu_time_s: float | None = None
    proc: subprocess.Popen | None = None
    monitor: threading.Thread | None = None
    cancelled: bool = False
    jail: Jail | None = None
    wrapper_pid: int | None = None   # the job wrapper's pid and its start time (/proc stat
    wrapper_start: int | None = None  # field 22, clock ticks since boot): who to adopt
    agent_pid: int | None = None     # pid of the node agent that started it (its lease holder)
    home: str | None = None          # node cgroup directory name holding its cgroups
    adopted: bool = False            # taken over from an earlier agent (not our child)
    out_offset: int = 0              # how much of wrapper.out has been read
    end_recorded: bool = False       # its outcome was recorded before an agent died in cleanup
    marks: dict[str, float] = field(default_factory=dict)   # clock times of its start's steps
    notify: int | None = None        # read end of a zygote wrapper's doorbell pipe (while starting)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def to(self, new: VWNState) -> None:
        """Change the state through ``VWN_STATES`` (IllegalTransition if not allowed)."""
        self.state = VWN_STATES.transition(self.state, new, self.vwn)

    def fail(self, outcome: Outcome, reason: str) -> None:
        """Record why the VWN will end aborted (code and prose)."""
        self.outcome, self.reason = outcome, reason

    def record(self) -> dict:
        r = self.request
        return {"vwn": self.vwn, "job_id": r.job_id, "key": r.key, "state": self.state.value,
                "pid": self.pid, "cpu_cap": self.cpu_caps[-1][1] if self.cpu_caps else None,
                "cpu_caps": self.cpu_caps, "capped": self.capped, "cap_reason": self.cap_reason,
                "exit_code": self.exit_code, "reason": self.reason,
                "outcome": self.outcome.value if self.outcome else None, "created": self.created,
                "ended": self.ended, "cpu_time_s": self.cpu_time_s, "adopted": self.adopted,
                "marks": dict(self.marks),
                **(self.jail.record() if self.jail else {})}
