"""The Information Super-Market: the broker's snapshot of the grid's CE ads.

As in the gLite WMS: ads are collected from information sources every ``refresh_s`` seconds
(gLite default 240 s) into a new ``Snapshot`` that replaces the old one in a single reference
assignment, so a match in progress keeps reading the snapshot it started with. A source that
fails keeps its previous ads and the snapshot is flagged ``stale``; ads whose source has not
answered for ``refresh_s + timeout_s`` expire and are not offered to matching. CEs can be
blacklisted for a time (the broker does it when a dispatch fails; see ``blacklist``). The
feedback counters of seed 004 Section 4.2 restart at every refresh and are
visible in matching as ``VGridDispatchedSinceRefresh`` (see ``AdView``).

Time comes only from the clock passed in (live: WallClock; simulation: SimulatedClock with
``maybe_refresh(now)``).
"""
from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Mapping
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from infosys.bdii_source import BdiiSource  # noqa: F401  (re-exported: the broker's --bdii)
from vgrid_runtime.clock import Clock, WallClock
from infosys.feedback import FeedbackCounters
from infosys.periodic import Periodic
from infosys.glue import AD_ID, Rejected
from infosys.sources import (HttpLdifSource, LdifFileSource, Source, SourceError,  # noqa: F401
                             StaticSource)

DISPATCHED = "VGridDispatchedSinceRefresh"
"""Ad attribute (``other.VGridDispatchedSinceRefresh`` in Rank expressions): the feedback count."""

GLITE_DEFAULT_REFRESH_S = 240.0

log = logging.getLogger(__name__)

__all__ = ["ISM", "Snapshot", "AdView", "ad_id", "DISPATCHED", "GLITE_DEFAULT_REFRESH_S",
           "SourceError", "StaticSource", "LdifFileSource", "HttpLdifSource", "BdiiSource"]


_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False


@contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector while a refresh builds a large snapshot.

    A refresh allocates hundreds of thousands of dicts and lists and none of them form cycles;
    with the collector on, its repeated full passes over the growing heap cost about as much as
    the parsing itself (benchmarks/ism_refresh.py). Nested and thread-safe: the collector is
    re-enabled when the last user leaves, if it was enabled when the first came in.
    """
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()


def ad_id(ad: Mapping) -> str:
    """The key of an ad: ``VGridAdID`` if present, else its GlueCEUniqueID."""
    return str(ad.get(AD_ID) or ad.get("GlueCEUniqueID"))


@dataclass(frozen=True)
class Snapshot:
    """One ISM picture of the grid.

    ads: CE ads (dicts, not to be mutated); taken_at: when the snapshot was built (s, clock
    time; 0.0 for the empty snapshot before the first refresh); fresh_at: when the oldest data in it was fetched (== taken_at when every source
    answered); stale: some source failed and its last ads are kept; errors: "source: message"
    of the failed sources; rejected: entries left out by the sources; expired: ids of ads dropped
    because their source had not answered for refresh_s + timeout_s; ad_time: ad id -> time its
    data was fetched.
    """

    ads: tuple[dict, ...] = ()
    taken_at: float = 0.0
    fresh_at: float = 0.0
    stale: bool = False
    errors: tuple[str, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    expired: tuple[str, ...] = ()
    ad_time: Mapping[str, float] = field(default_factory=dict)
    by_id: Mapping[str, dict] = field(default_factory=dict)

    def age(self, now: float) -> float:
        """Seconds since the oldest data in the snapshot was fetched."""
        return now - self.fresh_at

    def get(self, ad_id_: str) -> dict | None:
        return self.by_id.get(ad_id_)


class AdView(Mapping):
    """Read-only view of an ad that adds ``VGridDispatchedSinceRefresh`` from the live feedback
    counters (cheap: no copy of the ad). Usable wherever a CE ad mapping is expected."""

    __slots__ = ("ad", "key", "_feedback")

    def __init__(self, ad: dict, feedback: FeedbackCounters) -> None:
        self.ad = ad
        self.key = ad_id(ad)
        self._feedback = feedback

    def __getitem__(self, name: str):
        if name == DISPATCHED:
            return self._feedback.get(self.key)
        return self.ad[name]

    def get(self, name: str, default=None):
        """``Mapping.get`` without its ``__getitem__`` + KeyError round trip: the matcher reads
        every attribute of every class's Requirements and Rank through it."""
        if name == DISPATCHED:
            return self._feedback.get(self.key)
        return self.ad.get(name, default)

    def __iter__(self) -> Iterator[str]:
        yield from self.ad
        if DISPATCHED not in self.ad:
            yield DISPATCHED

    def __len__(self) -> int:
        return len(self.ad) + (0 if DISPATCHED in self.ad else 1)

    def __contains__(self, name: object) -> bool:
        return name == DISPATCHED or name in self.ad


