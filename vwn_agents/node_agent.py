"""The node agent: one virtual worker node (VWN) per job on this worker-node host.

A VWN is the job wrapper's process tree in its own cgroup, CPU-capped at C/(N+1) of the node's
capacity C when it arrives (N = VWNs already running), the other VWNs readjusted to the same
share; on a departure the remaining VWNs are readjusted to C/n (seed 004, Section 5.1; see
``fairshare``). Every readjustment is recorded in each VWN's ``cpu_caps`` history ``[[t, fraction]]``
(t from the clock passed in) and reported as a ``caps`` event; the job's own life is reported as
``running``, ``done`` (exit code) or ``aborted`` (reason) events POSTed to the VWN's
``callback_url`` through an ``Outbox`` (docs/architecture.md, "events").

Every VWN runs as a pool account leased for its owner, never as root, with memory, pids and
disk limits; the node agent stages both sandboxes (``confinement``, docs/vwn.md "Confinement").

HTTP (Flask, see ``create_app``): POST /vwns, GET /vwns, GET /vwns/<vwn>, DELETE /vwns/<vwn>,
GET /status.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from flask import Flask, jsonify

from vgrid_runtime.clock import Clock, WallClock

from . import cgroups, fairshare, proctree
from vgrid_runtime.authn import authorize, caller, install_authentication
from .confinement import Confinement, Jail
from .jobpaths import PathError, check_plain, check_relative
from .pool_accounts import AccountError, Owner
from .sandbox import SandboxError
from vgrid_runtime.httpjson import ApiError, install_error_handlers, parse_body
from .node_config import NodeAgentConfig  # noqa: F401  (re-exported)
from .outbox import Outbox
from .vwn_states import ACTIVE, VWN_STATES, VWNState
from vgrid_runtime.outcomes import Outcome

log = logging.getLogger(__name__)

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
# Joins every cgroup.procs file given before "--", then execs the rest: the wrapper starts inside
# the VWN's cgroup(s), so the job and all its children inherit the CPU cap.
JOIN_AND_EXEC = ('for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 97; shift; '
                 'done; shift; exec "$@"')
JOIN_FAILED = 97


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
    heartbeat_url: str | None = None  # the CE agent's POST /node-heartbeats (contract 3)

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
                "ended": self.ended, "cpu_time_s": self.cpu_time_s,
                **(self.jail.record() if self.jail else {})}


class NodeAgent:
    """The node agent's logic (no HTTP): VWN lifecycle, CPU caps, events."""

    def __init__(self, config: NodeAgentConfig, clock: Clock | None = None,
                 driver: cgroups.CpuCgroups | None = None) -> None:
        self.config = config
        self.clock = clock or WallClock()
        self.cg = driver or cgroups.open_cpu_cgroups(config.node, config.cgroup,
                                                     config.cgroup_parent)
        self._own_work_dir = config.work_dir is None
        self.work_dir = Path(config.work_dir or tempfile.mkdtemp(prefix=f"vgrid-{config.node}-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.conf = Confinement(config, self.work_dir,
                                self.cg.node_dir if self.cg.version == "v2" else None)
        self.outbox = Outbox(config.retry_initial_s, config.retry_max_s, name=f"{config.node}-events",
                             tls=config.tls_files())
        self.vwns: dict[str, VWN] = {}
        self.by_key: dict[str, str] = {}
        self._lock = threading.RLock()
        self._counter = 0
        self._stopping = False
        if not self.cg.capped:
            log.warning("node %s: VWNs will run UNCAPPED: %s", config.node, self.cg.reason)

    # -- queries ------------------------------------------------------------------------------

    def active(self) -> list[VWN]:
        with self._lock:
            return [v for v in self.vwns.values() if v.active]

    def get(self, vwn: str) -> VWN:
        with self._lock:
            if vwn not in self.vwns:
                raise ApiError(404, f"no VWN {vwn!r} on node {self.config.node}", vwn=vwn)
            return self.vwns[vwn]

    def records(self) -> list[dict]:
        """Every VWN record (active and ended), in creation order."""
        with self._lock:
            return [v.record() for v in self.vwns.values()]

    def status(self) -> dict:
        return {"node": self.config.node, "capacity": self.config.capacity,
                "vwns": len(self.active()), "cgroup": self.cg.describe(),
                "confinement": self.conf.describe()}

    def job_dir(self, vwn: str) -> Path:
        """The work directory of ``vwn`` (while it runs, or kept with ``keep_workdirs``)."""
        return self.conf.jobs / vwn

    def read_cap(self, vwn: str) -> float | None:
        """The cap of ``vwn`` as the kernel has it (read back from the cgroup files)."""
        return self.cg.read_cap(vwn)

    # -- arrival ------------------------------------------------------------------------------

    def create_vwn(self, req: VWNRequest) -> tuple[VWN, bool]:
        """Start a VWN for ``req`` (idempotent on ``req.key``); returns (vwn, created).

        The new VWN gets C/(N+1); the others are readjusted to the same share (seed 004, 5.1).
        """
        with self._lock:
            if self._stopping:
                raise ApiError(503, f"node agent {self.config.node} is shutting down")
            if req.key in self.by_key:
                return self.vwns[self.by_key[req.key]], False
            self._counter += 1
            name = f"vwn-{self.config.node}-{self._counter}"
            try:
                jail = self.conf.open(name, Owner.from_json(req.owner), req.memory_mb)
            except AccountError as exc:
                raise ApiError(503, f"no pool account for the VWN: {exc}", key=req.key) from None
            share = fairshare.vwn_cap(self.config.capacity, len(self.active()))
            v = VWN(name, req, VWNState.STARTING, self.clock.now(), self.cg.capped,
                    None if self.cg.capped else self.cg.reason, jail=jail)
            self.vwns[name] = v
            self.by_key[req.key] = name
            try:
                self.cg.create(name)
            except cgroups.CgroupError as exc:
                v.capped, v.cap_reason = False, f"cgroup not created: {exc}"
            self._readjust(share, arriving=v)
            self._launch(v)
            return v, True

    def _readjust(self, share: float | None, arriving: VWN | None = None) -> None:
        """Set every active VWN to ``share``; record it and emit ``caps`` for the others."""
        now = self.clock.now()
        for v in self.active():
            if v.capped:
                try:
                    self.cg.set_cap(v.vwn, share)
                except cgroups.CgroupError as exc:
                    v.capped, v.cap_reason = False, f"cap not applied: {exc}"
                    log.warning("%s: %s", v.vwn, v.cap_reason)
            if v.cpu_caps and v.cpu_caps[-1][1] == share:
                continue
            v.cpu_caps.append([now, share])
            if v is not arriving:
                self._emit(v, "caps")

    def _spec(self, v: VWN) -> dict:
        r = v.request
        spec = {"job_id": r.job_id, "workdir": str(v.jail.workdir), "executable": r.executable,
                "arguments": r.arguments, "environment": r.environment,
                "std_input": r.std_input, "std_output": r.std_output, "std_error": r.std_error}
        (v.jail.vdir / "spec.json").write_text(json.dumps(spec, indent=1))
        return spec

    def _launch(self, v: VWN) -> None:
        v.monitor = threading.Thread(target=self._run, args=(v,), name=v.vwn, daemon=True)
        v.monitor.start()

    def _start(self, v: VWN) -> None:
        """Start the wrapper: join the VWN's cgroups as root, then exec it as the pool account."""
        spec = self._spec(v)
        python = self.config.python or sys.executable
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "LANG": os.environ.get("LANG", "C.UTF-8"), "PYTHONPATH": PACKAGE_PARENT,
               "PYTHONDONTWRITEBYTECODE": "1"}
        procs = self.cg.procs_files(v.vwn) if v.capped else []
        argv = ["/bin/sh", "-c", JOIN_AND_EXEC, "vwn-join",
                *self.conf.command(v.jail, procs, [python, "-m", "vwn_agents.wrapper", "-"])]
        log_file = open(v.jail.vdir / "wrapper.log", "ab")
        try:
            v.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log_file,
                                      stdin=subprocess.PIPE, start_new_session=True,
                                      cwd=v.jail.workdir, env=env)
        except OSError as exc:
            v.fail(Outcome.WRAPPER_ERROR, f"cannot start the job wrapper: {exc}")
            return
        finally:
            log_file.close()
        try:
            v.proc.stdin.write(json.dumps(spec).encode())
            v.proc.stdin.close()
        except OSError:
            pass                                       # it died at once: its exit status says why

    # -- the VWN's life -----------------------------------------------------------------------

    def _run(self, v: VWN) -> None:
        """Monitor thread: stage in, start the wrapper, read its lines, collect, stage out;
        always finishes (the VWN ends and is reported)."""
        try:
            try:
                self.conf.prepare(v.jail, v.request.input_sandbox)
            except (SandboxError, OSError) as exc:
                v.fail(Outcome.WRAPPER_ERROR, str(exc))
                return
            with self._lock:
                if v.cancelled or self._stopping:
                    return
                self._start(v)
            if v.proc is not None:
                self._watch(v)
        except Exception as exc:  # noqa: BLE001 - the VWN must still end and be reported
            log.exception("%s: monitor failed", v.vwn)
            if v.reason is None:
                v.fail(Outcome.WRAPPER_ERROR, f"node agent error while watching the VWN: {exc}")
        finally:
            self._finish(v)

    def _watch(self, v: VWN) -> None:
        """Control lines from the wrapper (``running``, ``result``), then its exit."""
        result = None
        for line in v.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("event") == "running" and v.state is VWNState.STARTING:
                with self._lock:
                    v.to(VWNState.RUNNING)
                    v.pid = msg.get("pid")
                    self._emit(v, "running")
            elif msg.get("event") == "result":
                result = msg
        code = v.proc.wait()
        v.proc.stdout.close()
        self._collect(v, code, result)
        if v.outcome in (None, Outcome.EXIT) and not v.cancelled and result \
                and result.get("exit_code") is not None:
            self._stage_out(v)

    def _stage_out(self, v: VWN) -> None:
        """Upload the output sandbox once every process of the VWN is gone."""
        self._kill(v)
        r = v.request
        try:
            self.conf.stage_out(v.jail, r.output_sandbox, r.output_upload_url,
                                lambda: v.cancelled or self._stopping)
        except (SandboxError, OSError) as exc:
            v.fail(Outcome.WRAPPER_ERROR, f"{exc} (job exit code {v.exit_code})")
            v.exit_code = None

    def _collect(self, v: VWN, code: int, result: dict | None) -> None:
        """Set exit_code / reason from the wrapper's result line (or its exit status) and the
        limits the VWN hit (memory, disk quota)."""
        if v.cancelled:
            return
        verdict = self.conf.verdict(v.jail, result.get("exit_code") if result else None)
        if self._stopping and (result is None or result.get("exit_code") is None):
            v.fail(Outcome.NODE_SHUTDOWN, f"node agent {self.config.node} shut down")
        elif verdict is not None:
            v.fail(*verdict)
        elif result is None:
            v.fail(Outcome.WRAPPER_ERROR,
                   "cannot join the VWN's cgroup" if code == JOIN_FAILED else
                   f"job wrapper ended without a result (exit status {code}); "
                   f"see {v.jail.vdir / 'wrapper.log'}")
        elif result.get("error"):
            v.fail(Outcome.WRAPPER_ERROR, result["error"])
        else:
            v.exit_code, v.outcome = result.get("exit_code"), Outcome.EXIT

    def _finish(self, v: VWN) -> None:
        """The VWN has ended: remove its cgroup, readjust the others, report."""
        with self._lock:
            try:
                v.cpu_time_s = self.cg.cpu_usage_s(v.vwn) if v.capped else None
                self.cg.remove(v.vwn)
            except (cgroups.CgroupError, OSError) as exc:
                log.warning("%s: %s", v.vwn, exc)
            self.conf.close(v.jail, self.config.keep_workdirs)
            if v.cancelled:
                v.outcome = Outcome.CANCELLED
                v.to(VWNState.CANCELLED)
            elif self._stopping and v.exit_code is None and v.outcome is None:
                v.fail(Outcome.NODE_SHUTDOWN, f"node agent {self.config.node} shut down")
                v.to(VWNState.ABORTED)
            elif v.outcome in (None, Outcome.EXIT):
                v.outcome = Outcome.EXIT
                v.to(VWNState.DONE)
            else:
                v.to(VWNState.ABORTED)
            v.ended = self.clock.now()
            if v.state is not VWNState.CANCELLED:
                self._emit(v, v.state.value)
            self._readjust(fairshare.equal_shares(self.config.capacity, len(self.active())))

    def _emit(self, v: VWN, kind: str) -> None:
        r = v.request
        if not r.callback_url:
            return
        event = {"job_id": r.job_id, "key": r.key, "vwn": v.vwn, "node": self.config.node,
                 "event": kind, "exit_code": v.exit_code, "reason": v.reason,
                 "outcome": v.outcome.value if v.outcome else None,
                 "cpu_caps": [list(c) for c in v.cpu_caps], "capped": v.capped,
                 "cap_reason": v.cap_reason, "time": self.clock.now()}
        self.outbox.post(r.callback_url, event, order_key=r.key)

    # -- departure on request -----------------------------------------------------------------

    def delete_vwn(self, vwn: str, reason: str = "cancelled") -> VWN:
        """Kill the VWN's whole process tree, remove its cgroup, readjust the others.

        No ``done``/``aborted`` event is sent for a cancelled VWN (the canceller knows).
        """
        v = self.get(vwn)
        with self._lock:
            if not v.active:
                return v
            v.cancelled, v.reason, v.outcome = True, reason, Outcome.CANCELLED
        self._kill(v)
        if v.monitor is not None:
            v.monitor.join(timeout=10)
        return v

    def _kill(self, v: VWN) -> None:
        if v.proc is not None:
            proctree.kill_tree(v.proc.pid)
        self.cg.kill(v.vwn)
        self.conf.kill(v.jail)

    def shutdown(self, flush_s: float = 3.0) -> None:
        """Kill every VWN (reported ``aborted``), remove the cgroups, deliver pending events.

        A temporary work directory the agent made itself is removed (unless ``keep_workdirs``).
        """
        with self._lock:
            self._stopping = True
            running = self.active()
        for v in running:
            self._kill(v)
        for v in running:
            if v.monitor is not None:
                v.monitor.join(timeout=10)
        self.outbox.flush(flush_s)
        self.outbox.close()
        try:
            self.cg.close()
        except (cgroups.CgroupError, OSError) as exc:
            log.warning("node %s: %s", self.config.node, exc)
        self.conf.shutdown()
        if self._own_work_dir and not self.config.keep_workdirs:
            shutil.rmtree(self.work_dir, ignore_errors=True)


