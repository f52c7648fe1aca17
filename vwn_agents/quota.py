"""Disk quota of a VWN's work directory: a loop-mounted ext4 filesystem image per VWN.

``DiskQuota.attach`` makes a sparse image ``<image>`` of ``size_mb`` MB (``truncate``), formats it
(``mkfs.ext4 -q``, no reserved blocks, no journal: scratch space) and mounts it on the work directory (``mount -o loop``,
``nosuid,nodev``); the job's writes past the size fail with ENOSPC and the host filesystem only
grows by what the image really holds. ``detach`` unmounts (at once; the kernel's teardown in
the background: ``mounts.detach``) and removes the image. ``quota_spares`` keeps images formatted and mounted ahead of the VWNs.
``probe`` tells at node start whether loop mounts work here; when they do not, VWNs run without a
quota and say why (``QuotaUnavailable`` / the node's ``disk.reason``), never silently.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import mounts

log = logging.getLogger("vgrid.node.quota")

TOOLS = ("truncate", "mkfs.ext4", "mount", "umount")


class QuotaUnavailable(RuntimeError):
    """The loop-mounted quota cannot be made; the message names the missing facility."""


def _run(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise QuotaUnavailable(f"{what}: {exc}") from None
    if proc.returncode != 0:
        raise QuotaUnavailable(f"{what}: {(proc.stderr or proc.stdout).strip() or proc.returncode}")


def format_image(image: Path, size_mb: int) -> None:
    """Create the sparse ``size_mb`` MB image file ``image`` (must not exist) and format it
    (ext4, no journal, no reserved blocks); QuotaUnavailable naming the step (nothing left)."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise QuotaUnavailable(f"{', '.join(missing)} not installed")
    try:
        with open(image, "xb") as fh:
            fh.truncate(size_mb * 1_000_000)
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "nodiscard", str(image)],
             "mkfs.ext4")
    except (QuotaUnavailable, OSError) as exc:
        image.unlink(missing_ok=True)
        raise QuotaUnavailable(str(exc)) from None


def attach(image: Path, mountpoint: Path, size_mb: int, formatted: bool = False) -> None:
    """Create the ``size_mb`` MB image (unless ``formatted``: ``image`` is a fresh image from
    :func:`format_image`, e.g. a spare of :mod:`vwn_agents.quota_spares`) and mount it on the
    (existing, empty) ``mountpoint``; QuotaUnavailable naming the step that failed (nothing is
    left behind)."""
    if not formatted:
        format_image(image, size_mb)
    try:
        _run(["mount", "-o", "loop,nosuid,nodev", str(image), str(mountpoint)], "loop mount")
    except QuotaUnavailable:
        image.unlink(missing_ok=True)
        raise
    lost = mountpoint / "lost+found"
    if lost.is_dir():
        lost.rmdir()


def detach(image: Path, mountpoint: Path) -> None:
    """Take the file system off ``mountpoint`` (``mounts.detach``: no ``umount`` process; the
    kernel's teardown finishes in the background) and remove ``image``; never raises (a
    failure is logged)."""
    if os.path.ismount(mountpoint):
        try:
            mounts.detach(mountpoint)
        except OSError as exc:
            log.warning("quota: cannot unmount %s: %s", mountpoint, exc)
    image.unlink(missing_ok=True)


def is_full(mountpoint: Path, slack_bytes: int = 1 << 20) -> bool:
    """True when the quota filesystem at ``mountpoint`` has less than ``slack_bytes`` free."""
    try:
        st = os.statvfs(mountpoint)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < slack_bytes


def probe(directory: Path) -> str | None:
    """None when a loop-mounted ext4 works in ``directory``, else the reason it does not."""
    d = Path(tempfile.mkdtemp(prefix=".quota-probe-", dir=directory))
    try:
        (d / "mnt").mkdir()
        attach(d / "probe.img", d / "mnt", 8)
        detach(d / "probe.img", d / "mnt")
        return None
    except QuotaUnavailable as exc:
        return f"no loop-mounted disk quota: {exc}"
    finally:
        shutil.rmtree(d, ignore_errors=True)
