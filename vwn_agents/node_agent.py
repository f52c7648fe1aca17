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

Everything it acknowledges is in its database (``node_store``: VWNs, VWN counter, heartbeat
targets; ``outbox_store``: undelivered events) before the HTTP answer. A ``kill -9`` of the agent
leaves the job wrappers running (their own sessions); the next agent adopts them
(``node_recovery``; docs/vwn.md, "Node agent state, restart and heartbeats"). It heartbeats to
the CE agents (``node_heartbeat``).

HTTP (Flask, see ``create_app``): POST /vwns, GET /vwns, GET /vwns/<vwn>, DELETE /vwns/<vwn>,
GET /status; POST /vwns/<vwn>/suspend and /resume (``node_suspend``: freeze, thaw).
"""
from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path

from flask import Flask, jsonify, request

from vgrid_runtime.authn import authorize, caller, install_authentication
from vgrid_runtime.clock import Clock, WallClock
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.httpjson import ApiError, install_error_handlers, parse_body
from vgrid_runtime.outcomes import Outcome
from vgrid_runtime.sqldb import open_engine, sqlite_url

from . import cgroups, drivers, fairshare, node_heartbeat, node_migration, node_recovery, node_stop, node_suspend, proctree
from .drivers import vm_job, voc_job
from .confinement import Confinement
from .heartbeats import Heartbeats
from .images import node_routes as node_images, vwn_disk
from .node_config import NodeAgentConfig  # noqa: F401  (re-exported)
from .node_store import NodeStore
from .api_models import NODE_SPEC, install_openapi
from .node_metrics import install_node_metrics
from .outbox import Outbox
from .pool_accounts import AccountError, Owner
from .sandbox import SandboxError
from .vwn_model import VWN, VWNRequest  # noqa: F401  (re-exported)
from .vwn_process import stage_in_and_start, compile_wrapper, is_wrapper
from . import node_voc, wrapper_launch
from .wrapper_launch import JOIN_AND_EXEC, JOIN_FAILED, PACKAGE_PARENT  # noqa: F401  (re-exported)
from .vwn_states import SHARING, VWNState

log = logging.getLogger(__name__)



class NodeAgent:
    """The node agent's logic (no HTTP): VWN lifecycle, CPU caps, events, persistence.

    Raises RuntimeError when another agent of the same node runs on the same work directory,
    ``pool_accounts.AccountError`` when the pool accounts cannot be prepared.
    """

    def __init__(self, config: NodeAgentConfig, clock: Clock | None = None,
                 driver: cgroups.CpuCgroups | None = None) -> None:
        self.config = config
        self.clock = clock or WallClock()
        compile_wrapper()
        self._own_work_dir = config.work_dir is None
        self.work_dir = Path(config.work_dir or tempfile.mkdtemp(prefix=f"vgrid-{config.node}-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._node_lock = node_recovery.lock_node(self.work_dir, config.node)
        self.engine = open_engine(config.db_url or sqlite_url(self.work_dir / "node.db"))
        self.store = NodeStore(self.engine, config.node)
        self.store.prune(self.clock.now() - config.keep_ended_s)
        self.vwns: dict[str, VWN] = {v.vwn: v for v in self.store.load()}
        self.by_key: dict[str, str] = {v.request.key: v.vwn for v in self.vwns.values()}
        resumed = [v for v in self.vwns.values() if v.active]
        self.driver = drivers.open_driver(config, driver, resumed)   # cgroup | libvirt
        self.cg, self.fz = self.driver.cg, self.driver.fz
        self.conf = Confinement(config, self.work_dir,
                                self.cg.node_dir if self.cg.version == "v2" else None,
                                adopted=node_recovery.leases(resumed))
        self.outbox = Outbox(config.retry_initial_s, config.retry_max_s, name=f"{config.node}-events",
                             tls=config.tls_files(), engine=self.engine,
                             give_up_s=config.outbox_give_up_s, max_items=config.outbox_max_items,
                             clock=self.clock, senders=config.outbox_senders)
        self._lock = threading.RLock()
        self._stopping = False
        self._node_urls = self.store.targets()     # heartbeat URL -> our URL as its CE knows it
        self.heartbeats = Heartbeats(config.heartbeat_s, lambda url: node_heartbeat.body(self, url),
                                     lambda *a: node_heartbeat.kill_unknown(self, *a),
                                     new_session(config.tls_files()), self.clock,
                                     name=f"{config.node}-heartbeats")
        for url in self._node_urls:
            self.heartbeats.add(url)
        if not self.cg.capped:
            log.warning("node %s: VWNs will run UNCAPPED: %s", config.node, self.cg.reason)
        if self._own_work_dir and not config.db_url:
            log.warning("node %s: no work_dir configured: its VWNs will not survive a restart",
                        config.node)
        self.zygote = wrapper_launch.open_zygote(self)      # the preforked wrapper starter
        self.voc = node_voc.NodeVOC(self)                   # VOC VMs serving jobs (libvirt)
        node_recovery.resume(self, resumed)

    # -- queries ------------------------------------------------------------------------------

    def active(self) -> list[VWN]:
        with self._lock:
            return [v for v in self.vwns.values() if v.active]

    def sharing(self) -> list[VWN]:      # the VWNs holding a CPU share: N of C/(N+1)
        with self._lock:
            return [v for v in self.vwns.values() if v.state in SHARING]

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
        box = self.outbox.stats()
        return {"node": self.config.node, "capacity": self.config.capacity,
                "vwns": len(self.active()), "driver": self.driver.describe(), "cgroup": self.cg.describe(),
                "confinement": self.conf.describe(), "freezer": self.fz.describe(),
                "adopted": sum(1 for v in self.active() if v.adopted),
                "outbox": {"pending": box["pending"], "dropped": box["dropped"]},
                "heartbeat": self.heartbeats.status(), **node_images.status(self)}

    def job_dir(self, vwn: str) -> Path:
        """The work directory of ``vwn`` (while it runs, or kept with ``keep_workdirs``)."""
        return self.conf.jobs / vwn

    def read_cap(self, vwn: str) -> float | None:
        """The cap of ``vwn`` as the kernel has it (read back from the cgroup files)."""
        return self.cg.read_cap(vwn)

    # -- arrival ------------------------------------------------------------------------------

    def create_vwn(self, req: VWNRequest, node_url: str | None = None) -> tuple[VWN, bool]:
        """Start a VWN for ``req`` (idempotent on ``req.key``, also across restarts); returns
        (vwn, created). ``node_url``: this agent's URL as the caller called it (for heartbeats).

        The new VWN gets C/(N+1); the others are readjusted to the same share (seed 004, 5.1).
        The VWN is in the database when this returns (ApiError 503 if it cannot be stored).
        """
        with self._lock:
            if self._stopping:
                raise ApiError(503, f"node agent {self.config.node} is shutting down")
            if req.key in self.by_key:
                return self.vwns[self.by_key[req.key]], False
            vwn_disk.attach(self, req)           # the overlay of its VM image (409 until it arrived)
            node_voc.check_request(self, req)    # a VOC node's job: 409 without its VM
            name = f"vwn-{self.config.node}-{self._store_call(self.store.next_number)}"
            try:
                jail = self.conf.open(name, Owner.from_json(req.owner), req.memory_mb)
            except AccountError as exc:
                raise ApiError(503, f"no pool account for the VWN: {exc}", key=req.key) from None
            share = fairshare.vwn_cap(self.config.capacity, len(self.sharing()))
            v = VWN(name, req, VWNState.STARTING, self.clock.now(), self.cg.capped,
                    None if self.cg.capped else self.cg.reason, jail=jail,
                    agent_pid=os.getpid(), home=self.cg.home(name))
            try:
                self.store.insert(v)
            except Exception as exc:  # noqa: BLE001 - e.g. a full disk: refuse, leave nothing
                self.conf.close(jail, False)
                raise ApiError(503, f"node agent {self.config.node} cannot record the VWN: "
                               f"{type(exc).__name__}", key=req.key) from None
            self.vwns[name] = v
            self.by_key[req.key] = name
            try:
                self.cg.create(name)
            except cgroups.CgroupError as exc:
                v.capped, v.cap_reason = False, f"cgroup not created: {exc}"
            node_suspend.create(self, v)
            self._readjust(share, arriving=v)
            self._save(v)
            if req.heartbeat_url:
                node_heartbeat.add_target(self, req.heartbeat_url, node_url)
            self._launch(v)
            return v, True

    def _store_call(self, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - the database is unusable: say so, 503
            raise ApiError(503, f"node agent {self.config.node}: database error "
                                f"{type(exc).__name__}") from None

    def _save(self, v: VWN) -> None:
        """Record ``v``'s state; a database failure is logged (the VWN goes on)."""
        try:
            self.store.save(v)
        except Exception as exc:  # noqa: BLE001
            log.error("%s: cannot record its state %s: %s", v.vwn, v.state.value, exc)

    def _readjust(self, share: float | None, arriving: VWN | None = None) -> None:
        """Set every sharing (not suspended) VWN to ``share``; record it and emit ``caps`` for the others."""
        now = self.clock.now()
        for v in self.sharing():
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
                self._save(v)

    def _launch(self, v: VWN) -> None:
        v.monitor = threading.Thread(target=self._run, args=(v,), name=v.vwn, daemon=True)
        v.monitor.start()

    # -- the VWN's life -----------------------------------------------------------------------

    def _run(self, v: VWN) -> None:
        """Monitor thread: stage in, start the wrapper (unless an earlier agent did), watch its
        lines, collect, stage out; always finishes (the VWN ends and is reported)."""
        try:
            if self.driver.runs_jobs:              # libvirt: the job runs in the guest
                return (voc_job.run if v.request.voc_node else vm_job.run)(self, v)   # voc: issue 15
            if v.wrapper_pid is None and not stage_in_and_start(
                    self, v, lambda v: wrapper_launch.start(self, v)):
                return
            if v.wrapper_pid is not None and not v.end_recorded:
                wrapper_launch.watch(self, v)
        except Exception as exc:  # noqa: BLE001 - the VWN must still end and be reported
            log.exception("%s: monitor failed", v.vwn)
            if v.reason is None:
                v.fail(Outcome.WRAPPER_ERROR, f"node agent error while watching the VWN: {exc}")
        finally:
            self._finish(v)

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

    def _collect(self, v: VWN, code: int | None, result: dict | None) -> None:
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
            status = "unknown: it ended while the node agent was down" if code is None else code
            v.fail(Outcome.WRAPPER_ERROR,
                   "cannot join the VWN's cgroup" if code == JOIN_FAILED else
                   f"job wrapper ended without a result (exit status {status}); "
                   f"see {v.jail.vdir / 'wrapper.log'}")
        elif result.get("error"):
            v.fail(Outcome.WRAPPER_ERROR, result["error"])
        else:
            v.exit_code, v.outcome = result.get("exit_code"), Outcome.EXIT

    def _finish(self, v: VWN) -> None:
        """The VWN has ended: record how, remove its cgroup, report, readjust the others.

        The outcome is in the database before the cleanup removes the wrapper's output file
        (a restarted agent reports it from there, ``node_recovery``); the event is posted
        after the cleanup (a receiver may rely on it) and before the end state is recorded."""
        with self._lock:
            try:
                v.cpu_time_s = self.cg.cpu_usage_s(v.vwn) if v.capped else None
            except (cgroups.CgroupError, OSError) as exc:
                log.warning("%s: %s", v.vwn, exc)
            if v.cancelled:
                v.outcome, final = Outcome.CANCELLED, VWNState.CANCELLED
            elif self._stopping and v.exit_code is None and v.outcome is None:
                v.fail(Outcome.NODE_SHUTDOWN, f"node agent {self.config.node} shut down")
                final = VWNState.ABORTED
            elif v.outcome in (None, Outcome.EXIT):
                v.outcome, final = Outcome.EXIT, VWNState.DONE
            else:
                final = VWNState.ABORTED
            self._save(v)
            try:
                self.cg.remove(v.vwn)
            except (cgroups.CgroupError, OSError) as exc:
                log.warning("%s: %s", v.vwn, exc)
            node_suspend.remove(self, v)
            vwn_disk.detach(self, v)             # unpins its VM image
            self.conf.close(v.jail, self.config.keep_workdirs)
            v.to(final)
            v.ended = self.clock.now()
            if v.state is not VWNState.CANCELLED:
                self._emit(v, v.state.value)
            self._save(v)
            self._readjust(fairshare.equal_shares(self.config.capacity, len(self.sharing())))

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
            self._save(v)                          # a restarted agent finishes the kill
        self._kill(v)
        if v.monitor is not None:
            v.monitor.join(timeout=10)
        return v

    def _kill(self, v: VWN) -> None:
        self.fz.kill(v.vwn)                        # a suspended VWN: SIGKILL, then thaw
        if v.proc is not None:
            proctree.kill_tree(v.proc.pid)
        elif is_wrapper(v.wrapper_pid, v.wrapper_start, v.home if v.capped else None, v.vwn):
            proctree.kill_tree(v.wrapper_pid)      # adopted: not our child
        self.cg.kill(v.vwn)
        self.conf.kill(v.jail)

    def shutdown(self, flush_s: float = 3.0) -> None:
        """Kill every VWN (reported ``aborted``), remove the cgroups, deliver pending events
        (one bounded, non-retrying attempt of ``flush_s`` seconds; the rest is kept for the next
        start): ``node_stop``. A temporary work directory the agent made itself is removed
        (unless ``keep_workdirs``)."""
        node_stop.shutdown(self, flush_s)


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
        v, created = agent.create_vwn(parse_body(VWNRequest, "POST /vwns"),
                                      node_url=request.host_url.rstrip("/"))
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

    node_suspend.install_routes(app, agent, from_ce)
    node_images.install_routes(app, agent, from_ce)     # image pool (docs/vwn.md)
    node_migration.install_routes(app, agent, from_ce)  # cold migration (libvirt VWNs)
    node_voc.install_routes(app, agent, from_ce)        # VOC VMs (issue 15)
    install_node_metrics(app, agent)                 # GET /metrics (node_metrics)
    install_openapi(app, NODE_SPEC)                  # GET /openapi.json, body models (api_models)

    @app.get("/status")
    def status():
        body = agent.status()
        if caller().authenticated and not caller().is_one_of(config.ce_dns):
            body = {k: x for k, x in body.items() if k not in ("outbox", "heartbeat", "image_pool")}  # CE only
        return jsonify(body)

    return app

