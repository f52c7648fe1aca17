"""Jobs received from peers, in the broker's database (table ``federation_received``).

One row per forwarded job accepted here: the local job key, the peer it came from and the
origin's dispatch key (unique together: a repeated forward answers the same job), where to
report (the origin's event callback, heartbeat and output upload URLs), the gateways passed,
the CPUs it holds of the peer's share, and ``relayed``: the last state reported to the origin
(the relay loop, :mod:`broker.federation.relay`, reports a change once it is acknowledged).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text, UniqueConstraint, select, update

#: Relayed states after which nothing more is reported.
FINAL = frozenset({"Done", "Aborted", "Cancelled"})

_meta = MetaData()
received_table = Table(
    "federation_received", _meta,
    Column("key", String(64), primary_key=True),
    Column("peer", String(128), nullable=False),
    Column("origin_key", String(128), nullable=False),
    Column("origin_id", Text, nullable=False),
    Column("callback_url", Text, nullable=False),
    Column("heartbeat_url", Text),
    Column("output_upload_url", Text),
    Column("gateways", Text, nullable=False),
    Column("hops", Integer, nullable=False),
    Column("cpus", Integer, nullable=False),
    Column("relayed", String(16), nullable=False),
    Column("created", Float, nullable=False),
    UniqueConstraint("peer", "origin_key", name="uq_federation_origin"),
)


@dataclass
class Received:
    key: str
    peer: str
    origin_key: str
    origin_id: str
    callback_url: str
    heartbeat_url: str | None
    output_upload_url: str | None
    gateways: list[str]
    hops: int
    cpus: int
    relayed: str
    created: float

    @property
    def final(self) -> bool:
        return self.relayed in FINAL


def _row(r) -> Received:
    d = dict(r._mapping)
    d["gateways"] = json.loads(d["gateways"])
    return Received(**d)


class ReceivedStore:
    """The ``federation_received`` table on ``engine`` (the broker's job database)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        _meta.create_all(engine)

    def add(self, rec: Received) -> None:
        d = {**rec.__dict__, "gateways": json.dumps(rec.gateways)}
        with self.engine.begin() as c:
            c.execute(received_table.insert().values(**d))

    def by_origin(self, peer: str, origin_key: str) -> Received | None:
        t = received_table
        with self.engine.connect() as c:
            r = c.execute(select(t).where(t.c.peer == peer, t.c.origin_key == origin_key)).first()
        return _row(r) if r else None

    def by_key(self, key: str) -> Received | None:
        """The row of the received job ``key`` (this broker's job key), or None."""
        t = received_table
        with self.engine.connect() as c:
            r = c.execute(select(t).where(t.c.key == key)).first()
        return _row(r) if r else None

    def open(self) -> list[Received]:
        """Rows whose final state has not been reported yet, oldest first."""
        t = received_table
        with self.engine.connect() as c:
            rows = c.execute(select(t).where(t.c.relayed.not_in(sorted(FINAL))).order_by(t.c.created)).all()
        return [_row(r) for r in rows]

    def used_cpus(self, peer: str) -> int:
        """CPUs of ``peer``'s jobs here not yet ended (its share in use)."""
        return sum(r.cpus for r in self.open() if r.peer == peer)

    def set_relayed(self, key: str, state: str) -> None:
        t = received_table
        with self.engine.begin() as c:
            c.execute(update(t).where(t.c.key == key).values(relayed=state))
