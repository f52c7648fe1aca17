"""A VWN's disk: a qcow2 overlay on a VM image of the node's pool (issue 14; seed 000 Section
6.3, a VM uses a pooled image template through a copy-on-write overlay).

A ``POST /vwns`` whose body names an ``image`` (``VWNRequest.image``, a name of the node's
pool; the CE agent's live staging sets it for a lease with a staged ``VMImage``) gets, before
the VWN exists, an overlay ``<pool>/overlays/<VWN key>.qcow2`` backed by the pooled image
(``attach``; ``ImagePool.overlay`` is idempotent on the name, so the overlay the CE's staging
made for the same key is reused). The overlay pins the image: the pool never evicts it while
the VWN lives. The libvirt driver boots the domain with it as virtio disk ``vda`` (``disk``;
the guest mounts it at ``/image``); the cgroup driver has no use for it (the overlay only pins
the image and makes the VWN wait for it). When the VWN ends (done, aborted, cancelled) the
overlay is removed (``detach``), which unpins the image: it stays READY for reuse until the
pool's LRU eviction takes it. A VWN migrated away hands its overlay over and removes it at the
handover's completion (``disk_handover``), not here.

Errors: ``attach`` raises ``ApiError`` 409 ``code = "not-ready"`` while the image has not
arrived (the CE's lease engine retries the start on its next tick), 500 ``overlay-failed``
(qemu-img), 400 ``bad-name``.
"""
from __future__ import annotations

import logging

from .node_routes import _api
from .pool import PoolError

log = logging.getLogger(__name__)


def attach(agent, req) -> dict | None:
    """Make the overlay of request ``req`` (``VWNRequest``) on ``agent``'s pool:
    ``{"path","backing","format"}``, or None when it names no image. ApiError (module doc)."""
    if not req.image:
        return None
    try:
        return agent.images.overlay(req.image, req.key)
    except PoolError as exc:
        err = _api(exc)
        err.body["key"] = req.key
        raise err from None


def disk(agent, v) -> str | None:
    """The overlay path of VWN ``v`` (what its domain boots with), None without an image."""
    if not v.request.image or getattr(agent, "images", None) is None:
        return None
    return agent.images.disk_of(v.request.key)


def detach(agent, v) -> None:
    """Remove VWN ``v``'s overlay when it ended (module doc); never raises."""
    if not v.request.image or getattr(agent, "images", None) is None:
        return
    if v.vwn in getattr(getattr(agent.driver, "vms", None), "left", ()):   # migrated away
        return
    try:
        agent.images.remove_overlay(v.request.key)
    except OSError as exc:
        log.warning("%s: cannot remove its overlay: %s", v.vwn, exc)
