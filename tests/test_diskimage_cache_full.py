"""``diskimage-cache-full`` (issue 16, HPDC'08 VM-REUSE): what a full image pool does.

With ``fail`` (vgrid's default) an image that finds no room in a node's pool, even after every
unpinned image is evicted, fails the lease's placement and the lease waits; with ``uncached``
(Haizea 1.1's ``_add_diskimages`` when ``purge_downto`` fails) the lease gets its own copy
outside the pool and starts as soon as that copy arrives, and the pool is unchanged.
Hand-made sites: 80 Mb/s = 10 MB/s, so a 100 MB image takes 10 s; the pools hold 100 MB.
"""
import pytest
from hypothesis import given, strategies as st

from vgrid_runtime.clock import SimulatedClock
from vwn_agents.leasing import LeaseConfig, LeaseScheduler, LeaseState, SimulatedNodes, simulate, uniform_site
from vwn_agents.leasing.config import ConfigError
from vwn_agents.leasing.haizeaconf import HAIZEA_DEFAULTS, load_haizea
from vwn_agents.leasing.imagepool import ImagePools
from vwn_agents.leasing.model import Lease, LeaseType, resource_vector
from vwn_agents.leasing.slottable import Reservation, ResKind, SlotTable

from .test_leasing_properties import SETTINGS, check_completed, configs, simulate_staged, workloads

VM = resource_vector(cpu=100, memory=512)
BASE = {"lease-preparation": "imagetransfer", "imagetransfer-bandwidth": 80.0, "transfer-mechanism": "multicast",
        "avoid-redundant-transfers": True, "diskimage-reuse": "image-caches", "diskimage-cache-size": 100.0,
        "backfilling": "aggressive"}


def be(lid, submit, image, dur=1000.0):
    return Lease(lid, LeaseType.BEST_EFFORT, submit, dur, 1, VM, image, 100.0, True)


def _workload():
    # one node with room for two VMs and a pool for one image: lease 1's x.img fills the pool and
    # stays pinned until 1,010 s; lease 2 needs y.img at the same time; lease 3 needs y.img later
    return [be(1, 0.0, "x.img"), be(2, 0.0, "y.img"), be(3, 2000.0, "y.img")]


def _pool(s, node=0):
    return sorted((e.image_id, e.uncached, e.arrived) for e in s.pools.pools[node].values())


@pytest.mark.parametrize("join", [False, True])
def test_a_full_pool_delays_the_lease_with_fail_and_not_with_uncached(join):
    got = {}
    for full in ("fail", "uncached"):
        cfg = LeaseConfig({**BASE, "diskimage-cache-full": full, "multicast-join": join})
        s = simulate(_workload(), uniform_site(1, 2, 1024), cfg).scheduler
        assert all(l.state is LeaseState.DONE for l in s.leases.values())
        got[full] = s
    fail, unc = got["fail"], got["uncached"]
    # fail: lease 2 waits until lease 1 ends and unpins x.img, then evicts it (transfer 1010-1020)
    assert [(l.start_s, l.transfers) for l in (fail.leases[1], fail.leases[2])] == [(10.0, 1), (1020.0, 1)]
    assert [t[1:] for t in fail.transfer_log] == [("x.img", (0,), 0.0, 10.0), ("y.img", (0,), 1010.0, 1020.0)]
    assert fail.leases[3].transfers == 0          # y.img was cached: lease 3 reuses it
    # uncached: lease 2 gets its own transfer right behind x.img's and starts at 20 s
    assert [(l.start_s, l.transfers) for l in (unc.leases[1], unc.leases[2])] == [(10.0, 1), (20.0, 1)]
    assert [t[1:] for t in unc.transfer_log[:2]] == [("x.img", (0,), 0.0, 10.0), ("y.img", (0,), 10.0, 20.0)]
    # ... its copy was not cached (deleted when it ended at 1,020 s), so lease 3 needs a transfer
    assert unc.leases[3].transfers == 1 and unc.leases[3].start_s == 2010.0
    assert (1020.0, 0, -100.0) in unc.pools.disk_events
    for s in (fail, unc):
        assert _pool(s) == [("y.img", False, True)]
        assert s.pools.used_mb(0) == s.pools.scan_used_mb(0) == 100.0


def test_with_uncached_the_pool_is_unchanged_while_the_lease_runs():
    cfg = LeaseConfig({**BASE, "diskimage-cache-full": "uncached"})
    site = uniform_site(1, 2, 1024)
    s = LeaseScheduler(site, cfg, SimulatedClock(0.0), SimulatedNodes(site))
    for lease in _workload()[:2]:
        s.submit(lease)
    s.process(0.0)
    # x.img is the pool's only image (100 of 100 MB); y.img comes as lease 2's private copy
    assert _pool(s) == [("x.img", False, False), ("y.img", True, False)]
    assert s.pools.used_mb(0) == s.pools.scan_used_mb(0) == 100.0
    y = next(e for e in s.pools.pools[0].values() if e.image_id == "y.img")
    assert y.lease_id == 2 and y.evicted_by is None
    assert s.pools.usable(0, "y.img", 3, 1e9) is None           # no other lease may use it
    x = next(e for e in s.pools.pools[0].values() if e.image_id == "x.img")
    assert x.evicted_by is None                                  # nothing was evicted for it


