"""The matcher as its own worker (issue 12): a submission burst over HTTP does not stall the
dispatch of queued jobs, and matcher workers sharing one PostgreSQL database (two brokers, two
workers each) never dispatch one job twice."""
from __future__ import annotations

import random
import threading
from pathlib import Path

import requests
from sqlalchemy import func, select

from broker.api import create_app
from broker.db import JobRow, JobStore
from broker.matchmaker import Matchmaker
from broker.service import Broker, BrokerSettings
from infosys.ism import ISM
from infosys.sources import StaticSource
from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.job_states import JobState
from vwn_agents.bulk_receiver import SimulatedCEs
from vgrid_runtime.wsgi import BackgroundServer

from .test_broker_api import ce_ad
from .waiting import wait_until

JDL = '[ Executable = "/bin/true"; Arguments = "{i}"; Requirements = other.GlueCEInfoTotalCPUs >= {c}; ]'


def simulated_site(n_ces: int):
    ces = SimulatedCEs()
    server = BackgroundServer(ces.app)
    ads = [{**ce_ad(f"ce-{i}:8443/vgrid-vwn-long", 4 + i % 3, 1000 + 10 * i),
            "GlueCEInfoContactString": [f"{server.url}/ce/{i}"]} for i in range(n_ces)]
    return ces, server, ads


def make_broker(tmp_path: Path, url: str, ads, seed: int, **settings) -> Broker:
    clock = SimulatedClock(1000.0)
    ism = ISM([StaticSource(ads)], refresh_s=3600, clock=clock)   # refreshed by the test
    return Broker(JobStore(url), ism, Matchmaker(ism.feedback, rng=random.Random(seed)), clock,
                  tmp_path / "sandboxes", BrokerSettings(match_interval_s=0.05, match_expiry_s=3600, **settings))


def queue(store: JobStore, n: int, prefix: str) -> list[str]:
    specs = [{"jdl": JDL.format(i=i, c=4 + i % 3), "filename": "j.jdl", "key": f"{prefix}{i:06d}",
              "state": JobState.WAITING} for i in range(n)]
    for k in range(0, n, 1000):
        store.create_many(specs[k:k + 1000], 1000.0)
    return [s["key"] for s in specs]


def count(store: JobStore, state: JobState, prefix: str = "") -> int:
    with store.engine.connect() as c:
        return c.scalar(select(func.count()).select_from(JobRow)
                        .where(JobRow.state == state.value, JobRow.key.like(f"{prefix}%")))


def test_a_submission_burst_does_not_stall_dispatch(tmp_path):
    """2,000 queued jobs are dispatched while 4 HTTP clients submit 800 jobs as fast as they
    can: every queued job is Scheduled before the burst is over (the per-job matcher of
    before managed 9-10 dispatches/s under such a burst: 200 s for these 2,000), and in the
    end every job, the burst's too, is Scheduled exactly once."""
    ces, receiver, ads = simulated_site(20)
    broker = make_broker(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}", ads, 1, match_batch=500)
    queued = queue(broker.store, 2000, "q.")
    app = create_app(broker)
    app.config["VGRID_ON_BOUND"] = lambda url: (setattr(broker.settings, "base_url", url), broker.start())
    server = BackgroundServer(app)
    burst, submitted, over = 800, [], threading.Event()
    lock = threading.Lock()

    def client(n: int) -> None:
        http = requests.Session()
        for i in range(n):
            r = http.post(f"{server.url}/jobs", data={"jdl": JDL.format(i=f"b{i}", c=4), "filename": "b.jdl"},
                          timeout=60)
            assert r.status_code == 201, r.text
            with lock:
                submitted.append(r.json()["key"])

    clients = [threading.Thread(target=client, args=(burst // 4,)) for _ in range(4)]
    try:
        for t in clients:
            t.start()
        wait_until(lambda: len(submitted) >= 40, "the burst to be under way", timeout_s=60)
        broker.ism.refresh()          # the matcher may start: its ISM is filled
        broker.wake()
        waiter = threading.Thread(target=lambda: ([t.join() for t in clients], over.set()))
        waiter.start()
        wait_until(lambda: count(broker.store, JobState.SCHEDULED, "q.") == len(queued) or over.is_set(),
                   "the queued jobs to be Scheduled", timeout_s=300, interval_s=0.1)
        assert not over.is_set(), (f"the burst ended before the queued jobs were dispatched: "
                                   f"{count(broker.store, JobState.SCHEDULED, 'q.')} of {len(queued)} Scheduled")
        assert len(submitted) < burst
        waiter.join(timeout=300)
        wait_until(lambda: count(broker.store, JobState.SCHEDULED) == len(queued) + burst,
                   "every job to be Scheduled", timeout_s=120, interval_s=0.1)
        stats = ces.stats()
        assert stats["jobs"] == len(queued) + burst and stats["duplicates"] == 0
        assert stats["posts"] < (len(queued) + burst) / 2          # bulk: far fewer POSTs than jobs
    finally:
        broker.stop()
        server.close()
        receiver.close()
        broker.store.close()


def test_two_brokers_with_two_workers_each_never_dispatch_a_job_twice(tmp_path, pg_url):
    """Four matcher workers (two brokers x two) claim batches of 50 from one PostgreSQL
    database: every job is dispatched once (the receiver saw each dispatch key once), Scheduled
    once (one Scheduled history row), by one broker."""
    ces, receiver, ads = simulated_site(8)
    brokers = [make_broker(tmp_path / f"b{i}", pg_url, ads, i, matcher_workers=2, match_batch=50)
               for i in range(2)]
    keys = queue(brokers[0].store, 1500, "pg.")
    try:
        for b in brokers:
            b.settings.base_url = "http://127.0.0.1:1"
            b.ism.refresh()
        for b in brokers:
            b.start()
        wait_until(lambda: count(brokers[0].store, JobState.SCHEDULED, "pg.") == len(keys),
                   "every job to be Scheduled", timeout_s=180, interval_s=0.1)
        stats = ces.stats()
        assert stats["jobs"] == len(keys) and stats["duplicates"] == 0
        jobs = brokers[0].store.list(keys=keys)
        assert all([h["state"] for h in j.history].count("Scheduled") == 1 for j in jobs)
        assert all([h["state"] for h in j.history].count("Ready") == 1 for j in jobs)
        assert sum(w.passes for b in brokers for w in b.workers) >= 4
    finally:
        for b in brokers:
            b.stop()
        receiver.close()
        for b in brokers:
            b.store.close()
