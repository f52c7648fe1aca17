"""Where a persistent ``Outbox`` keeps its undelivered events: table ``outbox`` of an agent's database.

One row per undelivered event (docs/architecture.md, "events"): ``id`` (insertion order, the
delivery order within an ``order_key``), ``box`` (the outbox's name, so several outboxes may
share a database), ``order_key``, ``url``, ``payload`` (JSON text), ``created``, ``attempts``,
``first_failure`` (clock time of the first failed attempt, None before; the give-up time counts
from it, also across restarts) and ``last_error``. A row is inserted before ``Outbox.post``
returns and deleted once the event is delivered or dropped, so an acknowledged event survives
``kill -9`` of the sender (SQLite WAL commit, ``vgrid_runtime.sqldb``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text, delete, insert, select, update
from sqlalchemy.engine import Engine

metadata = MetaData()

outbox_table = Table(
    "outbox", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("box", String(200), nullable=False, index=True),
    Column("order_key", String(300), nullable=False),
    Column("url", Text, nullable=False),
    Column("payload", Text, nullable=False),
    Column("created", Float, nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("first_failure", Float, nullable=True),
    Column("last_error", Text, nullable=True),
)


@dataclass
class StoredEvent:
    """One row of ``outbox`` as the outbox thread uses it."""

    id: int
    order_key: str
    url: str
    payload: dict
    attempts: int = 0
    first_failure: float | None = None
    last_error: str | None = None
    seq: int = 0                     # the outbox's queueing order (not stored)


class OutboxStore:
    """The rows of outbox ``box`` in ``engine`` (the table is created when missing)."""

    def __init__(self, engine: Engine, box: str) -> None:
        self.engine, self.box = engine, box
        metadata.create_all(engine, tables=[outbox_table])

    def add(self, order_key: str, url: str, payload: dict, now: float) -> int:
        """Insert one event (committed when this returns); its row id."""
        with self.engine.begin() as conn:
            res = conn.execute(insert(outbox_table).values(
                box=self.box, order_key=order_key, url=url, payload=json.dumps(payload),
                created=now, attempts=0))
            return int(res.inserted_primary_key[0])

    def failed(self, ev: StoredEvent) -> None:
        """Record a failed attempt (attempts, first_failure, last_error)."""
        with self.engine.begin() as conn:
            conn.execute(update(outbox_table).where(outbox_table.c.id == ev.id).values(
                attempts=ev.attempts, first_failure=ev.first_failure, last_error=ev.last_error))

    def remove(self, row_id: int) -> None:
        """Delete a delivered or dropped event."""
        with self.engine.begin() as conn:
            conn.execute(delete(outbox_table).where(outbox_table.c.id == row_id))

    def load(self) -> list[StoredEvent]:
        """Every undelivered event of this box, oldest first (an unreadable payload becomes
        ``{"unreadable": text}``, still delivered: nothing is silently lost)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(outbox_table).where(outbox_table.c.box == self.box)
                                .order_by(outbox_table.c.id)).all()
        out = []
        for r in rows:
            try:
                payload = json.loads(r.payload)
            except ValueError:
                payload = {"unreadable": r.payload}
            out.append(StoredEvent(r.id, r.order_key, r.url, payload, r.attempts or 0,
                                   r.first_failure, r.last_error))
        return out
