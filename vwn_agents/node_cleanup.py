"""Cleaning up after a node agent that will not be restarted (``vgrid node-cleanup``).

A node agent killed with SIGKILL leaves, by design, what its restart adopts: its VWNs' loop-mounted
disk quotas, its spare quota file systems (``<work_dir>/vwns/.spares/<size>mb-<id>.mnt``,
``quota_spares``), their images. An operator retiring the node (or a test tearing down its
directory) runs :func:`cleanup`: every mount below the work directory is unmounted (lazily when
busy) and the spares' images are deleted. The VWNs' records in ``node.db`` stay (a later agent on
the same work directory reports them ended). It refuses while a node agent runs on the directory
(its ``<node>.lock``, ``node_recovery.lock_node``). docs/operations.md, "Stopping a site".
"""
from __future__ import annotations

from pathlib import Path

from . import mounts, quota_spares
from .node_recovery import lock_node


def cleanup(work_dir: Path, node: str) -> dict:
    """Unmount everything below ``work_dir`` of node ``node`` and delete its spare images.

    Returns ``{"unmounted": [mount points], "failed": {mount point: error}, "spares_removed":
    n}``. Raises RuntimeError when a node agent of ``node`` runs on ``work_dir``, FileNotFoundError
    when ``work_dir`` does not exist."""
    work_dir = Path(work_dir)
    if not work_dir.is_dir():
        raise FileNotFoundError(f"no node work directory {work_dir}")
    lock = lock_node(work_dir, node)
    try:
        unmounted, failed = mounts.unmount_below(work_dir)
        spares = work_dir / "vwns" / ".spares"
        removed = quota_spares.clean(spares) if spares.is_dir() else 0
        return {"unmounted": unmounted, "failed": failed, "spares_removed": removed}
    finally:
        lock.close()
