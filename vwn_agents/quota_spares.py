"""Quota images formatted ahead of time, so a VWN's start does not wait for ``mkfs.ext4``.

Issue 12 ("a lean job wrapper": submit -> Running for ``/bin/true`` on an idle node): formatting
the work directory's loop-mounted ext4 image (:mod:`vwn_agents.quota`) costs ~50-100 ms, most of
a VWN's start. :class:`SpareImages` keeps ``keep`` freshly formatted, never mounted images of the
node's quota size in ``<work_dir>/vwns/.spares`` (root only, same filesystem as the VWNs'
private directories, so handing one over is a ``rename``). A background thread makes a new one
whenever one is taken. Images are never reused: a VWN's image is deleted when it ends
(``quota.detach``), a spare only ever holds an empty filesystem.

Files: ``<size>mb-<random>.img`` (ready), ``*.tmp`` (being formatted). At start, ``*.tmp`` and
images of another size (the configuration changed) are deleted. When no spare is ready (a
burst, or formatting fails) the VWN formats its own image as before.
"""
from __future__ import annotations

import logging
import os
import secrets
import threading
from pathlib import Path

from . import quota

log = logging.getLogger("vgrid.node.quota")


class SpareImages:
    """``keep`` formatted images of ``size_mb`` MB in ``directory``, refilled by a daemon thread.

    ``take(dest)`` moves a ready one to ``dest`` (True) or answers False at once (none ready,
    or ``dest`` on another filesystem). ``close()`` stops the thread (an image being formatted
    is left as ``.tmp`` and deleted at the next start). ``retry_s``: wait after a failed format.
    """

    def __init__(self, directory: Path, size_mb: int, keep: int = 1, retry_s: float = 30.0) -> None:
        self.directory, self.size_mb, self.keep, self.retry_s = Path(directory), size_mb, keep, retry_s
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        prefix = f"{size_mb}mb-"
        for p in self.directory.iterdir():
            if p.suffix != ".img" or not p.name.startswith(prefix):
                p.unlink(missing_ok=True)
        self._cond = threading.Condition()
        self._stopped = False
        self.taken = self.misses = 0
        self._thread = threading.Thread(target=self._fill, name="quota-spares", daemon=True)
        self._thread.start()

    def ready(self) -> list[Path]:
        """The images ready to be taken, oldest name first."""
        return sorted(self.directory.glob(f"{self.size_mb}mb-*.img"))

    def take(self, dest: Path) -> bool:
        """Move a ready image to ``dest`` (which must not exist); False when none is ready."""
        with self._cond:
            for image in self.ready():
                try:
                    os.rename(image, dest)
                except OSError:            # e.g. another filesystem: the caller formats its own
                    continue
                self.taken += 1
                self._cond.notify_all()
                return True
            self.misses += 1
            self._cond.notify_all()
            return False

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=10)

    def _fill(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and len(self.ready()) >= self.keep:
                    self._cond.wait()
                if self._stopped:
                    return
            tmp = self.directory / f"{self.size_mb}mb-{secrets.token_hex(8)}.tmp"
            try:
                quota.format_image(tmp, self.size_mb)
                os.rename(tmp, tmp.with_suffix(".img"))
            except (quota.QuotaUnavailable, OSError) as exc:
                tmp.unlink(missing_ok=True)
                log.warning("cannot format a spare quota image (VWNs format their own): %s", exc)
                with self._cond:
                    self._cond.wait(self.retry_s)
