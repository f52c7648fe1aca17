"""The matcher's hot path after session 6 (issue 12): recording a pass's jobs Scheduled per CE
in one keyed ``UPDATE ... FROM (VALUES ...)`` per chunk (SQLite and PostgreSQL) means the same
as one guarded UPDATE per CE, and the cheaper per-job steps keep their answers."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from broker import bulk_store
from broker.db import JobStore
from vgrid_runtime.job_states import IllegalTransition, JobState

JDL = '[ Executable = "/bin/true"; ]'
W, R, S, C = JobState.WAITING, JobState.READY, JobState.SCHEDULED, JobState.CANCELLED


def ready_jobs(store: JobStore, n: int, prefix: str) -> list[str]:
    keys = [j.key for j in store.create_many([{"jdl": JDL, "filename": "j.jdl", "state": W,
                                               "key": f"{prefix}{i:05d}"} for i in range(n)], 1.0)]
    assert len(store.claim(2.0, n)) == n
    return keys


def check_keyed_sets(store: JobStore, prefix: str) -> None:
    """Three CEs' sets over 1,234 Ready jobs (more than one chunk), one key in two sets, one
    unknown key, one job cancelled meanwhile: each moved job gets its own set's fields, one
    history row, and the answer is per set, in the order given."""
    keys = ready_jobs(store, 1234, prefix)
    rnd = random.Random(7)
    shuffled = keys[:]
    rnd.shuffle(shuffled)
    sets_keys = [shuffled[0::3], shuffled[1::3], shuffled[2::3] + [shuffled[0], "no-such-key"]]
    store.transition(shuffled[1], C, 3.0, expect=R)              # a concurrent cancel
    sets = [(ks, {"ce_id": f"ce-{i}", "ce_url": None if i == 2 else f"http://ce-{i}", "last_heard": 4.0 + i})
            for i, ks in enumerate(sets_keys)]
    moved = store.transition_sets(sets, S, 4.0, expect=R, increment=("dispatch_attempts",))
    assert moved[0] == sets_keys[0]
    assert moved[1] == [k for k in sets_keys[1] if k != shuffled[1]]
    assert moved[2] == sets_keys[2][:-2]                          # shuffled[0] went with set 0
    for i, ks in enumerate(moved):
        for k in ks[:50] + ks[-5:]:
            job = store.get(k)
            assert (job.state, job.ce_id, job.ce_url, job.last_heard, job.dispatch_attempts) == \
                (S, f"ce-{i}", None if i == 2 else f"http://ce-{i}", 4.0 + i, 1)
            assert [h["state"] for h in job.history] == ["Submitted", "Waiting", "Ready", "Scheduled"]
    assert store.get(shuffled[1]).state is C and store.get(shuffled[1]).dispatch_attempts == 0
    with pytest.raises(IllegalTransition):                       # checked before anything is written
        store.transition_sets([(moved[0], {"ce_id": "x"}), (moved[1], {"ce_id": "y"})], R, 5.0, expect=S)
    assert store.get(moved[0][0]).state is S


def test_keyed_sets_sqlite(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'j.db'}")
    try:
        check_keyed_sets(store, "a")
    finally:
        store.close()


def test_keyed_sets_postgresql(pg_url):
    store = JobStore(pg_url)
    try:
        check_keyed_sets(store, "pg6-")
    finally:
        store.close()


def test_sets_with_different_fields_take_one_update_each(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'j.db'}")
    try:
        keys = ready_jobs(store, 10, "b")
        moved = store.transition_sets([(keys[:5], {"ce_id": "ce-a"}), (keys[5:], {"ce_url": "http://b"})],
                                      S, 3.0, expect=R)
        assert moved == [keys[:5], keys[5:]]
        assert (store.get(keys[0]).ce_id, store.get(keys[9]).ce_url) == ("ce-a", "http://b")
    finally:
        store.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from([W, R, C]), min_size=1, max_size=14),
       st.lists(st.lists(st.integers(0, 15), max_size=8), min_size=2, max_size=4))
def test_property_keyed_update_equals_one_update_per_set(tmp_path_factory, states, picks):
    """Whatever the jobs' states and however the sets overlap (or name unknown keys), the keyed
    statement moves the same jobs with the same fields as one guarded UPDATE per set."""
    results = []
    for keyed in (True, False):
        store = JobStore(f"sqlite:///{tmp_path_factory.mktemp('p') / 'j.db'}")
        try:
            keys = [j.key for j in store.create_many([{"jdl": JDL, "filename": "j.jdl", "state": W,
                                                       "key": f"k{i:02d}"} for i in range(len(states))], 1.0)]
            for key, state in zip(keys, states):
                if state is not W:
                    store.transition(key, state if state is C else R, 1.5, expect=W)
            sets = [([f"k{i:02d}" for i in pick], {"ce_id": f"ce-{n}", "last_heard": float(n)})
                    for n, pick in enumerate(picks)]
            real = bulk_store.keyed_update
            if not keyed:
                bulk_store.keyed_update = lambda *a, **k: None
            try:
                moved = store.transition_sets(sets, S, 2.0, expect=R, reason="r")
            finally:
                bulk_store.keyed_update = real
            rows = [(j.key, j.state, j.ce_id, j.last_heard, [h["state"] for h in j.history])
                    for j in store.list(keys=keys)]
            results.append((moved, rows))
        finally:
            store.close()
    assert results[0] == results[1]


def test_agreement_holds_across_change_log_restarts(monkeypatch):
    """The task queues no longer re-read every count when the feedback change log restarts
    (only at a reset): with a log of 3 entries (it restarts every few choices) their choices
    still equal the per-job matcher's, refreshes (resets) included."""
    from infosys.feedback import FeedbackCounters

    from .test_taskqueues import POOL, VOS, run
    monkeypatch.setattr(FeedbackCounters, "LOG_LIMIT", 3)
    for seed in range(40):
        r = random.Random(seed)
        steps = [(r.randrange(len(POOL)), r.randrange(4), r.choice([None] + VOS), r.random() < 0.5,
                  [r.randrange(12)] if r.random() < 0.2 else [], r.randrange(60)) for _ in range(80)]
        work = (seed, r.randint(1, 12), r.choice(["sfete", "max", "fuzzy"]), steps)
        assert run("classes", *work) == run("per-job", *work)


