"""gLite resubmission, heartbeats and Stalled at the broker (issue 11), over a real broker on
loopback and scripted CE agents (tiny Flask apps that accept jobs and record cancels); the
events and heartbeats a CE agent would send are posted by the test, the broker's clock is a
SimulatedClock, and Stalled scans are run by the test (``Broker.check_stalled``) so that "not
Stalled yet" is checked after a scan that had its chance."""
from __future__ import annotations

import threading

import pytest
import requests
from flask import Flask, jsonify, request
from hypothesis import given, strategies as st

import jdl as jdlmod
from broker.resubmission import RetryLimits, decide, resubmittable
from broker.service import BrokerSettings
from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.wsgi import BackgroundServer

from .broker_site import start_broker
from .test_broker_api import ce_ad, run_cli
from .waiting import wait_until

A, B = "ce-a:8443/vgrid-vwn-long", "ce-b:8443/vgrid-vwn-long"
# max-rank on SI00: CE A (9000) is chosen first, B (1000) when A is excluded
RANKED = 'Executable = "/bin/true"; FeteRank = false; Rank = other.GlueHostBenchmarkSI00;'


class ScriptedCE:
    """A CE agent that accepts every job (202) and records submissions and cancels."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.cancels: list[str] = []
        self._lock = threading.Lock()
        app = Flask("scripted-ce")

        @app.post("/jobs")
        def submit():
            with self._lock:
                self.bodies.append(request.get_json(force=True))
            return jsonify({"state": "Scheduled", "key": self.bodies[-1]["key"]}), 202

        @app.post("/jobs/<key>/cancel")
        def cancel(key):
            with self._lock:
                self.cancels.append(key)
            return jsonify({"key": key, "state": "Cancelled"})

        @app.get("/jobs/<key>")
        def get(key):
            if key in self.keys() and key not in self.cancels:
                return jsonify({"key": key, "state": "Scheduled"})
            return jsonify({"error": {"message": "unknown"}}), 404

        self.server = BackgroundServer(app)
        self.url = self.server.url

    def keys(self) -> list[str]:
        with self._lock:
            return [b["key"] for b in self.bodies]


@pytest.fixture
def grid(tmp_path):
    made = []

    def make(ces=(A, B), limits=RetryLimits(), fakes=None, clock=None, **settings):
        fakes = fakes or {ce: ScriptedCE() for ce in ces}
        ads = [{**ce_ad(ce, 4, 9000 if ce == A else 1000), "GlueCEInfoContactString": [f.url]}
               for ce, f in fakes.items()]
        clock = clock or SimulatedClock(1000.0)
        defaults = dict(match_interval_s=0.05, dispatch_timeout_s=5, limits=limits,
                        stalled_resubmit_s=60.0, match_expiry_s=30.0)
        server, broker = start_broker(tmp_path, ads, clock, BrokerSettings(**{**defaults, **settings}))
        made.append((server, broker, fakes))
        return Grid(server.url, broker, fakes, clock)

    yield make
    for server, broker, fakes in made:
        broker.stop()
        server.close()
        broker.store.close()
    for f in {id(f): f for _, _, fakes in made for f in fakes.values()}.values():
        f.server.close()


class Grid:
    def __init__(self, url, broker, fakes, clock):
        self.url, self.broker, self.ce, self.clock = url, broker, fakes, clock

    def submit(self, extra: str = "") -> str:
        r = requests.post(f"{self.url}/jobs", data={"jdl": RANKED + extra, "filename": "r.jdl"}, timeout=10)
        assert r.status_code == 201, r.text
        return r.json()["key"]

    def job(self, key) -> dict:
        return requests.get(f"{self.url}/jobs/{key}", timeout=10).json()

    def at(self, ce: str, dk: str) -> None:
        """Wait until CE ``ce`` received dispatch key ``dk`` and the broker says Scheduled."""
        wait_until(lambda: dk in self.ce[ce].keys(), f"{dk} dispatched to {ce}")
        wait_until(lambda: self.job(dk.split(".")[0])["state"] == "Scheduled", f"{dk} Scheduled")

    def event(self, key, dk, kind, **extra) -> requests.Response:
        return requests.post(f"{self.url}/jobs/{key}/events",
                             json={"event": kind, "key": dk, **extra}, timeout=10)

    def heartbeat(self, ce: str, jobs: list[dict], interval_s=10.0, url=None) -> requests.Response:
        return requests.post(f"{self.url}/heartbeats", timeout=10, json={
            "ce": ce, "url": url or self.ce[ce].url, "interval_s": interval_s,
            "time": self.clock.now(), "jobs": jobs})


def test_deep_resubmission_after_node_lost_goes_to_another_ce_and_past_events_are_ignored(grid):
    g = grid()
    key = g.submit("RetryCount = 2; ShallowRetryCount = 1;")
    g.at(A, key)
    body = g.ce[A].bodies[0]
    assert body["heartbeat_url"] == f"{g.url}/heartbeats" and body["key"] == key
    assert body["callback_url"] == f"{g.url}/jobs/{key}/events"
    assert g.event(key, key, "running", node="n1", vwn="v1").json()["state"] == "Running"
    g.event(key, key, "aborted", outcome="node-lost", reason="node agent http://n1 lost: silent 31 s")
    g.at(B, f"{key}.1")
    job = g.job(key)
    assert job["attempt"] == 1 and job["dispatch_key"] == f"{key}.1" and job["ce"] == B
    assert job["deep_resubmissions"] == 1 and job["shallow_resubmissions"] == 0
    assert job["failed_ces"] == [A] and job["node"] is None
    waiting = [h for h in job["history"] if h["state"] == "Waiting" and h["reason"]]
    assert f"attempt 0 at CE {A} failed (node-lost)" in waiting[-1]["reason"]
    assert "deep resubmission 1/2 as attempt 1" in waiting[-1]["reason"]
    assert B not in job["failed_ces"] and g.ce[A].keys() == [key]       # never back to A
    # a late event of attempt 0 changes nothing
    late = g.event(key, key, "done", exit_code=0)
    assert late.status_code == 200 and late.json()["ignored"] == "past attempt"
    assert g.job(key)["state"] == "Scheduled"
    assert g.event(key, f"{key}.1", "running").json()["state"] == "Running"
    shown = run_cli("status", key, env_url=g.url)
    assert shown.returncode == 0 and "Running (attempt 1: deep 1, shallow 0)" in shown.stdout, shown
    done = g.event(key, f"{key}.1", "done", exit_code=0).json()
    assert done["state"] == "Done" and done["attempt"] == 1
    # the sandbox capability of attempt 0 no longer opens the sandbox
    old = g.broker.sandbox_token(key)
    assert not g.broker.valid_token(key, old)
    assert g.broker.valid_token(key, g.broker.sandbox_token(f"{key}.1"))


def test_shallow_resubmission_disabled_counts_every_failure_as_deep(grid):
    g = grid()
    key = g.submit("RetryCount = 1; ShallowRetryCount = -1;")
    g.at(A, key)
    g.event(key, key, "aborted", outcome="wrapper-error", reason="input sandbox download failed")
    g.at(B, f"{key}.1")                     # never started, yet a deep resubmission
    job = g.job(key)
    assert job["deep_resubmissions"] == 1 and job["shallow_resubmissions"] == 0
    assert "deep resubmission 1/1" in job["history"][-3]["reason"]
    end = g.event(key, f"{key}.1", "aborted", outcome="not-started", reason="no node took it").json()
    assert end["state"] == "Aborted" and end["outcome"] == "not-started"
    assert "RetryCount = 1 exhausted" in end["reason"]
    assert "shallow resubmission disabled (ShallowRetryCount = -1)" in end["reason"]


def test_shallow_resubmission_before_start_then_count_exhausted(grid):
    g = grid()
    key = g.submit("RetryCount = 0; ShallowRetryCount = 1;")
    g.at(A, key)
    g.event(key, key, "aborted", outcome="lease-rejected", reason="no room")
    g.at(B, f"{key}.1")
    job = g.job(key)
    assert job["shallow_resubmissions"] == 1 and job["deep_resubmissions"] == 0
    assert "shallow resubmission 1/1" in [h for h in job["history"] if h["state"] == "Waiting"][-1]["reason"]
    g.event(key, f"{key}.1", "running")
    end = g.event(key, f"{key}.1", "aborted", outcome="node-shutdown", reason="node agent shut down").json()
    assert end["state"] == "Aborted" and "RetryCount = 0 exhausted (0 deep resubmissions used)" in end["reason"]


def test_max_retry_count_caps_the_jdl(grid):
    g = grid(limits=RetryLimits(max_retry_count=1))
    key = g.submit("RetryCount = 5;")
    g.at(A, key)
    g.event(key, key, "running")
    g.event(key, key, "aborted", outcome="node-lost", reason="lost")
    g.at(B, f"{key}.1")
    g.event(key, f"{key}.1", "running")
    end = g.event(key, f"{key}.1", "aborted", outcome="node-lost", reason="lost again").json()
    assert end["state"] == "Aborted"
    assert "the broker's MaxRetryCount = 1 exhausted (RetryCount = 5)" in end["reason"]


def test_the_jobs_own_failures_are_not_resubmitted(grid):
    g = grid()
    k1, k2 = g.submit("RetryCount = 3;"), g.submit("RetryCount = 3; Arguments = \"x\";")
    g.at(A, k1)
    g.at(A, k2)
    g.event(k1, k1, "running")
    end = g.event(k1, k1, "aborted", outcome="memory-limit", reason="OOM-killed").json()
    assert end["state"] == "Aborted" and end["attempt"] == 0 and end["reason"] == "OOM-killed"
    g.event(k2, k2, "running")
    assert g.event(k2, k2, "done", exit_code=3).json()["state"] == "Done"


def test_a_resubmitted_job_never_goes_back_to_the_ce_it_failed_on(grid):
    g = grid(ces=(A,))
    key = g.submit("RetryCount = 1;")
    g.at(A, key)
    g.event(key, key, "running")
    g.event(key, key, "aborted", outcome="node-lost", reason="lost")
    wait_until(lambda: g.job(key)["state"] == "Waiting", "back to Waiting")
    g.clock.advance(31.0)                  # match_expiry_s after it went back to Waiting
    end = wait_until(lambda: (j := g.job(key))["state"] == "Aborted" and j, "Aborted, no other CE")
    assert end["outcome"] == "no-resources" and f"not on the CEs it failed on: {A}" in end["reason"]
    assert g.ce[A].keys() == [key]


def test_heartbeats_keep_a_job_then_stalled_recovered_and_resubmitted(grid):
    g = grid(stalled_resubmit_s=60.0)
    key = g.submit("RetryCount = 1;")
    g.at(A, key)
    g.event(key, key, "running")
    entry = {"key": key, "state": "Running", "node": "http://n1", "vwn": "v1", "silent_s": 0.0}
    for _ in range(4):                      # 4 heartbeats 10 s apart: never Stalled
        g.clock.advance(10.0)
        assert g.heartbeat(A, [entry]).json() == {"unknown": []}
        g.broker.check_stalled(force=True)
        assert g.job(key)["state"] == "Running"
    g.clock.advance(29.0)                  # 29 s of silence: still fine
    g.broker.check_stalled(force=True)
    assert g.job(key)["state"] == "Running"
    g.clock.advance(2.0)                   # 31 s > 3 x 10 s
    g.broker.check_stalled(force=True)
    job = g.job(key)
    assert job["state"] == "Stalled" and job["stalled_from"] == "Running"
    assert "not heard of for 31 s" in job["reason"]
    assert g.heartbeat(A, [entry]).json() == {"unknown": []}     # heard again: back
    assert g.job(key)["state"] == "Running"
    # a heartbeat that lists the job with a long silence of its VWN does not keep it
    g.clock.advance(10.0)
    g.heartbeat(A, [{**entry, "silent_s": 35.0}])
    g.broker.check_stalled(force=True)
    assert g.job(key)["state"] == "Stalled"
    g.clock.advance(59.0)
    g.broker.check_stalled(force=True)
    assert g.job(key)["state"] == "Stalled"
    g.clock.advance(2.0)                   # Stalled for stalled_resubmit_s: resubmitted
    g.broker.check_stalled(force=True)
    assert g.ce[A].cancels == [key]        # the old attempt was cancelled at its CE
    g.at(B, f"{key}.1")
    job = g.job(key)
    assert job["deep_resubmissions"] == 1 and job["failed_ces"] == [A]
    assert any("failed (stalled)" in (h["reason"] or "") for h in job["history"])
    # CE A comes back and lists the old attempt: unknown, so it kills it
    assert g.heartbeat(A, [entry]).json() == {"unknown": [key]}


def test_stalled_without_retries_ends_aborted_stalled(grid):
    g = grid(stalled_resubmit_s=0.0)
    key = g.submit("RetryCount = 0; ShallowRetryCount = 0;")
    g.at(A, key)
    g.heartbeat(A, [{"key": key, "state": "Scheduled", "silent_s": None}])
    g.clock.advance(31.0)
    g.broker.check_stalled(force=True)
    assert g.job(key)["stalled_from"] == "Scheduled"
    g.clock.advance(1.0)
    g.broker.check_stalled(force=True)
    end = g.job(key)
    assert end["state"] == "Aborted" and end["outcome"] == "stalled"
    # deep although it was Scheduled: it may have started after its CE went silent
    assert "RetryCount = 0 exhausted" in end["reason"] and "Stalled" in end["reason"]
    assert "ShallowRetryCount" not in end["reason"]


def test_an_event_brings_a_stalled_job_back(grid):
    g = grid()
    key = g.submit()
    g.at(A, key)
    g.heartbeat(A, [])
    g.clock.advance(31.0)
    g.broker.check_stalled(force=True)
    assert g.job(key)["state"] == "Stalled"
    job = g.event(key, key, "running").json()
    assert job["state"] == "Running"
    assert [h["state"] for h in job["history"]][-3:] == ["Stalled", "Scheduled", "Running"]


def test_a_restarted_broker_does_not_stall_jobs_for_its_own_downtime(grid):
    g = grid()
    key = g.submit("RetryCount = 1;")
    g.at(A, key)
    g.event(key, key, "running")
    g.heartbeat(A, [{"key": key, "state": "Running", "silent_s": 0.0}])
    g.broker.stop()
    g.clock.advance(300.0)                 # the broker was down for 5 minutes
    g2 = grid(fakes=g.ce, clock=g.clock)   # same database and CE agents
    assert g2.job(key)["state"] == "Running"
    g2.broker.check_stalled(force=True)
    assert g2.job(key)["state"] == "Running"
    g2.clock.advance(31.0)                 # but 3 intervals after the restart without news: Stalled
    g2.broker.check_stalled(force=True)
    assert g2.job(key)["state"] == "Stalled"


def test_a_restarted_broker_resubmits_what_the_ce_forgot_under_a_new_key(grid):
    """Resync by dispatch key: a CE that answers 404 for the attempt (it lost it) makes it a
    deep resubmission elsewhere, never the same key again (issue 11's "stays Scheduled")."""
    g = grid()
    key = g.submit("RetryCount = 1; ShallowRetryCount = 0;")
    g.at(A, key)
    g.broker.stop()
    g.ce[A].cancels.append(key)           # the CE agent lost the job (GET answers 404)
    g2 = grid(fakes=g.ce, clock=g.clock)
    g2.at(B, f"{key}.1")
    job = g2.job(key)
    assert job["deep_resubmissions"] == 1 and job["failed_ces"] == [A]
    assert any(f"no longer knows attempt 0 ({key})" in (h["reason"] or "") for h in job["history"])


def test_heartbeat_entries_of_jobs_at_another_ce_are_not_applied(grid):
    g = grid()
    key = g.submit()
    g.at(A, key)
    g.heartbeat(A, [])
    before = g.job(key)["last_heard"]
    g.clock.advance(5.0)
    answer = g.heartbeat(B, [{"key": key, "state": "Running", "silent_s": 0.0},
                             {"key": "nosuchjob", "state": "Running", "silent_s": None}]).json()
    assert answer == {"unknown": [key, "nosuchjob"]}
    assert g.job(key)["last_heard"] == before
    bad = g.heartbeat(A, [], interval_s=0)
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "interval_s"


def test_compound_nodes_are_resubmitted_too(grid):
    g = grid()
    text = ('[ Type = "collection"; DefaultNodeRetryCount = 1; Nodes = {'
            '[ Executable = "/bin/true"; FeteRank = false; Rank = other.GlueHostBenchmarkSI00; ],'
            '[ Executable = "/bin/false"; FeteRank = false; Rank = other.GlueHostBenchmarkSI00; ] }; ]')
    parent = requests.post(f"{g.url}/jobs", data={"jdl": text, "filename": "c.jdl"}, timeout=10).json()["key"]
    wait_until(lambda: len(g.ce[A].keys()) == 2, "both nodes at A")
    n1, n2 = g.ce[A].keys()
    wait_until(lambda: all(g.job(k)["state"] == "Scheduled" for k in (n1, n2)), "nodes Scheduled")
    g.event(n1, n1, "running")
    g.event(n1, n1, "aborted", outcome="node-lost", reason="lost")
    g.at(B, f"{n1}.1")
    for k, dk in ((n1, f"{n1}.1"), (n2, n2)):
        g.event(k, dk, "running")
        g.event(k, dk, "done", exit_code=0)
    assert wait_until(lambda: g.job(parent)["state"] == "Done", "the collection Done")


# -- the decision itself ------------------------------------------------------------------------

counts = st.integers(-1, 12)


@given(retry=st.one_of(st.none(), counts), shallow=st.one_of(st.none(), counts),
       deep_used=st.integers(0, 12), shallow_used=st.integers(0, 12), started=st.booleans(),
       max_deep=st.integers(0, 12), max_shallow=st.integers(0, 12))
def test_decide_follows_glite(retry, shallow, deep_used, shallow_used, started, max_deep, max_shallow):
    limits = RetryLimits(max_deep, max_shallow, default_retry_count=1, default_shallow_retry_count=2)
    d = decide(retry, shallow, deep_used, shallow_used, started, limits)
    r = 1 if retry is None else retry
    s = 2 if shallow is None else shallow
    deep = started or s == -1
    limit = max(0, min(r, max_deep)) if deep else max(0, min(s, max_shallow))
    used = deep_used if deep else shallow_used
    assert d.limit == limit and d.used == used
    if used < limit:
        assert d.kind == ("deep" if deep else "shallow") and d.why is None
    else:
        assert d.kind is None and ("RetryCount" if deep else "ShallowRetryCount") in d.why
        assert "exhausted" in d.why


def test_resubmittable_outcomes():
    for code in ("node-lost", "node-shutdown", "wrapper-error", "not-started", "lease-rejected",
                 "stalled", "preempted"):
        assert resubmittable(code), code
    for code in (None, "exit", "memory-limit", "disk-quota", "wallclock-limit", "cancelled",
                 "no-resources", "dispatch-failed", "dependency-failed", "some-future-code"):
        assert not resubmittable(code), code


@given(n=st.integers(-50, 50), attr=st.sampled_from(["RetryCount", "ShallowRetryCount"]))
def test_jdl_accepts_minus_one_and_refuses_lower_naming_the_field(n, attr):
    text = f'[ Executable = "/bin/true"; {attr} = {n}; ]'
    if n >= -1:
        desc = jdlmod.parse_jdl(text, "r.jdl", local_files=False)
        assert (desc.retry_count if attr == "RetryCount" else desc.shallow_retry_count) == n
    else:
        with pytest.raises(jdlmod.JDLError, match=f"{attr} must be >= -1, not {n}"):
            jdlmod.parse_jdl(text, "r.jdl", local_files=False)


def test_exclusion_keeps_the_per_snapshot_grouping():
    """``match(..., exclude=...)`` filters one job's candidates after the grouping: the next job
    with the same JDL text (and no exclusion) still sees every CE from the same evaluation."""
    import random

    from broker.matchmaker import Matchmaker
    from infosys.feedback import FeedbackCounters

    ads = [ce_ad(c, 4, 1000) for c in (A, B, "ce-c:8443/vgrid-vwn-long")]
    mm = Matchmaker(FeedbackCounters(), rng=random.Random(1))
    desc = jdlmod.parse_jdl(RANKED, "r.jdl", local_files=False)
    ids = lambda r: sorted(c.ce_id for c in r.candidates)   # noqa: E731
    everything = ids(mm.match(desc, ads, now=0.0))
    assert ids(mm.match(desc, ads, now=0.0, exclude={A, B})) == ["ce-c:8443/vgrid-vwn-long"]
    assert ids(mm.match(desc, ads, now=0.0)) == everything and len(everything) == 3
    assert len(mm._groups) == 1                         # one evaluation served all three


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                           max_leaves=12)


@given(body=st.one_of(json_values, st.fixed_dictionaries(
    {"ce": st.one_of(st.text(max_size=5), json_values), "url": st.sampled_from(["http://c:1", "ftp://x", 3, None]),
     "interval_s": st.one_of(st.floats(), st.integers(-2, 20), json_values),
     "jobs": st.one_of(st.lists(st.fixed_dictionaries({"key": json_values, "silent_s": json_values}), max_size=3),
                       json_values)})))
def test_heartbeat_parser_accepts_or_names_the_field(body):
    """Any JSON body: parsed into (ce, url, interval > 0, jobs with string keys), or a
    BrokerError 400 naming the field; never another exception."""
    from broker.heartbeats import parse
    from broker.transfers import BrokerError
    try:
        ce, url, interval, jobs = parse(body)
    except BrokerError as exc:
        assert exc.status == 400 and exc.details.get("field")
        return
    assert isinstance(ce, str) and ce and url.startswith("http") and interval > 0
    assert all(isinstance(e["key"], str) and e["key"] for e in jobs)
