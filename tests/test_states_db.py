"""gLite job states, the transition table and the SQLAlchemy job store (SQLite)."""
import threading

import pytest
from hypothesis import given, strategies as st

from broker.db import JobStore, StaleState, UnknownJob
from vgrid_runtime.job_states import ENDED, TRANSITIONS, IllegalTransition, JobState, check_transition


@pytest.fixture
def store(tmp_path):
    s = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    yield s
    s.close()


def test_transition_table_covers_every_state_and_cleared_is_final():
    assert set(TRANSITIONS) == set(JobState)
    assert TRANSITIONS[JobState.CLEARED] == frozenset()
    for s in ENDED - {JobState.CLEARED}:
        assert TRANSITIONS[s] == {JobState.CLEARED}


@given(st.sampled_from(list(JobState)), st.sampled_from(list(JobState)))
def test_check_transition_agrees_with_table(old, new):
    if new in TRANSITIONS[old]:
        check_transition("k", old, new)
    else:
        with pytest.raises(IllegalTransition, match=f"{old.value} -> {new.value}"):
            check_transition("k", old, new)


def test_job_lifecycle_is_recorded_in_history(store):
    job = store.create("Executable = \"/bin/true\";", "t.jdl", now=1.0)
    assert job.state is JobState.SUBMITTED
    store.transition(job.key, JobState.WAITING, 2.0)
    store.transition(job.key, JobState.READY, 3.0, expect=JobState.WAITING)
    store.transition(job.key, JobState.SCHEDULED, 4.0, ce_id="ce1", ce_url="http://x")
    store.transition(job.key, JobState.RUNNING, 5.0, node="wn1", vwn="vwn-wn1-1", cpu_caps=[[5.0, 1.0]])
    done = store.transition(job.key, JobState.DONE, 6.0, exit_code=0)
    assert [h["state"] for h in done.history] == ["Submitted", "Waiting", "Ready", "Scheduled", "Running", "Done"]
    assert done.cpu_caps == [[5.0, 1.0]] and done.exit_code == 0 and done.ce_id == "ce1"


def test_illegal_transition_raises_and_changes_nothing(store):
    job = store.create("x", "t.jdl", now=1.0)
    store.transition(job.key, JobState.CANCELLED, 2.0)
    with pytest.raises(IllegalTransition):
        store.transition(job.key, JobState.RUNNING, 3.0)
    assert store.get(job.key).state is JobState.CANCELLED
    assert len(store.get(job.key).history) == 2


def test_claim_is_atomic_only_one_thread_wins(store):
    job = store.create("x", "t.jdl", now=1.0)
    store.transition(job.key, JobState.WAITING, 1.0)
    wins, losses = [], []
    barrier = threading.Barrier(8)

    def claim():
        barrier.wait()
        try:
            store.transition(job.key, JobState.READY, 2.0, expect=JobState.WAITING)
            wins.append(1)
        except StaleState:
            losses.append(1)

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(losses) == 7


def test_unknown_job_and_unknown_field(store):
    with pytest.raises(UnknownJob):
        store.get("nope")
    job = store.create("x", "t.jdl", now=1.0)
    with pytest.raises(TypeError):
        store.update_fields(job.key, 2.0, colour="red")


def test_jobs_survive_reopening_the_database(tmp_path):
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    s1 = JobStore(url)
    job = s1.create("x", "t.jdl", now=1.0)
    s1.transition(job.key, JobState.WAITING, 2.0)
    s1.close()
    s2 = JobStore(url)
    assert s2.get(job.key).state is JobState.WAITING
    assert [j.key for j in s2.list(states=[JobState.WAITING])] == [job.key]


def test_outcome_is_stored_and_added_to_an_older_database(tmp_path):
    import sqlite3

    from vgrid_runtime.outcomes import Outcome
    path = tmp_path / "old.db"
    s = JobStore(f"sqlite:///{path}")
    job = s.create("x", "t.jdl", now=1.0)
    s.close()
    con = sqlite3.connect(path)                  # a database made before the outcome column
    con.execute("ALTER TABLE jobs DROP COLUMN outcome")
    con.commit()
    con.close()
    s = JobStore(f"sqlite:///{path}")
    assert s.get(job.key).outcome is None
    s.transition(job.key, JobState.CANCELLED, 2.0, reason="cancelled by the user", outcome=Outcome.CANCELLED)
    assert s.get(job.key).outcome is Outcome.CANCELLED
    s.close()
