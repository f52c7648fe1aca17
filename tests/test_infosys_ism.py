"""The ISM: atomic snapshots, staleness, expiry, blacklist, feedback, and real sources
(a CE agent-like GIP served over loopback HTTP, real LDIF files)."""
import threading

import pytest
from flask import Flask, Response
from hypothesis import given, settings
from hypothesis import strategies as st

from vgrid_runtime.clock import SimulatedClock, WallClock
from vgrid_runtime.wsgi import BackgroundServer
from infosys.gip import CEState, render_glue13
from infosys.glue import AD_ID
from infosys.ism import DISPATCHED, ISM, HttpLdifSource, LdifFileSource, SourceError, StaticSource
from tests.paths import SHARED_LDIF
from tests.waiting import wait_until

DATA = SHARED_LDIF


def ad(ce_id, waiting=0, running=0):
    return {"GlueCEUniqueID": ce_id, AD_ID: ce_id, "GlueCEStateWaitingJobs": waiting,
            "GlueCEStateRunningJobs": running}


def state(n, waiting=0):
    return CEState(ce_id=f"ce{n}.vgrid.local:8443/vgrid-vwn-long", host=f"ce{n}.vgrid.local",
                   site="VGRID", queue="long", total_cpus=4, free_cpus=4, waiting=waiting,
                   vos=["vgrid"])


class GipServer:
    """A CE agent's GET /glue on a real loopback socket (Flask app under vgrid's WSGI server)."""

    def __init__(self, st):
        self.state = st
        self.status = 200
        app = Flask("gip")

        @app.get("/glue")
        def glue():
            return Response(render_glue13(self.state), status=self.status, mimetype="text/plain")

        self.server = BackgroundServer(app, threads=2)
        self.url = self.server.url

    def close(self):
        self.server.close()


@pytest.fixture
def gip_servers():
    servers = [GipServer(state(1, waiting=2)), GipServer(state(2, waiting=5))]
    yield servers
    for s in servers:
        s.close()


def test_http_ldif_source_over_loopback(gip_servers):
    src = HttpLdifSource(gip_servers[0].url, timeout_s=5)
    assert src.url.endswith("/glue")
    ads = src.fetch()
    assert [a[AD_ID] for a in ads] == ["ce1.vgrid.local:8443/vgrid-vwn-long"]
    assert ads[0]["GlueCEStateWaitingJobs"] == 2 and src.rejected == []
    gip_servers[0].status = 500
    with pytest.raises(SourceError, match="HTTP 500"):
        src.fetch()


def test_ism_over_http_staleness_and_recovery(gip_servers):
    clock = SimulatedClock(1000.0)
    ism = ISM([HttpLdifSource(s.url, timeout_s=5) for s in gip_servers], refresh_s=240,
              clock=clock, timeout_s=60)
    snap = ism.refresh()
    assert not snap.stale and snap.errors == ()
    assert sorted(a["GlueCEStateWaitingJobs"] for a in snap.ads) == [2, 5]
    assert snap.age(1000.0) == 0
    # CE 2's agent goes away: its last ads are kept, the snapshot is stale with its age
    url2 = gip_servers[1].url
    gip_servers[1].close()
    gip_servers[0].state.waiting = 9
    clock.advance(240)
    snap = ism.refresh()
    assert snap.stale and len(snap.errors) == 1 and url2 in snap.errors[0]
    assert {a[AD_ID]: a["GlueCEStateWaitingJobs"] for a in snap.ads} == {
        "ce1.vgrid.local:8443/vgrid-vwn-long": 9, "ce2.vgrid.local:8443/vgrid-vwn-long": 5}
    assert snap.age(clock.now()) == 240
    # past refresh + timeout its ads expire
    clock.advance(240)
    snap = ism.refresh()
    assert [a[AD_ID] for a in snap.ads] == ["ce1.vgrid.local:8443/vgrid-vwn-long"]
    assert snap.expired == ("ce2.vgrid.local:8443/vgrid-vwn-long",) and snap.stale


