"""Bulk state transitions of the job store: one UPDATE for a set of jobs (issue 12).

The matcher moves thousands of jobs per pass (Waiting -> Ready when it claims them, Ready ->
Scheduled per CE once the CE accepted them, Ready -> Waiting when nothing matched yet). One
transaction per job costs milliseconds of store work; here a set of jobs changes with one
``UPDATE jobs ... WHERE key IN (...) AND state = <old> RETURNING key`` and their history rows
are inserted with one multi-row ``INSERT`` (in chunks of :data:`CHUNK` keys: SQLite binds at
most 32,766 parameters per statement), all in one transaction.

The state guard makes a bulk transition as safe as :meth:`JobStore.transition`: a job whose
state changed meanwhile (cancelled, claimed by another matcher worker) is not in the answer
and is left untouched; the transition table is checked once for ``old -> new`` and an illegal
change raises :class:`vgrid_runtime.states.IllegalTransition` before anything is written.

:class:`BulkTransitions` is a mixin of :class:`broker.db.JobStore` (which names its row
classes ``Row`` and ``History``), so this module does not import ``broker.db``.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Iterable, Sequence

from sqlalchemy import and_, bindparam, delete, func, insert, or_, select, update

from vgrid_runtime.job_states import JobState, check_transition

from .job_reader import row_reader

#: Keys per UPDATE / INSERT statement (5 bound parameters per history row).
CHUNK = 500

#: The columns a claim returns: what the matcher, the dispatch body and the record read of a
#: claimed job (``broker.matcher_worker``, ``broker.bulk_dispatch``); a claimed Job's other
#: fields are at their defaults (session 7: returning all ~40 columns and building them cost
#: ~10 µs per job of a 10,000-job claim).
CLAIM_COLUMNS = ("key", "jdl", "filename", "state", "submitted_at", "updated_at", "dispatch_attempts",
                 "kind", "parent_key", "owner_dn", "owner_vo", "owner_fqans", "attempt", "failed_ces",
                 "waiting_since", "last_failure", "dispatch_key", "match_class", "input_sandbox")


def _guard(table, state: JobState):
    """The state guard of a keyed bulk UPDATE, written ``state || '' = :state`` so that the
    planner finds the rows by their keys (primary key) and only checks the state: with a plain
    ``state = :state`` SQLite chose ix_jobs_state_order and visited every job in that state for
    each statement (10,000 Ready jobs x 324 per-CE UPDATEs: 10 ms a statement). Same meaning
    on PostgreSQL, whose planner takes the key either way."""
    return table.c.state.concat("") == state.value


def chunks(items: Sequence, size: int = CHUNK):
    """``items`` in consecutive slices of at most ``size``."""
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _placeholder(dialect) -> str | None:
    """The DB-API driver's positional parameter mark ("?" or "%s"), None for another style."""
    return {"qmark": "?", "format": "%s", "pyformat": "%s"}.get(dialect.paramstyle)


def _update_from_supported(dialect) -> bool:
    """``UPDATE ... FROM`` is in PostgreSQL and in SQLite from 3.33 (2020)."""
    if dialect.name == "sqlite":
        return getattr(dialect.dbapi, "sqlite_version_info", (0,)) >= (3, 33)
    return dialect.name == "postgresql"


