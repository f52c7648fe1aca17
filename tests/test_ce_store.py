"""The CE agent's database (``vwn_agents.ce_store``): what it writes it reads back, on SQLite and
on a real PostgreSQL server, and a restarted agent serves the jobs it acknowledged."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from vgrid_runtime.outcomes import Outcome
from vgrid_runtime.sqldb import open_engine, sqlite_url
from vwn_agents.ce_agent import CEAgentConfig, create_app
from vwn_agents.ce_jobs import CEJob, CEJobState, JobRequest
from vwn_agents.ce_leases import JobLeaseRequest
from vwn_agents.ce_store import CEStore

from .pg_server import postgres_server, unavailable_reason

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731

jobs = st.builds(
    lambda key, state, node, vwn, caps, capped, code, reason, outcome, lease, attempts, start, hb: CEJob(
        JobRequest(f"https://b/jobs/{key}", key, '[ Executable = "/bin/true"; ]', "j.jdl",
                   f"https://b/jobs/{key}/events", [{"name": "a", "url": "https://b/f/a"}], None,
                   {"dn": "/CN=x", "vo": "dteam", "fqans": ["/dteam"]}, hb),
        None, state, node=node, node_url=node and f"https://{node}:1", vwn=vwn, cpu_caps=caps, capped=capped,
        exit_code=code, reason=reason, outcome=outcome, lease_req=lease, lease_attempts=attempts,
        lease_node=node and f"https://{node}:1", lease_start=start, accepted=1000.0),
    st.text("abcdefghijk0123456789._-", min_size=1, max_size=24), st.sampled_from(list(CEJobState)),
    maybe(st.text("abcxyz", min_size=1, max_size=8)), maybe(text),
    st.lists(st.tuples(st.floats(0, 1e9), st.floats(0, 1)).map(list), max_size=4), maybe(st.booleans()),
    maybe(st.integers(-255, 255)), maybe(text), maybe(st.sampled_from(list(Outcome))),
    maybe(st.builds(JobLeaseRequest, st.sampled_from(["best-effort", "immediate"]), st.integers(1, 400),
                    st.integers(1, 4096), st.floats(1, 1e5), st.just("max_wallclock_s"),
                    st.none(), st.booleans(), maybe(text), st.floats(0, 1e4), st.booleans())),
    st.integers(0, 9), maybe(st.floats(0, 1e10)), maybe(st.just("https://b/heartbeats")))


def same(a: CEJob, b: CEJob) -> None:
    assert a.request == b.request and a.state is b.state and a.lease_req == b.lease_req
    for name in ("node", "node_url", "vwn", "cpu_caps", "capped", "exit_code", "reason", "outcome",
                 "lease_attempts", "lease_node", "lease_start", "accepted"):
        assert getattr(a, name) == getattr(b, name), name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(jobs, min_size=1, max_size=5, unique_by=lambda j: j.request.key))
def test_what_is_saved_is_loaded_in_arrival_order(tmp_path_factory, batch):
    store = CEStore(open_engine(sqlite_url(tmp_path_factory.mktemp("ce") / "ce.db")))
    for job in batch:
        store.save(job)
        store.save(job)                 # an update, not a second row
    loaded = store.load(lambda r: "parsed")
    assert [j.request.key for j in loaded] == [j.request.key for j in batch]
    for a, b in zip(batch, loaded):
        same(a, b)
    store.close()


def test_the_store_on_postgres():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with postgres_server() as url:
        store = CEStore(open_engine(url))
        job = CEJob(JobRequest("id", "k.1", "[]", heartbeat_url="https://b/heartbeats"), None,
                    CEJobState.RUNNING, node_url="https://n:1", vwn="vwn-n-1", cpu_caps=[[1.0, 0.5]],
                    lease_attempts=2, lease_start=5.0, outcome=Outcome.NODE_LOST)
        store.save(job)
        job.to(CEJobState.ABORTED)
        store.save(job)
        (back,) = CEStore(open_engine(url)).load(lambda r: None)
        same(job, back)
        store.close()


def test_a_restarted_agent_serves_the_jobs_it_acknowledged(tmp_path):
    cfg = CEAgentConfig.from_dict({"ce_id": "ce:1/vgrid-vwn-q", "host": "ce", "site": "S", "queue": "q",
                                   "nodes": [], "state_dir": str(tmp_path), "heartbeat_s": 0})
    app = create_app(cfg)
    client = app.test_client()
    body = {"job_id": "https://b/jobs/k1", "key": "k1", "jdl": '[ Executable = "/bin/true"; ]',
            "callback_url": "https://b/jobs/k1/events", "heartbeat_url": "https://b/heartbeats"}
    assert client.post("/jobs", json=body).status_code == 202
    assert client.post("/jobs/k1/cancel").get_json()["state"] == "Cancelled"
    assert client.post("/jobs", json=dict(body, key="k2")).status_code == 202
    app.config["VGRID_AGENT"]._stop.set()        # no orderly shutdown: the database is all there is
    again = create_app(cfg).test_client()
    records = {r["key"]: r for r in again.get("/jobs").get_json()}
    assert records["k1"]["state"] == "Cancelled" and records["k1"]["outcome"] == "cancelled"
    assert records["k2"]["state"] == "Scheduled"
    assert again.post("/jobs", json=dict(body, key="k2")).get_json()["state"] == "Scheduled"   # idempotent