def test_recovery_clears_staleness():
    src = StaticSource([ad("a", 1)], name="bdii")
    clock = SimulatedClock()
    ism = ISM([src], refresh_s=10, clock=clock)
    ism.refresh()
    src.fail("connection refused")
    clock.advance(10)
    s = ism.refresh()
    assert s.stale and s.errors == ("bdii: connection refused",) and s.age(10) == 10
    src.set_ads([ad("a", 4)])
    clock.advance(10)
    s = ism.refresh()
    assert not s.stale and s.age(20) == 0 and s.ads[0]["GlueCEStateWaitingJobs"] == 4


def test_ldif_file_source_real_fixtures(tmp_path):
    src = LdifFileSource(DATA / "synthetic_site.ldif")
    assert len(src.fetch()) == 3
    bad = LdifFileSource(DATA / "glue13_site2_cache.ldif")
    assert bad.fetch() == [] and len(bad.rejected) == 1
    ism = ISM([src, bad], refresh_s=240, clock=SimulatedClock())
    snap = ism.refresh()
    assert len(snap.ads) == 3 and len(snap.rejected) == 1 and not snap.stale
    broken = tmp_path / "broken.ldif"
    broken.write_text("dn: o=grid\nnot ldif\n")
    with pytest.raises(SourceError, match=r"broken.ldif:2: "):
        LdifFileSource(broken).fetch()
    with pytest.raises(SourceError, match="cannot read"):
        LdifFileSource(tmp_path / "missing.ldif").fetch()


def test_snapshot_swap_is_atomic_for_a_match_in_progress():
    src = StaticSource([ad("a", 1), ad("b", 2)])
    ism = ISM([src], refresh_s=10, clock=SimulatedClock())
    ism.refresh(0)
    held = ism.snapshot()
    views = ism.candidates(0)
    src.set_ads([ad("c", 7)])
    ism.refresh(10)
    assert [a[AD_ID] for a in held.ads] == ["a", "b"]
    assert [v["GlueCEUniqueID"] for v in views] == ["a", "b"]
    assert [a[AD_ID] for a in ism.snapshot().ads] == ["c"]


def test_maybe_refresh_follows_simulated_time():
    src = StaticSource([ad("a")])
    ism = ISM([src], refresh_s=240, clock=SimulatedClock())
    assert ism.maybe_refresh(0) is True
    assert ism.maybe_refresh(239.9) is False
    assert ism.maybe_refresh(240) is True and ism.last_refresh == 240


def test_feedback_visible_in_candidates_and_reset_by_refresh():
    src = StaticSource([ad("a", 3), ad("b", 1)])
    ism = ISM([src], refresh_s=240, clock=SimulatedClock())
    ism.refresh(0)
    ism.feedback.increment("a")
    ism.feedback.increment("a")
    views = {v.key: v for v in ism.candidates(1)}
    assert views["a"][DISPATCHED] == 2 and views["b"][DISPATCHED] == 0
    assert DISPATCHED in views["a"] and dict(views["a"])[DISPATCHED] == 2
    ism.refresh(240)
    assert ism.feedback.get("a") == 0 and views["a"][DISPATCHED] == 0


def test_dispatch_during_refresh_is_not_lost():
    class SlowSource(StaticSource):
        blocking = True

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.entered = threading.Event()
            self.release = threading.Event()

        def fetch(self):
            self.entered.set()
            assert self.release.wait(30), "the test never released the fetch"
            return super().fetch()

    src = SlowSource([ad("a")])
    ism = ISM([src], refresh_s=240, clock=SimulatedClock())
    ism.feedback.increment("a", 4)          # counted before the refresh: published next time
    t = threading.Thread(target=ism.refresh, args=(0,))
    t.start()
    assert src.entered.wait(30), "the refresh never fetched"
    ism.feedback.increment("a")             # dispatched while the ISM is fetching
    src.release.set()
    t.join(30)
    assert not t.is_alive() and ism.feedback.get("a") == 1


def test_blacklist_and_expiry_in_candidates():
    src = StaticSource([ad("a"), ad("b")])
    clock = SimulatedClock()
    ism = ISM([src], refresh_s=100, clock=clock, timeout_s=50)
    ism.refresh(0)
    ism.blacklist("a", until=30)
    assert [v.key for v in ism.candidates(10)] == ["b"]
    assert [v.key for v in ism.candidates(30)] == ["a", "b"]
    ism.blacklist("b")
    assert ism.blacklisted(40) == {"b"}
    ism.unblacklist("b")
    # nobody refreshed for longer than refresh_s + timeout_s: nothing is offered
    assert ism.candidates(151) == ()
    assert len(ism.candidates(150)) == 2