def _pools(when_full):
    st_ = SlotTable(uniform_site(1, 2, 1024))
    return st_, ImagePools(1, st_, reuse=True, capacity_mb=100.0, when_full=when_full)


def _transfer(lease_id, image, start, end):
    lease = be(lease_id, 0.0, image)
    return Reservation(ResKind.TRANSFER, lease, start, end, link="be", image_id=image, mb=100.0, dest=(0,),
                       users=[lease_id])


def test_pool_add_refuses_with_fail_and_adds_an_uncached_copy_that_a_rollback_removes():
    st_, fail = _pools("fail")
    fail.add(0, "x.img", 100.0, None, 1, 1000.0, 0.0)
    assert fail.add(0, "y.img", 100.0, _transfer(2, "y.img", 0.0, 10.0), 2, 1000.0, 10.0) is None
    st_, pools = _pools("uncached")
    pools.add(0, "x.img", 100.0, None, 1, 1000.0, 0.0)
    tx = st_.begin()
    e = pools.add(0, "y.img", 100.0, _transfer(2, "y.img", 0.0, 10.0), 2, 1000.0, 10.0)
    assert e is not None and e.uncached and pools.used_mb(0) == 100.0
    assert pools.entries_pinned_by(2) == [(0, e)]
    st_.rollback(tx)
    assert [x.image_id for x in pools.pools[0].values()] == ["x.img"] and pools.entries_pinned_by(2) == []
    # released before it arrives (the lease was unscheduled): the copy goes with its last user
    tx = st_.begin()
    e = pools.add(0, "y.img", 100.0, _transfer(2, "y.img", 0.0, 10.0), 2, 1000.0, 10.0)
    pools.release(e, 2, 5.0)
    assert [x.image_id for x in pools.pools[0].values()] == ["x.img"]
    st_.commit(tx)
    with pytest.raises(ValueError, match="when_full"):
        ImagePools(1, st_, when_full="sometimes")


def test_option_defaults_to_fail_and_is_on_for_haizea_files(tmp_path):
    assert LeaseConfig().diskimage_cache_full == "fail"
    assert HAIZEA_DEFAULTS["diskimage-cache-full"] == "uncached"
    conf = tmp_path / "reuse.conf"       # a Haizea 1.1 file with image caches (Haizea's INI format)
    conf.write_text("[general]\nmode: simulated\nlease-preparation: imagetransfer\n[simulation]\n"
                    "resources: in-tracefile\nimagetransfer-bandwidth: 100\n[deploy-imagetransfer]\n"
                    "diskimage-reuse: image-caches\ndiskimage-cache-size: 20480\n")
    cfg = load_haizea(conf).config
    assert (cfg.diskimage_reuse, cfg.diskimage_cache_size, cfg.diskimage_cache_full) == \
        ("image-caches", 20480.0, "uncached")
    with pytest.raises(ConfigError, match="diskimage-cache-full"):
        LeaseConfig({"diskimage-cache-full": "sometimes"})


@SETTINGS
@given(wl=workloads(), opts=configs, join=st.booleans(), cache=st.sampled_from([600.0, 1024.0, 2048.0]))
def test_with_uncached_no_lease_starts_before_its_image_is_on_every_node_and_pools_stay_in_size(wl, opts, join,
                                                                                                 cache):
    """Property: with ``diskimage-cache-full = uncached`` and small pools every best-effort or
    immediate lease's VMs start (the first time) only on nodes where its image has arrived, the
    pools never hold more than their size, every lease completes, no node is over-committed and
    a link carries one transfer at a time."""
    n_nodes, cpus, leases = wl
    opts = dict(opts, **{"lease-preparation": "imagetransfer", "diskimage-reuse": "image-caches",
                         "diskimage-cache-size": cache, "diskimage-cache-full": "uncached",
                         "multicast-join": join})

    def pools_in_size(self, res, t):
        for node in range(len(self.nodes)):
            assert self.pools.used_mb(node) == pytest.approx(self.pools.scan_used_mb(node))
            assert self.pools.used_mb(node) <= cache + 1e-6
    site = uniform_site(n_nodes, cpus, 1024 * cpus)
    sched, _ = simulate_staged(leases, site, opts, also=pools_in_size)
    check_completed(sched, site, opts["imagetransfer-link"] == "shared")
