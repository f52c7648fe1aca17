"""Cold migration of a libvirt VWN between node agents over HTTPS (issue 14; seed 002 Section 3:
suspend, transfer the memory image, resume elsewhere). The CE agent drives it
(``ce_migration.LeaseMigration``); the files travel node to node, not through a shared directory.

Routes (installed by ``node_agent.create_app``):

* ``POST /vwns/<vwn>/handover`` (source node A; the CE agents of ``ce_dns`` only): suspend the
  VWN to disk unless it already is (pause + save of its memory image, ``node_suspend``), then
  offer its directory: 200 ``{"vwn","node","dir","token","files":[{"name","size","sha256"}],
  "request","memory_mb","save"}``; a VM booted from the image pool adds its overlay as file
  ``disk.qcow2`` (``disk_handover``: staged, rebased and pinned on the target, removed here at
  the completion only). ``token`` (256 random bits, new at every handover, kept in
  memory only: a restarted agent has none and the CE agent asks again) is the capability the
  target presents to fetch the files. 404 unknown VWN; 409 ``code`` "not-libvirt" (the node's
  driver cannot hand a VM over) or "not-running" (starting or ended); 503 the save failed.
* ``GET /vwns/<vwn>/handover/files/<name>`` (A): one file of the handover, from ``Range:
  bytes=<n>-`` if given (206), throttled to ``migration_serve_mb_s`` (a token bucket; 0 =
  unlimited). Authorization: an authenticated caller (mutual TLS: a host of the site's CA)
  presenting the handover's token in ``X-Vgrid-Handover`` (compared in constant time); anyone
  else 403 -- so only the node the CE agent chose, to which it gave the token, gets the memory.
* ``POST /vwns/migrations`` (target node B; CE agents only) ``MigrationIn``: pull every file of
  the manifest from A over HTTPS with B's host credential into ``<vm_dir>/.incoming-<src vwn>``
  (a transfer broken off is resumed by Range, at most ``PULL_ATTEMPTS`` tries), check each
  size and SHA-256, then take a VWN number, move the files into its directory, restore the VM
  (paths rewritten; ``LibvirtVMs.restore_moved``) and record it running. The ``resumed`` event
  it sends carries ``migrated_from`` (A's VWN) so the CE agent moves the job to the new VWN.
  201 ``{"vwn","node","copy_s","bytes","mb","copy_mb_s","restore_s","restore_mb_s"}``;
  409 not-libvirt; 502 ``code`` "source-failed" (A did not serve the files: down, killed, 403);
  422 "checksum-mismatch"; 503 "restore-failed" (nothing is recorded on B then).
* ``POST /vwns/<vwn>/handover/complete`` (A; CE agents only) ``{"node","vwn"}``: the VWN runs on
  ``node`` as ``vwn`` now: A ends its record (cancelled, reason "migrated to node ..."; no
  ``done``/``aborted`` event) and removes its files. 200 the record.

kill -9 of either agent mid-copy leaves a defined state: A's VWN is recorded suspended with its
memory image on disk (a restarted A adopts it as suspended); B has recorded nothing (its partial
files are removed at the next pull of the same VWN and when the agent starts); the CE agent
retries and, after its attempts, ends the job with ``Outcome.MIGRATION_FAILED``
(``ce_migration``). Window left: a kill -9 of B between the restore and its database write
leaves a running domain B does not know (docs/vwn.md).
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from flask import Response, jsonify, request

from vgrid_runtime.authn import Forbidden, authorize, caller
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.httpjson import ApiError, parse_body

from . import disk_handover, fairshare, node_suspend
from .drivers.libvirt_driver import VMError
from .images.tokenbucket import TokenBucket
from .node_client import NodeAgentClient, NodeAgentError
from .pool_accounts import AccountError, Owner
from .vwn_model import VWN, VWNRequest
from .vwn_process import start_time
from .vwn_states import VWNState

log = logging.getLogger(__name__)

PULL_ATTEMPTS = 3
HEADER = "X-Vgrid-Handover"
INCOMING = ".incoming-"


@dataclass
class MigrationIn:
    """Body of POST /vwns/migrations: where the VWN is (``source_url`` of node ``source_node``,
    its VWN ``source_vwn`` and directory ``source_dir`` there), the handover's ``token`` and
    ``files`` (the manifest of POST /vwns/<vwn>/handover) and the VWN's ``request``."""

    source_url: str
    source_vwn: str
    source_dir: str
    token: str
    files: list
    request: dict
    source_node: str = ""
    memory_mb: int | None = None
    extra: dict = field(default_factory=dict)

    def validate(self) -> str | None:
        if not self.source_url.startswith(("http://", "https://")):
            return "field 'source_url': must be an http:// or https:// URL"
        for i, f in enumerate(self.files):
            if not (isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("size"), int)
                    and isinstance(f.get("sha256"), str)) or not _plain(f["name"]):
                return f"field 'files[{i}]': expected {{\"name\": plain file name, \"size\": int, \"sha256\": str}}"
        if not any(f["name"] == "memory.save" for f in self.files):
            return "field 'files': no memory.save (the VM's memory image)"
        return None


