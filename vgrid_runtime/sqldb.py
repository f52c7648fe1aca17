"""Opening the SQLAlchemy databases of vgrid's services (broker, CE agent, node agent).

Every service keeps what it acknowledged in one database: a SQLite file in its state directory
by default, or any SQLAlchemy URL (PostgreSQL in production and in the tests). This module is
the one place that knows how such an engine is opened and how a table made by an earlier
version gains the columns added since.

SQLite is opened in WAL mode with ``synchronous=NORMAL``: a committed transaction survives
``kill -9`` of the process (it is in the WAL, in the OS page cache); only a power loss may drop
the last commits. ``check_same_thread`` is off because every service uses one engine from its
HTTP worker threads and its background loops (one session per call).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Engine


def sqlite_url(path: str | Path) -> str:
    """The SQLAlchemy URL of the SQLite file ``path`` (made absolute)."""
    return f"sqlite:///{Path(path).resolve()}"


def open_engine(url: str) -> Engine:
    """An engine for ``url`` (``sqlite:///FILE`` or e.g. ``postgresql+psycopg2://user@host/db``).

    Raises ``sqlalchemy.exc.ArgumentError`` for a URL SQLAlchemy cannot read.
    """
    kwargs: dict[str, Any] = {}
    is_sqlite = url.startswith("sqlite")
    if is_sqlite:
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
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
