"""The job bookkeeping database (SQLAlchemy; SQLite file by default, PostgreSQL by URL).

One row per job in ``jobs`` with its JDL text, gLite state and where it runs; one row per state
change in ``job_history``. Every state change goes through :meth:`JobStore.transition`, which
checks the transition table (:mod:`vgrid_runtime.job_states`) and applies the change with a conditional
``UPDATE ... WHERE state = <old>`` so that two workers can never both win the same job.
"""
from __future__ import annotations

import heapq
import json
import secrets
from functools import partial
from dataclasses import dataclass, field
from typing import Any, Iterable

from sqlalchemy import (Boolean, Float, ForeignKey, Index, Integer, String, Text, and_, bindparam,
                        insert, or_, select, update)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from vgrid_runtime.sqldb import DBPool, add_missing_columns, open_engine

from .bulk_store import BulkTransitions
from vgrid_runtime.job_states import ENDED, JobState, check_transition
from vgrid_runtime.outcomes import Outcome

from .job_insert import plan_insert
from .job_reader import json_list as _json_list


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    __tablename__ = "jobs"

    key: Mapped[str] = mapped_column(String(32), primary_key=True)
    jdl: Mapped[str] = mapped_column(Text)
    filename: Mapped[str] = mapped_column(String(1024), default="<string>")
    state: Mapped[str] = mapped_column(String(16), index=True)
    submitted_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    ce_id: Mapped[str | None] = mapped_column(String(512), nullable=True)
    ce_url: Mapped[str | None] = mapped_column(String(512), nullable=True)
    node: Mapped[str | None] = mapped_column(String(256), nullable=True)
    vwn: Mapped[str | None] = mapped_column(String(256), nullable=True)
    cpu_caps: Mapped[str] = mapped_column(Text, default="[]")  # JSON [[t, fraction], ...]
    cpu_capped: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    cap_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    vwn_ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # node agent's clock
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    outcome: Mapped[str | None] = mapped_column(String(32), nullable=True)  # Outcome value
    stdout_head: Mapped[str | None] = mapped_column(Text, nullable=True)
    dispatch_attempts: Mapped[int] = mapped_column(Integer, default=0)
    # compound requests (gLite JDL spec Sections 3.3, 4, 5): the parent row has kind
    # "parametric" | "collection" | "dag"; its plain jobs have kind "node" and parent_key set.
    kind: Mapped[str] = mapped_column(String(16), default="job")
    parent_key: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    node_name: Mapped[str | None] = mapped_column(String(256), nullable=True)
    depends_on: Mapped[str] = mapped_column(Text, default="[]")  # JSON [sibling keys]
    # the owner, from the verified proxy of the submission (None in plain-HTTP mode)
    owner_dn: Mapped[str | None] = mapped_column(String(1024), nullable=True, index=True)
    owner_vo: Mapped[str | None] = mapped_column(String(256), nullable=True)
    owner_fqans: Mapped[str] = mapped_column(Text, default="[]")  # JSON [FQAN, ...]
    node_url: Mapped[str | None] = mapped_column(String(512), nullable=True)  # the VWN's node agent
    # the client's Idempotency-Key of the submission (first row of a request only) and its scope:
    # the owner's DN, "" in plain-HTTP mode (a unique index needs a non-NULL scope)
    idem_key: Mapped[str | None] = mapped_column(String(128), nullable=True)
    idem_scope: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    # resubmission (broker.resubmission, gLite deep/shallow): the attempt number (0 = first),
    # its dispatch key (``<key>`` for attempt 0, ``<key>.<n>`` after), the resubmissions used,
    # the CE ids the job failed on (JSON list, excluded from matching), when it last waited
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    dispatch_key: Mapped[str | None] = mapped_column(String(48), nullable=True)
    deep_count: Mapped[int] = mapped_column(Integer, default=0)
    shallow_count: Mapped[int] = mapped_column(Integer, default=0)
    failed_ces: Mapped[str] = mapped_column(Text, default="[]")
    waiting_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_failure: Mapped[str | None] = mapped_column(Text, nullable=True)  # of the last attempt
    # heartbeats (broker.heartbeats): when the job was last heard of (broker clock), and for a
    # Stalled job the state it came from and when it became Stalled
    last_heard: Mapped[float | None] = mapped_column(Float, nullable=True)
    stalled_from: Mapped[str | None] = mapped_column(String(16), nullable=True)
    stalled_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the broker instance whose matcher worker claimed the job (Ready): its restart requeues it
    claimed_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # stored at submission for the matcher (broker.taskqueues.match_fields): the job's class id
    # ("" = matched on its own) and its InputSandbox names (JSON list); NULL in older rows
    match_class: Mapped[str | None] = mapped_column(String(32), nullable=True)
    input_sandbox: Mapped[str | None] = mapped_column(Text, nullable=True)

    __table_args__ = (Index("ux_jobs_idempotency", "idem_scope", "idem_key", unique=True),
                      # every listing is ordered by (submitted_at, key): GET /jobs pages, the
                      # matcher's Waiting pass, the heartbeat sweeps (issue 12)
                      Index("ix_jobs_order", "submitted_at", "key"),
                      Index("ix_jobs_state_order", "state", "submitted_at", "key"),
                      Index("ix_jobs_owner_order", "owner_dn", "submitted_at", "key"),
                      Index("ix_jobs_parent_order", "parent_key", "submitted_at", "key"))


