"""The pool overlay of a migrating libvirt VWN (issue 14; seed 000 Section 6.3: a VM's disk is a
copy-on-write overlay on a pooled image template; seed 002 Section 3: cold migration moves the
VM's state to another node). Used by ``node_migration``.

A VM booted from the node image pool (``images/vwn_disk``) has a disk
``<pool A>/overlays/<key>.qcow2`` whose backing file is the image in A's pool. Its cold
migration hands that overlay over with the memory image:

* source A (``offer``, at ``POST /vwns/<vwn>/handover``, after the save: the overlay no longer
  changes): one more manifest file ``disk.qcow2`` (size, SHA-256 like the others) with
  ``"disk": {"image", "image_sha256", "format", "path", "backing"}`` (the pooled image it is
  backed by and A's paths of both). ``source_file`` serves it from the pool.
* target B (``stage_backing`` before the copy): B's pool must hold the *same* image (same
  SHA-256). A READY copy is a hit (no transfer); otherwise B pulls it from its own image
  repository through its pool (``ImagePool.pull`` with the expected checksum: verified, recorded
  as transfer ``migration:<key>``, LRU-accounted) and waits for it.
* B (``adopt``, after the files' checksums, before the restore): ``ImagePool.overlay`` registers
  the overlay under the VWN key (the pool pins the image from then on), the copied overlay is
  rebased in place onto B's copy (``qemu-img rebase -u -b <B's image> -F <format>``: only the
  header changes; the data clusters are the guest's writes) and moved to
  ``<pool B>/overlays/<key>.qcow2``; ``rewrites`` maps A's disk and image paths to B's for the
  restored domain's XML.
* A (``release``, at ``POST /vwns/<vwn>/handover/complete`` only, never before): the overlay is
  removed, which unpins A's image (it stays READY for reuse until LRU eviction).

kill -9 of either side mid-copy: A keeps its overlay and pin until the completion (its VWN stays
suspended); B's partial copy is in ``<vm_dir>/.incoming-<vwn>`` (swept), a staged image stays
READY and unpinned in B's pool. Errors (``ApiError``): 409 ``no-image-pool`` (B has no pool),
503 ``image-unavailable`` (B cannot get the image: its pull's typed failure is named), 503
``restore-failed`` (``qemu-img rebase`` failed).
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

from vgrid_runtime.httpjson import ApiError

from .images.pool import PoolError
from .images.pool_model import ImageState, PullRequest

log = logging.getLogger(__name__)

DISK = "disk.qcow2"


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# -- source side ---------------------------------------------------------------------------------

def offer(agent, v) -> dict | None:
    """The manifest entry of VWN ``v``'s overlay (module doc), None when it has none."""
    pool = getattr(agent, "images", None)
    if not v.request.image or pool is None:
        return None
    path = pool.disk_of(v.request.key)
    img = pool.get(v.request.image)
    if path is None or img is None:
        return None
    try:
        backing = str(pool.path(v.request.image).resolve())
    except PoolError:
        return None
    p = Path(path)
    return {"name": DISK, "size": p.stat().st_size, "sha256": _sha256(p),
            "disk": {"image": v.request.image, "image_sha256": img.sha256, "format": img.format,
                     "path": str(p), "backing": backing}}


def source_file(agent, vwn: str, name: str) -> Path:
    """The file ``name`` of the handover of ``vwn``: the overlay for ``disk.qcow2``, else a file
    of the VWN's directory."""
    if name == DISK:
        pool = getattr(agent, "images", None)
        v = agent.vwns.get(vwn)
        disk = pool.disk_of(v.request.key) if pool is not None and v is not None else None
        if disk:
            return Path(disk)
    return agent.driver.vms.files(vwn) / name


def release(agent, v) -> None:
    """After the handover completed: remove ``v``'s overlay from this pool (unpins its image).
    Never raises."""
    pool = getattr(agent, "images", None)
    if not v.request.image or pool is None:
        return
    try:
        pool.remove_overlay(v.request.key)
    except OSError as exc:
        log.warning("%s: cannot remove its overlay after the handover: %s", v.vwn, exc)


