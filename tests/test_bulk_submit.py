"""Bulk submission (issue 12): a request is stored in one transaction with no read back, and the
records create_many returns are exactly what the store reads back; a collection with a bad node
stores nothing. SQLite and PostgreSQL tiers."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from sqlalchemy.exc import IntegrityError

from broker.db import DuplicateSubmission, JobStore
from vgrid_runtime.job_states import IllegalTransition, JobState

_text = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=12)
_owner = st.none() | st.fixed_dictionaries({"dn": _text, "vo": _text, "fqans": st.lists(_text, max_size=3)})
_spec = st.fixed_dictionaries({"jdl": _text, "filename": _text},
                              optional={"kind": st.sampled_from(["job", "node", "collection"]),
                                        "node_name": _text, "owner": _owner,
                                        "state": st.sampled_from([JobState.SUBMITTED, JobState.WAITING]),
                                        "depends_on": st.lists(_text, max_size=3)})


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory):
    store = JobStore(f"sqlite:///{tmp_path_factory.mktemp('bulk') / 'jobs.db'}")
    yield store
    store.close()


def check_same_as_read_back(store, specs, now):
    made = store.create_many(specs, now)
    assert len(made) == len(specs)
    for job in made:
        assert store.get(job.key) == job     # every field, the history included


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_spec, min_size=1, max_size=6), st.floats(0, 2e9, allow_nan=False))
def test_created_records_equal_what_is_read_back(sqlite_store, specs, now):
    check_same_as_read_back(sqlite_store, specs, now)


def test_created_records_equal_what_is_read_back_on_postgres(pg_url):
    store = JobStore(pg_url)
    try:
        check_same_as_read_back(store, [
            {"jdl": "a", "filename": "c.jdl", "kind": "collection", "key": "p" * 22, "state": JobState.WAITING},
            *({"jdl": f"n{i}", "filename": f"c.jdl#n{i}", "kind": "node", "parent_key": "p" * 22,
               "node_name": f"n{i}", "owner": {"dn": "/CN=u", "vo": "dteam", "fqans": ["/dteam"]},
               "state": JobState.WAITING} for i in range(50))], 5.0)
        check_same_as_read_back(store, [{"jdl": "j", "filename": "j.jdl"}], 6.0)
        rows = len(store.list(history=False))
        with pytest.raises(DuplicateSubmission):   # unique (scope, key): the second stores nothing
            for _ in range(2):
                store.create_many([{"jdl": "x", "filename": "x", "idempotency": ("", "k1")},
                                   {"jdl": "y", "filename": "y"}], 7.0)
        assert len(store.list(history=False)) == rows + 2
    finally:
        store.close()


def test_a_failing_request_stores_nothing(sqlite_store):
    before = len(sqlite_store.list(history=False))
    with pytest.raises(IllegalTransition):   # the last node asks for a state Submitted cannot reach
        sqlite_store.create_many([{"jdl": "a", "filename": "a"}, {"jdl": "b", "filename": "b",
                                                                  "state": JobState.DONE}], 1.0)
    key = sqlite_store.create("a", "a", 1.0).key
    with pytest.raises(IntegrityError):      # a duplicate key in the second row: the first is rolled back
        sqlite_store.create_many([{"jdl": "c", "filename": "c"}, {"jdl": "d", "filename": "d", "key": key}], 2.0)
    assert len(sqlite_store.list(history=False)) == before + 1


def collection_jdl(n, bad=None):
    """A collection of ``n`` nodes; node ``bad`` (line 4 + bad) has an integer Executable at column 18."""
    nodes = [f'  [ Executable = {3 if i == bad else chr(34) + "/bin/echo" + chr(34)}; Arguments = "node {i}"; ]'
             for i in range(n)]
    return "[\n Type = \"collection\";\n Nodes = {\n" + ",\n".join(nodes) + "\n };\n]\n"


@pytest.fixture
def idle_broker(tmp_path):
    """A loopback broker whose matcher is stopped: what a submission stored stays as stored."""
    from broker.service import BrokerSettings
    from vgrid_runtime.clock import WallClock

    from .broker_site import start_broker
    server, broker = start_broker(tmp_path, [], WallClock(), BrokerSettings())
    broker.stop()
    yield server.url, broker
    server.close()
    broker.store.close()


def all_jobs(url):
    import requests
    jobs, after = [], None
    while True:
        page = requests.get(f"{url}/jobs", params={"limit": 1000, **({"after": after} if after else {})},
                            timeout=30).json()
        jobs += page["jobs"]
        after = page["next"]
        if after is None:
            return jobs


def test_a_bad_node_rejects_the_whole_collection_with_its_location(idle_broker):
    import requests
    url, broker = idle_broker
    r = requests.post(f"{url}/jobs", data={"jdl": collection_jdl(1000, bad=700), "filename": "big.jdl"},
                      timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["file"], err["line"], err["column"]) == ("big.jdl", 704, 18), err
    assert "big.jdl:704:18" in err["message"]
    assert all_jobs(url) == []
    assert not (broker.sandbox_dir.exists() and any(broker.sandbox_dir.iterdir()))


def test_a_1000_node_collection_is_one_request_with_an_id_per_node(idle_broker):
    import requests
    url, broker = idle_broker
    r = requests.post(f"{url}/jobs", data={"jdl": collection_jdl(1000), "filename": "big.jdl"}, timeout=60)
    assert r.status_code == 201, r.text
    parent = r.json()
    assert parent["state"] == "Waiting"
    jobs = all_jobs(url)
    nodes = [j for j in jobs if j["parent"] == parent["id"]]
    assert len(jobs) == 1001 and len(nodes) == 1000
    assert len({j["key"] for j in nodes}) == 1000 and parent["key"] not in {j["key"] for j in nodes}
    assert {j["state"] for j in jobs} == {"Waiting"} and {j["kind"] for j in nodes} == {"node"}
    assert sorted(j["node_name"] for j in nodes) == sorted(f"Node_{i}" for i in range(1000))
    assert len({j["submitted_at"] for j in jobs}) == 1     # stored by one create_many
