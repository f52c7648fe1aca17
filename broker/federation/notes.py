"""Notes of a received job passed on to its origin: ``suspended``, ``resumed``, ``requeued``
(issue 15; seed 002: an external lease preempted by a local request at the receiving site).

The relay (:mod:`.relay`) reports a received job's *state changes*; a preempted suspendable
lease does not change the job's state at the broker -- its CE agent sends a note event
(``suspended``/``resumed`` of a frozen VWN, ``requeued`` when its VWN was deleted and it
restarts later) that the broker records in the history. :class:`NoteRelay` wraps the receiving
broker's ``handle_event``: after the broker applied a note event of a received job, the same
note goes to the origin's callback (the origin records it in the job's history, prefixed with
``at peer <url>``). Notes are best effort: posted once, in a thread (the CE agent's event is
not held up by the origin), a failure is logged; states and outcomes go through the relay,
which retries until acknowledged.
"""
from __future__ import annotations

import logging
import threading

from vgrid_runtime.httpclient import ServiceError

from .glue import gateway_ce_id
from .relay import EventClient

log = logging.getLogger("vgrid.broker.federation")

NOTE_EVENTS = frozenset({"suspended", "resumed", "requeued"})


class NoteRelay:
    """Installs itself as ``fed.broker.handle_event`` (same signature and result)."""

    def __init__(self, fed) -> None:
        self.fed = fed
        self.inner = fed.broker.handle_event
        fed.broker.handle_event = self.handle_event

    def handle_event(self, key: str, event: dict):
        job = self.inner(key, event)
        if event.get("event") in NOTE_EVENTS:
            rec = self.fed.received.by_key(key)
            if rec is not None and not rec.final:
                threading.Thread(target=self._post, args=(rec, job, dict(event)), daemon=True,
                                 name=f"federation-note-{key}").start()
        return job

    def _post(self, rec, job, event: dict) -> None:
        fed = self.fed
        base = fed.broker.settings.base_url
        note = {"job_id": rec.origin_id, "key": rec.origin_key, "event": event["event"],
                "node": f"{job.node or event.get('node') or '?'} at {job.ce_id or '?'} (peer job {fed.broker.job_id(job.key)})",
                "vwn": event.get("vwn"), "time": fed.broker.clock.now(), "ce": gateway_ce_id(base),
                "reason": f"at peer {base}: {event.get('reason') or event['event']}"}
        try:
            EventClient(rec.callback_url, fed.broker.http, fed.timeout_s).post(note)
        except ServiceError as exc:
            log.warning("note %s of %s not passed on to its origin: %s", event["event"], rec.origin_id, exc)
