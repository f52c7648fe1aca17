"""The ISM blacklist wired to dispatch (issue 11), over a real broker and fake CE agents on
loopback: a CE that is unreachable or answers 5xx is left out of matching for ``blacklist_s``
seconds of the broker's (simulated) clock, visible in GET /ism; a 400 refusal is the job's
fault and blacklists nothing."""
import threading

import pytest
import requests
from flask import Flask, jsonify, request

from broker.blacklist import blacklist_reason
from broker.service import BrokerSettings
from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.httpclient import ErrorKind, ServiceError
from vgrid_runtime.wsgi import BackgroundServer

from .broker_site import start_broker
from .test_broker_api import ce_ad, wait_state

GOOD, BAD = "ce-good:8443/vgrid-vwn-long", "ce-bad:8443/vgrid-vwn-long"
BLACKLIST_S = 300.0
# max-rank selection on SI00: the (better published) bad CE is always tried first
JDL = 'Executable = "/bin/true"; FeteRank = false; Rank = other.GlueHostBenchmarkSI00;'


class FakeCE:
    """POST /jobs answering ``status`` (202 = accepted); counts the submissions."""

    def __init__(self, status: int = 202) -> None:
        self.status, self.submissions = status, 0
        self._lock = threading.Lock()
        app = Flask("fake-ce")

        @app.post("/jobs")
        def submit():
            with self._lock:
                self.submissions += 1
            body = request.get_json(force=True)
            if self.status == 202:
                return jsonify({"state": "Scheduled", "key": body["key"]}), 202
            return jsonify({"error": {"message": f"told to answer {self.status}"}}), self.status

        self.server = BackgroundServer(app)
        self.url = self.server.url


def make_site(tmp_path, bad_url: str, blacklist_s: float = BLACKLIST_S):
    good = FakeCE()
    ads = [{**ce_ad(GOOD, 4, 1000), "GlueCEInfoContactString": [good.url]},
           {**ce_ad(BAD, 4, 9000), "GlueCEInfoContactString": [bad_url]}]
    clock = SimulatedClock(1000.0)
    server, broker = start_broker(tmp_path, ads, clock,
                                  BrokerSettings(match_interval_s=0.05, max_dispatch_attempts=2,
                                                 dispatch_timeout_s=5, blacklist_s=blacklist_s))
    return server, broker, good, clock


@pytest.fixture
def site(tmp_path):
    made = []

    def make(bad_url, **kw):
        made.append(make_site(tmp_path, bad_url, **kw))
        server, broker, good, clock = made[-1]
        return server.url, broker, good, clock

    yield make
    for server, broker, good, _ in made:
        broker.stop()
        server.close()
        good.server.close()
        broker.store.close()


def submit(url):
    return requests.post(f"{url}/jobs", data={"jdl": JDL, "filename": "t.jdl"},
                         timeout=5).json()["key"]


def ism_doc(url):
    return requests.get(f"{url}/ism", timeout=5).json()


@pytest.mark.parametrize("failure", ["http-503", "unreachable"])
def test_failing_ce_is_blacklisted_and_the_job_scheduled_on_the_other(site, failure):
    bad = FakeCE(503) if failure == "http-503" else None
    bad_url = bad.url if bad else "http://127.0.0.1:9"     # nothing listens on port 9
    try:
        url, broker, good, clock = site(bad_url)
        job = wait_state(url, submit(url), {"Scheduled", "Aborted"})
        assert job["state"] == "Scheduled" and job["ce"] == GOOD
        assert broker.get(job["key"]).dispatch_attempts == 2               # the bad CE first, then the good one
        reason = ("dispatch refused: HTTP 503" if bad else "dispatch unreachable: ConnectionError")
        doc = ism_doc(url)
        assert doc["blacklist"] == [{"ce": BAD, "until": 1000.0 + BLACKLIST_S, "reason": reason}]
        rows = {c["id"]: c["blacklisted"] for c in doc["ces"]}
        assert rows == {GOOD: None, BAD: {"until": 1300.0, "reason": reason}}
        assert [v.key for v in broker.ism.candidates()] == [GOOD]

        # while blacklisted, the bad CE is not chosen again
        job = wait_state(url, submit(url), {"Scheduled", "Aborted"})
        assert job["ce"] == GOOD and broker.get(job["key"]).dispatch_attempts == 1
        if bad:
            assert bad.submissions == 1

        # the time passes on the broker's clock: a candidate again, and tried first again
        clock.advance(BLACKLIST_S)
        assert ism_doc(url)["blacklist"] == []
        assert sorted(v.key for v in broker.ism.candidates()) == sorted([GOOD, BAD])
        job = wait_state(url, submit(url), {"Scheduled", "Aborted"})
        assert job["ce"] == GOOD and broker.get(job["key"]).dispatch_attempts == 2
        if bad:
            assert bad.submissions == 2
        assert ism_doc(url)["blacklist"][0]["until"] == 1600.0
    finally:
        if bad:
            bad.server.close()


