"""VOC VMs on a node agent with the ``libvirt`` driver (issue 15, seed 003 Section 3.3): VMs booted
for a VO *before* its jobs arrive, each serving that VO's jobs one after another
(``drivers.guest_serve``), until the CE agent's watchdog terminates it.

Routes (installed by ``node_agent.create_app``; the CE agents of ``ce_dns`` only, like ``/vwns``):

* ``POST /voc/vms`` ``{"node": id, "vo": name, "image": name or null}``: boot a serving VM for
  VOC node ``id`` (domain ``vgrid-<node name>-<id>``), idempotent on ``id``; 202 the record. With
  ``image`` (the VO's image, in the node's pool) the VM boots with a qcow2 overlay of it
  (``voc-<id>`` in the pool, pinning the image) mounted at ``/image``; the overlay is removed when
  the VM is terminated or lost. 409 ``code`` "not-libvirt" when the node's driver is not libvirt,
  "not-ready" while the image is not in the pool (pull it first: ``POST /images/pulls``),
  "no-image-pool" without a pool; 400 a bad id or image name.
* ``GET /voc/vms``: ``{"vms": [{"node","vo","state","boot_s","why","jobs"}]}`` with ``state``
  ``booting``, ``ready`` or ``lost`` (its domain is gone: killed, crashed, failed to boot; ``why``
  says which) -- the domains are looked at on every call, so a killed VM is ``lost`` at the first
  call after its death (the CE agent calls at every watchdog interval, Section 5.3).
* ``DELETE /voc/vms/<id>``: power the VM off (``VGRID-POWEROFF``), destroy what is left and forget
  it; 200 ``{"node","state":"gone"}`` (also for an unknown id: terminating is idempotent).

A job runs in a VOC VM when its ``POST /vwns`` names ``voc_node`` (``VWNRequest``): the VWN is
the job's record on this node as usual (stage in, events, stage out), only the job goes into the
running VM (``voc_job``) instead of a new domain. A node agent restarted while VOC VMs run adopts
them (their directories ``<vm_dir>/<node name>-<id>`` whose domain runs) as ``ready``.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from pathlib import Path

from flask import jsonify

from vgrid_runtime.httpjson import ApiError, parse_body

from .images.node_routes import _api
from .images.pool import PoolError
from .images.repository import NAME_RE as IMAGE_NAME
from .voc.pool import VOCNode
from .vwn_model import VOC_NODE as NODE_ID

log = logging.getLogger(__name__)


class NodeVOC:
    """The VOC VMs of node agent ``agent`` (module doc); ``available`` False without libvirt."""

    def __init__(self, agent) -> None:
        self.agent = agent
        self.available = getattr(agent.driver, "kind", "") == "libvirt"
        self.records: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.driver = None
        if self.available:
            from .voc.vmdriver import LibvirtVOCDriver
            self.driver = LibvirtVOCDriver(agent.driver.vms, 0, agent.config.node, self._ready, self._lost,
                                           memory_mb=agent.driver.memory_mb, fraction=1.0)
            self._adopt()

    def _adopt(self) -> None:
        vms, prefix = self.driver.vms, f"{self.agent.config.node}-"
        for d in vms.vm_dir.glob(f"{prefix}*"):
            node_id = d.name[len(prefix):]
            if not NODE_ID.fullmatch(node_id) or not (d / "channel.in").exists():
                continue
            if vms.state(d.name) != "running":
                continue
            with self.driver._lock:
                self.driver.vwns[node_id] = d.name
                self.driver.started.add(node_id)
            self.records[node_id] = {"node": node_id, "vo": None, "state": "ready", "boot_s": None,
                                     "why": "adopted after a node agent restart", "jobs": 0}

    # -- the driver's callbacks --------------------------------------------------------------------

    def _ready(self, node_id: str) -> None:
        with self._lock:
            rec = self.records.get(node_id)
            if rec is not None and rec["state"] == "booting":
                rec["state"] = "ready"
                rec["boot_s"] = round(self.agent.clock.now() - rec["booted_at"], 3)

    def _lost(self, node_id: str, why: str) -> None:
        with self._lock:
            rec = self.records.get(node_id)
            if rec is not None:
                rec["state"], rec["why"] = "lost", why
        self._drop_disk(node_id)

    def _drop_disk(self, node_id: str) -> None:
        pool = getattr(self.agent, "images", None)
        if pool is not None and pool.disk_of(f"voc-{node_id}") is not None:
            try:
                pool.remove_overlay(f"voc-{node_id}")
            except OSError as exc:
                log.warning("VOC VM %s: cannot remove its overlay: %s", node_id, exc)

    # -- operations --------------------------------------------------------------------------------

    def boot(self, node_id: str, vo: str, image: str | None = None) -> dict:
        if not self.available:
            raise ApiError(409, f"node {self.agent.config.node} has no libvirt driver: no VOC VMs",
                           code="not-libvirt")
        if not NODE_ID.fullmatch(node_id or ""):
            raise ApiError(400, "field 'node': a VOC node id, [A-Za-z0-9][A-Za-z0-9._-]*", field="node")
        with self._lock:
            rec = self.records.get(node_id)
            if rec is not None and rec["state"] != "lost":
                return self._public(rec)
            disk = self._disk(node_id, image)
            rec = self.records[node_id] = {"node": node_id, "vo": vo, "state": "booting", "boot_s": None,
                                           "why": None, "jobs": 0, "image": image,
                                           "booted_at": self.agent.clock.now()}
            if disk is not None:
                self.driver.disks[node_id] = Path(disk)
        self.driver.boot(VOCNode(node_id, vo, "", rec["booted_at"]))
        return self._public(rec)

    def _disk(self, node_id: str, image: str | None) -> str | None:
        """The overlay of ``image`` for VOC node ``node_id`` (None without an image). ApiError."""
        if not image:
            return None
        pool = getattr(self.agent, "images", None)
        if pool is None:
            raise ApiError(409, f"node {self.agent.config.node} has no image pool: no VO image",
                           code="no-image-pool")
        try:
            return pool.overlay(image, f"voc-{node_id}")["path"]
        except PoolError as exc:
            raise _api(exc) from None

    def list(self) -> list[dict]:
        if self.driver is not None:
            self.driver.check()                   # a gone domain is lost now (Section 5.3)
        with self._lock:
            return [self._public(r) for r in self.records.values()]

    def terminate(self, node_id: str) -> dict:
        with self._lock:
            self.records.pop(node_id, None)
        if self.driver is not None and NODE_ID.fullmatch(node_id):
            self.driver.terminate(VOCNode(node_id, "", "", 0.0))
            self._drop_disk(node_id)
        return {"node": node_id, "state": "gone"}

    def ready(self, node_id: str) -> bool:
        with self._lock:
            rec = self.records.get(node_id)
            return rec is not None and rec["state"] == "ready"

    def count_job(self, node_id: str) -> None:
        with self._lock:
            if node_id in self.records:
                self.records[node_id]["jobs"] += 1

    def vwn(self, node_id: str) -> str:
        """The VWN (directory and domain) name of VOC node ``node_id``'s VM."""
        return self.driver.vwn(node_id)

    @staticmethod
    def _public(rec: dict) -> dict:
        return {k: v for k, v in rec.items() if k != "booted_at"}