class CEHeartbeatRow(Base):
    """The last heartbeat of one CE agent (``POST /heartbeats``), keyed by its URL."""

    __tablename__ = "ce_heartbeats"

    url: Mapped[str] = mapped_column(String(512), primary_key=True)
    ce_id: Mapped[str] = mapped_column(String(512))
    interval_s: Mapped[float] = mapped_column(Float)
    last_heard: Mapped[float] = mapped_column(Float)   # broker clock, seconds


class HistoryRow(Base):
    __tablename__ = "job_history"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(32), ForeignKey("jobs.key"), index=True)
    state: Mapped[str] = mapped_column(String(16))
    time: Mapped[float] = mapped_column(Float)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)


@dataclass
class Job:
    """A job as the broker's logic sees it (a detached copy of its row and history)."""

    key: str
    jdl: str
    filename: str
    state: JobState
    submitted_at: float
    updated_at: float
    ce_id: str | None = None
    ce_url: str | None = None
    node: str | None = None
    vwn: str | None = None
    cpu_caps: list[list[float]] = field(default_factory=list)
    cpu_capped: bool | None = None
    cap_reason: str | None = None
    vwn_ended_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    outcome: Outcome | None = None
    stdout_head: str | None = None
    dispatch_attempts: int = 0
    kind: str = "job"
    parent_key: str | None = None
    node_name: str | None = None
    depends_on: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    owner_dn: str | None = None
    owner_vo: str | None = None
    owner_fqans: list[str] = field(default_factory=list)
    node_url: str | None = None
    attempt: int = 0
    deep_count: int = 0
    shallow_count: int = 0
    failed_ces: list[str] = field(default_factory=list)
    waiting_since: float | None = None
    last_failure: str | None = None
    last_heard: float | None = None
    stalled_from: str | None = None
    stalled_at: float | None = None
    dispatch_key_col: str | None = None
    match_class: str | None = None            # broker.taskqueues.class_id; None: not stored
    input_sandbox: list[str] | None = None    # the JDL's InputSandbox; None: not stored

    @property
    def dispatch_key(self) -> str:
        """The key the current attempt is dispatched under: the job key for attempt 0,
        ``<key>.<attempt>`` after (contract 7, docs/architecture.md)."""
        return self.dispatch_key_col or dispatch_key_of(self.key, self.attempt)

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def compound(self) -> bool:
        """A parametric job, collection or DAG: never matched itself, its nodes are."""
        return self.kind in ("parametric", "collection", "dag")


