"""A small outbox for events: POST JSON to a URL, retried with backoff, in order per job.

The node agent sends VWN events to its CE agent through one, the CE agent sends job events to the
broker through another. ``post(url, payload, order_key)`` returns at once; one background thread
delivers. Events with the same ``order_key`` (the job key) are delivered strictly in the order they
were posted: a failing event holds back the later ones of its job, not those of other jobs.

A connection error, a timeout, HTTP 5xx, 408 or 429 is retried after ``retry_initial_s``, doubling up
to ``retry_max_s``, for ever (a restarted receiver gets the event). Any other 4xx means the
receiver refuses the event: it is dropped and kept in ``dropped`` (so it cannot block its job).
Undelivered events live in memory only: they are lost if the *sender* process dies.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass

import requests

from vgrid_runtime.httpclient import new_session

log = logging.getLogger(__name__)

RETRYABLE = {408, 429}


@dataclass
class _Item:
    url: str
    payload: dict
    attempts: int = 0
    last_error: str | None = None


class Outbox:
    """Thread-backed, per-key ordered, retrying JSON POST queue.

    ``timeout_s`` bounds one HTTP request. ``close()`` stops the thread (pending events are kept
    and can be inspected with ``pending()``).
    """

    def __init__(self, retry_initial_s: float = 0.2, retry_max_s: float = 10.0,
                 timeout_s: float = 5.0, name: str = "outbox", tls=None) -> None:
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.timeout_s = timeout_s
        self.dropped: list[dict] = []
        self.delivered = 0
        self._queues: OrderedDict[str, deque[_Item]] = OrderedDict()
        self._next_try: dict[str, float] = {}
        self._cond = threading.Condition()
        self._stop = False
        self._session = new_session(tls)   # tls: vgrid_runtime.tls.TLSFiles, or None (plain HTTP)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def post(self, url: str, payload: dict, order_key: str = "") -> None:
        """Queue ``payload`` for a JSON POST to ``url`` after the earlier events of ``order_key``."""
        with self._cond:
            self._queues.setdefault(order_key, deque()).append(_Item(url, payload))
            self._next_try.setdefault(order_key, 0.0)
            self._cond.notify_all()

    def pending(self) -> list[dict]:
        """Undelivered events, ``{"url", "payload", "attempts", "last_error"}``, per key in order."""
        with self._cond:
            return [{"url": i.url, "payload": i.payload, "attempts": i.attempts,
                     "last_error": i.last_error} for q in self._queues.values() for i in q]

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

    def close(self) -> None:
        """Stop the delivery thread (at most one in-flight request finishes)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=self.timeout_s + 1)
        self._session.close()

    # -- delivery thread ----------------------------------------------------------------------

    def _due(self) -> tuple[str, _Item] | float | None:
        """The next (key, head item) due now, else seconds to the next due one, else None."""
        now = time.monotonic()
        soonest = None
        for key, q in self._queues.items():
            wait = self._next_try[key] - now
            if wait <= 0:
                return key, q[0]
            soonest = wait if soonest is None else min(soonest, wait)
        return soonest

    def _run(self) -> None:
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
            outcome = self._send(item)
            with self._cond:
                self._finish(key, item, outcome)
                self._cond.notify_all()

    def _send(self, item: _Item) -> str:
        """'ok', 'drop' or 'retry' for one POST attempt."""
        item.attempts += 1
        try:
            resp = self._session.post(item.url, json=item.payload, timeout=self.timeout_s)
        except requests.RequestException as exc:
            item.last_error = str(exc)
            return "retry"
        if resp.status_code < 300:
            return "ok"
        item.last_error = f"HTTP {resp.status_code}: {resp.text[:200]}"
        if resp.status_code >= 500 or resp.status_code in RETRYABLE:
            return "retry"
        return "drop"

    def _finish(self, key: str, item: _Item, outcome: str) -> None:
        q = self._queues[key]
        if outcome == "retry":
            delay = min(self.retry_max_s, self.retry_initial_s * 2 ** (item.attempts - 1))
            self._next_try[key] = time.monotonic() + delay
            log.info("outbox: %s to %s failed (%s), retry in %.1f s", key, item.url,
                     item.last_error, delay)
            return
        q.popleft()
        if outcome == "ok":
            self.delivered += 1
        else:
            log.warning("outbox: %s refused by %s: %s; dropped", key, item.url, item.last_error)
            self.dropped.append({"url": item.url, "payload": item.payload,
                                 "error": item.last_error})
        self._next_try[key] = 0.0
        if not q:
            del self._queues[key]
            del self._next_try[key]
