"""GET /jobs pages (broker.listing, JobStore.page), ETags on single jobs, the indexes behind
every broker query (issue 12, "Reads that scale").

Real SQLite stores in temporary directories; the HTTP tests drive the real Flask app with its
test client (the matcher is not started, so jobs stay Waiting).
"""
from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from sqlalchemy import text

from broker import listing
from broker.api import create_app
from broker.db import JobStore
from broker.matchmaker import Matchmaker
from broker.service import Broker, BrokerSettings
from infosys.feedback import FeedbackCounters
from infosys.ism import ISM
from infosys.sources import StaticSource
from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.job_states import JobState

JDL = '[ Executable = "/bin/true"; ]'


def _add(store: JobStore, t: float, n: int = 1, state: JobState = JobState.WAITING,
         owner: str | None = None) -> list[str]:
    specs = [dict(jdl=JDL, filename="j.jdl", state=state,
                  owner={"dn": owner, "vo": "dteam"} if owner else None) for _ in range(n)]
    return [j.key for j in store.create_many(specs, t)]


def _walk(store: JobStore, limit: int, **filters) -> list[str]:
    seen, after = [], None
    while True:
        jobs, after = store.page(after=after, limit=limit, **filters)
        seen += [j.key for j in jobs]
        if after is None:
            return seen


# -- the property: pages never skip or repeat while jobs are added ------------------------------
# a step is "read a page of `limit`" or "insert n jobs submitted at time t" (few distinct times,
# so ties on submitted_at, broken by key, are common; t may lie before the cursor)
steps = st.lists(st.one_of(st.tuples(st.just("page"), st.integers(1, 4)),
                           st.tuples(st.just("insert"), st.integers(0, 6), st.integers(1, 3))),
                 max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial=st.lists(st.integers(0, 6), max_size=12), steps=steps)
def test_pagination_never_skips_or_repeats_while_jobs_are_added(initial, steps):
    with tempfile.TemporaryDirectory() as d:
        store = JobStore(f"sqlite:///{Path(d) / 'jobs.db'}")
        try:
            before = {k for t in initial for k in _add(store, float(t))}
            seen: list[str] = []
            order: list[tuple[float, str]] = []
            after, done = None, False
            for step in steps + [("page", 4)] * (len(before) + 40):
                if step[0] == "insert":
                    _add(store, float(step[1]), step[2])
                    continue
                if done:
                    break
                jobs, after = store.page(after=after, limit=step[1])
                assert len(jobs) <= step[1]
                seen += [j.key for j in jobs]
                order += [(j.submitted_at, j.key) for j in jobs]
                done = after is None
            assert done
            assert len(seen) == len(set(seen)), "a job was listed twice"
            assert before <= set(seen), "a job that existed before the walk was skipped"
            assert order == sorted(order) and len(set(order)) == len(order)
        finally:
            store.close()


@given(t=st.floats(allow_nan=False, allow_infinity=False), key=st.text(max_size=30))
def test_a_cursor_round_trips_exactly(t, key):
    assert listing.decode_cursor(listing.encode_cursor(t, key)) == (t, key)


@pytest.mark.parametrize("args, field", [
    ({"state": "Sleeping"}, "state"), ({"limit": "0"}, "limit"), ({"limit": "ten"}, "limit"),
    ({"since": "yesterday"}, "since"), ({"after": "not-a-cursor"}, "after"),
    ({"after": listing.encode_cursor(1.0, "k")[:-3] + "!!!"}, "after")])
def test_malformed_parameters_name_the_field(args, field):
    with pytest.raises(listing.BadQuery) as err:
        listing.parse_query(args)
    assert err.value.field == field


def test_limit_has_a_default_and_a_maximum():
    assert listing.parse_query({}).limit == listing.DEFAULT_LIMIT
    assert listing.parse_query({"limit": "100000"}).limit == listing.MAX_LIMIT
    q = listing.parse_query({"state": "Waiting,Running", "owner": "me", "since": "5"})
    assert q.states == (JobState.WAITING, JobState.RUNNING) and q.owner == "me" and q.since == 5.0


