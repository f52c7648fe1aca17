"""The forwarding policy: when a job goes to a peer Grid instead of a local CE (issue 15).

A peer publishes an aggregate of its CEs as one GLUE CE ad (:mod:`broker.federation.glue`), so
the ISM holds local CEs and peers side by side. :class:`FederatedChooser` wraps the broker's
chooser (``TaskQueues.choose``, same signature) and splits each ISM snapshot into local and
peer ads; for one job:

1. the local choice is made on the local ads alone, by the same selection code as ever;
2. the job may leave only if it has hops left (``VgridHops`` < ``federation_max_hops``) and its
   VO is sent to some peer; peers already passed (``VgridGateways``) are never offered again;
3. it leaves when no local CE matches, or when the chosen local CE's estimated wait
   (GlueCEStateEstimatedResponseTime, seconds) exceeds ``forward_wait_threshold_s`` (< 0:
   never for waiting) and a peer's published estimate is lower -- not for a local request
   (``RequestOrigin = "local"``: it preempts external leases here instead); peers are tried by ascending
   priority, and among the peers of one priority the selection code chooses; a peer whose
   published free CPUs (at most our share) are used up by the jobs dispatched to it since the
   last ISM refresh (:func:`peer_room`) is passed over.

Seed 002 Section 4.1: requests a Grid cannot serve go to peer Grids through the gateways.
"""
from __future__ import annotations

import math
import threading
from typing import Any, Mapping, Sequence

from ..selection import ad_value
from .peers import Peers

ERT = "GlueCEStateEstimatedResponseTime"


def job_gateways(desc) -> list[str]:
    """The gateways (broker base URLs) a job passed, from its JDL ``VgridGateways``."""
    v = desc.get("VgridGateways")
    return [str(x) for x in v] if isinstance(v, list) else ([str(v)] if isinstance(v, str) else [])


def job_hops(desc) -> int:
    """How many gateways forwarded the job so far (JDL ``VgridHops``, default 0)."""
    v = desc.get("VgridHops")
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def peer_room(ad: Mapping[str, Any]) -> float:
    """CPUs a peer's aggregate still offers: its published GlueCEStateFreeCPUs (at most our
    share there) less the jobs dispatched to it since the ISM refresh (the feedback counter,
    seed 004 Section 4.2), so that a stale ad does not send more than the share."""
    free = ad_value(ad, "GlueCEStateFreeCPUs")
    sent = ad_value(ad, "VGridDispatchedSinceRefresh")
    free = float(free) if isinstance(free, (int, float)) and not isinstance(free, bool) else 0.0
    return free - (float(sent) if isinstance(sent, (int, float)) and not isinstance(sent, bool) else 0.0)


def is_local_request(desc) -> bool:
    """A local request (JDL ``RequestOrigin = "local"``, p(L) = 0 in seed 002): it may preempt
    external leases here, so the published wait does not apply to it; it leaves only when no
    local CE matches it."""
    return str(desc.get("RequestOrigin") or "").lower() == "local"


def estimated_wait(ad: Mapping[str, Any]) -> float:
    """The published GlueCEStateEstimatedResponseTime of an ad in seconds (inf if absent)."""
    v = ad_value(ad, ERT)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.inf


class FederatedChooser:
    """``choose(desc, ads, *, now, vo, fqans, exclude)`` as ``TaskQueues.choose`` with the
    forwarding policy of the module doc. ``inner``: the local chooser; ``peers``: the
    :class:`~broker.federation.peers.Peers`; ``own_url()``: this broker's base URL;
    ``threshold_s``, ``max_hops``: the knobs. ``forwarded`` / ``kept`` count decisions."""

    def __init__(self, inner, peers: Peers, own_url, threshold_s: float, max_hops: int) -> None:
        self.inner, self.peers, self.own_url = inner, peers, own_url
        # peers are chosen by a second chooser of the same kind, so that the local chooser's
        # per-snapshot caches survive alternating local and peer choices
        self.remote = type(inner)(inner.matchmaker) if hasattr(inner, "matchmaker") else inner
        self._offered: dict = {}
        self.threshold_s, self.max_hops = threshold_s, max_hops
        self._split: tuple | None = None
        self._lock = threading.Lock()
        self.forwarded = self.kept = 0

    def __getattr__(self, name: str):   # the wrapped chooser's counters (matched, per_job, ...)
        return getattr(self.inner, name)

    def split(self, ads: Sequence) -> tuple[tuple, dict]:
        """``(local ads, {priority: {peer name: (peer, ads)}})`` of one snapshot, computed once per
        ``ads`` object (so the inner chooser's per-snapshot caches stay valid)."""
        with self._lock:
            if self._split is not None and self._split[0] is ads:
                return self._split[1], self._split[2]
            local, remote = [], {}
            for ad in ads:
                peer = self.peers.of_ad(ad)
                if peer is None:
                    local.append(ad)
                else:
                    remote.setdefault(peer.name, (peer, []))[1].append(ad)
            levels: dict[int, list] = {}
            for name, (peer, pads) in remote.items():
                levels.setdefault(peer.priority, []).append((peer, tuple(pads)))
            by_level = {p: (tuple(pr for pr, _ in group), tuple(a for _, pa in group for a in pa))
                        for p, group in sorted(levels.items())}
            self._split = (ads, tuple(local), by_level)
            self._offered = {}
            return self._split[1], self._split[2]

    def _offered_ads(self, pads: tuple, usable: frozenset) -> tuple:
        """The ads of ``pads`` whose peer is in ``usable`` (one tuple object per snapshot)."""
        with self._lock:
            key = (id(pads), usable)
            if key not in self._offered:
                self._offered[key] = tuple(a for a in pads if self.peers.of_ad(a).gateway_url in usable)
            return self._offered[key]

    def choose(self, desc, ads, blacklist=frozenset(), *, now: float, vo=None, fqans=(),
               exclude=frozenset()):
        local_ads, levels = self.split(ads)
        local = self.inner.choose(desc, local_ads, blacklist, now=now, vo=vo, fqans=fqans, exclude=exclude)
        if not levels or job_hops(desc) >= self.max_hops:
            return local
        local_wait = estimated_wait(local.ad) if local is not None else math.inf
        if local is not None and (self.threshold_s < 0 or local_wait <= self.threshold_s
                                  or is_local_request(desc)):
            return local
        passed = set(job_gateways(desc)) | {self.own_url().rstrip("/")}
        for peers, pads in levels.values():
            usable = {p.gateway_url for p in peers if p.sends(vo) and p.base not in passed}
            offered = self._offered_ads(pads, frozenset(usable))
            if not offered:
                continue
            remote = self.remote.choose(desc, offered, blacklist, now=now, vo=vo, fqans=fqans,
                                       exclude=exclude)
            if remote is None or peer_room(remote.ad) <= 0:
                continue     # the best peer of this level has no CPU of our share left
            if local is None or estimated_wait(remote.ad) < local_wait:
                self.forwarded += 1
                return remote
        if local is not None:
            self.kept += 1
        return local
