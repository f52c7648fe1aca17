"""The VOC pool in the CE agent's database: its nodes survive ``kill -9`` (issue 15).

Two SQLAlchemy tables in the CE agent's own database (the ``ce_jobs`` pattern of
``vwn_agents.ce_store``): ``voc_nodes``, one row per VOC node not gone (id, VO, slot, state,
``booted_at``/``ready_at``/``idle_since`` in the agent's clock seconds, the job it runs, jobs
run), and ``voc_pool`` (``serial``: the last node number, so ids never repeat; ``boots``: boots
so far). ``VOCStore.save(pool)`` writes the pool's live nodes in one transaction when they
changed since the last save (the CE agent calls it under the VOC lock after every change, before
the change is acted upon: a claim is stored before its VWN is created); ``load()`` gives them
back for :meth:`vwn_agents.voc.live.VOCScheduling.start` to adopt.
"""
from __future__ import annotations

from sqlalchemy import Column, Float, Integer, MetaData, String, Table, delete, select
from sqlalchemy.engine import Engine

from .pool import VOCNode, VOCNodeState, VOCPool

_meta = MetaData()
VOC_NODES = Table(
    "voc_nodes", _meta,
    Column("id", String(200), primary_key=True),
    Column("vo", String(200), nullable=False),
    Column("slot", String(600), nullable=False),
    Column("state", String(20), nullable=False),
    Column("booted_at", Float, nullable=False),
    Column("ready_at", Float),
    Column("idle_since", Float),
    Column("job", String(200)),
    Column("jobs_run", Integer, nullable=False, default=0),
)
VOC_POOL = Table(
    "voc_pool", _meta,
    Column("name", String(40), primary_key=True),
    Column("value", Integer, nullable=False),
)


def _rows(pool: VOCPool) -> tuple:
    return tuple((n.id, n.vo, n.slot, n.state.value, n.booted_at, n.ready_at, n.idle_since, n.job, n.jobs_run)
                 for n in pool.nodes.values())


class VOCStore:
    """The VOC tables in ``engine`` (created if missing). Not thread-safe by itself: the caller
    holds the VOC lock."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        _meta.create_all(engine)
        self._last: tuple | None = None

    def save(self, pool: VOCPool) -> bool:
        """Store ``pool``'s live nodes, serial and boots (committed when this returns); False
        when nothing changed since the last save (nothing written)."""
        rows = (_rows(pool), pool.serial, pool.boots)
        if rows == self._last:
            return False
        with self.engine.begin() as conn:
            conn.execute(delete(VOC_NODES))
            for r in rows[0]:
                conn.execute(VOC_NODES.insert().values(
                    id=r[0], vo=r[1], slot=r[2], state=r[3], booted_at=r[4], ready_at=r[5],
                    idle_since=r[6], job=r[7], jobs_run=r[8]))
            conn.execute(delete(VOC_POOL))
            conn.execute(VOC_POOL.insert(), [{"name": "serial", "value": pool.serial},
                                             {"name": "boots", "value": pool.boots}])
        self._last = rows
        return True

    def load(self) -> tuple[list[VOCNode], int, int]:
        """``(nodes, serial, boots)`` as last saved (``([], 0, 0)`` for a new database)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(VOC_NODES)).mappings().all()
            meta = dict(conn.execute(select(VOC_POOL.c.name, VOC_POOL.c.value)).all())
        nodes = [VOCNode(r["id"], r["vo"], r["slot"], r["booted_at"], VOCNodeState(r["state"]),
                         ready_at=r["ready_at"], idle_since=r["idle_since"], job=r["job"],
                         jobs_run=r["jobs_run"] or 0) for r in rows]
        return nodes, int(meta.get("serial", 0)), int(meta.get("boots", 0))