def keyed_update(conn, table, sets: list[tuple[list[str], dict[str, Any]]], new: JobState, now: float,
                 expect: JobState, reason: str | None, increment: Iterable[str]) -> list[list[str]] | None:
    """The sets of :meth:`BulkTransitions.transition_sets` in **one** ``UPDATE ... FROM`` a
    ``VALUES`` list per :data:`CHUNK` jobs, in key order: each row of the list carries a job's
    key and its own set's field values (``WITH v(k, f0, ..) AS (VALUES ..) UPDATE jobs SET
    ce_id = CAST(v.f0 AS ...), .. FROM v WHERE jobs.key = v.k AND <state guard> RETURNING
    jobs.key``). Same meaning as one guarded UPDATE per set (a key named by two sets belongs
    to the first); returns the moved keys of each set, in the order given, or None when it
    does not apply (sets with different field names, a driver of another parameter style,
    SQLite < 3.33): the caller then runs one UPDATE per set.

    Why: a matcher pass records its jobs Scheduled per CE, so each per-CE UPDATE visits keys
    spread over the whole table (and over both state indexes); 324 such statements for 10,000
    jobs cost ~21 us per job in SQLite alone, the same rows visited in key order ~5 us
    (``benchmarks/broker_match.py``, docs/benchmarks.md "session 6")."""
    dialect = conn.dialect
    mark = _placeholder(dialect)
    names = sorted(sets[0][1])
    if mark is None or not _update_from_supported(dialect) or any(sorted(v) != names for _, v in sets):
        return None
    owner: dict[str, int] = {}
    for i, (keys, _) in enumerate(sets):
        for k in keys:
            owner.setdefault(k, i)
    q = dialect.identifier_preparer.quote
    name = q(table.name)
    assign = [f"{q('state')} = {mark}", f"{q('updated_at')} = {mark}"]
    fixed: list[Any] = [new.value, now]
    if reason is not None:
        assign.append(f"{q('reason')} = {mark}")
        fixed.append(reason)
    assign += [f"{q(c)} = {name}.{q(c)} + 1" for c in increment]
    assign += [f"{q(c)} = CAST(v.f{j} AS {table.c[c].type.compile(dialect=dialect)})" for j, c in enumerate(names)]
    columns = ", ".join(["k"] + [f"f{j}" for j in range(len(names))])
    row = "(" + ", ".join([mark] * (1 + len(names))) + ")"
    tail = (f" UPDATE {name} SET {', '.join(assign)} FROM v WHERE {name}.{q('key')} = v.k"
            f" AND {name}.{q('state')} || {mark} = {mark} RETURNING {name}.{q('key')}")
    per_set = [[v[c] for c in names] for _, v in sets]
    moved: set[str] = set()
    for part in chunks(sorted(owner)):
        params: list[Any] = []
        for k in part:
            params.append(k)
            params += per_set[owner[k]]
        sql = f"WITH v({columns}) AS (VALUES {', '.join([row] * len(part))}){tail}"
        moved.update(r[0] for r in conn.exec_driver_sql(sql, tuple(params + fixed + ["", expect.value])))
    return [[k for k in keys if k in moved and owner[k] == i] for i, (keys, _) in enumerate(sets)]


@lru_cache(maxsize=32)
def _claim_sql(dialect, table: str, kinds: int, after: bool) -> str:
    """The claim as one driver statement (SQLite >= 3.33; not PostgreSQL, see ``claim``):
    ``UPDATE jobs SET state, updated_at, claimed_by FROM (SELECT key ... WHERE state = Waiting
    AND kind IN (kinds) [AND after the cursor] ORDER BY submitted_at, key LIMIT n) AS pick
    WHERE jobs.key = pick.key AND <state guard> RETURNING CLAIM_COLUMNS``.
    Parameters, in order: Ready, now, owner, Waiting, each kind, [after's time, its time
    again, its key], the limit, "", Waiting. SQLite evaluates the subquery in FROM once (one
    set of at most ``limit`` keys; writers are serialised)."""
    q, ph = dialect.identifier_preparer.quote, _placeholder(dialect)
    t = q(table)
    key, at = q("key"), q("submitted_at")
    sub = (f"SELECT {key} FROM {t} WHERE {q('state')} = {ph} AND {q('kind')} IN ({', '.join([ph] * kinds)})"
           + (f" AND ({at} > {ph} OR ({at} = {ph} AND {key} > {ph}))" if after else "")
           + f" ORDER BY {at}, {key} LIMIT {ph}")
    return (f"UPDATE {t} SET {q('state')} = {ph}, {q('updated_at')} = {ph}, {q('claimed_by')} = {ph} "
            f"FROM ({sub}) AS pick WHERE {t}.{key} = pick.{key} AND {t}.{q('state')} || {ph} = {ph} "
            f"RETURNING {', '.join(f'{t}.{q(n)}' for n in CLAIM_COLUMNS)}")


def _claim_statement(table):
    """Waiting -> Ready of the keys ``:keys`` (an expanding parameter: built and compiled
    once, not per chunk), returning every column."""
    return (update(table).where(table.c.key.in_(bindparam("keys", expanding=True)), _guard(table, JobState.WAITING))
            .values(state=JobState.READY.value, updated_at=bindparam("now"), claimed_by=bindparam("owner"))
            .returning(*[table.c[n] for n in CLAIM_COLUMNS]))