@dataclass
class CompleteBody:
    """Body of POST /vwns/<vwn>/handover/complete: where the VWN runs now."""

    node: str
    vwn: str


def _plain(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..") and not name.startswith(".")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _libvirt(agent, verb: str, vwn: str) -> None:
    if agent.driver.kind != "libvirt":
        raise ApiError(409, f"cannot {verb} {vwn}: node {agent.config.node} runs the "
                            f"{agent.driver.kind} driver (cold migration needs libvirt VMs)", code="not-libvirt")


# -- source side ---------------------------------------------------------------------------------

def handover(agent, vwn: str) -> dict:
    """POST /vwns/<vwn>/handover (module doc). ApiError 404/409/503."""
    _libvirt(agent, "hand over", vwn)
    v = agent.get(vwn)
    if v.state not in (VWNState.RUNNING, VWNState.SUSPENDED) or v.cancelled:
        raise ApiError(409, f"cannot hand over {vwn}: it is {v.state.value}", code="not-running")
    vms = agent.driver.vms
    before = vms.last_save
    node_suspend.suspend(agent, vwn)                 # 503 when the save fails
    save = vms.last_save if vms.last_save is not before else None
    try:
        d = vms.export(vwn)
    except VMError as exc:
        raise ApiError(409, str(exc), code="not-running") from None
    files = [{"name": p.name, "size": p.stat().st_size, "sha256": sha256_of(p)}
             for p in sorted(d.iterdir()) if p.is_file() and _plain(p.name) and p.name != disk_handover.DISK]
    disk = disk_handover.offer(agent, v)            # the pool overlay (docs/vwn.md)
    if disk is not None:
        files.append(disk)
    token = secrets.token_urlsafe(32)
    agent.handovers[vwn] = token
    return {"vwn": vwn, "node": agent.config.node, "dir": str(d), "token": token, "files": files,
            "request": asdict(v.request),
            "memory_mb": v.request.memory_mb or agent.driver.memory_mb,
            "save": save.record() if save else None}


def serve_file(agent, vwn: str, name: str):
    """GET /vwns/<vwn>/handover/files/<name> (module doc)."""
    token = agent.handovers.get(vwn)
    given = request.headers.get(HEADER, "")
    authorize(lambda: caller().authenticated, f"fetch the handover files of {vwn}")
    if token is None or not hmac.compare_digest(token.encode(), given.encode()):
        raise Forbidden(f"fetch the handover files of {vwn} (no valid {HEADER} token)")
    if not _plain(name):
        raise ApiError(400, f"bad file name {name!r}")
    path = disk_handover.source_file(agent, vwn, name)
    try:
        size = path.stat().st_size
    except OSError:
        raise ApiError(404, f"no file {name!r} in the handover of {vwn}") from None
    start = 0
    rng = request.headers.get("Range", "")
    if rng.startswith("bytes=") and rng.endswith("-") and rng[6:-1].isdigit():
        start = int(rng[6:-1])
        if start > size:
            raise ApiError(416, f"offset {start} is past the end of {name} ({size} bytes)")
    rate = agent.config.migration_serve_mb_s * 1e6
    bucket = TokenBucket(rate) if rate > 0 else None

    def body():
        with open(path, "rb") as f:
            f.seek(start)
            while block := f.read(256 * 1024):
                if bucket is not None:
                    bucket.take(len(block))
                yield block

    resp = Response(body(), status=206 if start else 200, mimetype="application/octet-stream")
    resp.headers["Content-Length"] = str(size - start)
    resp.headers["Accept-Ranges"] = "bytes"
    if start:
        resp.headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
    return resp


def complete(agent, vwn: str, body: CompleteBody):
    """POST /vwns/<vwn>/handover/complete (module doc): the VWN record, ended."""
    _libvirt(agent, "complete the handover of", vwn)
    v = agent.get(vwn)
    agent.handovers.pop(vwn, None)
    agent.driver.vms.left.add(vwn)       # its domain now belongs to the target (one libvirtd may host both)
    out = agent.delete_vwn(vwn, reason=f"migrated to node {body.node} as {body.vwn}") if v.active else v
    disk_handover.release(agent, v)      # only now: its overlay goes, the image is unpinned
    return out


# -- target side ---------------------------------------------------------------------------------

def _pull(agent, client: NodeAgentClient, body: MigrationIn, into: Path) -> int:
    """Every file of the manifest into ``into``, checked; returns the bytes moved. ApiError 502/422."""
    moved = 0
    for f in body.files:
        part = into / f["name"]
        part.touch()
        have = part.stat().st_size
        for attempt in range(PULL_ATTEMPTS):
            if have >= f["size"]:
                break
            try:
                status, _, chunks = client.open_handover_file(body.source_vwn, f["name"], body.token, have)
                with open(part, "ab" if status == 206 else "wb") as out:
                    have = have if status == 206 else 0
                    for chunk in chunks:
                        out.write(chunk)
                        have += len(chunk)
                        moved += len(chunk)
            except NodeAgentError as exc:
                if attempt == PULL_ATTEMPTS - 1 or (exc.status is not None and exc.status < 500):
                    raise ApiError(502, f"cannot copy {f['name']} of {body.source_vwn} from "
                                        f"{body.source_url}: {exc}", code="source-failed") from None
                time.sleep(0.2 * (attempt + 1))
        digest = sha256_of(part) if part.exists() else ""
        if have != f["size"] or digest != f["sha256"]:
            part.unlink(missing_ok=True)
            raise ApiError(422, f"{f['name']} of {body.source_vwn}: {have} bytes with SHA-256 {digest or '-'}; "
                                f"the handover says {f['size']} bytes, {f['sha256']}", code="checksum-mismatch")
    return moved


def migrate_in(agent, body: MigrationIn) -> dict:
    """POST /vwns/migrations (module doc). ApiError 409/422/502/503."""
    _libvirt(agent, "take over", body.source_vwn)
    try:
        req = VWNRequest(**body.request)
    except TypeError as exc:
        raise ApiError(400, f"field 'request': {exc}", field="request") from None
    with agent._lock:
        if req.key in agent.by_key and agent.vwns[agent.by_key[req.key]].active:
            v = agent.vwns[agent.by_key[req.key]]          # a repeated request (the answer was lost)
            return {"vwn": v.vwn, "node": agent.config.node, "repeated": True}
    disk = disk_handover.entry(body.files)
    staged = disk_handover.stage_backing(agent, disk, req.key, agent.config.migration_image_wait_s) \
        if disk is not None else None
    vms = agent.driver.vms
    into = vms.vm_dir / f"{INCOMING}{body.source_vwn}"
    into.mkdir(parents=True, exist_ok=True)
    client = NodeAgentClient(body.source_url, session=new_session(agent.config.tls_files()),
                             timeout_s=agent.config.migration_pull_timeout_s)
    t0 = time.monotonic()
    try:
        moved = _pull(agent, client, body, into)
    finally:
        client.session.close()
    copy_s = time.monotonic() - t0
    total = sum(f["size"] for f in body.files)
    with agent._lock:
        name = f"vwn-{agent.config.node}-{agent._store_call(agent.store.next_number)}"
        try:
            jail = agent.conf.open(name, Owner.from_json(req.owner), req.memory_mb)
        except AccountError as exc:
            raise ApiError(503, f"no pool account on {agent.config.node}: {exc}") from None
        d = vms.files(name)
        try:
            rewrites = disk_handover.adopt(agent, disk, req.key, into / disk_handover.DISK) if disk else {}
        except ApiError:
            agent.conf.close(jail, False)
            raise
        shutil.rmtree(d, ignore_errors=True)
        os.replace(into, d)
        share = fairshare.vwn_cap(agent.config.capacity, len(agent.sharing()))
        try:
            restore = vms.restore_moved(name, body.source_dir, body.source_vwn, share, rewrites)
        except VMError as exc:
            agent.conf.close(jail, False)
            if disk:
                disk_handover.drop(agent, req.key)
            shutil.rmtree(d, ignore_errors=True)
            raise ApiError(503, f"cannot restore {body.source_vwn} on {agent.config.node}: {exc}",
                           code="restore-failed") from None
        pid = vms.qemu_pid(name)
        v = VWN(name, req, VWNState.RUNNING, agent.clock.now(), True, None, jail=jail, agent_pid=os.getpid())
        v.wrapper_pid, v.wrapper_start = pid, start_time(pid) if pid else None
        agent.store.insert(v)
        agent.vwns[name] = v
        agent.by_key[req.key] = name
        agent._readjust(share, arriving=v)
        agent._save(v)
        _emit_resumed(agent, v, body)
        agent._launch(v)
    return {"vwn": name, "node": agent.config.node, "copy_s": round(copy_s, 3), "bytes": total,
            "moved_bytes": moved, "mb": round(restore.mb, 1),
            "copy_mb_s": round(total / 1e6 / copy_s, 1) if copy_s > 0 else None,
            "restore_s": round(restore.seconds, 3), "restore_mb_s": restore.mb_s,
            "disk": None if staged is None else {"image": disk["image"], "hit": staged["hit"],
                                                 "path": rewrites[disk["path"]]}}


def _emit_resumed(agent, v: VWN, body: MigrationIn) -> None:
    """The ``resumed`` event of the VWN on its new node, with ``migrated_from`` (A's VWN) and
    ``migrated_from_node``: the CE agent moves the job to this VWN (``ce_migration``)."""
    r = v.request
    if not r.callback_url:
        return
    agent.outbox.post(r.callback_url, {
        "job_id": r.job_id, "key": r.key, "vwn": v.vwn, "node": agent.config.node, "event": "resumed",
        "exit_code": None, "reason": f"migrated from node {body.source_node or body.source_url}",
        "outcome": None, "cpu_caps": [list(c) for c in v.cpu_caps], "capped": v.capped,
        "cap_reason": v.cap_reason, "time": agent.clock.now(), "migrated_from": body.source_vwn,
        "migrated_from_node": body.source_node}, order_key=r.key)


def sweep_incoming(agent) -> None:
    """Remove partial copies a killed agent left (``<vm_dir>/.incoming-*``); never raises."""
    vms = getattr(agent.driver, "vms", None)
    if vms is None:
        return
    for p in vms.vm_dir.glob(f"{INCOMING}*"):
        shutil.rmtree(p, ignore_errors=True)


def install_routes(app, agent, from_ce) -> None:
    """The migration routes (module doc) on the node agent's Flask ``app``."""
    agent.handovers = {}
    sweep_incoming(agent)

    @app.post("/vwns/<vwn>/handover")
    def handover_vwn(vwn):
        from_ce(f"hand over VWN {vwn}")
        return jsonify(handover(agent, vwn))

    @app.get("/vwns/<vwn>/handover/files/<name>")
    def handover_file(vwn, name):
        return serve_file(agent, vwn, name)

    @app.post("/vwns/<vwn>/handover/complete")
    def handover_complete(vwn):
        from_ce(f"complete the handover of VWN {vwn}")
        return jsonify(complete(agent, vwn, parse_body(CompleteBody, f"POST /vwns/{vwn}/handover/complete")).record())

    @app.post("/vwns/migrations")
    def migrations():
        from_ce("take over a migrated VWN")
        return jsonify(migrate_in(agent, parse_body(MigrationIn, "POST /vwns/migrations"))), 201