def test_a_400_refusal_is_the_jobs_fault_and_blacklists_nothing(site):
    bad = FakeCE(400)
    try:
        url, broker, good, _ = site(bad.url)
        job = wait_state(url, submit(url), {"Scheduled", "Aborted"})
        assert job["state"] == "Aborted" and job["outcome"] == "dispatch-failed"
        assert bad.submissions == 2 and good.submissions == 0   # chosen again: not blacklisted
        assert ism_doc(url)["blacklist"] == [] and broker.ism.blacklisted() == set()
    finally:
        bad.server.close()


def test_blacklist_s_zero_disables_it(site):
    url, broker, good, _ = site("http://127.0.0.1:9", blacklist_s=0)
    job = wait_state(url, submit(url), {"Scheduled", "Aborted"})
    assert job["state"] == "Aborted" and good.submissions == 0
    assert ism_doc(url)["blacklist"] == []


@pytest.mark.parametrize("kind,status,blacklisted", [
    (ErrorKind.UNREACHABLE, None, True), (ErrorKind.TIMEOUT, None, True),
    (ErrorKind.HTTP, 500, True), (ErrorKind.HTTP, 503, True), (ErrorKind.HTTP, 400, False),
    (ErrorKind.HTTP, 403, False), (ErrorKind.HTTP, 409, False), (ErrorKind.BAD_ANSWER, 200, False)])
def test_which_failures_blacklist(kind, status, blacklisted):
    exc = ServiceError(kind, "HTTP 503 CE on fire" if status else "x", "http://ce/jobs",
                       status=status, cause=None if status else "ReadTimeout")
    assert (blacklist_reason(exc) is not None) is blacklisted


def test_vgrid_info_broker_shows_the_blacklist(site):
    from click.testing import CliRunner
    import json
    from vgrid_cli.infosys_cmds import info_cmd

    url, broker, good, clock = site("http://127.0.0.1:9")
    wait_state(url, submit(url), {"Scheduled", "Aborted"})
    r = CliRunner().invoke(info_cmd, ["--broker", url, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["blacklist"] == [{"ce": BAD, "until": 1300.0,
                                 "reason": "dispatch unreachable: ConnectionError"}]
    assert {c["id"]: c["blacklisted"] is not None for c in doc["ces"]} == {GOOD: False, BAD: True}
    r = CliRunner().invoke(info_cmd, ["--broker", url], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if "ce-bad" in x)
    assert "for 300s: dispatch unreachable" in line
    assert CliRunner().invoke(info_cmd, ["--broker", url, "--ldif", "x"]).exit_code == 2


def test_blacklist_s_is_a_broker_option(tmp_path):
    from broker.config import BrokerConfig
    from broker.server import build_broker

    assert BrokerConfig().blacklist_s == 300.0
    assert "blacklist_s" in BrokerConfig(blacklist_s=-1).validate()
    broker = build_broker(BrokerConfig(state_dir=str(tmp_path / "b"), blacklist_s=42))
    try:
        assert broker.settings.blacklist_s == 42
    finally:
        broker.store.close()
