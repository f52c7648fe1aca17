"""``multicast-join`` (Haizea 1.1's multicast with ``avoid-redundant-transfers``; issue 16).

A best-effort lease whose image is already on its way to other nodes in a multicast that has
not started joins that multicast instead of queueing a transfer of its own; with the option
off (vgrid's default) nothing changes. Hand-made sites: 80 Mb/s = 10 MB/s, so a 100 MB image
takes 10 s.
"""
import pytest
from hypothesis import given, strategies as st

from vgrid_runtime.clock import SimulatedClock
from vwn_agents.leasing import LeaseConfig, LeaseScheduler, LeaseState, SimulatedNodes, simulate, uniform_site
from vwn_agents.leasing.config import ConfigError
from vwn_agents.leasing.haizeaconf import HAIZEA_DEFAULTS
from vwn_agents.leasing.model import Lease, LeaseType, resource_vector
from vwn_agents.leasing.slottable import ResKind

from .test_leasing_properties import SETTINGS, check_completed, configs, simulate_staged, workloads

VM = resource_vector(cpu=100, memory=512)
BASE = {"lease-preparation": "imagetransfer", "imagetransfer-bandwidth": 80.0, "transfer-mechanism": "multicast",
        "avoid-redundant-transfers": True, "diskimage-reuse": "none", "backfilling": "aggressive"}


def be(lid, submit, image, n=1, dur=1000.0):
    return Lease(lid, LeaseType.BEST_EFFORT, submit, dur, n, VM, image, 100.0, True)


def run(leases, join, **opts):
    cfg = LeaseConfig({**BASE, "multicast-join": join, **{k.replace("_", "-"): v for k, v in opts.items()}})
    result = simulate(leases, uniform_site(4, 1, 1024), cfg)
    return result.scheduler


def _leases_behind_a_busy_link():
    # Z's transfer holds the link over [0, 10); A's multicast of x.img is queued for [10, 20);
    # B (x.img too) arrives at 1 s, while A's multicast has not started
    return [be(1, 0.0, "y.img"), be(2, 0.0, "x.img", n=2), be(3, 1.0, "x.img")]


@pytest.mark.parametrize("reuse", ["none", "image-caches"])
def test_a_lease_joins_a_pending_multicast_of_its_image_only_when_the_option_is_on(reuse):
    on = run(_leases_behind_a_busy_link(), True, diskimage_reuse=reuse)
    off = run(_leases_behind_a_busy_link(), False, diskimage_reuse=reuse)
    a_on, b_on = on.leases[2], on.leases[3]
    assert (a_on.start_s, b_on.start_s) == (20.0, 20.0)      # B rides on A's multicast
    assert (a_on.transfers, b_on.transfers) == (1, 0)
    assert [(lid, img, s, e) for lid, img, _, s, e in on.transfer_log] == [(1, "y.img", 0.0, 10.0),
                                                                         (2, "x.img", 10.0, 20.0)]
    dest = on.transfer_log[1][2]
    assert set(b_on.segments[0].nodes) <= set(dest) and len(dest) == 3   # A's two nodes and B's
    assert not set(b_on.segments[0].nodes) & set(a_on.segments[0].nodes)
    a_off, b_off = off.leases[2], off.leases[3]
    assert (a_off.start_s, b_off.start_s) == (20.0, 30.0)    # B waits for a transfer of its own
    assert (a_off.transfers, b_off.transfers) == (1, 1)
    assert len(off.transfer_log) == 3
    for s in (on, off):
        assert all(l.state is LeaseState.DONE for l in s.leases.values())


def test_a_multicast_created_in_the_same_queue_pass_is_joined():
    """Haizea starts due reservations before it processes the queue: a transfer created in this
    instant's pass has not started, so the next lease of the same image joins it."""
    on = run([be(1, 0.0, "x.img", n=2), be(2, 0.0, "x.img", n=2)], True)
    off = run([be(1, 0.0, "x.img", n=2), be(2, 0.0, "x.img", n=2)], False)
    assert [on.leases[i].start_s for i in (1, 2)] == [10.0, 10.0] and len(on.transfer_log) == 1
    assert [off.leases[i].start_s for i in (1, 2)] == [10.0, 20.0] and len(off.transfer_log) == 2


def test_a_started_multicast_is_not_joined():
    # A's multicast runs over [0, 10); B arrives at 5 s: it needs a transfer of its own
    on = run([be(1, 0.0, "x.img", n=2), be(2, 5.0, "x.img")], True)
    assert on.leases[2].transfers == 1 and on.leases[2].start_s == 20.0


def test_a_pending_multicast_that_ends_later_than_an_own_transfer_is_not_joined():
    """Haizea joins only when that is earlier: never for the FIFO link, where a new transfer
    always ends after every pending one -- so no lease ever waits longer by joining."""
    on = run(_leases_behind_a_busy_link(), True)
    assert on.leases[3].start_s <= run(_leases_behind_a_busy_link(), False).leases[3].start_s


def _scheduler(**opts):
    cfg = LeaseConfig({**BASE, "multicast-join": True, **opts})
    site = uniform_site(4, 1, 1024)
    return LeaseScheduler(site, cfg, SimulatedClock(0.0), SimulatedNodes(site))


def _transfers(s):
    return [r for r in s.st.reservations() if r.kind is ResKind.TRANSFER]