@dataclass
class _SourceState:
    ads: list[dict] = field(default_factory=list)
    ok_at: float | None = None
    rejected: list[Rejected] = field(default_factory=list)


class ISM:
    """Snapshot of CE ads from ``sources``, refreshed every ``refresh_s`` seconds.

    sources: objects with ``fetch() -> list[dict]`` raising SourceError; refresh_s > 0;
    clock: where time comes from; feedback: the counters reset at each refresh; timeout_s: how
    long past a missed refresh a source's ads are still matched (expiry = refresh_s + timeout_s).
    """

    def __init__(self, sources: Sequence[Source], refresh_s: float = GLITE_DEFAULT_REFRESH_S,
                 clock: Clock | None = None, feedback: FeedbackCounters | None = None,
                 timeout_s: float = 60.0) -> None:
        if refresh_s <= 0:
            raise ValueError(f"refresh_s must be > 0, got {refresh_s}")
        self.sources = list(sources)
        self.refresh_s = float(refresh_s)
        self.timeout_s = float(timeout_s)
        self.clock = clock or WallClock()
        self.feedback = feedback if feedback is not None else FeedbackCounters()
        self._state = [_SourceState() for _ in self.sources]
        self._snapshot = Snapshot()
        self._views: tuple[Snapshot, tuple[AdView, ...]] = (self._snapshot, ())
        self._last_refresh: float | None = None
        self.refresh_seconds = [0, 0.0, None]   # refreshes, their total and the last's duration (s)
        self._blacklist: dict[str, float] = {}
        self._bl_reason: dict[str, str] = {}
        self._bl_lock = threading.Lock()
        self._filtered: tuple = (None, None, ())   # (snapshot, excluded keys, candidates)
        self._refresh_lock = threading.Lock()
        self._loop = Periodic(self.refresh, self.refresh_s, self.clock, "ism-refresh")

    # -- snapshots -------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The current snapshot (an empty one before the first refresh)."""
        return self._snapshot

    @property
    def last_refresh(self) -> float | None:
        return self._last_refresh

    def refresh(self, now: float | None = None) -> Snapshot:
        """Fetch every source, build a new snapshot, swap it in and restart the feedback counts.

        ``now``: the refresh time (default: clock.now()). Never raises for a failing source.
        """
        with self._refresh_lock, gc_paused():
            began = time.perf_counter()          # refresh_seconds: GET /metrics (broker.metrics)
            mark = self.feedback.snapshot()
            results = self._fetch_all()
            now = self.clock.now() if now is None else now
            snap = self._build(results, now)
            views = tuple(AdView(a, self.feedback) for a in snap.ads)
            self._views = (snap, views)
            self._snapshot = snap
            self._last_refresh = now
            self.feedback.subtract(mark)
            took = time.perf_counter() - began
            self.refresh_seconds = [self.refresh_seconds[0] + 1, self.refresh_seconds[1] + took, took]
            return snap

    def maybe_refresh(self, now: float) -> bool:
        """Refresh if ``now >= last refresh + refresh_s`` (or never refreshed); True if done."""
        if self._last_refresh is None or now >= self._last_refresh + self.refresh_s:
            self.refresh(now)
            return True
        return False

    def _fetch_one(self, src: Source) -> tuple[list[dict] | None, str | None, list[Rejected]]:
        try:
            ads = src.fetch()
        except SourceError as e:
            return None, str(e), []
        except Exception as e:  # a source bug must not stop the ISM; reported as an error
            return None, f"{getattr(src, 'name', src)}: {type(e).__name__}: {e}", []
        return ads, None, list(getattr(src, "rejected", []) or [])

    def _fetch_all(self):
        remote = [s for s in self.sources if getattr(s, "blocking", True)]
        if len(remote) > 1:
            with ThreadPoolExecutor(max_workers=min(16, len(self.sources))) as pool:
                return list(pool.map(self._fetch_one, self.sources))
        return [self._fetch_one(s) for s in self.sources]

    def _build(self, results, now: float) -> Snapshot:
        ttl = self.refresh_s + self.timeout_s
        ads: list[dict] = []
        ad_time: dict[str, float] = {}
        by_id: dict[str, dict] = {}
        errors: list[str] = []
        rejected: list[Rejected] = []
        expired: list[str] = []
        fresh_at = now
        for st, (got, err, rej) in zip(self._state, results):
            if err is None:
                st.ads, st.ok_at, st.rejected = got, now, rej
            else:
                errors.append(err)
            rejected.extend(st.rejected)
            if st.ok_at is None:
                continue
            if now - st.ok_at > ttl:
                expired.extend(ad_id(a) for a in st.ads)
                continue
            fresh_at = min(fresh_at, st.ok_at)
            for a in st.ads:
                key = ad_id(a)
                if key in by_id:
                    rejected.append(Rejected(key, "published by more than one source; "
                                                  "the first is kept"))
                    continue
                by_id[key] = a
                ad_time[key] = st.ok_at
                ads.append(a)
        return Snapshot(tuple(ads), now, fresh_at, bool(errors), tuple(errors),
                        tuple(rejected), tuple(expired), ad_time, by_id)

    # -- matching ---------------------------------------------------------------------------
    def candidates(self, now: float | None = None) -> tuple[AdView, ...]:
        """Ads offered to matching at ``now``: not expired, not blacklisted, as AdViews
        carrying ``VGridDispatchedSinceRefresh``. O(1) when nothing is expired or blacklisted
        (the views of a snapshot are built once, at refresh)."""
        now = self.clock.now() if now is None else now
        snap, views = self._views
        ttl = self.refresh_s + self.timeout_s
        bl = self._active_blacklist(now)
        if not bl and now - snap.fresh_at <= ttl:
            return views
        excluded = frozenset(
            v.key for v in views
            if now - snap.ad_time.get(v.key, now) > ttl
            or (bl and (v.key in bl or v.ad.get("GlueCEUniqueID") in bl)))
        fsnap, fexcl, fviews = self._filtered
        if fsnap is snap and fexcl == excluded:
            return fviews  # the same tuple object: the Matchmaker's grouping cache stays valid
        out = tuple(v for v in views if v.key not in excluded)
        self._filtered = (snap, excluded, out)
        return out

    def blacklist(self, ce_id: str, until: float | None = None, reason: str = "") -> None:
        """Exclude a CE (GlueCEUniqueID, or one VO-view key) from matching until ``until``
        (clock seconds; None = until ``unblacklist``); ``reason`` is shown by ``blacklist_entries``."""
        with self._bl_lock:
            self._blacklist[ce_id] = float("inf") if until is None else until
            self._bl_reason[ce_id] = reason

    def unblacklist(self, ce_id: str) -> None:
        with self._bl_lock:
            self._blacklist.pop(ce_id, None)
            self._bl_reason.pop(ce_id, None)

    def blacklisted(self, now: float | None = None) -> set[str]:
        now = self.clock.now() if now is None else now
        return set(self._active_blacklist(now))

    def blacklist_entries(self, now: float | None = None) -> dict[str, dict]:
        """The blacklist in force at ``now``: ``{ce_id: {"until": clock s or None (no end),
        "reason": str}}``, in the order the entries were made."""
        now = self.clock.now() if now is None else now
        return {k: {"until": None if t == float("inf") else t, "reason": self._bl_reason.get(k, "")}
                for k, t in self._active_blacklist(now).items()}

    def _active_blacklist(self, now: float) -> dict[str, float]:
        if not self._blacklist:
            return {}
        with self._bl_lock:  # passed entries are kept (at most one per CE), just not in force
            return {k: t for k, t in self._blacklist.items() if t > now}

    # -- background refresh -----------------------------------------------------------------
    def start(self) -> None:
        """Refresh now and then every refresh_s seconds in a daemon thread until ``stop()``.
        A failed refresh is logged; the last snapshot stays and ages (stale)."""
        self._loop.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the background refresh (waits for a refresh in progress, up to ``timeout`` s)."""
        self._loop.stop(timeout)
