"""Quota file systems made and mounted ahead of time, so a VWN's start waits for neither
``mkfs.ext4`` nor ``mount -o loop`` (issue 12: submit -> Running for ``/bin/true`` on an idle
node p50 <= 100 ms; together they cost 15-160 ms of a VWN's start, measured at load 4-49).

:class:`SpareImages` keeps ``keep`` spares of the node's quota size in ``<work_dir>/vwns/.spares``
(root, 0700: no pool account can reach them): an image ``<size>mb-<id>.img``, freshly formatted
(:func:`quota.format_image`), loop-mounted (``nosuid,nodev``) on ``<size>mb-<id>.mnt``. Handing
one to a VWN (``take``) is a ``rename`` of the image into the VWN's private directory and a
``mount --move`` of its file system onto the work directory (``mounts.move``: one system call,
~0.05 ms); a background thread then makes the next one. A spare only ever holds an empty file
system and is never used twice (a VWN's image is deleted when it ends, ``quota.detach``).

Start: whatever an earlier agent left in the directory (spares, ``*.tmp`` being made, mounts
of a killed agent) is unmounted and deleted before the first spare is made; ``close`` at
shutdown does the same (``vgrid node-cleanup``, ``node_cleanup``, for an agent never restarted). When no spare is ready (a burst, or making one failed: logged, retried
after ``retry_s``) the VWN formats and mounts its own as before. Counters: ``taken``,
``misses``.
"""
from __future__ import annotations

import logging
import os
import secrets
import shutil
import threading
from pathlib import Path

from . import mounts, quota

log = logging.getLogger("vgrid.node.quota")


def clean(directory: Path) -> int:
    """Unmount and delete everything in a spares ``directory`` (an earlier agent's spares, or
    a retired node's: ``node_cleanup``); a mount that cannot be unmounted is logged and left
    in place, never deleted into. Returns how many entries were removed."""
    removed = 0
    for p in Path(directory).iterdir():
        if p.is_dir():
            if os.path.ismount(p):
                try:
                    mounts.unmount(p)
                except OSError as exc:
                    log.warning("cannot unmount an old spare %s: %s", p, exc)
                    continue
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed += 1
    return removed


class SpareImages:
    """``keep`` ready quota file systems of ``size_mb`` MB in ``directory`` (module doc).

    ``take(image, mountpoint)`` hands one over (True) or answers False at once. ``close()``
    stops the thread and removes the spares. ``retry_s``: wait after a failed spare."""

    def __init__(self, directory: Path, size_mb: int, keep: int = 1, retry_s: float = 30.0) -> None:
        self.directory, self.size_mb, self.keep, self.retry_s = Path(directory), size_mb, keep, retry_s
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._clean()
        self._ready: list[tuple[Path, Path]] = []      # (image, its mount point)
        self._cond = threading.Condition()
        self._stopped = False
        self.taken = self.misses = 0
        self._thread = threading.Thread(target=self._fill, name="quota-spares", daemon=True)
        self._thread.start()

    def _clean(self) -> None:
        """Unmount and delete everything in the directory (an earlier agent's spares)."""
        clean(self.directory)

    def ready(self) -> list[Path]:
        """The images ready to be taken, oldest first."""
        with self._cond:
            return [image for image, _ in self._ready]

    def take(self, image: Path, mountpoint: Path) -> bool:
        """Move a ready spare's image to ``image`` (must not exist, same file system) and its
        file system onto ``mountpoint`` (an existing empty directory). False when none is
        ready or the hand-over failed (that spare is discarded; ``mountpoint`` unchanged)."""
        with self._cond:
            spare = self._ready.pop(0) if self._ready else None
            if spare is None:
                self.misses += 1
            self._cond.notify_all()
        if spare is None:
            return False
        src_image, src_mnt = spare
        try:
            os.rename(src_image, image)
        except OSError as exc:
            log.warning("cannot take a spare quota image: %s", exc)
            self._discard(src_image, src_mnt)
            return False
        try:
            mounts.move(src_mnt, mountpoint)
        except OSError as exc:
            log.warning("cannot move a spare quota mount to %s: %s", mountpoint, exc)
            self._discard(image, src_mnt)
            return False
        src_mnt.rmdir()
        with self._cond:
            self.taken += 1
        return True

    def close(self, wait_s: float = 5.0) -> None:
        """Stop making spares; unmount and delete the ready ones, then whatever else is in the
        directory (a killed earlier agent's leftovers: they would keep its directory from being
        removed). A spare still being made after ``wait_s`` seconds (``mkfs.ext4`` on a loaded
        disk) is discarded by its thread when done; if the process exits first, the next start or
        ``vgrid node-cleanup`` removes it."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=wait_s)
        with self._cond:
            ready, self._ready = self._ready, []
        for image, mnt in ready:
            self._discard(image, mnt)
        if not self._thread.is_alive() and self.directory.is_dir():
            self._clean()

    @staticmethod
    def _discard(image: Path, mnt: Path) -> None:
        quota.detach(image, mnt)
        shutil.rmtree(mnt, ignore_errors=True)

    def _make(self) -> tuple[Path, Path]:
        """One new spare (QuotaUnavailable / OSError; nothing left behind)."""
        name = f"{self.size_mb}mb-{secrets.token_hex(8)}"
        tmp = self.directory / f"{name}.tmp"
        quota.format_image(tmp, self.size_mb)
        image = self.directory / f"{name}.img"
        os.rename(tmp, image)
        mnt = self.directory / f"{name}.mnt"
        mnt.mkdir(mode=0o700)
        try:
            quota.attach(image, mnt, self.size_mb, formatted=True)
        except quota.QuotaUnavailable:
            mnt.rmdir()
            raise
        return image, mnt

    def _fill(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and len(self._ready) >= self.keep:
                    self._cond.wait()
                if self._stopped:
                    return
            try:
                spare = self._make()
            except (quota.QuotaUnavailable, OSError) as exc:
                log.warning("cannot make a spare quota file system (VWNs make their own): %s", exc)
                with self._cond:
                    self._cond.wait(self.retry_s)
                continue
            with self._cond:
                if self._stopped:
                    stale = spare
                else:
                    self._ready.append(spare)
                    stale = None
            if stale is not None:
                self._discard(*stale)
                return