_JOBS, _HIST = JobRow.__table__, HistoryRow.__table__
#: one job's row, and its history in order (parameter ``k``: the key); built once, not per read
_JOB_ROW = select(_JOBS).where(_JOBS.c.key == bindparam("k"))
_HISTORY_OF = (select(_HIST.c.state, _HIST.c.time, _HIST.c.reason).where(_HIST.c.key == bindparam("k"))
               .order_by(_HIST.c.id))


_INSERT_JOBS, _INSERT_HISTORY = insert(_JOBS), insert(_HIST)   # built once, compiled once


class StaleState(RuntimeError):
    """The job changed state under us (another worker won the conditional UPDATE)."""


class UnknownJob(KeyError):
    """No job with that key."""


class DuplicateSubmission(Exception):
    """Another request stored a job with the same idempotency key and scope first
    (``args``: scope, key); nothing of this request was stored."""


def dispatch_key_of(key: str, attempt: int) -> str:
    """``key`` for attempt 0, ``"<key>.<attempt>"`` after ('.' is not in the key alphabet)."""
    return key if attempt <= 0 else f"{key}.{attempt}"


def job_key_of(dispatch_key: str) -> str:
    """The job key of a dispatch key (the part before the first '.')."""
    return dispatch_key.split(".", 1)[0]


def new_key() -> str:
    """A 22-character URL-safe job key (as the unique part of a gLite job id)."""
    return secrets.token_urlsafe(16)[:22]


_COLUMNS = ("ce_id", "ce_url", "node", "vwn", "cpu_capped", "cap_reason", "vwn_ended_at", "exit_code", "reason",
            "outcome", "stdout_head", "dispatch_attempts", "kind", "parent_key", "node_name",
            "owner_dn", "owner_vo", "node_url", "attempt", "deep_count", "shallow_count",
            "waiting_since", "last_failure", "last_heard", "stalled_from", "stalled_at")
_PLAIN_COLUMNS = tuple(c for c in _COLUMNS if c not in ("outcome", "attempt", "deep_count", "shallow_count"))




#: Columns added after the first release, created in older databases when opened.
_ADDED_COLUMNS = {"outcome": "VARCHAR(32)", "owner_dn": "VARCHAR(1024)", "owner_vo": "VARCHAR(256)",
                  "owner_fqans": "TEXT DEFAULT '[]'", "node_url": "VARCHAR(512)",
                  "idem_key": "VARCHAR(128)", "idem_scope": "VARCHAR(1024)",
                  "attempt": "INTEGER DEFAULT 0", "dispatch_key": "VARCHAR(48)",
                  "deep_count": "INTEGER DEFAULT 0", "shallow_count": "INTEGER DEFAULT 0",
                  "failed_ces": "TEXT DEFAULT '[]'", "waiting_since": "FLOAT", "last_failure": "TEXT",
                  "last_heard": "FLOAT", "stalled_from": "VARCHAR(16)", "stalled_at": "FLOAT",
                  "claimed_by": "VARCHAR(64)", "match_class": "VARCHAR(32)", "input_sandbox": "TEXT"}
#: Indexes on added columns (``create_all`` makes them only with a new table).
_ADDED_INDEXES = ("CREATE UNIQUE INDEX IF NOT EXISTS ux_jobs_idempotency ON jobs (idem_scope, idem_key)",
                  "CREATE INDEX IF NOT EXISTS ix_jobs_order ON jobs (submitted_at, key)",
                  "CREATE INDEX IF NOT EXISTS ix_jobs_state_order ON jobs (state, submitted_at, key)",
                  "CREATE INDEX IF NOT EXISTS ix_jobs_owner_order ON jobs (owner_dn, submitted_at, key)",
                  "CREATE INDEX IF NOT EXISTS ix_jobs_parent_order ON jobs (parent_key, submitted_at, key)")


