"""Heartbeats from an agent to the services that gave it work (docs/architecture.md, contracts 3-5).

A node agent heartbeats to every ``heartbeat_url`` its VWN requests carried (``<ce>/node-heartbeats``)
and a CE agent may do the same towards the broker (``<broker>/heartbeats``): every ``interval_s``
seconds, ``Heartbeats`` POSTs ``build(url)`` (a JSON object) to each target URL and hands the
answer's ``"unknown"`` list to ``on_unknown(url, sent_body, unknown)``, whose business it is to
stop what the receiver no longer knows. A failure (no answer, HTTP error, an answer without
``unknown``) is logged at most once per URL per minute and never stops the loop; the next beat
is the retry. ``status()`` shows each target's last success (clock time) and last error.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from vgrid_runtime.clock import Clock, WallClock
from vgrid_runtime.throttle import Throttle
from vgrid_runtime.httpclient import ErrorKind, ServiceClient, ServiceError

log = logging.getLogger(__name__)
LOG_EVERY_S = 60.0


class HeartbeatError(ServiceError):
    """A heartbeat POST failed: ``kind``, ``status``, ``url`` (``ServiceError``)."""


class HeartbeatClient(ServiceClient):
    """POST one heartbeat to the full URL ``base_url`` (``.../node-heartbeats``, ``.../heartbeats``)."""

    Error = HeartbeatError

    def beat(self, body: dict) -> list:
        """POST ``body``; the answer's ``unknown`` list. Raises HeartbeatError (BAD_ANSWER when
        the answer has no list ``unknown``)."""
        answer = self._call("POST", "", json=body, required=("unknown",))
        if not isinstance(answer["unknown"], list):
            raise self.Error(ErrorKind.BAD_ANSWER, f"{self.base_url}: 'unknown' is not a list",
                             self.base_url)
        return answer["unknown"]


class Heartbeats:
    """The heartbeat loop (a daemon thread; ``interval_s`` <= 0: off, nothing is sent).

    ``build(url) -> dict``: the body for target ``url``; ``on_unknown(url, body, unknown)``;
    ``session``: a ``requests.Session`` (``vgrid_runtime.httpclient.new_session``, mutual TLS);
    ``timeout_s`` bounds one POST.
    """

    def __init__(self, interval_s: float, build: Callable[[str], dict],
                 on_unknown: Callable[[str, dict, list], None], session, clock: Clock | None = None,
                 name: str = "heartbeats", timeout_s: float = 5.0) -> None:
        self.interval_s = interval_s
        self.build, self.on_unknown = build, on_unknown
        self.session, self.clock, self.timeout_s = session, clock or WallClock(), timeout_s
        self._targets: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._logged = Throttle(LOG_EVERY_S)
        self.beats = 0                 # successful POSTs
        self.rounds = 0                # completed rounds over every target
        self._thread = None
        if interval_s > 0:
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    def add(self, url: str) -> None:
        """Heartbeat to ``url`` from now on (idempotent)."""
        with self._lock:
            self._targets.setdefault(url, {"url": url, "last_ok": None, "last_error": None})

    def targets(self) -> list[str]:
        with self._lock:
            return list(self._targets)

    def status(self) -> dict:
        """``{"interval_s", "targets": [{"url", "last_ok", "last_error"}]}``."""
        with self._lock:
            return {"interval_s": self.interval_s, "targets": [dict(t) for t in self._targets.values()]}

    def beat_now(self) -> None:
        """One heartbeat to every target (what the loop does every ``interval_s``)."""
        for url in self.targets():
            body = self.build(url)
            client = HeartbeatClient(url, self.session, self.timeout_s)
            try:
                unknown = client.beat(body)
            except ServiceError as exc:
                self._failed(url, str(exc))
                continue
            with self._lock:
                self._targets[url].update(last_ok=self.clock.now(), last_error=None)
            self.beats += 1
            if unknown:
                try:
                    self.on_unknown(url, body, unknown)
                except Exception:  # noqa: BLE001 - never fatal to the loop
                    log.exception("heartbeat to %s: handling unknown %s failed", url, unknown)
        self.rounds += 1

    def _failed(self, url: str, error: str) -> None:
        with self._lock:
            if url in self._targets:
                self._targets[url]["last_error"] = error
        if self._logged.due(url):
            log.warning("heartbeat to %s failed (logged at most once a minute): %s", url, error)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat_now()
            except Exception:  # noqa: BLE001 - the loop must go on
                log.exception("heartbeat loop")

    def close(self) -> None:
        """Stop the loop (a beat in progress finishes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)
