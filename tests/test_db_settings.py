"""Production database settings (issue 12): SQLite in WAL mode with a busy timeout, a sized
connection pool (SQLite and PostgreSQL tiers, 503 when it is exhausted), and an index for every
query the job store runs (EXPLAIN QUERY PLAN on SQLite: no full scan of jobs or job_history)."""
import threading

import pytest
import requests
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError, TimeoutError as PoolTimeout

from broker.config import BrokerConfig
from broker.db import JobStore
from broker.service import BrokerSettings
from vgrid_runtime.clock import WallClock
from vgrid_runtime.job_states import AT_CE, JobState
from vgrid_runtime.sqldb import DBPool, sqlite_url

from .broker_site import start_broker

S = JobState


def test_sqlite_is_wal_with_the_configured_busy_timeout_and_pool(tmp_path):
    store = JobStore(sqlite_url(tmp_path / "j.db"), DBPool(size=3, overflow=2, busy_timeout_s=7.5))
    with store.engine.connect() as c:
        assert c.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert c.execute(text("PRAGMA busy_timeout")).scalar() == 7500       # ms
    assert store.engine.pool.size() == 3 and store.engine.pool._max_overflow == 2
    store.close()


def test_a_writer_waits_for_the_lock_up_to_the_busy_timeout(tmp_path):
    url = sqlite_url(tmp_path / "j.db")
    patient = JobStore(url, DBPool(busy_timeout_s=60))
    hasty = JobStore(url, DBPool(busy_timeout_s=0.05))
    holder = JobStore(url).engine.raw_connection()
    holder.execute("BEGIN IMMEDIATE")                    # another process's write transaction
    with pytest.raises(OperationalError, match="locked"):
        hasty.create("a", "a.jdl", 1.0)
    done = []
    writer = threading.Thread(target=lambda: done.append(patient.create("b", "b.jdl", 2.0)))
    writer.start()
    writer.join(0.3)
    assert writer.is_alive() and not done               # still waiting for the lock...
    holder.rollback()
    writer.join(60)
    assert [j.jdl for j in done] == ["b"]                # ...and stored once it was released
    assert [j.jdl for j in patient.list()] == ["b"]
    holder.close()
    for s in (patient, hasty):
        s.close()


def test_postgres_pool_is_sized_and_shared_by_threads(pg_url):
    store = JobStore(pg_url, DBPool(size=2, overflow=1, timeout_s=120))
    assert store.engine.pool.size() == 2
    errors, made = [], []

    def work(i):
        try:
            for k in range(5):
                job = store.create(f"j{i}.{k}", "t.jdl", float(i))
                made.append(store.transition(job.key, S.WAITING, 2.0).key)
        except Exception as exc:    # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert errors == [] and len(set(made)) == 40      # 8 threads over at most 3 connections
    assert store.engine.pool.checkedout() == 0 and store.engine.pool.overflow() <= 1
    store.close()
    small = JobStore(pg_url, DBPool(size=1, overflow=0, timeout_s=0.2))
    held = small.engine.connect()                      # its one connection busy: the next waits
    with pytest.raises(PoolTimeout):                   # timeout_s, then gives up
        small.get(made[0])
    held.close()
    assert small.get(made[0]).state is S.WAITING
    small.close()


def test_an_exhausted_pool_answers_503_not_500(tmp_path):
    store = JobStore(sqlite_url(tmp_path / "j.db"), DBPool(size=1, overflow=0, timeout_s=0.2))
    server, broker = start_broker(tmp_path, [], WallClock(), BrokerSettings(), store=store)
    broker.stop()
    try:
        key = requests.post(f"{server.url}/jobs", data={"jdl": '[ Executable = "/bin/true"; ]'},
                            timeout=10).json()["key"]
        held = store.engine.connect()
        r = requests.get(f"{server.url}/jobs/{key}", timeout=10)
        held.close()
        assert r.status_code == 503, r.text
        assert "database unavailable" in r.json()["error"]["message"]
        assert requests.get(f"{server.url}/jobs/{key}", timeout=10).status_code == 200
    finally:
        server.close()
        store.close()


