"""The node image pool: VM images pulled from the image repository, verified, reused, evicted.

Seed 000 Section 6.3 (Algorithm 4): each node keeps a *pool* of image templates; a VM uses a
template through a copy-on-write overlay, so a second lease on the same image needs no
transfer. Here:

* ``pull(request)`` downloads image ``name`` from the repository (``client``) into
  ``<pool_dir>/<name>.<sha256[:12]>``, through a ``TokenBucket`` at the scheduled rate, and
  verifies its size and SHA-256 against the repository's manifest (and against the checksum
  the caller expects, if it gives one). An image already READY with that checksum is a *hit*:
  no transfer, only pins. A pull of an image being pulled rides on it (piggybacking).
* Resumable: the bytes go to ``<file>.part``; a pull cut by a network failure is retried from
  where it stopped (``Range``) for ``patience_s``; the pool's state is in ``pool.json``
  (written atomically at every change of state), so after a ``kill -9`` of the node agent the
  next pool finds its PULLING images INTERRUPTED and resumes them by Range at their rate.
* Pins: the CE agent tells the node which images accepted leases still need
  (``set_pins``: ``{image: [lease keys]}``, a full replacement; ``pull`` adds its own); an
  image with a pin or an overlay in use is NEVER evicted. To make room (``capacity_mb``; 0 =
  unlimited) the least recently used unpinned images go first; when that is not enough the
  pull fails ``no-room``.
* ``overlay(name, vwn)``: ``qemu-img create -f qcow2 -b <pool image> -F raw|qcow2
  <pool_dir>/overlays/<vwn>.qcow2``, the disk of a VM (the libvirt VWN driver's ``disk``).

Every pull ends in a state with a typed reason (``ImageFailure``); transfers are recorded
(``transfers``: scheduled vs actual start/end, bytes, resumed offset) for the model comparison.
MB = 10^6 bytes, times in clock seconds (``clock``), rates in MB/s. Thread-safe.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import threading
import time
from dataclasses import asdict, fields
from pathlib import Path

from .client import ImageRepositoryClient, ImageRepositoryError
from .pool_model import (IMAGE_STATES, ImageFailure, ImageState, PoolError, PoolImage,  # noqa: F401
                         PullRequest, S)
from .repository import NAME_RE
from .tokenbucket import TokenBucket

log = logging.getLogger(__name__)

MB = 1_000_000
STATE_FILE = "pool.json"
KEEP_TRANSFERS = 1000


class ImagePool:
    """A node's image pool (see module doc). ``root``: the pool directory; ``client``: an
    ``ImageRepositoryClient`` (None: every pull fails ``unreachable``); ``capacity_mb`` (0 =
    unlimited); ``clock``: ``now()`` seconds; ``patience_s``: how long a broken download is
    retried; ``monotonic``/``sleep`` for the token bucket (tests). Call ``start()`` to resume
    interrupted pulls, ``close()`` to stop (running pulls stop and stay resumable)."""

    def __init__(self, root: str | Path, client: ImageRepositoryClient | None, clock,
                 capacity_mb: float = 0.0, patience_s: float = 60.0, qemu_img: str = "qemu-img",
                 monotonic=time.monotonic, sleep=time.sleep) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "overlays").mkdir(exist_ok=True)
        self.client = client
        self.clock = clock
        self.capacity_bytes = int(capacity_mb * MB)
        self.patience_s = patience_s
        self.qemu_img = qemu_img
        self._monotonic, self._sleep = monotonic, sleep
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._threads: dict[str, threading.Thread] = {}
        self.images: dict[str, PoolImage] = {}
        self.pins: dict[str, set[str]] = {}          # image -> lease keys (CE sync + pulls)
        self.overlays: dict[str, str] = {}           # vwn -> image
        self.transfers: list[dict] = []
        self._load()

    # -- persistence -------------------------------------------------------------------------

    def _load(self) -> None:
        path = self.root / STATE_FILE
        if not path.exists():
            return
        try:
            data = json.loads(path.read_text())
            images = [dict(d, state=ImageState(d["state"])) for d in data.get("images", [])]
            known = {f.name for f in fields(PoolImage)}
            if any(set(d) - known for d in images):
                raise ValueError(f"unknown fields {sorted(set().union(*images) - known)}")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            # the pins in it protect images leases need: refuse rather than start empty
            raise RuntimeError(f"image pool state {path} is unreadable ({type(exc).__name__}: {exc}); "
                               "repair or remove it (its images are then pulled again)") from None
        for d in images:
            img = PoolImage(**d)
            if img.state is S.PULLING:               # the agent died mid-download
                img.state = IMAGE_STATES.check(img.state, S.INTERRUPTED, img.name)
            self.images[img.name] = img
        self.pins = {k: set(v) for k, v in data.get("pins", {}).items()}
        self.overlays = dict(data.get("overlays", {}))
        self.transfers = list(data.get("transfers", []))
        for img in self.images.values():             # one object: the image's and the log's record
            same = [r for r in self.transfers if r == img.transfer]
            if same:
                img.transfer = same[-1]

    def _save(self) -> None:
        """Write ``pool.json`` atomically (tmp, fsync, rename); called under the lock."""
        data = {"images": [dict(asdict(i), state=i.state.value) for i in self.images.values()],
                "pins": {k: sorted(v) for k, v in self.pins.items() if v},
                "overlays": self.overlays, "transfers": self.transfers[-KEEP_TRANSFERS:]}
        tmp = self.root / (STATE_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.root / STATE_FILE)

    def _to(self, img: PoolImage, new: ImageState) -> None:
        img.state = IMAGE_STATES.check(img.state, new, img.name)

    # -- queries -------------------------------------------------------------------------------

    def view(self) -> dict:
        """``{"capacity_mb","used_mb","images":[...],"transfers":[...]}`` (the node's GET /images)."""
        with self._lock:
            return {"capacity_mb": self.capacity_bytes / MB, "used_mb": self.used_bytes() / MB,
                    "images": [i.view(sorted(self.pins.get(n, ())), sorted(v for v, im in self.overlays.items()
                                                                           if im == n))
                               for n, i in self.images.items()],
                    "transfers": list(self.transfers)}

    def get(self, name: str) -> PoolImage | None:
        with self._lock:
            return self.images.get(name)

    def path(self, name: str) -> Path:
        """The file of a READY image. PoolError "not-ready" otherwise."""
        with self._lock:
            img = self.images.get(name)
            if img is None or img.state is not S.READY:
                raise PoolError("not-ready", f"image {name!r} is not ready in the pool "
                                f"({img.state.value if img else 'absent'})")
            return self.root / img.file

    def used_bytes(self) -> int:
        """Bytes the pool holds or is pulling (READY sizes + the full size of running pulls +
        kept partial files)."""
        with self._lock:
            total = 0
            for img in self.images.values():
                if img.state in (S.READY, S.PULLING):
                    total += img.size
                elif img.state in (S.INTERRUPTED, S.FAILED) and img.file:
                    total += self._part(img).stat().st_size if self._part(img).exists() else 0
            return total

    def pinned(self, name: str) -> bool:
        with self._lock:
            return bool(self.pins.get(name)) or name in self.overlays.values()

    def _part(self, img: PoolImage) -> Path:
        return self.root / (img.file + ".part")

    # -- pins ----------------------------------------------------------------------------------

    def set_pins(self, pins: dict[str, list[str]]) -> None:
        """Replace every pin: ``{image: [lease keys]}`` (the CE agent's view of the leases
        that still need each image; docs/vwn.md)."""
        with self._lock:
            self.pins = {k: set(v) for k, v in pins.items() if v}
            self._save()

    # -- pulls ---------------------------------------------------------------------------------

    def pull(self, req: PullRequest) -> dict:
        """Start pulling ``req.image`` (idempotent per image: a running pull is joined, a READY
        image is a hit). Returns ``{"image","state","hit","transfer"}`` at once; the download
        runs in a thread. PoolError "bad-name" for a name the repository cannot have."""
        if not NAME_RE.fullmatch(req.image):
            raise PoolError("bad-name", f"image name {req.image!r} is not [A-Za-z0-9][A-Za-z0-9._-]*")
        now = self.clock.now()
        with self._lock:
            if req.pins:
                self.pins.setdefault(req.image, set()).update(req.pins)
            record = {"transfer": req.transfer, "image": req.image, "rate_mbs": req.rate_mbs,
                      "scheduled_start": req.scheduled_start, "scheduled_end": req.scheduled_end,
                      "requested_at": now, "started": None, "ended": None, "bytes": 0,
                      "resumed_from": 0, "hit": False, "joined": False, "outcome": None, "reason": None}
            img = self.images.get(req.image)
            if img is not None and img.state is S.PULLING:
                record.update(joined=True, outcome="joined", started=now)
                self.transfers.append(record)
                self._save()
                return {"image": req.image, "state": img.state.value, "hit": False, "transfer": record}
            if img is not None and img.state is S.READY and (not req.sha256 or req.sha256 == img.sha256) \
                    and (self.root / img.file).exists():
                img.last_use = now
                record.update(hit=True, outcome="hit", started=now, ended=now)
                self.transfers.append(record)
                self._save()
                return {"image": req.image, "state": img.state.value, "hit": True, "transfer": record}
            if img is None:
                img = PoolImage(req.image, S.PULLING)
                self.images[req.image] = img
            else:
                self._to(img, S.PULLING)
            img.rate_mbs, img.failure, img.reason, img.transfer = req.rate_mbs, None, None, record
            self.transfers.append(record)
            self._save()
            self._spawn(img, req.sha256)
            return {"image": req.image, "state": img.state.value, "hit": False, "transfer": record}

    def start(self) -> None:
        """Resume the pulls a dead agent left INTERRUPTED (at their recorded rate)."""
        with self._lock:
            for img in self.images.values():
                if img.state is S.INTERRUPTED:
                    self._to(img, S.PULLING)
                    if img.transfer is None:
                        img.transfer = {"transfer": "", "image": img.name, "started": None, "bytes": 0}
                        self.transfers.append(img.transfer)
                    img.transfer["resumed_by_restart"] = True
                    self._save()
                    self._spawn(img, "")

    def _spawn(self, img: PoolImage, expected: str) -> None:
        t = threading.Thread(target=self._run, args=(img, expected), name=f"pull-{img.name}", daemon=True)
        self._threads[img.name] = t
        t.start()

    def wait(self, name: str, timeout_s: float = 60.0) -> PoolImage | None:
        """Wait (at most ``timeout_s``) for the pull of ``name`` to finish; the image."""
        t = self._threads.get(name)
        if t is not None:
            t.join(timeout_s)
        return self.get(name)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop running pulls (they stay resumable: INTERRUPTED) and wait for their threads."""
        self._stop.set()
        for t in list(self._threads.values()):
            t.join(timeout_s)

    def _finish(self, img: PoolImage, state: ImageState, failure: ImageFailure | None = None,
                reason: str | None = None) -> None:
        with self._lock:
            self._to(img, state)
            img.failure = failure.value if failure else None
            img.reason = reason
            rec = img.transfer
            if rec is not None:
                rec["ended"] = self.clock.now()
                rec["outcome"] = state.value if failure is None else failure.value
                rec["reason"] = reason
            self._save()
        if failure is not None:
            log.warning("image %s: pull failed (%s): %s", img.name, failure.value, reason)

    def _run(self, img: PoolImage, expected: str) -> None:
        try:
            self._pull(img, expected)
        except OSError as exc:
            self._finish(img, S.FAILED, ImageFailure.DISK, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a pull must end in a state, never silently
            log.exception("image %s: pull crashed", img.name)
            self._finish(img, S.FAILED, ImageFailure.UNREACHABLE, f"{type(exc).__name__}: {exc}")

    def _manifest(self, img: PoolImage):
        if self.client is None:
            return None, ImageFailure.UNREACHABLE, "no image repository configured"
        try:
            return self.client.manifest(img.name), None, None
        except ImageRepositoryError as exc:
            return None, _failure_of(exc), str(exc)[:300]

    def _pull(self, img: PoolImage, expected: str) -> None:
        deadline = self._monotonic() + self.patience_s
        delay = 0.2
        while True:
            man, failure, reason = self._manifest(img)
            if man is not None or failure is not ImageFailure.UNREACHABLE or self._monotonic() > deadline:
                break
            if self._stop.wait(delay):
                return self._finish(img, S.INTERRUPTED)
            delay = min(delay * 2, 5.0)
        if man is None:
            return self._finish(img, S.FAILED, failure, reason)
        if expected and expected != man["sha256"]:
            return self._finish(img, S.FAILED, ImageFailure.CHECKSUM_MISMATCH,
                                f"the repository's {img.name} has SHA-256 {man['sha256']}, expected {expected}")
        with self._lock:
            new_file = f"{img.name}.{man['sha256'][:12]}"
            if img.file and img.file != new_file:
                self._part(img).unlink(missing_ok=True)  # a partial of another version
            img.sha256, img.size, img.format, img.file = man["sha256"], int(man["size"]), man["format"], new_file
            room = self._make_room(img)
            self._save()
        if room is not None:
            return self._finish(img, S.FAILED, ImageFailure.NO_ROOM, room)
        part = self._part(img)
        bucket = TokenBucket(img.rate_mbs * MB if img.rate_mbs > 0 else float("inf"),
                             monotonic=self._monotonic, sleep=self._sleep)
        rec = img.transfer if img.transfer is not None else {}
        first = True
        while True:
            have = part.stat().st_size if part.exists() else 0
            if have > img.size:
                part.unlink()
                have = 0
            if first:
                with self._lock:
                    if rec.get("resumed_by_restart") and "restart_offset" not in rec:
                        rec["restart_offset"], rec["restarted"] = have, self.clock.now()
                        rec["bytes_at_restart"] = rec.get("bytes", 0)  # counted (and saved) before it
                    if rec.get("started") is None:
                        rec["started"], rec["resumed_from"] = self.clock.now(), have
                    self._save()
                first = False
            if have == img.size:
                break
            try:
                self._download(img, part, have, bucket, rec)
                if self._stop.is_set():
                    return self._finish(img, S.INTERRUPTED)
                break
            except ImageRepositoryError as exc:
                if self._stop.is_set():
                    return self._finish(img, S.INTERRUPTED)
                failure = _failure_of(exc)
                if failure is not ImageFailure.UNREACHABLE or self._monotonic() > deadline:
                    return self._finish(img, S.FAILED, failure, str(exc)[:300])
                log.info("image %s: download broken at %d bytes (%s); resuming", img.name,
                         part.stat().st_size if part.exists() else 0, exc.brief())
                if self._stop.wait(delay):
                    return self._finish(img, S.INTERRUPTED)
                delay = min(delay * 2, 5.0)
        self._verify(img, part)

    def _download(self, img: PoolImage, part: Path, have: int, bucket: TokenBucket, rec: dict) -> None:
        status, headers, chunks = self.client.open(img.name, have, etag=img.sha256)
        mode = "ab" if status == 206 else "wb"      # 200: the whole file (no range, or a new version)
        with open(part, mode) as f:
            try:
                for chunk in chunks:
                    bucket.take(len(chunk))
                    f.write(chunk)
                    rec["bytes"] = rec.get("bytes", 0) + len(chunk)
                    if self._stop.is_set():
                        break
            finally:
                chunks.close()
                f.flush()
                os.fsync(f.fileno())

    def _verify(self, img: PoolImage, part: Path) -> None:
        size = part.stat().st_size
        if size != img.size:
            part.unlink(missing_ok=True)
            return self._finish(img, S.FAILED, ImageFailure.SIZE_MISMATCH,
                                f"{img.name}: {size} bytes received, the manifest says {img.size}")
        h = hashlib.sha256()
        with open(part, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
        if h.hexdigest() != img.sha256:
            part.unlink(missing_ok=True)
            return self._finish(img, S.FAILED, ImageFailure.CHECKSUM_MISMATCH,
                                f"{img.name}: SHA-256 of the received bytes is {h.hexdigest()}, "
                                f"the manifest says {img.sha256}")
        os.replace(part, self.root / img.file)
        with self._lock:
            img.last_use = self.clock.now()
        self._finish(img, S.READY)

    # -- eviction ------------------------------------------------------------------------------

    def _make_room(self, img: PoolImage) -> str | None:
        """Evict least recently used unpinned images until ``img`` fits (under the lock).
        Returns None, or why there is no room (nothing evicted then)."""
        if self.capacity_bytes <= 0:
            return None
        others = [i for i in self.images.values() if i is not img]
        used = sum(i.size for i in others if i.state in (S.READY, S.PULLING)) + sum(
            self._part(i).stat().st_size for i in others
            if i.state in (S.INTERRUPTED, S.FAILED) and i.file and self._part(i).exists())
        need = used + img.size - self.capacity_bytes
        if need <= 0:
            return None
        victims = sorted((i for i in others if i.state in (S.READY, S.FAILED, S.INTERRUPTED)
                          and not self.pinned(i.name)), key=lambda i: (i.last_use, i.name))
        chosen, freed = [], 0
        for v in victims:
            if freed >= need:
                break
            chosen.append(v)
            freed += v.size if v.state is S.READY else (
                self._part(v).stat().st_size if self._part(v).exists() else 0)
        if freed < need:
            pinned = sorted(i.name for i in others if self.pinned(i.name))
            return (f"{img.name} needs {img.size / MB:g} MB; the pool holds {used / MB:g} of "
                    f"{self.capacity_bytes / MB:g} MB and the images in use ({', '.join(pinned) or 'none'}) "
                    "are pinned")
        for v in chosen:
            self.evict(v.name)
        return None

    def evict(self, name: str) -> None:
        """Remove image ``name`` from disk (state EVICTED). PoolError "pinned" when a lease or
        an overlay still needs it -- a pinned image is never removed."""
        with self._lock:
            img = self.images.get(name)
            if img is None:
                raise PoolError("unknown-image", f"no image {name!r} in the pool")
            if self.pinned(name):
                raise PoolError("pinned", f"image {name!r} is pinned by {sorted(self.pins.get(name, ()))} "
                                f"and overlays {sorted(v for v, i in self.overlays.items() if i == name)}")
            self._to(img, S.EVICTED)
            if img.file:
                (self.root / img.file).unlink(missing_ok=True)
                self._part(img).unlink(missing_ok=True)
            log.info("image %s evicted from the pool", name)
            self._save()

    # -- overlays ------------------------------------------------------------------------------

    def overlay(self, name: str, vwn: str) -> dict:
        """A qcow2 overlay for VWN ``vwn`` backed by the pool's image ``name``:
        ``{"path","backing","format"}``. The image counts as in use (never evicted) until
        ``remove_overlay(vwn)``. PoolError "not-ready", "bad-name", "overlay-failed" (qemu-img
        missing or failing)."""
        if not NAME_RE.fullmatch(vwn):
            raise PoolError("bad-name", f"VWN name {vwn!r} is not [A-Za-z0-9][A-Za-z0-9._-]*")
        with self._lock:
            backing = self.path(name)
            img = self.images[name]
            dest = self.root / "overlays" / f"{vwn}.qcow2"
            self.overlays[vwn] = name
            img.last_use = self.clock.now()
            self._save()
        exe = shutil.which(self.qemu_img)
        if exe is None:
            self.remove_overlay(vwn)
            raise PoolError("overlay-failed", f"{self.qemu_img} not found (Debian package qemu-utils)")
        if not dest.exists():
            done = subprocess.run([exe, "create", "-q", "-f", "qcow2", "-b", str(backing.resolve()),
                                   "-F", img.format, str(dest)], capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                self.remove_overlay(vwn)
                raise PoolError("overlay-failed", f"qemu-img create: {done.stderr.strip()[:300]}")
        return {"path": str(dest), "backing": str(backing.resolve()), "format": img.format}

    def disk_of(self, vwn: str) -> str | None:
        """The overlay path of VWN ``vwn`` (made by ``overlay``, e.g. by the CE's staging before
        POST /vwns, named by the VWN key), or None: what a VM driver boots from."""
        with self._lock:
            path = self.root / "overlays" / f"{vwn}.qcow2"
            return str(path) if vwn in self.overlays and path.exists() else None

    def remove_overlay(self, vwn: str) -> None:
        """Delete VWN ``vwn``'s overlay; its image may be evicted again (if unpinned)."""
        with self._lock:
            name = self.overlays.pop(vwn, None)
            (self.root / "overlays" / f"{vwn}.qcow2").unlink(missing_ok=True)
            if name is not None and name in self.images:
                self.images[name].last_use = self.clock.now()
            self._save()


def _failure_of(exc: ImageRepositoryError) -> ImageFailure:
    if exc.status == 404:
        return ImageFailure.NOT_FOUND
    if exc.status is not None and 400 <= exc.status < 500 and exc.status not in (408, 429, 416):
        return ImageFailure.REFUSED
    return ImageFailure.UNREACHABLE