class JobStore(BulkTransitions):
    """Repository of jobs over a SQLAlchemy engine. Thread-safe (one session per call).
    Set-wise changes (``transition_many``, ``claim``): :mod:`broker.bulk_store`.

    ``url`` is any SQLAlchemy URL, e.g. ``sqlite:////tmp/jobs.db`` or
    ``postgresql+psycopg2://user@127.0.0.1:5432/vgrid``. Tables are created when missing.
    """

    Row, History, JobClass = JobRow, HistoryRow, Job

    def __init__(self, url: str, pool: DBPool | None = None) -> None:
        self.pool = pool                       # vgrid_runtime.sqldb.DBPool (connections), or the default
        self.engine = open_engine(url, pool)
        Base.metadata.create_all(self.engine)
        add_missing_columns(self.engine, "jobs", _ADDED_COLUMNS, _ADDED_INDEXES)
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    # -- reading -------------------------------------------------------------------------------
    def _to_job(self, row: JobRow, history: Iterable[HistoryRow]) -> Job:
        g = row.__getitem__ if isinstance(row, dict) else partial(getattr, row)   # dict: bulk claims
        return Job(key=g("key"), jdl=g("jdl"), filename=g("filename"), state=JobState(g("state")),
                   submitted_at=g("submitted_at"), updated_at=g("updated_at"),
                   cpu_caps=json.loads(g("cpu_caps") or "[]"), depends_on=_json_list(g("depends_on")),
                   owner_fqans=_json_list(g("owner_fqans")), failed_ces=_json_list(g("failed_ces")),
                   dispatch_key_col=g("dispatch_key"),
                   history=[{"state": h.state, "time": h.time, "reason": h.reason} for h in history],
                   **{c: g(c) for c in _PLAIN_COLUMNS},
                   attempt=g("attempt") or 0, deep_count=g("deep_count") or 0,
                   shallow_count=g("shallow_count") or 0,
                   outcome=Outcome.parse(g("outcome")), match_class=g("match_class"),
                   input_sandbox=None if g("input_sandbox") is None else _json_list(g("input_sandbox")))

    def get(self, key: str) -> Job:
        """The job with ``key``; :class:`UnknownJob` if there is none."""
        with self.engine.connect() as c:   # Core rows (no ORM identity map): ~3x cheaper
            row = c.execute(_JOB_ROW, {"k": key}).first()
            if row is None:
                raise UnknownJob(key)
            return self._to_job(row, c.execute(_HISTORY_OF, {"k": key}))

    def find_idempotent(self, scope: str, idem_key: str) -> Job | None:
        """The job stored with Idempotency-Key ``idem_key`` in ``scope`` (owner DN or ""), or None."""
        with self._session() as s:
            key = s.scalar(select(JobRow.key).where(JobRow.idem_scope == scope,
                                                    JobRow.idem_key == idem_key))
        return self.get(key) if key is not None else None

    def list(self, states: Iterable[JobState] | None = None, keys: Iterable[str] | None = None,
             parent: str | None = None, kinds: Iterable[str] | None = None,
             history: bool = True, owner_dn: str | None = None) -> list[Job]:
        """Jobs in submission order, optionally only those in ``states``, with ``keys``, whose
        parent is ``parent``, of ``kinds``, or owned by ``owner_dn``; ``history=False`` skips
        loading the state history (the matcher's every-pass queries do not need it)."""
        with self._session() as s:
            q = select(JobRow)
            if keys is not None:
                q = q.where(JobRow.key.in_(list(keys)))
            if parent is not None:
                q = q.where(JobRow.parent_key == parent)
            if kinds is not None:
                q = q.where(JobRow.kind.in_(list(kinds)))
            if owner_dn is not None:
                q = q.where(JobRow.owner_dn == owner_dn)
            q = q.order_by(JobRow.submitted_at, JobRow.key)
            if states is None:
                rows = list(s.scalars(q))
            else:   # one search of ix_jobs_state_order per state, already in order, merged: for
                # "state IN (...)" SQLite would rather walk the whole ix_jobs_order (every job)
                rows = list(heapq.merge(*(list(s.scalars(q.where(JobRow.state == st.value)))
                                          for st in dict.fromkeys(states)),
                                        key=lambda r: (r.submitted_at, r.key)))
            hist: dict[str, list[HistoryRow]] = {r.key: [] for r in rows}
            if rows and history:
                for h in s.scalars(select(HistoryRow).where(HistoryRow.key.in_(list(hist)))
                                   .order_by(HistoryRow.id)):
                    hist[h.key].append(h)
            return [self._to_job(r, hist[r.key]) for r in rows]

    def page(self, *, states: Iterable[JobState] | None = None, owner_dn: str | None = None,
             since: float | None = None, keys: Iterable[str] | None = None,
             after: tuple[float, str] | None = None, limit: int = 100
             ) -> tuple[list[Job], tuple[float, str] | None]:
        """One page of ``GET /jobs`` (:mod:`broker.listing`): at most ``limit`` jobs in
        ``(submitted_at, key)`` order strictly after ``after``, filtered like :meth:`list`
        (``since``: submitted at or after, s), with history; and the ``(submitted_at, key)``
        to continue after, None on the last page. Served by the ``ix_jobs_*_order`` indexes."""
        J = _JOBS.c       # Core rows, not ORM objects: the page's cost was the ORM (issue 12)
        q = select(_JOBS).order_by(J.submitted_at, J.key).limit(limit + 1)
        if states is not None:
            q = q.where(J.state.in_([st.value for st in states]))
        if owner_dn is not None:
            q = q.where(J.owner_dn == owner_dn)
        if since is not None:
            q = q.where(J.submitted_at >= since)
        if keys is not None:
            q = q.where(J.key.in_(list(keys)))
        if after is not None:
            t, k = after
            q = q.where(or_(J.submitted_at > t, and_(J.submitted_at == t, J.key > k)))
        with self.engine.connect() as c:
            rows = c.execute(q).all()
            more = len(rows) > limit
            rows = rows[:limit]
            hist: dict[str, list] = {r.key: [] for r in rows}
            if rows:              # one query for the page's history (ix on job_history.key)
                for h in c.execute(select(_HIST.c.key, _HIST.c.state, _HIST.c.time, _HIST.c.reason)
                                   .where(_HIST.c.key.in_(list(hist))).order_by(_HIST.c.id)):
                    hist[h.key].append(h)
            jobs = [self._to_job(r, hist[r.key]) for r in rows]
        last = rows[-1] if more else None
        return jobs, (last.submitted_at, last.key) if last else None

    # -- writing -------------------------------------------------------------------------------
    def create(self, jdl: str, filename: str, now: float, key: str | None = None, kind: str = "job",
               parent_key: str | None = None, node_name: str | None = None,
               depends_on: list[str] | None = None) -> Job:
        """Store a new job in state Submitted and return it."""
        return self.create_many([dict(jdl=jdl, filename=filename, key=key, kind=kind,
                                      parent_key=parent_key, node_name=node_name,
                                      depends_on=depends_on)], now)[0]

    def create_many(self, specs: list[dict[str, Any]], now: float) -> list[Job]:
        """Store several jobs (a compound request and its nodes) in one transaction, all
        Submitted. Each spec has ``jdl``, ``filename`` and optionally ``key``, ``kind``,
        ``parent_key``, ``node_name``, ``depends_on``, ``owner`` (``{"dn", "vo", "fqans"}``),
        ``idempotency`` (``(scope, key)``, unique per scope), ``state`` (Submitted, or Waiting
        to queue it in the same transaction: history Submitted then Waiting); parents must come
        before their nodes. DuplicateSubmission (nothing stored) when a job with the same ``idempotency``
        exists already (checked by the unique index, so two concurrent requests cannot both win).
        Returns the stored jobs in order, built from what was written (:mod:`broker.job_insert`:
        no read back)."""
        try:
            plan = plan_insert(specs, now, new_key)
            with self.engine.begin() as c:         # two multi-row INSERTs, no read back, no ORM
                c.execute(_INSERT_JOBS, plan.rows)
                c.execute(_INSERT_HISTORY, plan.history)
        except IntegrityError:
            idem = [tuple(sp["idempotency"]) for sp in specs if sp.get("idempotency")]
            if idem and self.find_idempotent(*idem[0]) is not None:
                raise DuplicateSubmission(*idem[0]) from None
            raise
        return [Job(**kw) for kw in plan.jobs]

    def transition(self, key: str, new: JobState, now: float, reason: str | None = None,
                   expect: JobState | None = None, **fields: Any) -> Job:
        """Move job ``key`` to ``new`` (checked against the transition table) and set ``fields``.

        ``expect`` pins the state the caller believes the job is in; if the row is not in that
        state any more, :class:`StaleState` is raised and nothing changes (atomic claim). Raises
        :class:`vgrid_runtime.states.IllegalTransition` for a change the table forbids, UnknownJob.
        """
        old = expect or self.get(key).state
        check_transition(key, old, new)
        values = self._values(fields)
        values.update(state=new.value, updated_at=now)
        if reason is not None:
            values["reason"] = reason
        with self._session.begin() as s:
            res = s.execute(update(JobRow).where(JobRow.key == key, JobRow.state == old.value)
                            .values(**values))
            if res.rowcount != 1:
                raise StaleState(f"job {key} is no longer {old.value}")
            s.add(HistoryRow(key=key, state=new.value, time=now, reason=reason))
        return self.get(key)

    def update_fields(self, key: str, now: float, **fields: Any) -> Job:
        """Set non-state fields (node, vwn, cpu_caps, ...) of job ``key``."""
        values = self._values(fields)
        values["updated_at"] = now
        with self._session.begin() as s:
            res = s.execute(update(JobRow).where(JobRow.key == key).values(**values))
            if res.rowcount != 1:
                raise UnknownJob(key)
        return self.get(key)

    def note(self, key: str, now: float, reason: str, **fields: Any) -> Job:
        """Add a history row (the job's current state, ``now``, ``reason``) without changing the
        state, and set ``fields``: e.g. its VWN suspended / resumed. UnknownJob."""
        job = self.update_fields(key, now, **fields)
        with self._session.begin() as s:
            s.add(HistoryRow(key=key, state=job.state.value, time=now, reason=reason))
        return self.get(key)

    def heard(self, times: dict[str, float]) -> None:
        """Set ``last_heard`` of each job key in ``times`` to its time (broker clock, s): what
        its CE reported last (an earlier time too: the CE knows when its node last spoke); one
        transaction, ``updated_at`` untouched; unknown keys ignored."""
        if not times:
            return
        with self._session.begin() as s:
            for key, t in times.items():
                s.execute(update(JobRow).where(JobRow.key == key).values(last_heard=t))

    # -- CE heartbeats -------------------------------------------------------------------------
    def record_ce_heartbeat(self, url: str, ce_id: str, interval_s: float, now: float) -> None:
        """Store (insert or replace) the last heartbeat of the CE agent at ``url``."""
        with self._session.begin() as s:
            row = s.get(CEHeartbeatRow, url)
            if row is None:
                s.add(CEHeartbeatRow(url=url, ce_id=ce_id, interval_s=interval_s, last_heard=now))
            else:
                row.ce_id, row.interval_s, row.last_heard = ce_id, interval_s, now

    def ce_heartbeats(self) -> dict[str, dict[str, Any]]:
        """``{url: {"ce", "interval_s", "last_heard"}}`` of every CE agent that sent a heartbeat."""
        with self._session() as s:
            return {r.url: {"ce": r.ce_id, "interval_s": r.interval_s, "last_heard": r.last_heard}
                    for r in s.scalars(select(CEHeartbeatRow))}

    @staticmethod
    def _values(fields: dict[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, value in fields.items():
            if name == "cpu_caps":
                values["cpu_caps"] = json.dumps(value)
            elif name == "failed_ces":
                values["failed_ces"] = json.dumps(list(value))
            elif name == "dispatch_key":
                values["dispatch_key"] = value
            elif name == "outcome":
                code = Outcome.parse(value)
                values["outcome"] = code.value if code else None
            elif name in _COLUMNS:
                values[name] = value
            else:
                raise TypeError(f"unknown job field {name!r}")
        return values
