"""Notes of a received job passed on to its origin: ``suspended``, ``resumed``, ``requeued``
(issue 15; seed 002: an external lease preempted by a local request at the receiving site).

The relay (:mod:`.relay`) reports a received job's *state changes*; a preempted suspendable
lease does not change the job's state at the broker -- its CE agent sends a note event
(``suspended``/``resumed`` of a frozen VWN, ``requeued`` when its VWN was deleted and it
restarts later) that the broker records in the history. :class:`NoteRelay` wraps the broker's
``handle_event`` on both sides:

* **at the receiving gateway** (the job is a received one): after the broker applied a note
  event, the note for the origin's callback is *stored* in a persistent outbox
  (:class:`vwn_agents.outbox.Outbox` named ``federation-notes``, table ``outbox`` of the broker's
  database) before ``handle_event`` returns -- so before the CE agent's event is acknowledged --
  and delivered in order per origin job, retried with backoff (``retry_initial_s`` doubling to
  ``retry_max_s``) on no answer, a timeout or 5xx, for ``give_up_s`` seconds; an origin's 4xx
  (e.g. the attempt is over there) drops it. A ``kill -9`` of this broker or an origin that is
  down loses nothing: the outbox is reloaded at the next start.
* **at the origin**: each note carries a ``note_id``, derived from the CE agent's event (gateway
  URL, received job key, event kind, event time, VWN), so the same note sent twice -- the outbox
  delivers at least once, and a CE agent may repeat its event -- is recorded once: the broker
  writes ``[note <id>]`` into the history row of the note (:meth:`broker.service.Broker.handle_event`),
  and a note whose id is already in the job's history is acknowledged without being applied.
"""
from __future__ import annotations

import hashlib
import logging
import threading

from vwn_agents.outbox import Outbox

from .glue import gateway_ce_id

log = logging.getLogger("vgrid.broker.federation")

NOTE_EVENTS = frozenset({"suspended", "resumed", "requeued"})
OUTBOX_NAME = "federation-notes"


def note_id(base_url: str, key: str, event: dict) -> str:
    """The id of the note of ``event`` (a CE agent's note event of received job ``key``) at the
    gateway ``base_url``: 24 hex digits of SHA-256 over what identifies the event."""
    ident = f"{base_url}|{key}|{event.get('event')}|{event.get('time')}|{event.get('vwn')}|{event.get('key')}"
    return hashlib.sha256(ident.encode()).hexdigest()[:24]


def note_mark(nid: str) -> str:
    """The text a recorded note carries in its history row: ``[note <id>]``."""
    return f"[note {nid}]"


class NoteRelay:
    """Installs itself as ``fed.broker.handle_event`` (same signature and result); ``outbox``
    (module doc) is created from ``fed``'s knobs: ``note_retry_initial_s``, ``note_retry_max_s``,
    ``note_give_up_s`` (seconds of the broker's clock)."""

    def __init__(self, fed) -> None:
        self.fed = fed
        self.inner = fed.broker.handle_event
        fed.broker.handle_event = self.handle_event
        self._lock = threading.Lock()          # one note id checked and applied at a time
        self.outbox = Outbox(fed.note_retry_initial_s, fed.note_retry_max_s, timeout_s=fed.timeout_s,
                             name=OUTBOX_NAME, tls=fed.tls, engine=fed.broker.store.engine,
                             give_up_s=fed.note_give_up_s, clock=fed.broker.clock, senders=2)

    def handle_event(self, key: str, event: dict):
        nid = event.get("note_id")
        if event.get("event") in NOTE_EVENTS and isinstance(nid, str) and nid:
            with self._lock:                    # at the origin: once per note id
                job = self.fed.broker.get(key)
                if any(note_mark(nid) in (h.get("reason") or "") for h in job.history):
                    log.info("note %s of %s already recorded: not applied again", nid, key)
                    return job
                return self._pass_on(key, event, self.inner(key, event))
        return self._pass_on(key, event, self.inner(key, event))

    def _pass_on(self, key: str, event: dict, job):
        if event.get("event") in NOTE_EVENTS:
            rec = self.fed.received.by_key(key)
            if rec is not None and not rec.final:
                self.outbox.post(rec.callback_url, self._note(rec, job, event), order_key=rec.origin_key)
        return job

    def _note(self, rec, job, event: dict) -> dict:
        fed = self.fed
        base = fed.broker.settings.base_url
        return {"job_id": rec.origin_id, "key": rec.origin_key, "event": event["event"],
                "note_id": note_id(base, job.key, event),
                "node": f"{job.node or event.get('node') or '?'} at {job.ce_id or '?'} (peer job {fed.broker.job_id(job.key)})",
                "vwn": event.get("vwn"), "time": fed.broker.clock.now(), "ce": gateway_ce_id(base),
                "reason": f"at peer {base}: {event.get('reason') or event['event']}"}

    def pending(self) -> list[dict]:
        """Notes stored and not yet delivered (``Outbox.pending``)."""
        return self.outbox.pending()

    def close(self) -> None:
        """Stop delivering (undelivered notes stay stored for the next start)."""
        self.outbox.close()
