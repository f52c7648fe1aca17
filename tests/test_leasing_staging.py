"""Image staging (seed 000 Algorithms 2-4): EDF, EDF/JIT, naive strategies, pools, disk usage."""
import pytest

from vgrid_runtime.clock import SimulatedClock
from vwn_agents.leasing import LeaseConfig, LeaseScheduler, LeaseState, SimulatedNodes, simulate, uniform_site
from vwn_agents.leasing.accounting import ar_satisfaction, disk_series
from vwn_agents.leasing.model import Lease, LeaseType, resource_vector
from vwn_agents.leasing.slottable import ResKind
from vwn_agents.leasing.staging import processor_sharing_ends

VM = resource_vector(cpu=100, memory=512)
# 80 Mb/s = 10 MB/s: a 1000 MB image takes 100 s
BASE = {"lease-preparation": "imagetransfer", "imagetransfer-bandwidth": 80.0, "transfer-mechanism": "unicast"}


def ar(lid, start, image, dur=1000.0, n=1, submit=0.0, mb=1000.0):
    return Lease(lid, LeaseType.ADVANCE_RESERVATION, submit, dur, n, VM, image, mb, False, requested_start_s=start)


def scheduler(strategy, nodes=2, **opts):
    cfg = LeaseConfig({**BASE, "ar-transfer-strategy": strategy, **{k.replace("_", "-"): v for k, v in opts.items()}})
    clock = SimulatedClock(0.0)
    site = uniform_site(nodes, 1, 1024)
    return LeaseScheduler(site, cfg, clock, SimulatedNodes(site))


def transfers(sched):
    return {r.lease.id: (r.start, r.end) for r in sched.st.reservations() if r.kind is ResKind.TRANSFER}


@pytest.mark.parametrize("strategy", ["edf", "edf-jit"])
def test_edf_moves_unstarted_transfers_to_accept_an_earlier_deadline(strategy):
    s = scheduler(strategy)
    s.submit(ar(1, 1000, "a.img"))
    s.submit(ar(2, 150, "b.img"))  # Haizea 1.1 keeps transfer 1 at [0,100) and rejects this
    assert s.leases[1].state is LeaseState.SCHEDULED and s.leases[2].state is LeaseState.SCHEDULED
    t = transfers(s)
    if strategy == "edf":
        assert t == {2: (0, 100), 1: (100, 200)}
    else:
        assert t == {2: (50, 150), 1: (900, 1000)}


@pytest.mark.parametrize("strategy", ["edf", "edf-jit"])
def test_edf_rejects_when_a_deadline_cannot_be_met(strategy):
    s = scheduler(strategy)
    s.submit(ar(1, 150, "a.img"))
    s.submit(ar(2, 160, "b.img"))  # needs [100,200) at best: misses 160
    assert s.leases[1].state is LeaseState.SCHEDULED
    assert s.leases[2].state is LeaseState.REJECTED
    assert "image transfers" in s.leases[2].reject_reason
    assert transfers(s) == ({1: (0, 100)} if strategy == "edf" else {1: (50, 150)})


def test_started_transfers_do_not_move():
    s = scheduler("edf")
    s.submit(ar(1, 1000, "a.img"))
    s.clock.advance_to(10)
    s.process(10)  # transfer 1 has started at 0
    s.submit(ar(2, 150, "b.img", submit=10))  # would need transfer 1 to move: rejected
    assert s.leases[2].state is LeaseState.REJECTED
    s.submit(ar(3, 250, "b.img", submit=10))
    assert s.leases[3].state is LeaseState.SCHEDULED
    t = transfers(s)
    assert t[1] == (0, 100) and t[3] == (100, 200)


def test_processor_sharing_ends():
    assert processor_sharing_ends([(0, 100), (0, 100)], 10) == [20, 20]
    assert processor_sharing_ends([(0, 100), (5, 50)], 10) == pytest.approx([15, 15])
    assert processor_sharing_ends([(0, 10), (100, 10)], 10) == [1, 101]