def test_filters_by_state_owner_and_since(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        a_old = _add(store, 1.0, 3, owner="/CN=alice")
        b_old = _add(store, 1.0, 2, owner="/CN=bob")
        a_new = _add(store, 5.0, 2, owner="/CN=alice")
        done = _add(store, 6.0, 1, state=JobState.SUBMITTED, owner="/CN=alice")
        assert set(_walk(store, 2, owner_dn="/CN=alice")) == set(a_old + a_new + done)
        assert set(_walk(store, 2, owner_dn="/CN=alice", since=5.0)) == set(a_new + done)
        assert set(_walk(store, 1, states=[JobState.SUBMITTED])) == set(done)
        assert set(_walk(store, 10, keys=b_old + done)) == set(b_old + done)
        assert len(_walk(store, 3)) == 8
    finally:
        store.close()


# -- indexes: every query shape the broker runs uses one, and none sorts in a temporary B-tree --
QUERIES = [
    "SELECT * FROM jobs ORDER BY submitted_at, key LIMIT 101",
    "SELECT * FROM jobs WHERE state IN ('Waiting') ORDER BY submitted_at, key",
    "SELECT * FROM jobs WHERE state IN ('Waiting') AND kind IN ('job','node') ORDER BY submitted_at, key",
    "SELECT * FROM jobs WHERE owner_dn = '/CN=a' ORDER BY submitted_at, key LIMIT 101",
    "SELECT * FROM jobs WHERE parent_key = 'p' ORDER BY submitted_at, key",
    "SELECT * FROM jobs WHERE (submitted_at > 1 OR (submitted_at = 1 AND key > 'k')) "
    "ORDER BY submitted_at, key LIMIT 101",
    "SELECT key FROM jobs WHERE idem_scope = '' AND idem_key = 'x'",
    "SELECT * FROM job_history WHERE key IN ('a','b') ORDER BY id",
    # two states (the heartbeat sweep): the index finds the rows, a merge sorts them
    "SELECT * FROM jobs WHERE state IN ('Scheduled','Running') ORDER BY submitted_at, key",
    "SELECT * FROM jobs WHERE key IN ('a','b') ORDER BY submitted_at, key",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_every_broker_query_is_served_by_an_index(tmp_path, sql):
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        with store.engine.connect() as c:
            plan = " | ".join(str(r[-1]) for r in c.execute(text("EXPLAIN QUERY PLAN " + sql)))
        if "IN ('Scheduled'" not in sql and "key IN" not in sql:
            assert "TEMP B-TREE" not in plan, plan
        assert "SCAN jobs" not in plan or "USING INDEX" in plan, plan
        assert "SCAN job_history" not in plan, plan
    finally:
        store.close()


def test_an_older_database_gets_the_new_indexes(tmp_path):
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    JobStore(url).close()
    store = JobStore(url)
    with store.engine.begin() as c:
        for name in ("ix_jobs_order", "ix_jobs_state_order", "ix_jobs_owner_order", "ix_jobs_parent_order"):
            c.execute(text(f"DROP INDEX {name}"))
    store.close()
    store = JobStore(url)
    try:
        with store.engine.connect() as c:
            names = {r[0] for r in c.execute(text("SELECT name FROM sqlite_master WHERE type='index'"))}
        assert {"ix_jobs_order", "ix_jobs_state_order", "ix_jobs_owner_order", "ix_jobs_parent_order"} <= names
    finally:
        store.close()


# -- the HTTP API ------------------------------------------------------------------------------
@pytest.fixture
def api(tmp_path):
    clock = SimulatedClock(1000.0)
    ism = ISM([StaticSource([])], refresh_s=3600, clock=clock, feedback=FeedbackCounters())
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    broker = Broker(store, ism, Matchmaker(ism.feedback, rng=random.Random(1)), clock,
                    tmp_path / "sandboxes", BrokerSettings())
    broker.settings.base_url = "http://broker.test"
    app = create_app(broker)
    yield app.test_client(), clock
    store.close()


def _submit(client, n: int) -> list[str]:
    keys = []
    for _ in range(n):
        r = client.post("/jobs", data={"jdl": JDL, "filename": "j.jdl"})
        assert r.status_code == 201, r.get_json()
        keys.append(r.get_json()["key"])
    return keys


def test_get_jobs_pages_follow_next_to_the_end(api):
    client, clock = api
    first = _submit(client, 5)
    clock.advance(10)
    later = _submit(client, 2)
    seen, after, pages = [], None, 0
    while True:
        doc = client.get("/jobs", query_string={"limit": 3, **({"after": after} if after else {})}).get_json()
        pages += 1
        seen += [j["key"] for j in doc["jobs"]]
        after = doc["next"]
        if after is None:
            break
    assert pages == 3 and sorted(seen) == sorted(first + later) and len(seen) == 7
    since = client.get("/jobs", query_string={"since": 1005}).get_json()
    assert {j["key"] for j in since["jobs"]} == set(later) and since["next"] is None
    assert client.get("/jobs", query_string={"state": "Running"}).get_json() == {"jobs": [], "next": None}
    ids = client.get("/jobs", query_string={"ids": ",".join(later)}).get_json()["jobs"]
    assert {j["key"] for j in ids} == set(later)


def test_get_jobs_bad_parameter_is_400_naming_it(api):
    client, _ = api
    r = client.get("/jobs", query_string={"limit": "-1"})
    assert r.status_code == 400 and r.get_json()["error"]["field"] == "limit"
    r = client.get("/jobs", query_string={"after": "%%%"})
    assert r.status_code == 400 and r.get_json()["error"]["field"] == "after"


def test_single_job_etag_answers_304_until_the_job_changes(api):
    client, _ = api
    key = _submit(client, 1)[0]
    r = client.get(f"/jobs/{key}")
    etag = r.headers["ETag"]
    assert r.status_code == 200 and etag
    again = client.get(f"/jobs/{key}", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.get_data() == b""
    assert client.post(f"/jobs/{key}/cancel").status_code == 200
    changed = client.get(f"/jobs/{key}", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.get_json()["state"] == "Cancelled"
    assert changed.headers["ETag"] != etag
