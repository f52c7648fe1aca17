"""VOC nodes as VMs on the CE's node agents (``voc_driver = "libvirt"``; issue 15, seed 003
Section 3.3): the CE agent's ``VOCScheduling`` boots each VOC node as a serving VM on a node agent
with the libvirt driver (``node_voc``: ``POST /voc/vms``) and sends that VO's jobs into it
(``POST /vwns`` with ``voc_node``), one after another, for as long as the watchdog keeps it.

``NodeVMDriver`` is the ``pool.VOCDriver``: slots are ``<node agent URL>#<i>`` as for the cgroup
driver (``cpus_per_node`` VMs per node agent); ``boot`` asks the node agent for the VM in a thread
and polls ``GET /voc/vms`` until its record is ``ready`` (the node joins the pool: its boot delay
is measured from the request to the node agent's first sight of the guest's ready line) or
``lost`` / not ready within ``voc_boot_timeout_s`` (the node leaves the pool); a VO with an
image (``voc_images``: ``"vo=image"``) has the node agent pull it first (``POST /images/pulls``)
and its VM boots with an overlay of it at ``/image`` (``POST /voc/vms`` is retried while the
node answers 409 not-ready); ``terminate``
asks the node agent to power it off (``DELETE /voc/vms/<id>``). ``check`` (every watchdog
interval, Section 5.3) reads every node agent's VOC VMs: a node whose VM is ``lost`` or unknown
there leaves the pool at once; its running job's VWN ends ``node-lost`` on the node agent
(``drivers.voc_job``), and the broker's resubmission rules take it. A node agent that does not
answer takes all its VOC nodes with it (``VOCScheduling.node_dead``).
"""
from __future__ import annotations

import logging
import threading
import time

from ..node_client import NodeAgentClient, NodeAgentError
from .pool import VOCNode, VOCNodeState

log = logging.getLogger(__name__)

POLL_S = 0.5


class NodeVMDriver:
    """The libvirt VOC driver of ``voc`` (a ``live.VOCScheduling``) on the slots of ``slots``
    (its ``live.CgroupDriver``: node agent URL + index, least used node agent first); module doc."""

    def __init__(self, voc, slots) -> None:
        self.voc = voc
        self._slots = slots                     # a live.CgroupDriver: the same slots and order
        self.slots = self._slots.slots
        self.monotonic = time.monotonic

    def free_slots(self, busy: set[str]) -> list[str]:
        return self._slots.free_slots(busy)

    def _client(self, url: str) -> NodeAgentClient:
        agent = self.voc.agent
        return NodeAgentClient(url, agent.http, agent.config.node_timeout_s)

    def boot(self, node: VOCNode) -> None:
        threading.Thread(target=self._boot, args=(node.id, node.vo, node.slot), name=f"voc-vm-{node.id}",
                         daemon=True).start()

    def image_of(self, vo: str) -> str | None:
        """The VO's image (``voc_images``), None when it has none."""
        images = dict(i.split("=", 1) for i in self.voc.agent.config.voc_images)
        return images.get(vo)

    def _ask(self, url: str, node_id: str, vo: str, deadline: float) -> bool:
        """POST /voc/vms (after a pull of the VO's image, retried while the node answers 409
        not-ready); False when the node is gone or refused it (already reported)."""
        image = self.image_of(vo)
        client = self._client(url)
        if image:
            try:
                client.pull_image({"image": image})
            except NodeAgentError as exc:
                log.info("VOC VM %s: pull of %s on %s: %s", node_id, image, url, exc.brief())
        while True:
            try:
                client._call("POST", "/voc/vms", json={"node": node_id, "vo": vo, "image": image})
                return True
            except NodeAgentError as exc:
                code = (exc.body.get("error") or {}).get("code") if isinstance(exc.body, dict) else None
                if exc.status == 409 and code == "not-ready" and self.monotonic() < deadline \
                        and self._booting(node_id):
                    time.sleep(POLL_S)                 # the image is still arriving
                    continue
                if exc.status is None:
                    self.voc.node_dead(url, f"boot of VOC VM {node_id}: {exc.brief()}")
                else:
                    self.voc.node_lost(node_id, f"the node agent refused its VM: {exc.brief()}")
                return False

    def _boot(self, node_id: str, vo: str, slot: str) -> None:
        url = slot.rsplit("#", 1)[0]
        deadline = self.monotonic() + self.voc.agent.config.voc_boot_timeout_s
        if not self._ask(url, node_id, vo, deadline):
            return
        while self.monotonic() < deadline:
            if not self._booting(node_id):
                return                          # terminated or lost meanwhile
            try:
                recs = {r["node"]: r for r in self._client(url)._call("GET", "/voc/vms")["vms"]}
            except (NodeAgentError, KeyError, TypeError) as exc:
                log.info("VOC VM %s: %s (asked again)", node_id, exc)
                recs = {node_id: {"state": "booting"}}
            rec = recs.get(node_id) or {"state": "lost", "why": "unknown to its node agent"}
            if rec["state"] == "ready":
                self.voc.ready(node_id)
                return
            if rec["state"] == "lost":
                self.voc.node_lost(node_id, f"its VM did not boot: {rec.get('why')}")
                return
            time.sleep(POLL_S)
        self.terminate_id(url, node_id)
        self.voc.node_lost(node_id, f"its VM did not boot within {self.voc.agent.config.voc_boot_timeout_s:g} s")

    def _booting(self, node_id: str) -> bool:
        with self.voc.lock:
            node = self.voc.pool.nodes.get(node_id)
            return node is not None and node.state is VOCNodeState.BOOTING

    def terminate(self, node: VOCNode) -> None:
        threading.Thread(target=self.terminate_id, args=(node.slot.rsplit("#", 1)[0], node.id),
                         name=f"voc-vm-stop-{node.id}", daemon=True).start()

    def terminate_id(self, url: str, node_id: str) -> None:
        try:
            self._client(url)._call("DELETE", f"/voc/vms/{node_id}")
        except NodeAgentError as exc:
            log.warning("VOC VM %s on %s not terminated: %s", node_id, url, exc.brief())

    def check(self) -> None:
        """Section 5.3: every VOC node that is idle or busy and whose VM its node agent reports
        lost or does not know leaves the pool now (a node agent that does not answer is left to
        ``VOCScheduling.check_nodes``)."""
        with self.voc.lock:
            up = [(n.id, n.slot.rsplit("#", 1)[0]) for n in self.voc.pool.live()
                  if n.state in (VOCNodeState.IDLE, VOCNodeState.BUSY)]
        for url in sorted({u for _, u in up}):
            try:
                recs = {r["node"]: r for r in self._client(url)._call("GET", "/voc/vms")["vms"]}
            except (NodeAgentError, KeyError, TypeError):
                continue
            for node_id, u in up:
                rec = recs.get(node_id) if u == url else {"state": "ready"}
                if rec is None or rec.get("state") == "lost":
                    why = (rec or {}).get("why") or "its node agent does not know its VM"
                    self.voc.node_lost(node_id, f"its VM is gone: {why}")
                    self.terminate_id(url, node_id)          # forget it there too

    def vwn_fields(self, node: VOCNode | None) -> dict:
        """What ``POST /vwns`` adds for a job on ``node``: ``{"voc_node": id}``."""
        return {"voc_node": node.id} if node is not None else {}
