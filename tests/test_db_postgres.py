"""The job store on a real PostgreSQL server: same behaviour as on SQLite."""
import threading

import pytest

from broker.db import JobStore, StaleState
from vgrid_runtime.job_states import IllegalTransition, JobState

from .pg_server import postgres_server, unavailable_reason


@pytest.fixture(scope="module")
def pg_url():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with postgres_server() as url:
        yield url


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
