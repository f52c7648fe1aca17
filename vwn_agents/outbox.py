"""An outbox for events: POST JSON to a URL, retried with backoff, in order per job, persistent.

The node agent sends VWN events to its CE agent through one, the CE agent sends job events to the
broker through another. ``post(url, payload, order_key)`` returns once the event is queued (and,
with an ``engine``, committed to table ``outbox``: ``outbox_store``); ``senders`` background
threads deliver (default 4, each with its own HTTP session), at most one event per ``order_key``
at a time. Events with the same ``order_key`` (the job key) are delivered strictly in the order they
were posted: a failing event holds back the later ones of its job, not those of other jobs.
Several senders (issue 12): with one, a burst of jobs queued every job's ``running`` behind the
others' events (1.75 s of submit -> Running at 100 jobs in flight, docs/benchmarks.md).

Retried after ``retry_initial_s``, doubling up to ``retry_max_s``: a connection error (refused,
unreachable: a restarting receiver must still get its events), a timeout, HTTP 5xx, 408 or 429.
Dropped -- logged, counted in ``dropped`` by reason, the last ones kept in ``drops`` -- are:

* ``"refused"``: any other HTTP 4xx (the receiver will never take it; it must not block its job);
* ``"bad-url"``: a URL requests cannot use (no scheme, ``http+unix://...``, no host);
* ``"gave-up"``: still failing ``give_up_s`` seconds (of the clock passed in) after its first
  failed attempt, counted across restarts;
* ``"overflow"``: ``post`` found ``max_items`` events queued; the oldest one goes.

With ``engine`` (a SQLAlchemy engine, contract 2 of docs/architecture.md) undelivered events
survive the sender's ``kill -9`` and are reloaded, in order, by the next ``Outbox`` of the same
``name``; delivery is then at least once (an event delivered just before the kill is sent again),
so receivers are idempotent per event. Without ``engine`` they live in memory only.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict, deque

import requests

from vgrid_runtime.clock import Clock, WallClock
from vgrid_runtime.httpclient import new_session

from .outbox_store import OutboxStore, StoredEvent

log = logging.getLogger(__name__)

RETRYABLE = {408, 429}
BAD_URL = (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
           requests.exceptions.InvalidSchema, requests.exceptions.URLRequired)
DROP_REASONS = ("refused", "bad-url", "gave-up", "overflow")
KEEP_DROPS = 100              # dropped events kept in ``drops`` for inspection


class Outbox:
    """Thread-backed, per-key ordered, retrying, optionally persistent JSON POST queue.

    ``timeout_s`` bounds one HTTP request; ``tls``: ``vgrid_runtime.tls.TLSFiles`` or None (plain
    HTTP); ``engine``: SQLAlchemy engine of the sender's database, or None (memory only);
    ``give_up_s``: seconds of failures after which an event is dropped; ``max_items``: queue
    bound; ``clock``: for ``give_up_s`` (default wall clock); ``senders``: delivery threads
    (>= 1). ``close()`` stops the threads (pending events are kept, in the database too, and can
    be inspected with ``pending()``); ``drain(timeout_s)`` before it is the stopping sender's
    last, bounded, non-retrying delivery.
    """

    def __init__(self, retry_initial_s: float = 0.2, retry_max_s: float = 10.0,
                 timeout_s: float = 5.0, name: str = "outbox", tls=None, engine=None,
                 give_up_s: float = 3600.0, max_items: int = 100000,
                 clock: Clock | None = None, senders: int = 4) -> None:
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.timeout_s = timeout_s
        self.give_up_s = give_up_s
        self.max_items = max(1, max_items)
        self.name = name
        self.clock = clock or WallClock()
        self.dropped: dict[str, int] = {}
        self.drops: deque[dict] = deque(maxlen=KEEP_DROPS)
        self.delivered = 0
        self._store = OutboxStore(engine, name) if engine is not None else None
        self._ids = itertools.count(1)          # events kept in memory only (negative row ids)
        self._seqs = itertools.count(1)         # queueing order, for "the oldest"
        self._queues: OrderedDict[str, deque[StoredEvent]] = OrderedDict()
        self._next_try: dict[str, float] = {}
        self._inflight: set[str] = set()        # order keys with an event being sent
        self._draining = False                  # drain(): a failed event parks its key
        self._parked: set[str] = set()          # keys not tried again before the next start
        self._count = 0
        self._cond = threading.Condition()
        self._stop = False
        if self._store is not None:
            for ev in self._store.load():
                self._enqueue(ev)
            if self._count:
                log.info("outbox %s: %d undelivered event(s) reloaded", name, self._count)
        self._tls = tls
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                         for i in range(max(1, senders))]
        for t in self._threads:
            t.start()

    def post(self, url: str, payload: dict, order_key: str = "") -> None:
        """Queue ``payload`` for a JSON POST to ``url`` after the earlier events of ``order_key``
        (stored before this returns when persistent; if the database fails -- e.g. a full disk --
        the event is kept in memory only, with an error in the log, never refused)."""
        with self._cond:
            if self._count >= self.max_items:
                self._drop_oldest()
            row = -next(self._ids)                 # negative: in memory only
            if self._store is not None:
                try:
                    row = self._store.add(order_key, url, payload, self.clock.now())
                except Exception as exc:  # noqa: BLE001 - deliver it anyway while we live
                    log.error("outbox %s: cannot store an event of %s (%s); it is kept in memory "
                              "only", self.name, order_key, exc)
            self._enqueue(StoredEvent(row, order_key, url, payload))
            self._cond.notify_all()

    def _enqueue(self, ev: StoredEvent) -> None:
        ev.seq = next(self._seqs)
        self._queues.setdefault(ev.order_key, deque()).append(ev)
        self._next_try.setdefault(ev.order_key, 0.0)
        self._count += 1

    def pending(self) -> list[dict]:
        """Undelivered events, ``{"url", "payload", "attempts", "last_error"}``, per key in order."""
        with self._cond:
            return [{"url": i.url, "payload": i.payload, "attempts": i.attempts,
                     "last_error": i.last_error} for q in self._queues.values() for i in q]

    def stats(self) -> dict:
        """``{"pending": n, "dropped": {reason: n}, "delivered": n, "persistent": bool}``."""
        with self._cond:
            return {"pending": self._count, "dropped": dict(self.dropped),
                    "delivered": self.delivered, "persistent": self._store is not None}

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued event is delivered or dropped; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queues:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def drain(self, timeout_s: float = 3.0) -> int:
        """The last delivery of a stopping sender: every job's queued events are sent at once
        (backoff ignored) and in order, but a failed attempt is not retried: the event and the
        later ones of its job stay queued -- and stored, with an ``engine`` -- for the next
        ``Outbox`` of the same name. Returns, at the latest after ``timeout_s`` seconds, the
        number of events left undelivered; a receiver that has stopped (connection refused)
        costs one attempt, not ``timeout_s`` (docs/operations.md, "Stopping a site")."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._draining = True
            for key in self._next_try:
                self._next_try[key] = 0.0
            self._cond.notify_all()
            while any(key not in self._parked for key in self._queues):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._count

    def close(self, wait_s: float | None = None) -> None:
        """Stop the delivery threads: each finishes its in-flight request, waited for up to
        ``wait_s`` seconds in all (default: one request's ``timeout_s`` + 1); an event whose
        request is cut short stays stored and is sent again by the next ``Outbox``."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        deadline = time.monotonic() + (self.timeout_s + 1 if wait_s is None else wait_s)
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    # -- dropping -----------------------------------------------------------------------------

    def _drop_oldest(self) -> None:
        """Drop the oldest queued event that is not being sent right now (max_items reached)."""
        oldest = None
        for key, q in self._queues.items():
            skip = 1 if key in self._inflight else 0     # its head is being sent
            if len(q) > skip and (oldest is None or q[skip].seq < oldest.seq):
                oldest = q[skip]
        if oldest is None:
            return
        q = self._queues[oldest.order_key]
        q.remove(oldest)
        self._forget(oldest, "overflow", f"more than {self.max_items} events queued")
        if not q:
            del self._queues[oldest.order_key]
            del self._next_try[oldest.order_key]

    def _forget(self, ev: StoredEvent, reason: str, error: str | None) -> None:
        """Count and log a dropped event and delete its row (under the lock)."""
        self._count -= 1
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        self.drops.append({"url": ev.url, "payload": ev.payload, "reason": reason, "error": error})
        log.warning("outbox %s: event %s of %s to %s dropped (%s): %s", self.name,
                    ev.payload.get("event"), ev.order_key, ev.url, reason, error)
        self._remove_row(ev)

    def _remove_row(self, ev: StoredEvent) -> None:
        if self._store is not None and ev.id > 0:
            try:
                self._store.remove(ev.id)
            except Exception as exc:  # noqa: BLE001 - the row is sent again after a restart
                log.warning("outbox %s: cannot delete row %s: %s", self.name, ev.id, exc)

    # -- delivery thread ----------------------------------------------------------------------

    def _due(self) -> tuple[str, StoredEvent] | float | None:
        """The next (key, head item) due now, else seconds to the next due one, else None."""
        now = time.monotonic()
        soonest = None
        for key, q in self._queues.items():
            if key in self._inflight or key in self._parked:
                continue
            wait = self._next_try[key] - now
            if wait <= 0:
                return key, q[0]
            soonest = wait if soonest is None else min(soonest, wait)
        return soonest

    def _run(self) -> None:
        session = new_session(self._tls)
        try:
            while True:
                with self._cond:
                    while not self._stop:
                        due = self._due()
                        if isinstance(due, tuple):
                            break
                        self._cond.wait(due)
                    if self._stop:
                        return
                    key, item = due
                    self._inflight.add(key)
                outcome = self._send(session, item)
                with self._cond:
                    self._inflight.discard(key)
                    self._finish(key, item, outcome)
                    self._cond.notify_all()
        finally:
            session.close()

    def _send(self, session, item: StoredEvent) -> str:
        """'ok', 'retry', or the drop reason ('refused', 'bad-url') of one POST attempt."""
        item.attempts += 1
        try:
            resp = session.post(item.url, json=item.payload, timeout=self.timeout_s)
        except BAD_URL as exc:
            item.last_error = f"{type(exc).__name__}: {exc}"
            return "bad-url"
        except requests.RequestException as exc:
            item.last_error = f"{type(exc).__name__}: {exc}"
            return "retry"
        except ValueError as exc:                  # e.g. a URL urllib3 cannot parse
            item.last_error = f"{type(exc).__name__}: {exc}"
            return "bad-url"
        if resp.status_code < 300:
            return "ok"
        item.last_error = f"HTTP {resp.status_code}: {resp.text[:200]}"
        if resp.status_code >= 500 or resp.status_code in RETRYABLE:
            return "retry"
        return "refused"

    def _finish(self, key: str, item: StoredEvent, outcome: str) -> None:
        q = self._queues.get(key)
        if q is None or not q or q[0] is not item:
            return                                 # dropped (overflow) while in flight
        if outcome == "retry":
            now = self.clock.now()
            if item.first_failure is None:
                item.first_failure = now
            if now - item.first_failure < self.give_up_s:
                delay = min(self.retry_max_s, self.retry_initial_s * 2 ** (item.attempts - 1))
                self._next_try[key] = time.monotonic() + delay
                if self._store is not None and item.id > 0:
                    try:
                        self._store.failed(item)
                    except Exception as exc:  # noqa: BLE001 - the retry goes on in memory
                        log.warning("outbox %s: cannot record a failure: %s", self.name, exc)
                if self._draining:                 # stopping: kept for the next start
                    self._parked.add(key)
                    log.info("outbox %s: %s to %s failed (%s), kept for the next start",
                             self.name, key, item.url, item.last_error)
                    return
                log.info("outbox %s: %s to %s failed (%s), retry in %.1f s", self.name, key,
                         item.url, item.last_error, delay)
                return
            outcome = "gave-up"
            item.last_error = f"still failing after {self.give_up_s:g} s: {item.last_error}"
        q.popleft()
        if outcome == "ok":
            self.delivered += 1
            self._count -= 1
            self._remove_row(item)
        else:
            self._forget(item, outcome, item.last_error)
        self._next_try[key] = 0.0
        if not q:
            del self._queues[key]
            del self._next_try[key]