def test_duplicate_ids_across_sources_keep_the_first():
    ism = ISM([StaticSource([ad("a", 1)], "s1"), StaticSource([ad("a", 9)], "s2")],
              refresh_s=10, clock=SimulatedClock())
    snap = ism.refresh(0)
    assert len(snap.ads) == 1 and snap.ads[0]["GlueCEStateWaitingJobs"] == 1
    assert "more than one source" in snap.rejected[0].reason


def test_background_refresh_thread_with_wall_clock():
    src = StaticSource([ad("a")])
    ism = ISM([src], refresh_s=0.05, clock=WallClock())
    ism.start()
    try:
        wait_until(lambda: ism.snapshot().ads != (), "the background thread's first refresh", interval_s=0.01)
        first = ism.last_refresh
        src.set_ads([ad("a"), ad("b")])
        wait_until(lambda: len(ism.snapshot().ads) >= 2, "a refresh with the new ads", interval_s=0.01)
        assert len(ism.snapshot().ads) == 2 and ism.last_refresh > first
    finally:
        ism.stop()
    assert not ism._loop.running


def test_a_source_bug_is_reported_not_raised():
    class Buggy:
        name = "buggy"
        blocking = False

        def fetch(self):
            raise KeyError("oops")

    snap = ISM([Buggy(), StaticSource([ad("a")])], refresh_s=1, clock=SimulatedClock()).refresh(0)
    assert snap.stale and "buggy: KeyError" in snap.errors[0] and len(snap.ads) == 1


def test_refresh_interval_must_be_positive():
    with pytest.raises(ValueError):
        ISM([], refresh_s=0)


def test_ads_and_feedback_work_in_jdl_requirements_and_rank():
    import jdl
    from infosys.glue import glue13_ce_ads
    from infosys.ldif import parse_ldif
    ads, _ = glue13_ce_ads(parse_ldif((DATA / "synthetic_site.ldif").read_text()))
    ism = ISM([StaticSource(ads)], refresh_s=240, clock=SimulatedClock())
    ism.refresh(0)
    ism.feedback.increment("ce01.example:8443/cream-pbs-long/dteam", 3)
    job = jdl.parse_jdl(
        '[Executable = "/bin/true";\n'
        ' Requirements = other.GlueCEStateStatus == "Production" &&\n'
        '   member("VO:dteam", other.GlueCEAccessControlBaseRule) &&\n'
        '   anyMatch(other.CloseStorageElements, name == "se01.example");\n'
        ' Rank = -(other.GlueCEStateWaitingJobs + other.VGridDispatchedSinceRefresh);]', "x.jdl")
    views = {v.key: v for v in ism.candidates(0)}
    assert [k for k, v in views.items() if jdl.matches(job, v, now=0.0)] == [
        "ce01.example:8443/cream-pbs-long/dteam"]
    assert jdl.rank_value(job, views["ce01.example:8443/cream-pbs-long/dteam"], now=0.0) == -4


