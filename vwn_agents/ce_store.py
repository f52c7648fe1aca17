"""The CE agent's database: its jobs survive ``kill -9`` (docs/vwn.md, "CE agent state").

One SQLAlchemy table, ``ce_jobs``, in the CE agent's own database (``vgrid_runtime.sqldb``: the
SQLite file ``<state_dir>/ce.db`` or the ``db_url`` option), one row per job key: the broker's
dispatch body (``JobRequest``: job_id, jdl, owner, callback_url, heartbeat_url, ...), the CE job
state, node URL and name, VWN, CPU caps, exit code, reason, outcome, the lease request and the
lease's start attempts (``lease_attempts``, ``lease_node``: the VWN key of the last attempt is
``lease_engine.vwn_key(key, lease_attempts)``), ``lease_start`` and ``accepted`` (clock seconds).
The CE agent writes a row before ``POST /jobs`` answers 202 and on every change of the job
(``CEStore.save``, under the agent's lock); ``load`` gives every row back in arrival order.
The event outbox keeps its own table (``outbox``) in the same database.
"""
from __future__ import annotations

import dataclasses
import json

from sqlalchemy import Boolean, Column, Float, Integer, MetaData, String, Table, Text, select
from sqlalchemy.engine import Engine

from vgrid_runtime.outcomes import Outcome
from vgrid_runtime.sqldb import add_missing_columns

from .ce_jobs import ENDED, CEJob, CEJobState, JobRequest
from .ce_leases import lease_request_from_json
from .outbox import Outbox

_meta = MetaData()
CE_JOBS = Table(
    "ce_jobs", _meta,
    Column("key", String(200), primary_key=True),
    Column("seq", Integer, nullable=False),
    Column("job_id", Text, nullable=False),
    Column("request", Text, nullable=False),          # JSON of JobRequest
    Column("state", String(20), nullable=False),
    Column("node", String(200)),
    Column("node_url", String(500)),
    Column("vwn", String(200)),
    Column("cpu_caps", Text, nullable=False, default="[]"),
    Column("capped", Boolean),
    Column("cap_reason", Text),
    Column("exit_code", Integer),
    Column("reason", Text),
    Column("outcome", String(40)),
    Column("lease_req", Text),                         # JSON of JobLeaseRequest, or NULL
    Column("lease_attempts", Integer, nullable=False, default=0),
    Column("lease_node", String(500)),
    Column("lease_start", Float),
    Column("accepted", Float),
    Column("lease_ran_s", Float),
)

#: Columns added after the first version of the table: ``add_missing_columns``.
LATER_COLUMNS: dict[str, str] = {"lease_ran_s": "FLOAT"}


class CEStore:
    """The ``ce_jobs`` table in ``engine`` (created if missing). Thread-safe (one connection
    per call); the CE agent serialises writes of one job under its own lock."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        _meta.create_all(engine)
        if LATER_COLUMNS:
            add_missing_columns(engine, "ce_jobs", LATER_COLUMNS)
        with engine.connect() as conn:
            top = conn.execute(select(CE_JOBS.c.seq).order_by(CE_JOBS.c.seq.desc()).limit(1)).scalar()
        self._seq = int(top or 0)

    def save(self, job: CEJob) -> None:
        """Insert or update the row of ``job`` (committed when this returns)."""
        self.save_many([job])

    def save_many(self, jobs: list[CEJob]) -> None:
        """Insert or update the rows of ``jobs`` in one transaction (a bulk dispatch: committed
        when this returns, before the CE agent answers)."""
        with self.engine.begin() as conn:
            for job in jobs:
                row = _row(job)
                done = conn.execute(CE_JOBS.update().where(CE_JOBS.c.key == row["key"]).values(**row)).rowcount
                if not done:
                    self._seq += 1
                    conn.execute(CE_JOBS.insert().values(seq=self._seq, **row))

    def load(self, parse) -> list[CEJob]:
        """Every stored job in arrival order. ``parse(request)`` returns the parsed JDL of a job
        that has not ended (its VWN body is built from it); ended jobs get ``desc`` None."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(CE_JOBS).order_by(CE_JOBS.c.seq)).mappings().all()
        return [_job(r, parse) for r in rows]

    def close(self) -> None:
        self.engine.dispose()


def _row(job: CEJob) -> dict:
    return {"key": job.request.key, "job_id": job.request.job_id,
            "request": json.dumps(dataclasses.asdict(job.request)), "state": job.state.value,
            "node": job.node, "node_url": job.node_url, "vwn": job.vwn,
            "cpu_caps": json.dumps(job.cpu_caps), "capped": job.capped, "cap_reason": job.cap_reason,
            "exit_code": job.exit_code, "reason": job.reason,
            "outcome": job.outcome.value if job.outcome else None,
            "lease_req": json.dumps(job.lease_req.to_json()) if job.lease_req else None,
            "lease_attempts": job.lease_attempts, "lease_node": job.lease_node,
            "lease_start": job.lease_start, "accepted": job.accepted, "lease_ran_s": job.lease_ran_s}


def _job(r, parse) -> CEJob:
    fields = {f.name for f in dataclasses.fields(JobRequest)}
    request = JobRequest(**{k: v for k, v in json.loads(r["request"]).items() if k in fields})
    state = CEJobState(r["state"])
    desc = None if state in ENDED else parse(request)
    return CEJob(request, desc, state, node=r["node"], node_url=r["node_url"], vwn=r["vwn"],
                 cpu_caps=json.loads(r["cpu_caps"] or "[]"), capped=r["capped"], cap_reason=r["cap_reason"],
                 exit_code=r["exit_code"], reason=r["reason"], outcome=Outcome.parse(r["outcome"]),
                 lease_req=lease_request_from_json(json.loads(r["lease_req"])) if r["lease_req"] else None,
                 lease_attempts=r["lease_attempts"] or 0, lease_node=r["lease_node"],
                 lease_start=r["lease_start"], accepted=r["accepted"], lease_ran_s=r.get("lease_ran_s"))


def open_outbox(config, tls, engine):
    """The CE agent's event outbox (``vwn_agents.outbox.Outbox``) with its undelivered events
    in ``engine`` (table ``outbox``), bounded and giving up after ``config.outbox_give_up_s``
    (rows of box ``<ce_id>-events``: the name must stay the same across restarts)."""
    return Outbox(config.retry_initial_s, config.retry_max_s, name=f"{config.ce_id}-events", tls=tls,
                  engine=engine, give_up_s=config.outbox_give_up_s, max_items=config.outbox_max_items,
                  senders=config.outbox_senders)
