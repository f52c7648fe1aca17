"""The result store of ``vgrid sweep``: one SQLite file (SQLAlchemy), one row per run key.

Table ``runs``: ``key`` (the run's input hash, primary key), ``sweep``, ``configuration``,
``trace``, ``inject``, ``seed``, ``params`` (JSON: the run's names, options, workload, site),
``status`` (``done`` or ``failed``), ``result`` (JSON, ``sweepspec.RESULT_FIELDS``; null when
failed), ``error`` (the last failure's type and message), ``attempts`` (how many times a worker
started it, Dask's retries included), ``cpu_s`` and ``wall_s`` of the successful attempt,
``worker`` (the Dask worker's address) and ``stored_seq`` (the order rows were stored).

Each result is committed as it arrives (SQLite WAL, ``vgrid_runtime.sqldb``), so killing a
sweep loses at most the runs that were being computed; a restart reads the ``done`` keys and
computes only the others (failed runs are tried again). A ``done`` row is never rewritten.
"""
from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text, delete, func, insert, select, update
from sqlalchemy.exc import OperationalError

from vgrid_runtime.sqldb import open_engine, sqlite_url

metadata = MetaData()
runs_table = Table(
    "runs", metadata,
    Column("key", String(64), primary_key=True),
    Column("sweep", String(200), nullable=False),
    Column("configuration", String(200), nullable=False),
    Column("trace", String(500), nullable=False),
    Column("inject", String(500), nullable=False),
    Column("seed", Integer, nullable=False),
    Column("params", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("result", Text),
    Column("error", Text),
    Column("attempts", Integer, nullable=False, default=1),
    Column("cpu_s", Float),
    Column("wall_s", Float),
    Column("worker", String(200)),
    Column("stored_seq", Integer, nullable=False),
)


class SweepStore:
    """``SweepStore(path)`` opens (creating) the SQLite file ``path``; ``url=`` any SQLAlchemy URL."""

    def __init__(self, path: str | Path | None = None, url: str | None = None) -> None:
        if (path is None) == (url is None):
            raise ValueError("give path or url")
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.engine = open_engine(url or sqlite_url(path))
        try:
            metadata.create_all(self.engine)
        except OperationalError:        # another process created the table between check and create
            metadata.create_all(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def done_keys(self) -> set[str]:
        with self.engine.connect() as c:
            return {r[0] for r in c.execute(select(runs_table.c.key).where(runs_table.c.status == "done"))}

    def _next_seq(self, conn) -> int:
        return (conn.execute(select(func.max(runs_table.c.stored_seq))).scalar() or 0) + 1

    def put(self, run, status: str, result: dict | None = None, error: str = "", attempts: int = 1,
            worker: str = "", key: str | None = None) -> bool:
        """Store the outcome of ``run`` (a ``sweepspec.SimRun``) under ``key`` (default
        ``run.key()``; the runner passes the key it planned with, so an input file changed during
        the sweep cannot relabel a result); returns False (and changes nothing) if a ``done`` row
        for the key exists already."""
        key = key or run.key()
        p = run.params()
        values = {"sweep": p["sweep"], "configuration": p["configuration"], "trace": p["trace"],
                  "inject": p["inject"], "seed": p["seed"], "params": json.dumps(p, sort_keys=True),
                  "status": status, "result": json.dumps(result) if result is not None else None,
                  "error": error or None, "attempts": attempts, "worker": worker or None,
                  "cpu_s": (result or {}).get("cpu_s"), "wall_s": (result or {}).get("wall_s")}
        with self.engine.begin() as c:
            old = c.execute(select(runs_table.c.status, runs_table.c.attempts)
                            .where(runs_table.c.key == key)).first()
            if old is not None and old.status == "done":
                return False
            values["stored_seq"] = self._next_seq(c)
            if old is None:
                c.execute(insert(runs_table).values(key=key, **values))
            else:
                values["attempts"] = old.attempts + attempts
                c.execute(update(runs_table).where(runs_table.c.key == key).values(**values))
        return True

    def prune(self, keep: set[str]) -> int:
        """Delete every row whose key is not in ``keep`` (e.g. the runs of an older
        ``config.COMPAT_RULES``, which no spec plans any more; a SQLite file is vacuumed after);
        returns how many went."""
        with self.engine.begin() as c:
            gone = [r[0] for r in c.execute(select(runs_table.c.key)) if r[0] not in keep]
            for i in range(0, len(gone), 500):
                c.execute(delete(runs_table).where(runs_table.c.key.in_(gone[i:i + 500])))
        if gone and self.engine.dialect.name == "sqlite":    # give the pages back: the file shrinks
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                c.exec_driver_sql("VACUUM")
        return len(gone)

    def rows(self, keys=None, status: str | None = None) -> list[dict]:
        """Rows as dicts (``params`` and ``result`` decoded), in stored order; only ``keys`` if
        given, only ``status`` if given."""
        q = select(runs_table).order_by(runs_table.c.stored_seq)
        if status:
            q = q.where(runs_table.c.status == status)
        with self.engine.connect() as c:
            out = []
            for r in c.execute(q).mappings():
                if keys is not None and r["key"] not in keys:
                    continue
                d = dict(r)
                d["params"] = json.loads(d["params"])
                d["result"] = json.loads(d["result"]) if d["result"] else None
                out.append(d)
            return out
