"""Haizea 1.1's image pools (``compat = "haizea-1.1"`` with ``diskimage-reuse = image-caches``;
issue 16, HPDC'08 VM-REUSE lease for lease). Rule 13 of ``compat_staging.py``'s list.

vgrid's own pools (``imagepool.py``, seed 000 Algorithm 4) make room when a transfer is
*planned*: images unpinned by its arrival are flagged and leave when it ends, so a later lease
cannot reuse them. Haizea 1.1 makes room when the image *arrives*
(``ImageTransferPreparationScheduler._add_diskimages``, called by ``_handle_end_filetransfer``):

* If the node's pool already holds the image (a second transfer of it arrived, e.g. one that
  started before another lease could ride on the first), the new copy is not added: the
  leases it brings are mapped to the pool's copy (``add_mapping_to_existing_reusable_image``).
* Otherwise, if the pool's size (arrived images only) plus the image exceeds
  ``diskimage-cache-size``, ``purge_downto(diskimage-cache-size)`` removes the *oldest unused*
  image -- no lease mapped to it, the smallest ``timeout``, the earliest added first among
  equal ones -- one at a time until the pool's size is at most the cache size (note: the cache
  size, not the cache size minus the image: with equal image sizes one image goes). When no
  unused image is left, the image is not cached: its leases get private copies
  (``diskimage-cache-full = uncached``; vgrid's ``PoolEntry.uncached``).
* An image's ``timeout`` is the latest end of the leases whose VMs the transfer brought it for
  (``get_endtime``) when it arrives, raised (never lowered) by each lease that reuses it: to the
  lease's end for a best-effort lease (``__schedule_asap``) and to its *start* for an AR
  (``__schedule_deadline``). vgrid's ``expire`` falls back to the end of the last user when
  a lease ends early; ``timeout`` keeps Haizea's value for the victim order.

Times in seconds, sizes in MB. The functions take the site's :class:`~.imagepool.ImagePools`
and run on real events (an arrival), outside any transaction: nothing here is undone.
"""
from __future__ import annotations


def _cached_arrived(pools, node: int, image_id: str | None = None) -> list:
    """Arrived entries of ``node``'s pool that count in it (not uncached, not flagged)."""
    return [e for e in pools.pools[node].values()
            if e.arrived and not e.uncached and e.evicted_by is None
            and (image_id is None or e.image_id == image_id)]


def arrive(pools, node: int, e, now: float) -> bool:
    """Haizea's ``_add_diskimages`` for the pool entry ``e`` whose transfer ended at ``now`` on
    ``node``: merge into a copy already there, or make room (purge) and keep it, or make it an
    uncached private copy. Returns False when ``e`` was merged away (the caller must not mark
    it arrived), True otherwise."""
    timeout = max(e.users.values(), default=e.expire)
    there = _cached_arrived(pools, node, e.image_id)
    if there:
        keep = there[0]
        pools._touch(keep)
        for lid, end in e.users.items():
            if keep.users.get(lid, float("-inf")) < end:
                keep.users = {**keep.users, lid: end}
                pools._pin_index(node, keep, lid)
        keep.expire = max(keep.expire, e.expire)
        keep.timeout = max(keep.timeout, timeout)
        pools._pop_raw(node, e)
        return False
    e.timeout = timeout
    e.seq = next(pools.arrivals)
    cap = pools.capacity_mb
    if cap > 0 and sum(x.mb for x in _cached_arrived(pools, node)) + e.mb > cap:
        if not purge_downto(pools, node, cap, now):
            pools._pop_raw(node, e)
            e.uncached = True
            e.lease_id = min(e.users, default=None)
            pools._put_raw(node, e)
    return True


def purge_downto(pools, node: int, target_mb: float, now: float) -> bool:
    """Haizea's ``purge_downto``: remove the oldest unused arrived image of ``node``'s pool
    until its size is at most ``target_mb``; False when no unused image is left first."""
    while True:
        unused = [x for x in _cached_arrived(pools, node) if not x.users]
        if not unused:
            return False
        oldest = min(unused, key=lambda x: (x.timeout, x.seq))
        pools._pop_raw(node, oldest)
        pools.disk_events.append((now, node, -oldest.mb))
        if sum(x.mb for x in _cached_arrived(pools, node)) <= target_mb:
            return True