_ops = st.lists(st.one_of(
    st.tuples(st.just("dispatch"), st.integers(0, 2)),
    st.tuples(st.just("fail"), st.integers(0, 1)),
    st.tuples(st.just("recover"), st.integers(0, 1)),
    st.tuples(st.just("advance"), st.floats(0, 400)),
    st.tuples(st.just("blacklist"), st.integers(0, 2)),
    st.tuples(st.just("refresh"), st.just(0)),
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(_ops)
def test_ism_invariants_under_any_sequence(ops):
    """Counters = dispatches since the last refresh; stale iff a source failed at the last
    refresh; candidates never hold an expired or blacklisted ad."""
    clock = SimulatedClock()
    srcs = [StaticSource([ad("a"), ad("b")], "s0"), StaticSource([ad("c")], "s1")]
    ism = ISM(srcs, refresh_s=240, clock=clock, timeout_s=60)
    ism.refresh()
    since = {}
    failing = set()
    ok_at = {0: 0.0, 1: 0.0}
    black = set()
    for op, arg in ops:
        if op == "dispatch":
            key = "abc"[arg]
            ism.feedback.increment(key)
            since[key] = since.get(key, 0) + 1
        elif op == "fail":
            srcs[arg].fail()
            failing.add(arg)
        elif op == "recover":
            srcs[arg].recover()
            failing.discard(arg)
        elif op == "advance":
            clock.advance(arg)
        elif op == "blacklist":
            ism.blacklist("abc"[arg])
            black.add("abc"[arg])
        else:
            snap = ism.refresh()
            since = {}
            for i in (0, 1):
                if i not in failing:
                    ok_at[i] = clock.now()
            assert snap.stale == bool(failing)
        for key in "abc":
            assert ism.feedback.get(key) == since.get(key, 0)
        now = clock.now()
        owner = {"a": 0, "b": 0, "c": 1}
        for v in ism.candidates(now):
            assert v.key not in black
            assert now - ok_at[owner[v.key]] <= ism.refresh_s + ism.timeout_s
            assert v[DISPATCHED] == since.get(v.key, 0)


def test_gc_paused_nests_and_restores_the_collector():
    import gc
    from infosys.ism import gc_paused
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # was off before: stays off
    finally:
        gc.enable()
    ISM([StaticSource([ad("a")])], refresh_s=1, clock=SimulatedClock()).refresh(0)
    assert gc.isenabled()


def test_periodic_keeps_running_after_a_failed_run():
    import threading
    from infosys.periodic import Periodic
    calls, done = [], threading.Event()

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first run fails")
        if len(calls) >= 3:
            done.set()

    loop = Periodic(flaky, 0.01, WallClock(), "test-periodic")
    loop.start()
    assert done.wait(30), "the loop stopped after a failed run"
    loop.stop()
    assert not loop.running


def test_blacklist_with_reason_expires_on_a_simulated_clock():
    src = StaticSource([ad("a"), ad("b")])
    clock = SimulatedClock(1000)
    ism = ISM([src], refresh_s=10_000, clock=clock)
    ism.refresh()
    ism.blacklist("a", until=1300, reason="dispatch unreachable: ConnectionError")
    assert [v.key for v in ism.candidates()] == ["b"]
    assert ism.blacklist_entries() == {"a": {"until": 1300,
                                             "reason": "dispatch unreachable: ConnectionError"}}
    clock.advance(299.5)
    assert [v.key for v in ism.candidates()] == ["b"] and ism.blacklisted() == {"a"}
    clock.advance(0.5)                              # until is exclusive: back at 1300
    assert [v.key for v in ism.candidates()] == ["a", "b"]
    assert ism.blacklist_entries() == {} and ism.blacklisted() == set()
    ism.blacklist("b", reason="by hand")
    assert ism.blacklist_entries() == {"b": {"until": None, "reason": "by hand"}}


def test_candidates_with_a_blacklist_are_one_object_until_the_blacklist_changes():
    """The Matchmaker caches its groups on the identity of the ads it is given."""
    from broker.matchmaker import Matchmaker
    import jdl

    src = StaticSource([{**ad(c), "GlueCEAccessControlBaseRule": ["VO:dteam"],
                         "GlueCEStateStatus": "Production", "GlueCEInfoTotalCPUs": 2,
                         "GlueHostBenchmarkSI00": 1000, "GlueCEStateTotalJobs": 0,
                         "GlueCEStateEstimatedResponseTime": 0, "GlueCEStateFreeCPUs": 2}
                        for c in "abc"])
    clock = SimulatedClock()
    ism = ISM([src], refresh_s=10_000, clock=clock)
    ism.refresh()
    mm = Matchmaker(ism.feedback)
    job = jdl.parse_jdl('Executable = "/bin/true"; VirtualOrganisation = "dteam";', "t.jdl",
                        local_files=False)

    def matched():
        return sorted(c.ce_id for c in mm.match(job, ism.candidates(), now=clock.now()).candidates)

    assert matched() == ["a", "b", "c"]
    ism.blacklist("a", until=100)
    first = ism.candidates()
    assert ism.candidates() is first and matched() == ["b", "c"]
    ism.blacklist("b", until=50)
    assert ism.candidates() is not first and matched() == ["c"]
    clock.advance(50)
    assert matched() == ["b", "c"]
    clock.advance(50)
    assert matched() == ["a", "b", "c"]
