"""Cached job records for GET /jobs/<key> (broker.records, issue 12 "Reads that scale").

The cache must never answer an outdated record: every write by any process (here: a second
JobStore on the same database file, as another broker front end or matcher would hold) shows
up at the next read, on SQLite and on PostgreSQL (whose driver takes the check statement in
another parameter style). Real stores; the HTTP tests drive the real Flask app.
"""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from broker.api import create_app
from broker.db import JobStore, UnknownJob
from broker.matchmaker import Matchmaker
from broker.records import RecordCache
from broker.service import Broker, BrokerSettings
from infosys.feedback import FeedbackCounters
from infosys.ism import ISM
from infosys.sources import StaticSource
from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.job_states import JobState

JDL = '[ Executable = "/bin/true"; ]'


def _render(job) -> bytes:
    return json.dumps({"state": job.state.value, "reason": job.reason, "node": job.node,
                       "history": [h["state"] for h in job.history]}).encode()


def _job(store: JobStore, t: float = 100.0) -> str:
    return store.create_many([dict(jdl=JDL, filename="j.jdl", state=JobState.WAITING,
                                   owner={"dn": "/CN=alice", "vo": "dteam"})], t)[0].key


def _writes_seen_by_the_next_read(url: str) -> None:
    reader, writer = JobStore(url), JobStore(url)      # two processes' stores on one database
    try:
        cache = RecordCache(reader, _render, size=10)
        key = _job(writer)
        first = cache.read(key)
        assert json.loads(first.body)["state"] == "Waiting" and first.owner_dn == "/CN=alice"
        assert cache.read(key) == first and cache.hits == 1 and cache.renders == 1
        writer.transition(key, JobState.READY, 101.0)               # a state change
        second = cache.read(key)
        assert json.loads(second.body)["state"] == "Ready" and second.etag != first.etag
        writer.update_fields(key, 101.0, node="n1")                 # a field, same time stamp
        third = cache.read(key)
        assert json.loads(third.body)["node"] == "n1" and third.etag != second.etag
        writer.note(key, 101.0, "a note")                           # history, same time stamp
        fourth = cache.read(key)
        assert len(json.loads(fourth.body)["history"]) == len(json.loads(third.body)["history"]) + 1
        assert cache.read(key) == fourth and cache.renders == 4
        with pytest.raises(UnknownJob):
            cache.read("no-such-job")
    finally:
        reader.close()
        writer.close()


def test_another_stores_writes_are_seen_by_the_next_read_sqlite(tmp_path):
    _writes_seen_by_the_next_read(f"sqlite:///{tmp_path / 'jobs.db'}")


def test_another_stores_writes_are_seen_by_the_next_read_postgresql(pg_url):
    _writes_seen_by_the_next_read(pg_url)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["transition", "field", "note", "read"])),
                    min_size=1, max_size=30))
def test_cached_record_always_equals_a_fresh_render(tmp_path_factory, ops):
    """Whatever writes happen between reads, a read answers what rendering the stored job
    now gives (the cache is bounded to 2 entries, so evictions happen too)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('rec') / 'jobs.db'}"
    store, writer = JobStore(url), JobStore(url)
    try:
        cache = RecordCache(store, _render, size=2)
        keys = [_job(writer, 100.0 + i) for i in range(5)]
        cycle = {JobState.WAITING: JobState.READY, JobState.READY: JobState.WAITING}
        for i, op in ops:
            key = keys[i]
            if op == "transition":
                writer.transition(key, cycle[writer.get(key).state], 200.0)
            elif op == "field":
                writer.update_fields(key, 200.0, node=f"n{random.random()}")
            elif op == "note":
                writer.note(key, 200.0, "noted")
            assert cache.read(key).body == _render(store.get(key))
    finally:
        store.close()
        writer.close()


def test_size_bounds_the_cache_and_zero_disables_it(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        keys = [_job(store, 100.0 + i) for i in range(3)]
        cache = RecordCache(store, _render, size=2)
        for k in keys + keys[-1:]:
            cache.read(k)
        assert len(cache._entries) == 2 and cache.hits == 1
        off = RecordCache(store, _render, size=0)
        off.read(keys[0])
        off.read(keys[0])
        assert off.hits == 0 and off.renders == 2 and not off._entries
    finally:
        store.close()


@pytest.fixture
def api(tmp_path):
    clock = SimulatedClock(1000.0)
    ism = ISM([StaticSource([])], refresh_s=3600, clock=clock, feedback=FeedbackCounters())
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    broker = Broker(store, ism, Matchmaker(ism.feedback, rng=random.Random(1)), clock,
                    tmp_path / "sandboxes", BrokerSettings())
    broker.settings.base_url = "http://broker.test"
    app = create_app(broker)
    yield app, store
    store.close()


def test_http_record_is_the_rendered_job_and_changes_with_it(api, tmp_path):
    app, store = api
    client = app.test_client()
    key = client.post("/jobs", data={"jdl": JDL, "filename": "j.jdl"}).get_json()["key"]
    r = client.get(f"/jobs/{key}")
    assert r.status_code == 200 and r.mimetype == "application/json"
    assert r.get_json()["key"] == key and r.get_json()["id"] == f"http://broker.test/jobs/{key}"
    etag = r.headers["ETag"]
    assert client.get(f"/jobs/{key}", headers={"If-None-Match": etag}).status_code == 304
    assert client.get(f"/jobs/{key}", headers={"If-None-Match": f'"x", {etag}'}).status_code == 304
    other = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")       # another process's write
    try:
        other.transition(key, JobState.READY, 1000.0)
    finally:
        other.close()
    changed = client.get(f"/jobs/{key}", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.get_json()["state"] == "Ready"
    assert app.config["VGRID_RECORDS"].hits >= 1
    missing = client.get("/jobs/no-such-job", headers={"If-None-Match": etag})
    assert missing.status_code == 404 and "ETag" not in missing.headers
