"""The receiving gateway reports forwarded jobs back to their origin, as a CE agent would.

Every ``federation_relay_s`` of the broker's clock, for each received job whose final state has
not been reported (:class:`~broker.federation.received.ReceivedStore`):

* a change of its CE-like state (Scheduled -> Running -> Done/Aborted/Cancelled) is posted to the
  origin's ``callback_url`` as the CE agent's event (``running``, ``done`` with ``exit_code``,
  ``aborted`` with ``outcome`` and ``reason``; a job cancelled here but not by the origin is
  ``aborted``, outcome ``cancelled``), with ``node`` = ``<node> at <peer CE>`` so the origin's
  record shows where it ran; before ``done``, every output sandbox file is PUT to the origin's
  ``output_upload_url`` (its write-once rule makes a repeat harmless);
* the jobs not ended are listed in a heartbeat to the origin's ``heartbeat_url`` (``url`` = this
  gateway's URL, interval ``federation_relay_s``): if this gateway dies, the origin marks them
  Stalled after 3 intervals and its resubmission rules take them back (docs/architecture.md,
  "Heartbeats and Stalled"); keys the origin answers ``unknown`` are cancelled here.

A report is recorded (``relayed``) only once the origin acknowledged it (2xx, or a 4xx: the
origin will never take it); otherwise it is retried on the next pass: nothing is lost across a
restart of either broker.
"""
from __future__ import annotations

import logging
import os
import threading

from vgrid_runtime.httpclient import ServiceClient, ServiceError
from vgrid_runtime.storage import log_failure
from vwn_agents.heartbeats import HeartbeatClient, HeartbeatError
from vwn_agents.sandbox import SandboxClient

from ..transfers import BrokerError
from .gateway import CE_STATE
from .glue import gateway_ce_id
from .peers import GATEWAY_PATH

log = logging.getLogger("vgrid.broker.federation")


class EventClient(ServiceClient):
    """Posts one event to an origin's ``callback_url`` (the broker's ``POST /jobs/<key>/events``)."""

    def post(self, event: dict) -> dict:
        return self._call("POST", "", json=event)


class Relay:
    """The report loop of federation ``fed`` (``start``/``stop``; ``run_once`` for one pass)."""

    def __init__(self, fed) -> None:
        self.fed = fed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="vgrid-federation-relay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:   # keep relaying whatever one pass did
                log_failure(log, "federation relay pass failed", exc)
            self._stop.wait(self.fed.relay_s)

    def run_once(self) -> int:
        """One pass; how many state changes were reported."""
        broker = self.fed.broker
        reported, beats = 0, {}
        for rec in self.fed.received.open():
            job = broker.get(rec.key)
            state = CE_STATE[job.state.value]
            if state != rec.relayed:
                if self._report(rec, job, state):
                    self.fed.received.set_relayed(rec.key, state)
                    reported += 1
                    rec.relayed = state
            if rec.relayed not in ("Done", "Aborted", "Cancelled") and rec.heartbeat_url:
                beats.setdefault(rec.heartbeat_url, []).append((rec, state))
        for url, recs in beats.items():
            self._beat(url, recs)
        return reported

    def _report(self, rec, job, state: str) -> bool:
        fed = self.fed
        where = f"{job.node or '?'} at {job.ce_id or '?'} (peer job {fed.broker.job_id(job.key)})"
        event = {"job_id": rec.origin_id, "key": rec.origin_key, "node": where, "vwn": job.vwn,
                 "time": fed.broker.clock.now(), "ce": gateway_ce_id(fed.broker.settings.base_url)}
        if state == "Scheduled":
            return True
        if state == "Running":
            event["event"] = "running"
        elif state == "Done":
            if not self._upload_outputs(rec, job):
                return False
            event.update(event="done", exit_code=job.exit_code,
                         outcome=job.outcome.value if job.outcome else None)
        else:
            cancelled_here = state == "Cancelled"
            event.update(event="aborted", outcome=(job.outcome.value if job.outcome else None),
                         reason=f"at peer {fed.broker.settings.base_url}: "
                                f"{job.reason or ('cancelled there' if cancelled_here else 'aborted')}")
        try:
            EventClient(rec.callback_url, fed.broker.http, fed.timeout_s).post(event)
        except ServiceError as exc:
            if exc.answered:     # the origin refused it for good (e.g. the job ended there)
                log.warning("origin refused %s event of %s: %s", event["event"], rec.origin_id, exc)
                return True
            log.info("origin of %s not reached: %s (retried)", rec.origin_id, exc.brief())
            return False
        return True

    def _upload_outputs(self, rec, job) -> bool:
        if not rec.output_upload_url:
            return True
        client = SandboxClient(session=self.fed.broker.http, timeout_s=self.fed.timeout_s)
        try:
            names = self.fed.broker.output_files(job.key)
        except BrokerError:
            return True
        for name in names:
            fd = os.open(self.fed.broker.output_dir(job.key) / name, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                status = client.upload(f"{rec.output_upload_url}/{name}", fd)
            except ServiceError as exc:
                log.info("output %s of %s not uploaded: %s (retried)", name, rec.origin_id, exc.brief())
                return False
            finally:
                os.close(fd)
            if status >= 500:
                return False
        return True

    def _beat(self, url: str, recs) -> None:
        fed = self.fed
        base = fed.broker.settings.base_url.rstrip("/")
        body = {"ce": gateway_ce_id(base), "url": base + GATEWAY_PATH, "interval_s": fed.relay_s,
                "time": fed.broker.clock.now(),
                "jobs": [{"key": r.origin_key, "state": s, "node": None, "vwn": None, "silent_s": None}
                         for r, s in recs]}
        try:
            unknown = HeartbeatClient(url, fed.broker.http, fed.timeout_s).beat(body)
        except HeartbeatError as exc:
            log.info("heartbeat to %s failed: %s", url, exc.brief())
            return
        for r, _ in recs:
            if r.origin_key in unknown:   # the origin no longer wants this attempt
                fed.received.set_relayed(r.key, "Cancelled")
                try:
                    fed.broker.cancel(r.key)
                except BrokerError:
                    pass
