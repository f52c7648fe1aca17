"""Orphaned Ready claims (issue 12, broker.claims): a matcher worker that died holding claims
does not hold its jobs for ever; another broker on the same PostgreSQL database requeues them
after the claim lease and matches them, each dispatched once."""
from __future__ import annotations

import threading

from broker import matcher_worker
from broker.config import BrokerConfig
from broker.db import JobStore
from vgrid_runtime.job_states import JobState

from .test_matcher_worker import count, make_broker, queue, simulated_site
from .waiting import wait_until


def test_claims_of_a_dead_worker_are_requeued_after_the_lease_and_dispatched_once(tmp_path, pg_url):
    ces, receiver, ads = simulated_site(6)
    dead = make_broker(tmp_path / "dead", pg_url, ads, 1, match_batch=100)
    live = make_broker(tmp_path / "live", pg_url, ads, 2, matcher_workers=2, match_batch=50,
                       claim_lease_s=120.0)
    try:
        keys = queue(dead.store, 600, "lease.")
        # the dead broker's worker claimed 300 jobs, then died before dispatching them
        held = dead.store.claim(dead.clock.now(), 300, owner="dead-broker")
        assert len(held) == 300
        live.ism.refresh()
        live.clock.advance(60.0)
        assert live.claims.sweep(live.clock.now()) == 0              # the lease still runs
        stores = [live.store, JobStore(pg_url)]
        done = []
        workers = [threading.Thread(target=lambda s=s: done.append(matcher_worker.match_pass(live, s)))
                   for s in stores]
        for t in workers:
            t.start()
        for t in workers:
            t.join(timeout=300)
        assert count(live.store, JobState.SCHEDULED, "lease.") == 300     # the unclaimed ones only
        assert count(live.store, JobState.READY, "lease.") == 300
        live.clock.advance(61.0)                                          # 121 s after the claim
        # a sweep and two workers matching at once: every job dispatched once
        sweeper = threading.Thread(target=lambda: live.claims.sweep(live.clock.now()))
        workers = [threading.Thread(target=matcher_worker.match_pass, args=(live, s)) for s in stores]
        sweeper.start()
        sweeper.join(timeout=120)
        for t in workers:
            t.start()
        for t in workers:
            t.join(timeout=300)
        wait_until(lambda: count(live.store, JobState.SCHEDULED, "lease.") == 600,
                   "every job Scheduled", timeout_s=60)
        assert live.claims.requeued == 300
        stats = ces.stats()
        assert stats["jobs"] == 600 and stats["duplicates"] == 0
        job = live.store.get(held[0].key)
        states = [h["state"] for h in job.history]
        assert states == ["Submitted", "Waiting", "Ready", "Waiting", "Ready", "Scheduled"]
        assert "claim lease expired" in job.history[3]["reason"]
        assert set(keys) >= {h.key for h in held}
        for s in stores[1:]:
            s.close()
    finally:
        receiver.close()
        dead.store.close()
        live.store.close()


def test_a_recent_claim_is_not_swept_and_the_lease_is_validated(tmp_path):
    ces, receiver, ads = simulated_site(2)
    b = make_broker(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}", ads, 1, claim_lease_s=30.0)
    try:
        queue(b.store, 10, "r.")
        b.store.claim(b.clock.now(), 4, owner="x")
        b.clock.advance(29.0)
        assert b.claims.maybe(b.clock.now()) == 0
        assert b.claims.maybe(b.clock.now() + 1.5) == 0      # swept at most every lease / 4
        b.clock.advance(8.0)
        assert b.claims.maybe(b.clock.now()) == 4
        assert count(b.store, JobState.WAITING, "r.") == 10
    finally:
        receiver.close()
        b.store.close()
    assert BrokerConfig(claim_lease_s=-1).validate() == "field 'claim_lease_s' must be >= 0"
