"""Several broker processes on one port (broker.front_ends, issue 12 "Reads that scale"):
real ``vgrid serve broker`` processes sharing a port with SO_REUSEPORT and one SQLite database,
and the rule for two processes changing one job (the row is the truth; the loser answers 503
and its retry is judged against the new row)."""
from __future__ import annotations

import http.client
import json
import os
import random
import signal
from urllib.parse import urlsplit

import requests

from broker.api import create_app
from broker.config import BrokerConfig
from broker.federation.peers import PeerConfig
from broker.db import JobStore
from broker.matchmaker import Matchmaker
from broker.service import Broker, BrokerSettings
from infosys.feedback import FeedbackCounters
from infosys.ism import ISM
from infosys.sources import StaticSource
from vgrid_cli.services import ServiceGroup
from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.job_states import JobState

from .waiting import wait_until

JDL = '[ Executable = "/bin/true"; ]'


def _children(pid: int) -> list[int]:
    """Live front ends started by broker process ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z" and b"broker.server" in cmd:
            out.append(int(entry))
    return out


def _sockets(pid: int) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_two_processes_share_the_port_and_the_database(tmp_path):
    (tmp_path / "svc").mkdir()
    with ServiceGroup(tmp_path / "svc") as group:
        svc = group.start("broker", "b", f'port = 0\nstate_dir = "{tmp_path / "broker"}"\nce_urls = []\n'
                          'front_ends = 2\nmatch_interval_s = 60\n')
        main = svc.pids()[0]
        child = wait_until(lambda: _children(main), "the second front end to start")[0]
        host, port = urlsplit(svc.url).hostname, urlsplit(svc.url).port
        wait_until(lambda: _sockets(child) >= 1 and _listening(child, port), "the front end to listen")
        before = {p: _sockets(p) for p in (main, child)}
        conns, keys = [], []
        for i in range(40):       # 40 kept-alive connections: the kernel spreads them over both
            c = http.client.HTTPConnection(host, port, timeout=30)
            if i % 4 == 0:
                c.request("POST", "/jobs", body=f"jdl={JDL}&filename=f{i}.jdl",
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
                r = c.getresponse()
                assert r.status == 201
                keys.append(json.loads(r.read())["key"])
            else:
                c.request("GET", "/health")
                assert c.getresponse().read()
            conns.append(c)
        gained = {p: _sockets(p) - before[p] for p in (main, child)}
        assert gained[main] >= 1 and gained[child] >= 1, gained
        for c in conns:           # every job is readable through every connection
            key = random.choice(keys)
            c.request("GET", f"/jobs/{key}")
            r = c.getresponse()
            body = json.loads(r.read())
            assert r.status == 200 and body["key"] == key and body["id"] == f"{svc.url}/jobs/{key}"
            c.close()
        group.stop(svc)
        assert wait_until(lambda: not _alive(child), "the front end to stop with the broker")


def _listening(pid: int, port: int) -> bool:
    """Some socket of the system listens on ``port`` (the front end binds it once started)."""
    try:
        r = requests.get(f"http://127.0.0.1:{port}/health", timeout=5)
        return r.status_code == 200 and _alive(pid)
    except requests.RequestException:
        return False


def test_a_front_end_dies_with_a_broker_killed_by_sigkill(tmp_path):
    (tmp_path / "svc").mkdir()
    with ServiceGroup(tmp_path / "svc") as group:
        svc = group.start("broker", "b", f'port = 0\nstate_dir = "{tmp_path / "broker"}"\nce_urls = []\n'
                          'front_ends = 2\n')
        main = svc.pids()[0]
        child = wait_until(lambda: _children(main), "the second front end to start")[0]
        os.kill(main, signal.SIGKILL)
        svc.process.wait()
        assert wait_until(lambda: not _alive(child), "PR_SET_PDEATHSIG to stop the front end")


def test_front_ends_are_validated():
    assert "front_ends" in BrokerConfig(front_ends=0).validate()
    peers = [PeerConfig(name="b", url="https://b.example:8440")]  # a gateway: one process

    assert "front_ends" in BrokerConfig(front_ends=2, peers=peers).validate()


def test_of_two_processes_changing_one_job_one_wins_and_the_other_retries(tmp_path):
    """Broker A applies a job's ``done`` event; broker B (another process over the same
    database) had read the job before that commit and applies ``aborted``: its conditional
    UPDATE finds nothing, it answers 503 reason retry and stores nothing; the CE's retry is
    judged against the new row (an ended job: ignored)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    clock = SimulatedClock(1000.0)

    def broker() -> tuple[Broker, object]:
        ism = ISM([StaticSource([])], refresh_s=3600, clock=clock, feedback=FeedbackCounters())
        b = Broker(JobStore(url), ism, Matchmaker(ism.feedback, rng=random.Random(1)), clock,
                   tmp_path / "sandboxes", BrokerSettings())
        b.settings.base_url = "http://broker.test"
        return b, create_app(b).test_client()

    (a, client_a), (b, client_b) = broker(), broker()
    try:
        key = client_a.post("/jobs", data={"jdl": JDL, "filename": "j.jdl"}).get_json()["key"]
        for new in (JobState.WAITING, JobState.READY):
            if a.store.get(key).state is not new:
                a.store.transition(key, new, clock.now())
        a.store.transition(key, JobState.SCHEDULED, clock.now(), ce_url="https://ce.test", ce_id="ce.test")
        a.store.transition(key, JobState.RUNNING, clock.now())
        seen_by_b = b.store.get(key)                     # B reads Running ...
        assert client_a.post(f"/jobs/{key}/events", json={"event": "done", "exit_code": 0}).status_code == 200
        real_get = b.store.get
        b.store.get = lambda k: seen_by_b if k == key else real_get(k)   # ... and acts on it now
        lost = client_b.post(f"/jobs/{key}/events", json={"event": "aborted", "reason": "x"})
        assert lost.status_code == 503 and lost.get_json()["error"]["reason"] == "retry"
        b.store.get = real_get
        retry = client_b.post(f"/jobs/{key}/events", json={"event": "aborted", "reason": "x"})
        assert retry.status_code == 200 and retry.get_json()["state"] == "Done"
        job = a.store.get(key)
        assert job.state is JobState.DONE and job.exit_code == 0
        assert [h["state"] for h in job.history].count("Done") == 1
        assert not any(h["state"] in ("Aborted", "Waiting") for h in job.history[4:])
    finally:
        a.store.close()
        b.store.close()
