"""Live image staging: the lease engine's transfer schedule enacted on real node image pools.

Seed 000 Sections 6.2-6.3: an advance reservation's image is transferred before its start
(EDF, Algorithm 2, or EDF/JIT, Algorithm 3, laid out by ``leasing.staging``), best-effort
leases' images in FIFO order; a transfer to a node that already has or is getting the image is
avoided (reuse, Algorithm 4; piggybacking, 6.3.1). The engine decides all of that; this module
enacts it (CE agent side, driven by ``node_enactment.NodeAgentEnactment``):

* ``start_transfer(enactment, res, now)`` -- the engine started transfer reservation ``res``
  (at its scheduled start, to the nodes ``res.dest``): each destination node agent is asked to
  pull ``res.image_id`` at the scheduled rate ``res.mb / (res.end - res.start)`` MB/s
  (``POST /images/pulls``; the node throttles with a token bucket). A reuse hit is no
  reservation, so no request: no transfer at all. A node that cannot be asked is asked again on
  the next tick (``retry``) until the reservation's end.
* ``sync_pins(enactment, pools)`` -- every node's pins, ``{image: [lease keys]}``, from the
  engine's pools (``leasing.imagepool``: the leases that use or will use each image), sent
  (``PUT /images/pins``) when they change: the node never evicts a pinned image.
* ``before_vm`` / ``after_stop`` -- a VM of a lease with an image names it in its ``POST
  /vwns`` (``image``); the node agent boots it from a qcow2 overlay on the pool's image, named
  by its VWN key (``images.vwn_disk``); a 409 (the image is not there yet: a late transfer)
  fails the start, which the engine retries on the next tick. The node removes the overlay
  when the VWN ends; ``after_stop`` deletes it too (``DELETE /images/overlays/<key>``: a VWN
  the node could not be told to delete).
* ``records`` -- per transfer and node: scheduled start/end and MB, when the CE asked, the
  node's answer (``hit``, ``joined``); ``report(enactment)`` joins them with the nodes' own
  records (actual start/end, bytes, resumed offset): the model-vs-measured comparison.

Images named ``node-software`` or of 0 MB (leases without ``VMImage``) are never staged.
MB = 10^6 bytes, times in clock seconds.
"""
from __future__ import annotations

import logging

from ..node_client import NodeAgentError

log = logging.getLogger(__name__)

NO_IMAGE = "node-software"


def has_image(lease) -> bool:
    """Whether the lease runs a VM image that is staged (``VMImage`` with a size)."""
    return bool(lease.image_id) and lease.image_id != NO_IMAGE and lease.image_mb > 0