@dataclass
class VOCBoot:
    """Body of ``POST /voc/vms``: the CE's VOC node id, its VO, the VO's image (a pool name) or None."""

    node: str
    vo: str
    image: str | None = None

    def validate(self) -> str | None:
        if not NODE_ID.fullmatch(self.node):
            return "field 'node': a VOC node id, [A-Za-z0-9][A-Za-z0-9._-]*"
        if not self.vo:
            return "field 'vo': must be a non-empty string"
        if self.image is not None and not IMAGE_NAME.fullmatch(self.image):
            return "field 'image': an image name of the node's pool, [A-Za-z0-9][A-Za-z0-9._-]*"
        return None


def check_request(agent, req) -> None:
    """``POST /vwns`` naming ``voc_node``: ApiError 409 ``code`` "not-libvirt" on a node without
    VOC VMs, "voc-node-not-ready" when that node's VM is not ready (booting, lost, unknown)."""
    if not req.voc_node:
        return
    if not agent.voc.available:
        raise ApiError(409, f"node {agent.config.node} has no libvirt driver: no VOC VMs",
                       code="not-libvirt", key=req.key)
    if not agent.voc.ready(req.voc_node):
        raise ApiError(409, f"VOC node {req.voc_node} has no ready VM on node {agent.config.node}",
                       code="voc-node-not-ready", key=req.key)


def install_routes(app, agent, from_ce) -> None:
    """``/voc/vms`` (module doc) on the node agent's app; ``agent.voc`` is its ``NodeVOC``."""
    @app.post("/voc/vms")
    def boot_voc_vm():
        from_ce("boot VOC VMs")
        body = parse_body(VOCBoot, "POST /voc/vms")
        return jsonify(agent.voc.boot(body.node, body.vo, body.image)), 202

    @app.get("/voc/vms")
    def list_voc_vms():
        from_ce("list VOC VMs")
        return jsonify({"vms": agent.voc.list()})

    @app.delete("/voc/vms/<node_id>")
    def delete_voc_vm(node_id):
        from_ce(f"terminate VOC VM {node_id}")
        return jsonify(agent.voc.terminate(node_id))