def test_grown_only_since_tells_a_reset_from_a_restarted_log():
    from infosys.feedback import FeedbackCounters
    fc = FeedbackCounters()
    v0 = fc.version
    for i in range(FeedbackCounters.LOG_LIMIT + 5):
        fc.increment(f"ce{i % 7}")
    assert fc.changed_since(v0) is None and fc.grown_only_since(v0)   # the log restarted; nothing fell
    v1 = fc.version
    fc.subtract({"ce1": 1})
    assert not fc.grown_only_since(v1) and fc.grown_only_since(fc.version)
    v2 = fc.version
    fc.reset()
    assert not fc.grown_only_since(v2)


def test_service_sessions_read_the_environment_once_per_host(monkeypatch):
    """vgrid's sessions answer what requests answers for the proxy environment (a proxy, a
    host it bypasses), but read the environment once per scheme and host, not per request."""
    import requests
    import requests.sessions

    from vgrid_runtime.httpclient import new_session
    monkeypatch.setenv("http_proxy", "http://proxy.example.org:3128")
    monkeypatch.setenv("no_proxy", "ce-direct.example.org")
    plain, ours = requests.Session(), new_session()
    urls = ["http://ce1.example.org:8443/jobs/bulk", "http://ce1.example.org:8443/jobs/x",
            "http://ce-direct.example.org/jobs", "https://ce1.example.org:8443/glue"]
    for url in urls:
        assert ours.merge_environment_settings(url, {}, None, True, None) == \
            plain.merge_environment_settings(url, {}, None, True, None)
    calls = []
    real = requests.sessions.get_environ_proxies
    monkeypatch.setattr(requests.sessions, "get_environ_proxies", lambda *a, **k: calls.append(a) or real(*a, **k))
    fresh = new_session()
    for _ in range(5):
        for url in urls[:2]:
            got = fresh.merge_environment_settings(url, {}, None, True, None)
            assert got["proxies"]["http"] == "http://proxy.example.org:3128"
            got["proxies"].clear()                  # a caller's change does not reach the memo
    assert len(calls) == 1                          # one scheme and host: read once