class LiveStaging:
    """Enacts the engine's image transfers and pins on node agents (see module doc).
    ``key_of(lease_id)`` -> the job key of a lease (pins and transfer ids name leases by it)."""

    def __init__(self, key_of, clock=None) -> None:
        self.key_of = key_of
        self.clock = clock          # set by the LeaseEngine: when requests were really sent
        self.records: list[dict] = []
        self._pending: list[tuple[int, dict]] = []      # (node, pull body) not delivered yet
        self._pins_sent: dict[int, dict] = {}
        self.disks: dict[int, list[tuple[int, str]]] = {}  # lease id -> [(node, VWN key)]

    def _lease_key(self, lease_id: int) -> str:
        return self.key_of(lease_id) or f"lease-{lease_id}"

    def start_transfer(self, enactment, res, now: float) -> None:
        """Ask every destination node to pull the image now at the scheduled rate (never
        raises: an undelivered request is retried by ``retry``)."""
        if not res.image_id or res.image_id == NO_IMAGE or res.mb <= 0:
            return
        length = max(res.end - res.start, 1e-9)
        for node in res.dest:
            body = {"image": res.image_id, "transfer": f"{self._lease_key(res.lease.id)}:{res.id}",
                    "rate_mbs": res.mb / length, "pins": [self._lease_key(u) for u in res.users],
                    "scheduled_start": res.start, "scheduled_end": res.end}
            rec = {"transfer": body["transfer"], "lease": self._lease_key(res.lease.id), "image": res.image_id,
                   "node": enactment.node_urls[node], "link": res.link, "mb": res.mb,
                   "rate_mbs": body["rate_mbs"], "scheduled_start": res.start, "scheduled_end": res.end,
                   "deadline": res.deadline, "asked_at": None, "answer": None, "error": None}
            self.records.append(rec)
            self._send(enactment, node, body, rec, now)

    def _send(self, enactment, node: int, body: dict, rec: dict, now: float) -> bool:
        try:
            answer = enactment.client(node).pull_image(body)
        except NodeAgentError as exc:
            enactment.answered(node, exc.answered, now)
            rec["error"] = str(exc)[:300]
            if exc.status is None or exc.status >= 500 and exc.status != 501:
                self._pending.append((node, body))
            log.warning("image %s to %s: pull request failed: %s", body["image"], rec["node"], exc.brief())
            return False
        enactment.answered(node, True, now)
        rec.update(asked_at=self.clock.now() if self.clock is not None else now, error=None,
                   answer={"state": answer.get("state"), "hit": answer.get("hit"),
                           "joined": (answer.get("transfer") or {}).get("joined")})
        return True

    def retry(self, enactment, now: float) -> None:
        """Send again the pull requests a node did not take, while their reservation lasts."""
        pending, self._pending = self._pending, []
        for node, body in pending:
            rec = next((r for r in reversed(self.records) if r["transfer"] == body["transfer"]
                        and r["node"] == enactment.node_urls[node]), None)
            if rec is None or now > body["scheduled_end"]:
                continue
            self._send(enactment, node, body, rec, now)

    def sync_pins(self, enactment, pools, now: float) -> None:
        """Send each node its pins when they changed (``PUT /images/pins``); a node that does
        not answer is sent them again next time."""
        for node in range(len(enactment.node_urls)):
            pins: dict[str, set] = {}
            for e in pools.pools[node].values():
                if e.image_id == NO_IMAGE or e.mb <= 0 or not e.users:
                    continue
                pins.setdefault(e.image_id, set()).update(self._lease_key(u) for u in e.users)
            want = {k: sorted(v) for k, v in pins.items()}
            if self._pins_sent.get(node) == want:
                continue
            try:
                enactment.client(node).set_image_pins(want)
                self._pins_sent[node] = want
            except NodeAgentError as exc:
                enactment.answered(node, exc.answered, now)

    def before_vm(self, enactment, lease, node: int, vwn_key: str) -> str | None:
        """The pool image the VM's ``POST /vwns`` names (its ``image`` field), None for a lease
        without a staged image. The node agent makes the VM's qcow2 overlay on it when it
        creates the VWN (``images.vwn_disk``: HTTP 409 while the image has not arrived, and the
        engine retries the start on its next tick) and removes it when the VWN ends."""
        if not has_image(lease):
            return None
        self.disks.setdefault(lease.id, []).append((node, vwn_key))
        return lease.image_id

    def after_stop(self, enactment, lease, now: float) -> None:
        """Remove the overlays of the lease's stopped VMs (their images may be evicted again)."""
        for node, key in self.disks.pop(lease.id, []):
            try:
                enactment.client(node).delete_overlay(key)
            except NodeAgentError as exc:
                enactment.answered(node, exc.answered, now)

    def report(self, enactment) -> list[dict]:
        """The CE's transfer records joined with each node's (``GET /images``): per transfer
        and node ``scheduled_start/end``, ``actual_start/end`` (clock s, the node's), ``bytes``,
        ``mb``, ``rate_mbs``, ``hit``, ``joined``, ``outcome``, ``resumed_from``."""
        nodes: dict[str, list] = {}
        for i, url in enumerate(enactment.node_urls):
            try:
                nodes[url] = enactment.client(i).images()["transfers"]
            except NodeAgentError:
                nodes[url] = []
        out = []
        for rec in self.records:
            mine = next((t for t in nodes.get(rec["node"], []) if t.get("transfer") == rec["transfer"]), {})
            out.append(dict(rec, actual_start=mine.get("started"), actual_end=mine.get("ended"),
                            bytes=mine.get("bytes"), hit=mine.get("hit"), joined=mine.get("joined"),
                            outcome=mine.get("outcome"), resumed_from=mine.get("resumed_from")))
        return out


def image_staging(config, session=None):
    """``(ImageRepositoryClient | None, LiveStaging | None)`` for a CE agent's configuration:
    both None unless it has an ``image_repository``."""
    if not getattr(config, "image_repository", ""):
        return None, None
    from .client import ImageRepositoryClient
    client = ImageRepositoryClient(config.image_repository, session=session, timeout_s=config.node_timeout_s)
    return client, LiveStaging(lambda lease_id: None)


def image_name(vmimage: str) -> str:
    """The repository name of a JDL ``VMImage`` (a URI or an absolute path, docs/jdl.md): its
    last path segment (``https://images.example.org/sl5-worker.img`` -> ``sl5-worker.img``). The
    CE agent stages it from its own ``image_repository``, whatever host the URI names."""
    from urllib.parse import unquote, urlsplit
    path = urlsplit(vmimage).path if "://" in vmimage else vmimage
    return unquote(path.rstrip("/").rsplit("/", 1)[-1])


def image_size_mb(client, desc, name: str, bad) -> float:
    """The size in MB (10^6 bytes) of image ``name`` from the repository's manifest. Raises
    ``bad(desc, "VMImage", message)`` (an ApiError 400 naming the attribute) for an image the
    repository does not have, and ApiError 503 when it cannot be asked."""
    from vgrid_runtime.httpjson import ApiError
    from .client import ImageRepositoryError
    try:
        return client.manifest(name)["size"] / 1e6
    except ImageRepositoryError as exc:
        if exc.status == 404:
            raise bad(desc, "VMImage", f"VMImage {desc.get('VMImage')!r}: the image repository has no "
                      f"image {name!r}") from None
        raise ApiError(503, f"the image repository cannot be asked for {name!r}: {exc.brief()}") from None
