"""Bulk paths of issue 12: set-wise state transitions in the job store (SQLite and PostgreSQL),
the CE agent's POST /jobs/bulk (idempotent, per-job refusals with a typed outcome) and the
broker's bulk dispatch (one POST per CE per batch; a CE agent without the endpoint still gets
its jobs one POST each)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import requests
from hypothesis import HealthCheck, given, settings, strategies as st

from broker.db import JobStore
from broker.matchmaker import Matchmaker
from broker.service import Broker, BrokerSettings
from infosys.ism import ISM
from infosys.sources import StaticSource
from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.job_states import IllegalTransition, JobState
from vwn_agents.bulk_receiver import SimulatedCEs
from vwn_agents.ce_agent import CEAgentConfig, create_app
from vwn_agents.ce_client import CEAgentClient
from vgrid_runtime.wsgi import BackgroundServer

from .test_broker_api import ce_ad
from .test_broker_blacklist import FakeCE

JDL = '[ Executable = "/bin/true"; ]'
W, R, S = JobState.WAITING, JobState.READY, JobState.SCHEDULED


def store_with(url: str, n: int, state: JobState = W) -> tuple[JobStore, list[str]]:
    store = JobStore(url)
    jobs = store.create_many([{"jdl": JDL, "filename": "j.jdl", "state": state} for _ in range(n)], 1.0)
    return store, [j.key for j in jobs]


def check_guarded_bulk_transitions(store: JobStore, keys: list[str]) -> None:
    """The shared assertions of the SQLite and PostgreSQL tiers (``keys``: 6 Waiting jobs)."""
    oldest = [j.key for j in store.list(states=[W], history=False)][:4]   # the database's order
    claimed = store.claim(2.0, 4)
    assert [j.key for j in claimed] == oldest
    assert all(j.state is R for j in claimed)
    assert store.claim(2.0, 4, after=(claimed[-1].submitted_at, claimed[-1].key)) and \
        store.claim(2.0, 4) == []                                  # nothing Waiting is left
    ready = [j.key for j in claimed]
    store.transition(ready[0], JobState.CANCELLED, 3.0, expect=R)  # a concurrent change ...
    moved = store.transition_many(ready + ["no-such-key"], S, 4.0, expect=R, increment=("dispatch_attempts",),
                                  ce_id="ce-1", ce_url="http://ce-1", last_heard=4.0)
    assert moved == ready[1:]                                      # ... is not overwritten
    assert store.get(ready[0]).state is JobState.CANCELLED
    for key in moved:
        job = store.get(key)
        assert (job.state, job.ce_id, job.ce_url, job.dispatch_attempts, job.last_heard) == (S, "ce-1", "http://ce-1", 1, 4.0)
        assert [h["state"] for h in job.history] == ["Submitted", "Waiting", "Ready", "Scheduled"]
    with pytest.raises(IllegalTransition):                         # loud, and nothing written
        store.transition_many(moved, JobState.READY, 5.0, expect=S)
    assert {store.get(k).state for k in moved} == {S}
    assert store.transition_many([], S, 5.0, expect=R) == []


def test_bulk_transitions_are_guarded_by_the_state_sqlite(tmp_path):
    store, keys = store_with(f"sqlite:///{tmp_path / 'j.db'}", 6)
    try:
        check_guarded_bulk_transitions(store, keys)
    finally:
        store.close()


def test_bulk_transitions_are_guarded_by_the_state_postgresql(pg_url):
    store, keys = store_with(pg_url, 6)
    try:
        check_guarded_bulk_transitions(store, keys)
    finally:
        store.close()


def test_a_large_set_moves_in_chunks_with_one_history_row_each(tmp_path):
    store, keys = store_with(f"sqlite:///{tmp_path / 'j.db'}", 1234)
    try:
        claimed = store.claim(2.0, 5000)
        assert len(claimed) == 1234
        assert len(store.transition_many(keys, W, 3.0, expect=R, reason="again")) == 1234
        assert [(h["state"], h["reason"]) for h in store.get(keys[-1]).history][-2:] == [("Ready", None), ("Waiting", "again")]
    finally:
        store.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from([JobState.SUBMITTED, W, R, S, JobState.CANCELLED]), min_size=1, max_size=12),
       st.sampled_from([(W, R), (R, S), (R, W), (S, JobState.RUNNING)]), st.randoms(use_true_random=False))
def test_property_transition_many_moves_exactly_the_jobs_in_the_expected_state(tmp_path_factory, states, change, rnd):
    """Whatever states the jobs are in, a bulk transition moves exactly those in ``expect``
    (each with one more history row) and leaves every other job as it was."""
    expect, new = change
    store = JobStore(f"sqlite:///{tmp_path_factory.mktemp('p') / 'j.db'}")
    try:
        keys = []
        for state in states:      # each job walked to its state through legal transitions
            key = store.create(JDL, "j.jdl", 1.0).key
            path = {JobState.SUBMITTED: [], W: [W], R: [W, R], S: [W, R, S], JobState.CANCELLED: [W, JobState.CANCELLED]}
            for step in path[state]:
                store.transition(key, step, 1.0)
            keys.append(key)
        before = {k: store.get(k) for k in keys}
        chosen = [k for k in keys if rnd.random() < 0.7]
        moved = store.transition_many(chosen, new, 2.0, expect=expect)
        assert moved == [k for k in chosen if before[k].state is expect]
        for k in keys:
            after = store.get(k)
            if k in moved:
                assert after.state is new and len(after.history) == len(before[k].history) + 1
            else:
                assert after.state is before[k].state and after.history == before[k].history
    finally:
        store.close()


# -- the CE agent's POST /jobs/bulk ---------------------------------------------------------------

@pytest.fixture
def ce_agent(tmp_path):
    cfg = {"ce_id": "ce1.vgrid.local:8443/vgrid-vwn-long", "host": "ce1.vgrid.local", "site": "VGRID-TEST",
           "queue": "long", "nodes": [], "si00": 1500, "ram_mb": 2048, "max_wallclock_s": 7200,
           "vos": ["dteam"], "state_dir": str(tmp_path / "ce")}
    server = BackgroundServer(create_app(CEAgentConfig.from_dict(cfg)))
    yield server.url, server.app.config["VGRID_AGENT"]
    server.close()


def body(key: str, jdl: str = JDL, filename: str = "j.jdl") -> dict:
    return {"job_id": f"http://broker/jobs/{key}", "key": key, "jdl": jdl, "filename": filename,
            "callback_url": "http://127.0.0.1:9/events", "input_sandbox": []}


def test_ce_agent_bulk_accepts_each_job_once_and_refuses_bad_ones_typed(ce_agent):
    url, agent = ce_agent
    client = CEAgentClient(url)
    bad_jdl = body("b2", jdl='[ Executable = "/bin/true";\n  Arguments = ; ]', filename="bad.jdl")
    entries = [body("b1"), bad_jdl, {"key": "b3", "jdl": JDL, "colour": "red"}, "not an object", body("b4")]
    results = client.submit_many(entries)
    assert [r["accepted"] for r in results] == [True, False, False, False, True]
    assert [r["key"] for r in results] == ["b1", "b2", "b3", None, "b4"]
    assert results[0]["created"] and results[0]["state"] == "Scheduled"
    refused = results[1:4]
    assert {r["outcome"] for r in refused} == {"refused"} and {r["status"] for r in refused} == {400}
    assert refused[0]["error"]["file"] == "bad.jdl" and refused[0]["error"]["line"] == 2   # file:line of the JDL
    assert "jobs[2]" in refused[1]["error"]["message"] and "colour" in refused[1]["error"]["message"]
    assert sorted(agent.jobs) == ["b1", "b4"]

    again = client.submit_many([body("b1"), body("b4"), body("b5")])      # a repeated POST
    assert [(r["accepted"], r["created"]) for r in again] == [(True, False), (True, False), (True, True)]
    assert sorted(agent.jobs) == ["b1", "b4", "b5"]                       # nothing created twice
    assert [j["key"] for j in client.jobs()] == ["b1", "b4", "b5"]
    assert client.submit(body("b6"))["key"] == "b6"                         # the single-job API stays


def test_ce_agent_bulk_jobs_are_stored_before_the_answer(tmp_path):
    """What a bulk POST accepted survives a restart of the CE agent (one transaction before
    the answer); a key twice in one request is created once."""
    cfg = CEAgentConfig.from_dict({"ce_id": "ce1.vgrid.local:8443/vgrid-vwn-long", "host": "ce1.vgrid.local",
                                   "site": "S", "queue": "long", "nodes": [], "vos": ["dteam"],
                                   "state_dir": str(tmp_path / "ce")})
    server = BackgroundServer(create_app(cfg))
    try:
        results = CEAgentClient(server.url).submit_many([body("s1"), body("s2"), body("s1")])
        assert [(r["key"], r["created"]) for r in results] == [("s1", True), ("s2", True), ("s1", False)]
    finally:
        server.close()
    again = BackgroundServer(create_app(cfg))          # a restart on the same state directory
    try:
        assert sorted(again.app.config["VGRID_AGENT"].jobs) == ["s1", "s2"]
        assert [r["created"] for r in CEAgentClient(again.url).submit_many([body("s2")])] == [False]
    finally:
        again.close()


def test_ce_agent_bulk_rejects_a_malformed_request_whole(ce_agent):
    url, agent = ce_agent
    for doc in ({"jobs": "x"}, {"no": []}, [1, 2]):
        r = requests.post(f"{url}/jobs/bulk", json=doc, timeout=10)
        assert r.status_code == 400 and "error" in r.json()
    r = requests.post(f"{url}/jobs/bulk", json={"jobs": [body("x")] * 10_001}, timeout=30)
    assert r.status_code == 413 and r.json()["error"]["field"] == "jobs"
    assert agent.jobs == {}


# -- the broker's bulk dispatch -------------------------------------------------------------------

def broker_on(tmp_path: Path, ads: list[dict], **settings) -> Broker:
    clock = SimulatedClock(1000.0)
    ism = ISM([StaticSource(ads)], refresh_s=3600, clock=clock)
    ism.refresh()
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    return Broker(store, ism, Matchmaker(ism.feedback, rng=random.Random(1)), clock,
                  tmp_path / "sandboxes", BrokerSettings(base_url="http://127.0.0.1:1", **settings))


def test_one_post_per_ce_per_batch_and_a_refused_job_back_to_waiting(tmp_path):
    ces = SimulatedCEs()
    receiver = BackgroundServer(ces.app)
    ads = [{**ce_ad(f"ce-{i}:8443/vgrid-vwn-long", 4, 1000), "GlueCEInfoContactString": [f"{receiver.url}/ce/{i}"]}
           for i in range(3)]
    broker = broker_on(tmp_path, ads)
    try:
        ces.refuse = {"refused-1"}
        keys = [broker.submit(f'[ Executable = "/bin/true"; Arguments = "{i}"; ]', "j.jdl", {}).key for i in range(40)]
        broker.store.create_many([{"jdl": JDL, "filename": "j.jdl", "key": "refused-1", "state": W}], 1000.0)
        assert broker.match_pending() == 40
        assert ces.stats() == {"posts": 3, "jobs": 40, "duplicates": 0, "ces": 3}    # one POST per CE
        jobs = broker.store.list(keys=keys)
        assert {j.state for j in jobs} == {S} and {j.dispatch_attempts for j in jobs} == {1}
        assert {j.ce_url for j in jobs} == {f"{receiver.url}/ce/{i}" for i in range(3)}
        assert all([h["state"] for h in j.history] == ["Submitted", "Waiting", "Ready", "Scheduled"] for j in jobs)
        refused = broker.get("refused-1")     # refused for itself: back to Waiting, attempt counted
        assert refused.state is W and refused.dispatch_attempts == 1 and "refused the job" in refused.reason
        assert len(broker.ism.candidates()) == 3                   # the job's fault: no blacklist
        assert broker.match_pending() == 0 and broker.get("refused-1").dispatch_attempts == 2
        assert ces.stats()["duplicates"] == 0
    finally:
        receiver.close()
        broker.store.close()


def test_a_ce_agent_without_the_bulk_endpoint_gets_one_post_per_job(tmp_path):
    old = FakeCE()            # POST /jobs only: /jobs/bulk answers 404
    ads = [{**ce_ad("ce-old:8443/vgrid-vwn-long", 4, 1000), "GlueCEInfoContactString": [old.url]}]
    broker = broker_on(tmp_path, ads)
    try:
        keys = [broker.submit(f'[ Executable = "/bin/true"; Arguments = "{i}"; ]', "j.jdl", {}).key for i in range(5)]
        assert broker.match_pending() == 5 and old.submissions == 5
        assert broker.dispatcher.no_bulk == {old.url}
        assert {j.state for j in broker.store.list(keys=keys)} == {S}
    finally:
        old.server.close()
        broker.store.close()


def test_a_restart_requeues_only_its_own_claims(tmp_path):
    """Brokers sharing one database: the Ready jobs another instance claimed are not this
    restart's to requeue (they may be in flight); unowned ones (older versions) are."""
    store, keys = store_with(f"sqlite:///{tmp_path / 'j.db'}", 5)
    try:
        a = store.claim(2.0, 2, owner="broker-a")
        b = store.claim(2.0, 2, owner="broker-b")
        unowned = [k for k in keys if k not in {j.key for j in a + b}]
        store.transition(unowned[0], R, 2.0, expect=W)                 # the per-job path: no owner
        mine = store.ready_claimed_by("broker-a")
        assert set(mine) == {j.key for j in a} | set(unowned) and not {j.key for j in b} & set(mine)
    finally:
        store.close()