# -- target side ---------------------------------------------------------------------------------

def entry(files: list) -> dict | None:
    """The ``disk`` description of a manifest's ``disk.qcow2``, None without one. ApiError 400
    for a malformed one."""
    for f in files:
        if f.get("name") == DISK:
            d = f.get("disk")
            keys = ("image", "image_sha256", "format", "path", "backing")
            if not (isinstance(d, dict) and all(isinstance(d.get(k), str) for k in keys)):
                raise ApiError(400, f"field 'files': {DISK} needs \"disk\": {{{', '.join(keys)}}} (strings)",
                               field="files")
            if not all(d[k].startswith("/") and "'" not in d[k] and '"' not in d[k] for k in ("path", "backing")):
                raise ApiError(400, f"field 'files': {DISK}: \"path\" and \"backing\" must be absolute paths",
                               field="files")
            return d
    return None


def stage_backing(agent, disk: dict, key: str, timeout_s: float) -> dict:
    """Make sure this node's pool holds ``disk["image"]`` with ``disk["image_sha256"]``:
    a hit, or a verified pull from this node's repository (waited for at most ``timeout_s``).
    The pull's answer ``{"image","state","hit","transfer"}``. ApiError 409/503 (module doc)."""
    pool = getattr(agent, "images", None)
    if pool is None:
        raise ApiError(409, f"node {agent.config.node} has no image pool for the disk of {key}",
                       code="no-image-pool")
    name = disk["image"]
    try:
        ans = pool.pull(PullRequest(image=name, transfer=f"migration:{key}", sha256=disk["image_sha256"]))
    except PoolError as exc:
        raise ApiError(503, f"cannot stage image {name} for {key}: {exc}", code="image-unavailable") from None
    img = pool.get(name) if ans["hit"] else pool.wait(name, timeout_s)
    if img is None or img.state is not ImageState.READY or img.sha256 != disk["image_sha256"]:
        why = (f"{img.state.value}" + (f", {img.failure}: {img.reason}" if img.failure else "")
               if img else "absent")
        raise ApiError(503, f"image {name} (SHA-256 {disk['image_sha256'][:12]}) is not in the pool of "
                            f"{agent.config.node} for the disk of {key}: {why}", code="image-unavailable")
    return ans


def adopt(agent, disk: dict, key: str, copied: Path) -> dict[str, str]:
    """Make the copied overlay ``copied`` the disk of VWN key ``key`` in this node's pool, backed
    by this pool's image (module doc); the path rewrites for the domain XML
    ``{A's overlay: B's, A's image: B's}``. ApiError 503."""
    pool = agent.images
    try:
        ov = pool.overlay(disk["image"], key)
    except PoolError as exc:
        raise ApiError(503, f"cannot make the overlay of {key}: {exc}", code="image-unavailable") from None
    exe = shutil.which(pool.qemu_img)
    done = subprocess.run([exe or pool.qemu_img, "rebase", "-q", "-u", "-b", ov["backing"], "-F", ov["format"],
                           str(copied)], capture_output=True, text=True, timeout=60) if exe else None
    if done is None or done.returncode != 0:
        pool.remove_overlay(key)
        why = done.stderr.strip()[:300] if done is not None else f"{pool.qemu_img} not found (qemu-utils)"
        raise ApiError(503, f"cannot rebase the disk of {key} onto {ov['backing']}: {why}",
                       code="restore-failed")
    os.chmod(copied, 0o644)
    os.replace(copied, ov["path"])
    return {disk["path"]: ov["path"], disk["backing"]: ov["backing"]}


def drop(agent, key: str) -> None:
    """Undo ``adopt`` when the restore failed (the overlay goes, the image is unpinned)."""
    pool = getattr(agent, "images", None)
    if pool is not None:
        pool.remove_overlay(key)