def test_pool_options_are_checked():
    assert "db_pool" in BrokerConfig(db_pool_size=0).validate()
    assert "db_pool" in BrokerConfig(db_pool_overflow=-1).validate()
    assert BrokerConfig(db_pool_size=4).db_pool().size == 4
    with pytest.raises(ValueError):
        JobStore("sqlite://", DBPool(size=0))


# -- an index for every query --------------------------------------------------------------------
def store_queries(store):
    """Run every kind of query the broker makes of the store; the SQL text and parameters."""
    seen = []

    @event.listens_for(store.engine, "before_cursor_execute")
    def grab(conn, cursor, statement, parameters, context, executemany):
        if not executemany:
            seen.append((statement, parameters))

    specs = [{"jdl": "p", "filename": "p", "key": "P" * 22, "kind": "dag", "state": S.WAITING}]
    specs += [{"jdl": f"n{i}", "filename": "n", "kind": "node", "parent_key": "P" * 22,
               "owner": {"dn": "/CN=u", "vo": "dteam", "fqans": []},
               "idempotency": ("/CN=u", f"k{i}") if i == 0 else None, "state": S.WAITING}
              for i in range(3)]
    jobs = store.create_many(specs, 10.0)
    key = jobs[1].key
    store.get(key)
    store.find_idempotent("/CN=u", "k0")
    store.list(states=[S.WAITING], kinds=["job", "node"], history=False)      # the matcher's pass
    store.list(states=[S.WAITING, S.RUNNING], kinds=["dag"], history=False)  # DAG release
    store.list(parent="P" * 22)                                                # nodes of a parent
    store.list(keys=[key], history=False)                                      # heartbeats, recovery
    store.list(states=[S.SCHEDULED, S.RUNNING], history=False)                # Stalled scan
    store.list(states=[S.STALLED], history=False)
    store.list(states=list(AT_CE))                                            # recovery
    store.list(states=[S.SUBMITTED])
    store.list(owner_dn="/CN=u")
    for kw in ({}, {"states": [S.WAITING]}, {"owner_dn": "/CN=u"}, {"since": 5.0},
               {"states": [S.DONE], "owner_dn": "/CN=u"}, {"keys": [key]}):
        store.page(limit=2, **kw)
        store.page(limit=2, after=(10.0, key), **kw)
    store.transition(key, S.READY, 11.0, expect=S.WAITING)
    store.update_fields(key, 12.0, node="n1")
    store.note(key, 13.0, "a note")
    store.heard({key: 14.0})
    return seen


def test_every_store_query_uses_an_index(tmp_path):
    store = JobStore(sqlite_url(tmp_path / "j.db"))
    # a broker's database: mostly ended jobs (and statistics, as PRAGMA optimize gathers them)
    old = store.create_many([{"jdl": "x", "filename": "x", "state": S.WAITING} for _ in range(2000)], 1.0)
    with store.engine.begin() as c:
        c.execute(text("UPDATE jobs SET state = 'Done'"))
        c.execute(text("ANALYZE"))
    assert len(old) == 2000
    queries = [(sql, p) for sql, p in store_queries(store)
               if ("jobs" in sql or "job_history" in sql) and sql.lstrip().upper().startswith(
                   ("SELECT", "UPDATE", "DELETE"))]
    assert len(queries) >= 25
    raw = store.engine.raw_connection()
    scans = []
    for sql, params in queries:
        plan = [row[3] for row in raw.execute("EXPLAIN QUERY PLAN " + sql, params)]
        full = [p for p in plan if p.startswith("SCAN") and ("jobs" in p or "job_history" in p)
                and "USING" not in p]
        walks = [p for p in plan if p.startswith("SCAN jobs USING INDEX ix_jobs_order")
                 and "WHERE" in sql.upper() and "submitted_at >" not in sql]
        if full or walks:
            scans.append((" ".join(sql.split())[-200:], plan))
    raw.close()
    store.close()
    assert scans == [], "queries without an index:\n" + "\n".join(f"{s}\n  {p}" for s, p in scans)
