"""The persistent outbox (contract 2): stored before post returns, reloaded in order, bounded, and
giving up -- counted by reason -- instead of retrying for ever."""
from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings, strategies as st

from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.sqldb import open_engine, sqlite_url
from vwn_agents.outbox import Outbox

from .waiting import wait_until


def closed_port_url() -> str:
    """A loopback URL nobody listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/events"


def test_events_survive_the_sender_and_are_reloaded_in_order(tmp_path, receiver):
    engine = open_engine(sqlite_url(tmp_path / "a.db"))
    box = Outbox(retry_initial_s=0.05, retry_max_s=0.1, name="n1-events", engine=engine)
    dead = closed_port_url()
    for i in range(4):
        box.post(dead, {"key": "ob-r", "n": i}, "ob-r")
    box.post(dead, {"key": "ob-s", "n": 9}, "ob-s")
    wait_until(lambda: all(p["attempts"] for p in box.pending()[:1]), "a failed attempt")
    box.close()                                     # the sender "dies" with 5 events undelivered
    other = Outbox(name="other-box", engine=engine)  # another box in the same database sees none
    assert other.pending() == []
    other.close()
    again = Outbox(retry_initial_s=0.05, name="n1-events", engine=engine)
    assert [p["payload"]["n"] for p in again.pending()] == [0, 1, 2, 3, 9]
    assert again.stats()["pending"] == 5 and again.stats()["persistent"]
    again.close()
    # delivered events leave the table
    live = Outbox(retry_initial_s=0.05, name="live", engine=engine)
    for i in range(3):
        live.post(f"{receiver.url}/events", {"key": "ob-l", "n": i}, "ob-l")
    assert live.flush(10) and [e["n"] for e in receiver.events_for("ob-l")] == [0, 1, 2]
    live.close()
    assert Outbox(name="live", engine=engine).pending() == []        # delivered rows are deleted


def test_refused_and_unusable_urls_are_dropped_and_counted(receiver):
    box = Outbox(retry_initial_s=0.05)
    box.post(f"{receiver.url}/nowhere", {"key": "d1"}, "d1")            # 404
    box.post("http+unix://%2Frun%2Fsock/events", {"key": "d2"}, "d2")  # no adapter for it
    box.post("no-scheme-at-all", {"key": "d3"}, "d3")
    assert box.flush(10)
    assert box.dropped == {"refused": 1, "bad-url": 2}
    assert {d["payload"]["key"]: d["reason"] for d in box.drops} == {"d1": "refused", "d2": "bad-url",
                                                                    "d3": "bad-url"}
    box.close()


def test_an_unreachable_receiver_is_retried_until_give_up_s_of_the_clock():
    clock = SimulatedClock(1000.0)
    box = Outbox(retry_initial_s=0.02, retry_max_s=0.05, give_up_s=60.0, clock=clock)
    box.post(closed_port_url(), {"key": "g1"}, "g1")
    wait_until(lambda: box.pending() and box.pending()[0]["attempts"] >= 3, "3 failed attempts")
    assert box.dropped == {}                      # connection refused: retried, not dropped
    clock.advance(61)
    assert box.flush(10)
    assert box.dropped == {"gave-up": 1} and "still failing after 60 s" in box.drops[0]["error"]
    box.close()


@pytest.mark.parametrize("persistent", [True, False])
def test_max_items_drops_the_oldest(tmp_path, persistent):
    engine = open_engine(sqlite_url(tmp_path / "b.db")) if persistent else None
    box = Outbox(retry_initial_s=5, name="small", engine=engine, max_items=3)
    dead = closed_port_url()
    # The sender may not take an event while they are posted: an event in flight is never the
    # one dropped (documented), and on a loaded machine m0 could still be in flight at m3.
    with box._cond:
        for i in range(5):
            box.post(dead, {"key": f"m{i}", "n": i}, f"m{i}")
    assert box.dropped == {"overflow": 2}
    assert sorted(p["payload"]["n"] for p in box.pending()) == [2, 3, 4]
    box.close()
    if persistent:
        assert sorted(p["payload"]["n"] for p in Outbox(name="small", engine=engine).pending()) == [2, 3, 4]


def test_an_event_the_database_cannot_store_is_still_delivered(tmp_path, receiver):
    engine = open_engine(sqlite_url(tmp_path / "c.db"))
    box = Outbox(retry_initial_s=0.05, name="broken", engine=engine)
    engine.dispose()
    (tmp_path / "c.db").unlink()
    (tmp_path / "c.db").mkdir()                     # the file is gone, a directory in its place
    box.post(f"{receiver.url}/events", {"key": "ob-db", "n": 1}, "ob-db")
    assert box.flush(10) and [e["n"] for e in receiver.events_for("ob-db")] == [1]
    box.close()


@settings(max_examples=6, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=10), st.integers(0, 2),
       st.integers(1, 4))
def test_persistent_outbox_keeps_order_per_job(tmp_path_factory, receiver, keys, failures, senders):
    engine = open_engine(sqlite_url(tmp_path_factory.mktemp("ob") / "o.db"))
    tag = f"p{id(keys)}{len(receiver.events)}"
    receiver.fail_events = failures
    box = Outbox(retry_initial_s=0.01, name=tag, engine=engine, senders=senders)
    for i, k in enumerate(keys):
        box.post(f"{receiver.url}/events", {"key": f"{tag}-{k}", "n": i}, f"{tag}-{k}")
    assert box.flush(20)
    box.close()
    for k in set(keys):
        assert [e["n"] for e in receiver.events_for(f"{tag}-{k}")] == [i for i, kk in enumerate(keys) if kk == k]


def test_several_senders_keep_each_jobs_order_and_a_stuck_job_holds_back_only_itself(receiver):
    """Issue 12: ``senders`` deliver events of different jobs at once; one job's events stay
    in order, and a job whose receiver never answers does not delay the others."""
    import threading
    from flask import Flask
    from vgrid_runtime.wsgi import BackgroundServer
    release = threading.Event()
    app = Flask("stuck")
    app.add_url_rule("/events", "events", lambda: ("", 204) if release.wait(60) else ("", 503),
                     methods=["POST"])
    stuck = BackgroundServer(app)
    box = Outbox(retry_initial_s=0.05, timeout_s=60, senders=3)
    try:
        box.post(f"{stuck.url}/events", {"key": "os-stuck"}, "os-stuck")
        for i in range(20):
            for key in ("os-a", "os-b"):
                box.post(f"{receiver.url}/events", {"key": key, "n": i}, key)
        wait_until(lambda: all(len(receiver.events_for(k)) == 20 for k in ("os-a", "os-b")),
                   "both jobs' events while another job's receiver hangs", timeout_s=10)
        for key in ("os-a", "os-b"):
            assert [e["n"] for e in receiver.events_for(key)] == list(range(20))
        # the receiver records an event before its answer reaches the sender: wait for the count
        wait_until(lambda: box.stats()["pending"] == 1, "only the stuck job's event to be pending")
        release.set()
        assert box.flush(30) and box.stats()["delivered"] == 41
    finally:
        release.set()
        box.close()
        stuck.close()


def test_drain_at_stop_tries_each_job_once_and_keeps_the_rest_for_the_next_start(tmp_path, receiver):
    """A stopping sender (node or CE agent) whose receiver has already stopped: one attempt per
    job, no retry, no wait for its deadline; undelivered events stay stored, in order."""
    import time
    engine = open_engine(sqlite_url(tmp_path / "d.db"))
    box = Outbox(retry_initial_s=3600, retry_max_s=3600, name="stopping", engine=engine)
    dead = closed_port_url()
    for i in range(30):                              # 10 jobs, 3 events each, receiver gone
        box.post(dead, {"key": f"dr-{i % 10}", "n": i}, f"dr-{i % 10}")
    wait_until(lambda: sum(p["attempts"] for p in box.pending()) == 10, "each job's first attempt")
    for i in range(3):                               # one job whose receiver still runs
        box.post(f"{receiver.url}/events", {"key": "dr-live", "n": i}, "dr-live")
    t0 = time.monotonic()
    left = box.drain(60)
    took = time.monotonic() - t0
    box.close()
    tried = {p["payload"]["n"]: p["attempts"] for p in box.pending() if p["attempts"]}
    # flush(60) waited the whole 60 s here, retrying a receiver that had stopped
    assert left == 30 and took < 30, (left, took)
    assert [e["n"] for e in receiver.events_for("dr-live")] == [0, 1, 2]
    again = Outbox(name="stopping", engine=engine)   # the next start has them all, in order
    kept = again.pending()
    again.close()
    assert [p["payload"]["n"] for p in kept] == sorted(range(30), key=lambda n: (n % 10, n))
    # at once: a job whose first attempt was still in flight when the drain began is parked by
    # that attempt's failure (1), the others are tried once more (2); none waited for its backoff
    assert set(tried) == set(range(10)) and set(tried.values()) <= {1, 2}, tried


def test_drain_to_a_receiver_that_never_answers_is_bounded(tmp_path):
    import time
    with socket.socket() as silent:                  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/events"
        box = Outbox(timeout_s=30, name="silent", engine=open_engine(sqlite_url(tmp_path / "s.db")))
        for i in range(8):
            box.post(url, {"key": f"sl-{i}", "n": i}, f"sl-{i}")
        t0 = time.monotonic()
        left = box.drain(1.0)
        box.close(wait_s=1.0)
        took = time.monotonic() - t0
    assert left == 8 and took < 15, (left, took)     # not the 30 s of a request's timeout