def test_naive_jit_arrives_late_under_contention_while_edf_is_on_time():
    leases = lambda: [ar(1, 1000, "a.img"), ar(2, 1000, "b.img")]
    site = uniform_site(2, 1, 1024)
    jit = simulate(leases(), site, LeaseConfig({**BASE, "ar-transfer-strategy": "jit"}))
    sat = ar_satisfaction(jit.scheduler)
    assert sat == {1: pytest.approx(0.9), 2: pytest.approx(0.9)}  # both arrive at 1100
    edf = simulate(leases(), site, LeaseConfig({**BASE, "ar-transfer-strategy": "edf"}))
    assert ar_satisfaction(edf.scheduler) == {1: 1.0, 2: 1.0}
    assert edf.report()["metrics"]["ar_client_satisfaction"] == 1.0


def test_job_style_transfer_starts_at_lease_start():
    site = uniform_site(1, 1, 1024)
    r = simulate([ar(1, 1000, "a.img")], site, LeaseConfig({**BASE, "ar-transfer-strategy": "job-style"}))
    assert ar_satisfaction(r.scheduler)[1] == pytest.approx(0.9)


def test_pool_size_limit_evicts_unused_image():
    site = uniform_site(1, 1, 1024)
    cfg = LeaseConfig({**BASE, "diskimage-cache-size": 1500.0})
    leases = [ar(1, 200, "a.img", dur=100), ar(2, 600, "b.img", dur=100), ar(3, 1000, "a.img", dur=100)]
    r = simulate(leases, site, cfg)
    got = {l.id: l for l in r.scheduler.leases.values()}
    assert all(l.ar_on_time for l in got.values())
    assert got[3].transfers == 1  # a.img was evicted for b.img
    peak = max(v for _, v in disk_series(r.scheduler)[0])
    assert peak <= 1500


def test_unlimited_pool_reuses_image():
    site = uniform_site(1, 1, 1024)
    leases = [ar(1, 200, "a.img", dur=100), ar(2, 600, "b.img", dur=100), ar(3, 1000, "a.img", dur=100)]
    r = simulate(leases, site, LeaseConfig(BASE))
    got = {l.id: l for l in r.scheduler.leases.values()}
    assert got[3].transfers == 0
    assert max(v for _, v in disk_series(r.scheduler)[0]) == 2000


def test_no_reuse_transfers_every_time_and_frees_disk():
    site = uniform_site(1, 1, 1024)
    leases = [ar(1, 200, "a.img", dur=100), ar(2, 600, "a.img", dur=100)]
    r = simulate(leases, site, LeaseConfig({**BASE, "diskimage-reuse": "none"}))
    assert [l.transfers for l in r.scheduler.leases.values()] == [1, 1]
    series = disk_series(r.scheduler)[0]
    assert series[-1][1] == 0 and max(v for _, v in series) == 1000


def disk_integral(sched, horizon):
    total = 0.0
    for series in disk_series(sched).values():
        for (t, v), nxt in zip(series, series[1:] + [(horizon, 0)]):
            total += v * (nxt[0] - t)
    return total


def test_edf_jit_keeps_images_on_disk_for_less_time_than_edf():
    site = uniform_site(4, 1, 1024)
    leases = lambda: [ar(i, 2000 + 500 * i, f"img{i}.img", dur=300) for i in range(1, 5)]
    edf = simulate(leases(), site, LeaseConfig({**BASE, "ar-transfer-strategy": "edf", "diskimage-reuse": "none"}))
    jit = simulate(leases(), site, LeaseConfig({**BASE, "ar-transfer-strategy": "edf-jit", "diskimage-reuse": "none"}))
    assert disk_integral(jit.scheduler, 10_000) < disk_integral(edf.scheduler, 10_000)