def create_app(config: NodeAgentConfig, clock: Clock | None = None,
               driver: cgroups.CpuCgroups | None = None) -> Flask:
    """The node agent's Flask app (HTTP contract: docs/architecture.md, "node agent").

    ``app.config["VGRID_AGENT"]`` is the ``NodeAgent``; ``app.config["VGRID_ON_STOP"]`` its
    ``shutdown`` (``wsgi.serve`` calls it on SIGTERM/SIGINT).
    """
    agent = NodeAgent(config, clock or WallClock(), driver)
    app = Flask(f"vgrid-node-{config.node}")
    app.config["VGRID_AGENT"] = agent
    app.config["VGRID_ON_STOP"] = agent.shutdown
    install_error_handlers(app, max_body_bytes=int(config.max_body_mb * 1_000_000))
    install_authentication(app, config.tls_files(), agent.clock)

    def from_ce(what: str) -> None:          # VWNs are the CE agents' business only
        authorize(caller().is_one_of(config.ce_dns), what)

    @app.post("/vwns")
    def post_vwn():
        from_ce("create VWNs")
        v, created = agent.create_vwn(parse_body(VWNRequest, "POST /vwns"))
        body = {"vwn": v.vwn, "cpu_cap": v.cpu_caps[-1][1] if v.cpu_caps else None,
                "capped": v.capped, "cap_reason": v.cap_reason, "state": v.state.value}
        return jsonify(body), 201 if created else 200

    @app.get("/vwns")
    def list_vwns():
        from_ce("list VWNs")
        return jsonify(agent.records())

    @app.get("/vwns/<vwn>")
    def get_vwn(vwn):
        from_ce(f"read VWN {vwn}")
        return jsonify(agent.get(vwn).record())

    @app.delete("/vwns/<vwn>")
    def delete_vwn(vwn):
        from_ce(f"delete VWN {vwn}")
        return jsonify(agent.delete_vwn(vwn).record())

    @app.get("/status")
    def status():
        return jsonify(agent.status())

    return app

