"""The node agent's database: its VWNs, its VWN counter and its heartbeat targets.

Tables (created when missing; SQLite file ``<work_dir>/node.db`` by default, any SQLAlchemy URL
with ``db_url``; ``vgrid_runtime.sqldb``):

* ``vwns``: one row per VWN -- ``vwn`` id, ``key`` (the dispatch key, unique), ``request`` (the
  POST /vwns body, JSON), ``state``, the job wrapper's ``wrapper_pid`` and ``wrapper_start``
  (/proc/<pid>/stat field 22), the job's ``pid``, ``agent_pid`` (the agent that started it:
  its pool-account holder ``<agent_pid>.<vwn>``), ``home`` (the node cgroup directory
  ``<node>-<agent pid>`` holding its cgroups, null when uncapped), ``jail`` (account, work
  directory, private directory, limits; JSON), ``capped``, ``cap_reason``, ``cpu_caps`` (JSON
  ``[[t, fraction]]``), ``exit_code``, ``reason``, ``outcome``, ``created``, ``ended``,
  ``cpu_time_s``. Written before POST /vwns answers 201 and on every state change.
* ``node_meta``: ``name -> value``; ``vwn_counter/<node>`` keeps VWN ids unique across restarts.
* ``heartbeat_targets``: every ``heartbeat_url`` a VWN request carried (``node``, ``url``,
  ``node_url``: the URL the sender called this node agent by, ``added``).

Every row carries the node name: node agents sharing a work directory share the file.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from sqlalchemy import (BigInteger, Boolean, Column, Float, Integer, MetaData, String, Table, Text, delete,
                        insert, select, update)
from sqlalchemy.engine import Engine

from vgrid_runtime.outcomes import Outcome

from .confinement import Jail
from .pool_accounts import Account, Owner
from .vwn_model import VWN, VWNRequest
from .vwn_states import ACTIVE, VWNState

metadata = MetaData()

vwns_table = Table(
    "vwns", metadata,
    Column("vwn", String(200), primary_key=True),
    Column("node", String(200), nullable=False, index=True),
    Column("key", String(300), nullable=False),
    Column("request", Text, nullable=False),
    Column("state", String(20), nullable=False),
    Column("wrapper_pid", Integer), Column("wrapper_start", BigInteger), Column("pid", Integer),
    Column("agent_pid", Integer), Column("home", String(300)), Column("jail", Text),
    Column("capped", Boolean, nullable=False), Column("cap_reason", Text),
    Column("cpu_caps", Text, nullable=False),
    Column("exit_code", Integer), Column("reason", Text), Column("outcome", String(40)),
    Column("created", Float, nullable=False), Column("ended", Float), Column("cpu_time_s", Float),
)
meta_table = Table("node_meta", metadata, Column("name", String(100), primary_key=True),
                   Column("value", Text, nullable=False))
targets_table = Table("heartbeat_targets", metadata,
                      Column("node", String(200), primary_key=True),
                      Column("url", String(1000), primary_key=True),
                      Column("node_url", String(1000)), Column("added", Float, nullable=False))


def jail_to_json(j: Jail | None) -> str | None:
    if j is None:
        return None
    return json.dumps({"owner": {"dn": j.owner.dn, "vo": j.owner.vo, "fqans": list(j.owner.fqans)},
                       "account": [j.account.name, j.account.uid, j.account.gid],
                       "workdir": str(j.workdir), "vdir": str(j.vdir), "memory_mb": j.memory_mb,
                       "pids_max": j.pids_max, "disk_quota_mb": j.disk_quota_mb,
                       "unconfined": j.unconfined})


def jail_from_json(vwn: str, text: str | None) -> Jail | None:
    if not text:
        return None
    d = json.loads(text)
    return Jail(vwn, Owner.from_json(d["owner"]), Account(*d["account"]), Path(d["workdir"]),
                Path(d["vdir"]), d.get("memory_mb"), d.get("pids_max"), d.get("disk_quota_mb"),
                dict(d.get("unconfined") or {}))


class NodeStore:
    """Node ``node``'s rows in ``engine`` (node agents sharing a work directory share the file,
    each sees its own rows). Every method commits before it returns."""

    def __init__(self, engine: Engine, node: str) -> None:
        self.engine, self.node = engine, node
        metadata.create_all(engine)

    # -- VWNs -----------------------------------------------------------------------------------

    def _values(self, v: VWN) -> dict:
        return {"state": v.state.value, "wrapper_pid": v.wrapper_pid,
                "wrapper_start": v.wrapper_start, "pid": v.pid, "agent_pid": v.agent_pid,
                "home": v.home, "jail": jail_to_json(v.jail), "capped": v.capped,
                "cap_reason": v.cap_reason, "cpu_caps": json.dumps(v.cpu_caps),
                "exit_code": v.exit_code, "reason": v.reason,
                "outcome": v.outcome.value if v.outcome else None, "created": v.created,
                "ended": v.ended, "cpu_time_s": v.cpu_time_s}

    def insert(self, v: VWN) -> None:
        """Record a new VWN."""
        with self.engine.begin() as conn:
            conn.execute(insert(vwns_table).values(vwn=v.vwn, node=self.node, key=v.request.key,
                                                   request=json.dumps(asdict(v.request)),
                                                   **self._values(v)))

    def save(self, v: VWN) -> None:
        """Record the VWN's current state (state, pids, caps, result)."""
        with self.engine.begin() as conn:
            conn.execute(update(vwns_table).where(vwns_table.c.vwn == v.vwn).values(**self._values(v)))

    def prune(self, before: float) -> int:
        """Delete the ended VWNs (done, aborted, cancelled) that ended before ``before``; how many."""
        ended = vwns_table.c.state.in_([s.value for s in VWNState if s not in ACTIVE])
        with self.engine.begin() as conn:
            res = conn.execute(delete(vwns_table).where((vwns_table.c.node == self.node) & ended
                                                        & (vwns_table.c.ended < before)))
            return res.rowcount or 0

    def load(self) -> list[VWN]:
        """Every VWN recorded, in creation order (``adopted`` is False: the caller decides)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(vwns_table).where(vwns_table.c.node == self.node)
                                .order_by(vwns_table.c.created, vwns_table.c.vwn)).all()
        out = []
        for r in rows:
            v = VWN(r.vwn, VWNRequest(**json.loads(r.request)), VWNState(r.state), r.created,
                    bool(r.capped), r.cap_reason, json.loads(r.cpu_caps), r.pid, r.exit_code,
                    r.reason, Outcome.parse(r.outcome), r.ended, r.cpu_time_s,
                    jail=jail_from_json(r.vwn, r.jail), wrapper_pid=r.wrapper_pid,
                    wrapper_start=r.wrapper_start, agent_pid=r.agent_pid, home=r.home)
            out.append(v)
        return out

    # -- the VWN counter --------------------------------------------------------------------------

    def next_number(self) -> int:
        """The next VWN number (1, 2, ...), never repeated in this database."""
        name = f"vwn_counter/{self.node}"
        with self.engine.begin() as conn:
            row = conn.execute(select(meta_table.c.value).where(meta_table.c.name == name)).first()
            n = int(row[0]) + 1 if row else 1
            if row:
                conn.execute(update(meta_table).where(meta_table.c.name == name).values(value=str(n)))
            else:
                conn.execute(insert(meta_table).values(name=name, value=str(n)))
            return n

    # -- heartbeat targets ------------------------------------------------------------------------

    def add_target(self, url: str, node_url: str | None, now: float) -> None:
        """Remember heartbeat URL ``url`` and the URL ``node_url`` its sender calls this node
        agent by (the latest one given)."""
        where = (targets_table.c.node == self.node) & (targets_table.c.url == url)
        with self.engine.begin() as conn:
            if conn.execute(select(targets_table.c.url).where(where)).first() is None:
                conn.execute(insert(targets_table).values(node=self.node, url=url,
                                                          node_url=node_url, added=now))
            else:
                conn.execute(update(targets_table).where(where).values(node_url=node_url))

    def targets(self) -> dict[str, str | None]:
        """Heartbeat URL -> the node agent's URL as that receiver knows it, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(targets_table.c.url, targets_table.c.node_url)
                                .where(targets_table.c.node == self.node)
                                .order_by(targets_table.c.added)).all()
        return {r[0]: r[1] for r in rows}
