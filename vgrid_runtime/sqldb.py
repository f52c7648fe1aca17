"""Opening the SQLAlchemy databases of vgrid's services (broker, CE agent, node agent).

Every service keeps what it acknowledged in one database: a SQLite file in its state directory
by default, or any SQLAlchemy URL (PostgreSQL in production and in the tests). This module is
the one place that knows how such an engine is opened and how a table made by an earlier
version gains the columns added since.

SQLite is opened in WAL mode with ``synchronous=NORMAL``: a committed transaction survives
``kill -9`` of the process (it is in the WAL, in the OS page cache); only a power loss may drop
the last commits. A writer that finds the database locked waits up to the busy timeout
(:attr:`DBPool.busy_timeout_s`) before failing. ``check_same_thread`` is off because every
service uses one engine from its HTTP worker threads and its background loops (one session per
call). Every engine keeps a sized pool of connections (:class:`DBPool`): a PostgreSQL server is
shared by every broker process and worker of a multi-host installation, so each process holds at
most ``size + overflow`` connections, and a connection found dead (the server restarted) is
replaced before use (``pre_ping``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Engine


def sqlite_url(path: str | Path) -> str:
    """The SQLAlchemy URL of the SQLite file ``path`` (made absolute)."""
    return f"sqlite:///{Path(path).resolve()}"


@dataclass(frozen=True)
class DBPool:
    """The connection pool of one engine (counts, seconds).

    ``size``: connections kept open; ``overflow``: extra connections opened under load and closed
    when returned; ``timeout_s``: how long a thread waits for a free connection before
    ``sqlalchemy.exc.TimeoutError``; ``recycle_s``: a connection older than this is replaced
    (servers and firewalls drop idle ones; -1 never); ``busy_timeout_s``: SQLite only, how long
    a write waits for another writer's lock (SQLite's busy timeout)."""

    size: int = 10
    overflow: int = 10
    timeout_s: float = 30.0
    recycle_s: float = 3600.0
    busy_timeout_s: float = 30.0

    def problem(self) -> str | None:
        """A description of an invalid value, or None."""
        if self.size < 1:
            return "the pool size must be >= 1"
        if self.overflow < 0:
            return "the pool overflow must be >= 0"
        if self.timeout_s <= 0 or self.busy_timeout_s < 0:
            return "the pool and busy timeouts must be > 0"
        return None


def open_engine(url: str, pool: DBPool | None = None) -> Engine:
    """An engine for ``url`` (``sqlite:///FILE`` or e.g. ``postgresql+psycopg2://user@host/db``)
    with the connection pool ``pool`` (default :class:`DBPool`; an in-memory SQLite database
    keeps SQLAlchemy's single-connection pool).

    Raises ``sqlalchemy.exc.ArgumentError`` for a URL SQLAlchemy cannot read, ValueError for a
    ``pool`` with an invalid value.
    """
    pool = pool or DBPool()
    if pool.problem():
        raise ValueError(pool.problem())
    kwargs: dict[str, Any] = {}
    is_sqlite = url.startswith("sqlite")
    if is_sqlite:
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": pool.busy_timeout_s}
    if not (is_sqlite and (url in ("sqlite://", "sqlite:///:memory:") or "mode=memory" in url)):
        kwargs.update(pool_size=pool.size, max_overflow=pool.overflow, pool_timeout=pool.timeout_s,
                      pool_recycle=pool.recycle_s, pool_pre_ping=not is_sqlite)
    engine = create_engine(url, future=True, **kwargs)
    if is_sqlite:
        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # pragma: no cover - driver detail
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()
    return engine


def add_missing_columns(engine: Engine, table: str, columns: Mapping[str, str],
                        indexes: Iterable[str] = ()) -> list[str]:
    """Add to ``table`` (made by an earlier version) the ``columns`` it lacks, as
    ``{name: SQL type and default}``, then run the ``indexes`` statements (``CREATE ... IF NOT
    EXISTS``). No data is lost. Returns the names of the columns added."""
    present = {c["name"] for c in inspect(engine).get_columns(table)}
    missing = [(n, sql) for n, sql in columns.items() if n not in present]
    with engine.begin() as conn:
        for name, sql in missing:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {sql}"))
        for sql in indexes:
            conn.execute(text(sql))
    return [n for n, _ in missing]