def test_leaving_a_joined_multicast_cancels_it_only_when_nobody_rides_on_it():
    s = _scheduler()
    for lease in _leases_behind_a_busy_link()[:2]:
        s.submit(lease)
    s.process(0.0)
    s.clock.advance_to(1.0)
    s.submit(be(3, 1.0, "x.img"))
    s.process(1.0)
    (x,) = [r for r in _transfers(s) if r.image_id == "x.img"]
    assert x.lease.id == 2 and x.users == [2, 3] and len(x.dest) == 3
    s.unschedule(s.leases[2], 1.0)            # the owner leaves: B still needs the multicast
    assert x in s.st and x.users == [3]
    assert not [e for n in range(4) for e in s.pools.pools[n].values() if e.lease_id == 2]   # A's copies dropped
    s.unschedule(s.leases[3], 1.0)            # the last rider leaves: the multicast is cancelled
    assert x not in s.st
    assert not [e for n in range(4) for e in s.pools.pools[n].values() if e.image_id == "x.img"]


def test_a_rolled_back_placement_leaves_no_trace_of_its_join():
    s = _scheduler()
    for lease in _leases_behind_a_busy_link()[:2]:
        s.submit(lease)
    s.process(0.0)
    (x,) = [r for r in _transfers(s) if r.image_id == "x.img"]
    before = (x.dest, list(x.users), s.pools.version)
    tx = s.st.begin()
    lease = be(3, 0.0, "x.img")
    s.leases[3] = lease
    ready = s.staging.stage_be(lease, (3,), 20.0, 1020.0, 0.0)
    assert ready == 20.0 and x.users == [2, 3] and 3 in x.dest
    s.st.rollback(tx)
    assert (x.dest, x.users) == before[:2]
    assert not [e for e in s.pools.pools[3].values() if e.image_id == "x.img"]


def test_option_is_off_by_default_and_on_for_haizea_files():
    assert LeaseConfig().multicast_join is False
    assert HAIZEA_DEFAULTS["multicast-join"] is True
    with pytest.raises(ConfigError, match="multicast-join must be bool"):
        LeaseConfig({"multicast-join": "sometimes"})
    # without multicast (or without avoid-redundant-transfers) it has no effect, as in Haizea
    s = _scheduler(**{"transfer-mechanism": "unicast"})
    assert s.staging.join is False
    s = _scheduler(**{"avoid-redundant-transfers": False})
    assert s.staging.join is False


@SETTINGS
@given(wl=workloads(), opts=configs, reuse=st.sampled_from(["none", "image-caches"]))
def test_with_joining_no_lease_starts_before_its_image_is_on_every_node_it_uses(wl, opts, reuse):
    """Property: with ``multicast-join`` every best-effort or immediate lease's VMs start (the
    first time) only on nodes where its image has arrived, every lease completes, no node is
    over-committed and a link carries one transfer at a time."""
    n_nodes, cpus, leases = wl
    opts = dict(opts, **{"lease-preparation": "imagetransfer", "transfer-mechanism": "multicast",
                         "avoid-redundant-transfers": True, "multicast-join": True, "diskimage-reuse": reuse})
    site = uniform_site(n_nodes, cpus, 1024 * cpus)
    sched, started = simulate_staged(leases, site, opts)
    done = check_completed(sched, site, opts["imagetransfer-link"] == "shared")
    assert set(started) >= {l.id for l in done if not l.is_ar and l.state is LeaseState.DONE
                            and l.id not in sched.children and l.parent_id is None}


def test_on_the_blue_trace_joining_saves_transfers_and_never_delays_the_queue():
    """The first 500 leases of the 30-day SDSC Blue trace with the 30 % 3-hour medium ARs in
    HPDC'08's VM-MULT (37 images of 4 GB, 10 MB/s, no reuse): with joining, fewer transfers
    cross the link and the last best-effort lease ends no later (issue 16)."""
    from vgrid_runtime import traces as catalogue
    from vwn_agents.leasing.tracefile import assign_images
    from vwn_agents.leasing.traces import read_trace

    def workload():
        be_leases = read_trace(catalogue.bundled("blue-30days")).leases[:500]
        horizon = be_leases[-1].submit_s + 86400.0
        ars = read_trace(catalogue.resolve("work_30-dur_3h-size_2medium"), id_offset=10**6).leases
        return assign_images(be_leases + [a for a in ars if a.requested_start_s < horizon], 37, 4096.0, "uniform", 1)
    opts = {"backfilling": "aggressive", "suspension": "all", "suspend-rate": 50.0, "resume-rate": 50.0,
            "migration": "yes", "migration-transfer": "node-to-node", "add-overhead": "all",
            "runtime-slowdown-overhead": 5.0, "bootshutdown-overhead": 20.0,
            "lease-preparation": "imagetransfer", "transfer-mechanism": "multicast",
            "avoid-redundant-transfers": True, "imagetransfer-bandwidth": 80.0, "diskimage-reuse": "none"}
    got = {}
    for join in (False, True):
        result = simulate(workload(), uniform_site(144, 1, 1024), LeaseConfig({**opts, "multicast-join": join}))
        m = result.report()["metrics"]
        joined = sum(1 for l in result.scheduler.leases.values() if l.start_s is not None and l.transfers == 0)
        got[join] = (m["all_best_effort_s"], m["mb_transferred"], joined, m["ar_rejected"])
    assert got[True][0] <= got[False][0]
    assert got[True][1] <= 0.85 * got[False][1]          # measured: 413 transfers instead of 544
    assert got[True][2] >= 50 and got[False][2] == 0     # leases that rode on another's multicast
    assert got[True][3] == got[False][3]