def test_online_edf_and_edf_jit_can_differ_because_started_transfers_do_not_move():
    """Counter-examples to "same AR sets" when ARs arrive over time (documented limitation)."""
    def run(strategy, leases):
        site = uniform_site(2, 1, 1024)
        r = simulate(leases, site, LeaseConfig({**BASE, "ar-transfer-strategy": strategy}))
        return {l.id for l in r.scheduler.leases.values() if l.state is not LeaseState.REJECTED}
    # EDF starts transfer 1 at once and it blocks the link when AR 2 (tight deadline) arrives
    first = lambda: [ar(1, 2000, "a.img"), ar(2, 150, "b.img", submit=50)]
    assert run("edf", first()) == {1}
    assert run("edf-jit", first()) == {1, 2}
    # EDF/JIT has pushed transfer 1 to [1900, 2000): it is running when AR 3 needs the link
    second = lambda: [ar(1, 2000, "a.img"), ar(3, 2010, "c.img", submit=1950, mb=500)]
    assert run("edf", second()) == {1, 3}
    assert run("edf-jit", second()) == {1}


def be(lid, image, dur=300.0, submit=0.0, mb=1000.0):
    return Lease(lid, LeaseType.BEST_EFFORT, submit, dur, 1, VM, image, mb, True)


def test_shared_link_best_effort_fills_gaps_and_edf_works_around_it():
    s = scheduler("edf-jit", imagetransfer_link="shared")
    s.submit(ar(1, 1000, "a.img"))  # EDF/JIT: [900, 1000)
    s.submit(be(2, "b.img"))
    s.process(0)
    t = transfers(s)
    assert t[1] == (900, 1000) and t[2] == (0, 100)  # the best-effort transfer took the gap
    s.submit(ar(3, 150, "c.img"))  # would need [50, 150): the best-effort transfer is in the way
    assert s.leases[3].state is LeaseState.REJECTED
    s.submit(ar(4, 250, "c.img"))  # [150, 250) fits after it
    assert s.leases[4].state is LeaseState.SCHEDULED and transfers(s)[4] == (150, 250)


def test_separate_links_do_not_interfere():
    s = scheduler("edf-jit")
    s.submit(ar(1, 1000, "a.img"))
    s.submit(be(2, "b.img"))
    s.process(0)
    s.submit(ar(3, 150, "c.img"))
    assert s.leases[3].state is LeaseState.SCHEDULED
    assert transfers(s)[3] == (50, 150)


def test_strict_expiry_transfers_again_after_expiration():
    site = uniform_site(1, 1, 1024)
    leases = [ar(1, 200, "a.img", dur=100), ar(2, 600, "a.img", dur=100)]
    strict = simulate(leases, site, LeaseConfig({**BASE, "diskimage-cache-expire": True}))
    assert [l.transfers for l in strict.scheduler.leases.values()] == [1, 1]  # 600 > expiration 300
    series = disk_series(strict.scheduler)[0]
    assert series[-1][1] == 0  # removed when it expired
    leases = [ar(1, 200, "a.img", dur=100), ar(2, 250, "a.img", dur=100, submit=0)]
    site2 = uniform_site(2, 1, 1024)
    again = simulate(leases, site2, LeaseConfig({**BASE, "diskimage-cache-expire": True}))
    got = {l.id: l for l in again.scheduler.leases.values()}
    assert got[1].ar_on_time and got[2].ar_on_time


def test_naive_jit_allots_time_for_all_of_the_leases_own_transfers():
    site = uniform_site(3, 1, 1024)
    lease = ar(1, 1000, "a.img", n=3)
    r = simulate([lease], site, LeaseConfig({**BASE, "ar-transfer-strategy": "jit"}))
    # three unicast transfers share the link: JIT starts them 3 x size / B early, so they end on time
    assert ar_satisfaction(r.scheduler) == {1: 1.0}
    starts = {res.start for res in r.scheduler.staging.naive}
    assert len(starts) == 1 and 1000 - starts.pop() == pytest.approx(3 * (1000 - 900))
