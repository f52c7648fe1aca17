"""The job store on a real PostgreSQL server: same behaviour as on SQLite."""
import threading

import pytest

from broker.db import JobStore, StaleState
from vgrid_runtime.job_states import IllegalTransition, JobState



def test_lifecycle_and_history_on_postgres(pg_url):
    store = JobStore(pg_url)
    job = store.create('Executable = "/bin/true";', "t.jdl", now=1.0)
    store.transition(job.key, JobState.WAITING, 2.0)
    store.transition(job.key, JobState.READY, 3.0, expect=JobState.WAITING)
    store.transition(job.key, JobState.SCHEDULED, 4.0, ce_id="ce1")
    done = store.transition(job.key, JobState.DONE, 5.0, exit_code=3, cpu_caps=[[4.0, 0.5]])
    assert [h["state"] for h in done.history] == ["Submitted", "Waiting", "Ready", "Scheduled", "Done"]
    assert done.exit_code == 3 and done.cpu_caps == [[4.0, 0.5]]
    with pytest.raises(IllegalTransition):
        store.transition(job.key, JobState.RUNNING, 6.0)
    store.close()


def test_atomic_claim_on_postgres(pg_url):
    store = JobStore(pg_url)
    job = store.create("x", "t.jdl", now=1.0)
    store.transition(job.key, JobState.WAITING, 1.0)
    results = []
    barrier = threading.Barrier(6)

    def claim():
        barrier.wait()
        try:
            store.transition(job.key, JobState.READY, 2.0, expect=JobState.WAITING)
            results.append("won")
        except StaleState:
            results.append("lost")

    ts = [threading.Thread(target=claim) for _ in range(6)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert sorted(results) == ["lost"] * 5 + ["won"]
    store.close()


def test_resubmission_and_heartbeat_columns_on_postgres(pg_url):
    """The issue-11 columns (attempt, dispatch key, counts, failed CEs, last heard, Stalled)
    and the ce_heartbeats table round-trip, and an older jobs table gains them on open."""
    from sqlalchemy import text

    store = JobStore(pg_url)
    job = store.create('Executable = "/bin/true";', "t.jdl", now=1.0)
    store.transition(job.key, JobState.WAITING, 2.0)
    store.transition(job.key, JobState.READY, 3.0)
    store.transition(job.key, JobState.SCHEDULED, 4.0, ce_id="ce1", ce_url="http://ce1", last_heard=4.0)
    store.transition(job.key, JobState.STALLED, 40.0, stalled_from="Scheduled", stalled_at=40.0)
    back = store.transition(job.key, JobState.WAITING, 100.0, attempt=1, dispatch_key=f"{job.key}.1",
                            shallow_count=1, failed_ces=["ce1"], waiting_since=100.0)
    assert (back.attempt, back.dispatch_key, back.shallow_count, back.deep_count) == (1, f"{job.key}.1", 1, 0)
    assert back.failed_ces == ["ce1"] and back.stalled_from == "Scheduled"
    store.heard({job.key: 120.5})
    assert store.get(job.key).last_heard == 120.5
    store.record_ce_heartbeat("http://ce1", "ce1", 10.0, 121.0)
    store.record_ce_heartbeat("http://ce1", "ce1", 5.0, 122.0)
    assert store.ce_heartbeats() == {"http://ce1": {"ce": "ce1", "interval_s": 5.0, "last_heard": 122.0}}
    with store.engine.begin() as conn:
        for col in ("attempt", "dispatch_key", "deep_count", "shallow_count", "failed_ces", "last_failure",
                    "waiting_since", "last_heard", "stalled_from", "stalled_at"):
            conn.execute(text(f"ALTER TABLE jobs DROP COLUMN {col}"))
    store.close()
    store = JobStore(pg_url)                       # an older table: the columns come back
    old = store.get(job.key)
    assert (old.attempt, old.dispatch_key, old.failed_ces) == (0, job.key, [])
    store.close()


def test_pages_and_listing_indexes_on_postgres(pg_url):
    """GET /jobs pages (JobStore.page) on PostgreSQL: the keyset order holds with ties on
    submitted_at and with jobs added mid-walk; a second open re-runs the index statements."""
    store = JobStore(pg_url)
    try:
        first = [j.key for j in store.create_many([dict(jdl="[]", filename="p.jdl") for _ in range(5)], 100.0)]
        seen, after = [], None
        while True:
            jobs, after = store.page(after=after, limit=2, since=100.0)
            seen += [j.key for j in jobs]
            if len(seen) == 2:   # added while walking: one after the cursor, one before it
                store.create_many([dict(jdl="[]", filename="p.jdl")], 101.0)
                store.create_many([dict(jdl="[]", filename="p.jdl")], 100.0)
            if after is None:
                break
        assert len(seen) == len(set(seen)) and set(first) <= set(seen)
        JobStore(pg_url).close()
    finally:
        store.close()