class BulkTransitions:
    """Set-wise state changes of a job store (``self.Row``, ``self.History``, ``self._session``,
    ``self._values``, ``self._to_job`` come from :class:`broker.db.JobStore`)."""

    def transition_many(self, keys: Iterable[str], new: JobState, now: float, *, expect: JobState,
                        reason: str | None = None, increment: Iterable[str] = (), quiet: bool = False,
                        **fields: Any) -> list[str]:
        """Move every job of ``keys`` that is still in state ``expect`` to ``new`` and set
        ``fields`` (the same values for all; ``increment``: integer columns raised by 1, e.g.
        ``dispatch_attempts``); one history row ``(new, now, reason)`` per moved job.
        ``quiet=True`` (only Ready -> Waiting: a claim put back unmatched) writes no history
        row and removes the claim's own Ready row instead, so a job waiting for a matching CE
        keeps its history as it was rather than gaining two rows per matcher pass (the row's
        ``reason`` still says why it waits).

        Returns the keys that moved (in the order given); the others are no longer in
        ``expect`` (changed concurrently) or unknown, and are unchanged. One transaction;
        ``now`` in seconds of the broker's clock. Raises IllegalTransition (nothing written)
        when the transition table forbids ``expect -> new``, TypeError for an unknown field."""
        return self.transition_sets([(keys, fields)], new, now, expect=expect, reason=reason,
                                    increment=increment, quiet=quiet)[0]

    def transition_sets(self, sets: Iterable[tuple[Iterable[str], dict[str, Any]]], new: JobState,
                        now: float, *, expect: JobState, reason: str | None = None,
                        increment: Iterable[str] = (), quiet: bool = False) -> list[list[str]]:
        """:meth:`transition_many` for several sets of jobs at once, each ``(keys, fields)``
        with its own field values (e.g. the jobs accepted by each CE of a matcher pass, with
        that CE's ``ce_id`` and ``ce_url``): one UPDATE per set, all in one transaction.
        Returns the moved keys of each set, in order. Same errors."""
        sets = [(list(dict.fromkeys(keys)), self._values(fields)) for keys, fields in sets]
        check_transition(f"{sum(len(k) for k, _ in sets)} jobs", expect, new)
        if quiet and (expect, new) != (JobState.READY, JobState.WAITING):
            raise ValueError("quiet: only for claims put back (Ready -> Waiting)")
        table = self.Row.__table__
        common: dict[str, Any] = {"state": new.value, "updated_at": now}
        for name in increment:
            common[name] = table.c[name] + 1
        if reason is not None:
            common["reason"] = reason
        out: list[list[str]] = []

        def record(conn, moved: list[str]) -> None:   # the moved keys' history rows
            if quiet:
                self._unclaim(conn, moved)
            else:
                self._history(conn, moved, new, now, reason)

        with self.engine.begin() as c:     # Core statements: compiled once, cached
            if len(sets) > 1:
                keyed = keyed_update(c, table, sets, new, now, expect, reason, increment)
                if keyed is not None:
                    record(c, [k for moved in keyed for k in moved])
                    return keyed
            for keys, values in sets:
                moved: set[str] = set()
                for part in chunks(keys):
                    done = list(c.scalars(update(table).where(table.c.key.in_(part),
                                                              _guard(table, expect))
                                          .values(**values, **common).returning(table.c.key)))
                    moved.update(done)
                    record(c, done)
                out.append([k for k in keys if k in moved])
        return out

    def _unclaim(self, conn, keys: list[str]) -> None:
        """For claims put back unmatched (:meth:`transition_many` ``quiet``): delete each key's
        last history row where it is its claim's Ready row; one DELETE per chunk of keys."""
        table = self.History.__table__
        for part in chunks(keys):
            last = select(func.max(table.c.id)).where(table.c.key.in_(part)).group_by(table.c.key)
            conn.execute(delete(table).where(table.c.id.in_(last), table.c.state == JobState.READY.value))

    def _history(self, conn, keys: list[str], state: JobState, now: float, reason: str | None) -> None:
        """One INSERT statement for the history rows of ``keys`` (executemany of one
        prepared statement; SQLAlchemy batches it into multi-row VALUES where the driver
        gains from it)."""
        if not keys:
            return
        table = self.History.__table__
        value = state.value                      # once, not per row (an enum property)
        if conn.dialect.paramstyle == "qmark":   # SQLite: the driver's executemany of tuples,
            q = conn.dialect.identifier_preparer.quote   # without per-row parameter processing
            conn.exec_driver_sql(f"INSERT INTO {q(table.name)} ({q('key')}, {q('state')}, {q('time')}, "
                                 f"{q('reason')}) VALUES (?, ?, ?, ?)",
                                 [(k, value, now, reason) for k in keys])
            return
        conn.execute(insert(table), [{"key": k, "state": value, "time": now, "reason": reason} for k in keys])

    def claim(self, now: float, limit: int, kinds: Sequence[str] = ("job", "node"),
              after: tuple[float, str] | None = None, owner: str | None = None) -> list:
        """Atomically claim at most ``limit`` Waiting jobs of ``kinds`` for one matcher worker:
        Waiting -> Ready in one UPDATE (oldest first: ``(submitted_at, key)`` order, strictly
        after ``after`` when given: the cursor of a pass), their history rows in one INSERT.
        Returns the claimed jobs (:class:`broker.db.Job`, without history) in that order.
        ``owner``: the claiming broker instance (column ``claimed_by``, see
        :meth:`ready_claimed_by`).

        Atomic across workers and processes sharing the database: the UPDATE is guarded by
        ``state = 'Waiting'``, so a job is claimed by one worker only; on PostgreSQL the
        candidate rows are picked ``FOR UPDATE SKIP LOCKED`` so concurrent workers take
        disjoint batches instead of waiting for each other (SQLite serialises writers)."""
        check_transition("claimed jobs", JobState.WAITING, JobState.READY)
        Row = self.Row
        pick = (select(Row.key)
                .where(Row.state == JobState.WAITING.value, Row.kind.in_(list(kinds)))
                .order_by(Row.submitted_at, Row.key).limit(limit)
                .with_for_update(skip_locked=True))    # SQLite: no row locks, writers serialise
        if after is not None:
            pick = pick.where(or_(Row.submitted_at > after[0],
                                  and_(Row.submitted_at == after[0], Row.key > after[1])))
        table = Row.__table__
        with self.engine.begin() as c:
            if c.dialect.name == "sqlite" and _update_from_supported(c.dialect):
                # one statement, the driver's own: UPDATE ... FROM (the picked keys, evaluated
                # once) RETURNING the CLAIM_COLUMNS
                sql = _claim_sql(c.dialect, table.name, len(kinds), after is not None)
                params = [JobState.READY.value, now, owner, JobState.WAITING.value, *kinds]
                if after is not None:
                    params += [after[0], after[0], after[1]]
                params += [limit, "", JobState.WAITING.value]
                read = row_reader(self.JobClass, CLAIM_COLUMNS)   # by position, not by name
                jobs = [read(r) for r in c.exec_driver_sql(sql, tuple(params)).fetchall()]
            else:
                # two statements in one transaction: an UPDATE over "key IN (SELECT ... LIMIT n)"
                # or "FROM (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)" may take more than n
                # rows on PostgreSQL (the subquery is re-run when a locked row is rechecked)
                keys = list(c.scalars(pick))
                jobs = []
                claim_rows = _claim_statement(table)
                for part in chunks(keys):
                    res = c.execute(claim_rows, {"keys": part, "now": now, "owner": owner})
                    read = row_reader(self.JobClass, tuple(res.keys()))
                    jobs += [read(r) for r in res.all()]
            self._history(c, [j.key for j in jobs], JobState.READY, now, None)
        jobs.sort(key=lambda j: (j.submitted_at, j.key))
        return jobs

    def store_classes(self, classes: Iterable[tuple[str, str, list[str]]]) -> None:
        """Write ``(key, match_class, input_sandbox names)`` of rows stored before those columns
        existed (the matcher computed them once from the JDL): one executemany, one transaction;
        a row that has them already keeps them."""
        rows = [{"k": k, "c": c, "i": json.dumps(list(i))} for k, c, i in classes]
        if not rows:
            return
        table = self.Row.__table__
        with self.engine.begin() as c:
            c.execute(update(table).where(table.c.key == bindparam("k"), table.c.match_class.is_(None))
                      .values(match_class=bindparam("c"), input_sandbox=bindparam("i")), rows)

    def requeue_expired_claims(self, cutoff: float, now: float, reason: str) -> list:
        """Ready jobs claimed before ``cutoff`` (``updated_at``, broker-clock seconds) back to
        Waiting (``claimed_by`` cleared, ``waiting_since`` kept), history ``(Waiting, now,
        reason)``; one transaction, guarded by the state and the time, so a job recorded
        meanwhile is untouched; PostgreSQL skips rows another transaction holds. Returns the
        moved jobs (:class:`broker.db.Job`, without history). :mod:`broker.claims`."""
        check_transition("expired claims", JobState.READY, JobState.WAITING)
        Row = self.Row
        table = Row.__table__
        pick = (select(Row.key).where(Row.state == JobState.READY.value, Row.updated_at < cutoff)
                .order_by(Row.submitted_at, Row.key).with_for_update(skip_locked=True))
        rows: list[dict] = []
        with self.engine.begin() as c:
            keys = list(c.scalars(pick))
            for part in chunks(keys):
                res = c.execute(update(table).where(table.c.key.in_(part),
                                                    _guard(table, JobState.READY),
                                                    table.c.updated_at < cutoff)
                                .values(state=JobState.WAITING.value, updated_at=now, claimed_by=None,
                                        reason=reason)
                                .returning(*table.c))
                names = tuple(res.keys())
                rows += [dict(zip(names, r)) for r in res]
            self._history(c, [r["key"] for r in rows], JobState.WAITING, now, reason)
        return [self._to_job(r, ()) for r in rows]

    def ready_claimed_by(self, owner: str | None) -> list[str]:
        """Keys of the Ready jobs claimed by broker instance ``owner`` or by no recorded
        instance (an older version, ``JobStore.transition``): what a restart of ``owner`` may
        requeue. Ready jobs of another broker sharing the database are its own business."""
        Row = self.Row
        with self._session() as s:
            return list(s.scalars(select(Row.key).where(
                Row.state == JobState.READY.value,
                or_(Row.claimed_by.is_(None), Row.claimed_by == owner))
                .order_by(Row.submitted_at, Row.key)))