def test_a_claim_put_back_unmatched_leaves_the_history_as_it_was(tmp_path):
    """Matcher passes that find no CE for a job claim it and put it back: the history must not
    grow by two rows a pass (a job waiting an hour for a CE would carry thousands of rows into
    every read); the row's reason says why it waits. Later transitions still record Ready."""
    store = JobStore(f"sqlite:///{tmp_path / 'j.db'}")
    try:
        key = store.create(JDL, "j.jdl", 1.0).key
        store.transition(key, W, 1.0)
        before = store.get(key).history
        for t in (2.0, 3.0, 4.0):                       # three passes without a match
            assert [j.key for j in store.claim(t, 10)] == [key]
            assert store.get(key).history[-1]["state"] == R.value   # the claim is visible
            assert store.transition_many([key], W, t, expect=R, reason="no CE yet", quiet=True) == [key]
            job = store.get(key)
            assert job.state is W and job.reason == "no CE yet"
            assert job.history == before
        store.claim(5.0, 10)
        assert store.transition_many([key], S, 5.0, expect=R) == [key]
        assert [h["state"] for h in store.get(key).history][-3:] == [W.value, R.value, S.value]
        with pytest.raises(ValueError, match="quiet"):
            store.transition_many([key], JobState.RUNNING, 6.0, expect=S, quiet=True)
    finally:
        store.close()
