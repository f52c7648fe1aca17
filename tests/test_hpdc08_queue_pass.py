"""The queue pass of the HPDC'08 sweep's image configurations (issue 16, session 8).

``examples/sweeps/hpdc08.toml`` runs VM-MULT and VM-REUSE-* with ``multicast-join`` (and the
reuse ones with ``diskimage-cache-full = uncached``), which the golden digests of
``test_hpdc08_fast_paths`` (computed before those options existed) do not cover. Here:

* golden per-lease digests of those three configurations on the first 1,200 leases of the
  30-day Blue trace with the 30 % 3-hour medium ARs, computed at commit b0e263e with the queue
  pass's bulk answers switched off (every queued lease asked ``besteffort._may_start``, its
  definition): the fast paths must reproduce them exactly;
* ``QueueScan`` with ``multicast-join``: a lease without a copy of its image is ready at the end
  of a pending multicast of its image when that ends before one more FIFO transfer; the scan
  used the FIFO time and answered no where ``_may_start`` says yes (202 of 2,639 answers wrong on
  the 250-lease VM-MULT input below before the fix). Every answer must equal the definition;
* ``besteffort._may_resume`` (a suspended lease skipped when too few VM slots are free now for
  each of its two placements, session 9): whenever it says no, placing the lease (in a
  transaction, rolled back) must fail too.
"""
import hashlib
import json

import pytest
from hypothesis import given, strategies as st

from vgrid_runtime import traces as catalogue
from vwn_agents.leasing import LeaseConfig, besteffort, simulate, uniform_site
from vwn_agents.leasing.model import LeaseState
from vwn_agents.leasing.queuescan import QueueScan
from vwn_agents.leasing.staging import Staging
from vwn_agents.leasing.tracefile import assign_images
from vwn_agents.leasing.traces import read_trace

from .test_hpdc08_fast_paths import IMG, REUSE, per_lease, reference_may_start
from .test_imagepool_index import SETTINGS
from .test_leasing_properties import configs, workloads

JOIN = {"multicast-join": True}
UNCACHED = {"diskimage-cache-full": "uncached"}
#: configuration -> (options as in hpdc08.toml, image distribution, per-lease SHA-256 prefix,
#: all-best-effort s), computed at b0e263e with ``QueueScan.allows`` replaced by ``_may_start``.
GOLDEN = {
    "VM-MULT": ({**IMG, "diskimage-reuse": "none", **JOIN}, "uniform", "a8d23a5914689848d7b8e9c2c26a3be7", 553843.2),
    "VM-REUSE-UNIFORM": ({**REUSE, **UNCACHED, **JOIN}, "uniform", "435b0f4afd2a7217e113480cbb9813f6", 566865.4),
    "VM-REUSE-SKEWED": ({**REUSE, **UNCACHED, **JOIN}, "7,10 30,1", "400d6673865d3a1d3a0ad2a860461739", 536546.6),
}


def workload(n: int, dist: str) -> list:
    """The first ``n`` leases of the 30-day Blue trace, the 30 % 3 h medium ARs that start
    before the last of them is a day old, one of 37 4 GB images each (seed 1)."""
    be = read_trace(catalogue.bundled("blue-30days")).leases[:n]
    horizon = be[-1].submit_s + 86400.0
    ars = read_trace(catalogue.resolve("work_30-dur_3h-size_2medium"), id_offset=10**6).leases
    return assign_images(be + [a for a in ars if a.requested_start_s < horizon], 37, 4096.0, dist, 1)


def digest(result) -> str:
    return hashlib.sha256(json.dumps(per_lease(result.scheduler.leases.values())).encode()).hexdigest()[:32]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_sweep_image_configurations_schedule_as_the_per_lease_definition(name):
    opts, dist, want, abe = GOLDEN[name]
    result = simulate(workload(1200, dist), uniform_site(144, 1, 1024), LeaseConfig(opts))
    assert sum(1 for l in result.scheduler.leases.values() if l.suspensions) > 0   # resumptions are tried
    assert round(result.report()["metrics"]["all_best_effort_s"], 3) == abe
    assert digest(result) == want


def _checked_allows(counts):
    allows = QueueScan.allows

    def checked(self, i):
        got = allows(self, i)
        assert got == reference_may_start(self.sched, self.queue[i], self.now), (i, self.now)
        counts[got] += 1
        return got
    return checked


def test_queue_scan_with_multicast_join_answers_as_may_start():
    """Regression (VM-MULT of hpdc08.toml): a pending multicast of the image makes a lease
    without a copy ready before the FIFO tail."""
    counts = {True: 0, False: 0}
    with pytest.MonkeyPatch.context() as m:
        m.setattr(QueueScan, "allows", _checked_allows(counts))
        simulate(workload(250, "uniform"), uniform_site(144, 1, 1024),
                 LeaseConfig(GOLDEN["VM-MULT"][0]))
    assert counts[True] > 0 and counts[False] > 1000


join_configs = configs.map(lambda c: {**c, "lease-preparation": "imagetransfer", "transfer-mechanism": "multicast",
                                      "avoid-redundant-transfers": True, "multicast-join": True})


@SETTINGS
@given(wl=workloads(), opts=join_configs, full=st.sampled_from(["fail", "uncached"]))
def test_queue_scan_with_multicast_join_in_random_simulations(wl, opts, full):
    n_nodes, cpus, leases = wl
    with pytest.MonkeyPatch.context() as m:
        m.setattr(QueueScan, "allows", _checked_allows({True: 0, False: 0}))
        simulate(leases, uniform_site(n_nodes, cpus, 2048), LeaseConfig({**opts, "diskimage-cache-full": full}))


def _checked_may_resume(counts):
    may_resume = besteffort._may_resume

    def checked(sched, lease, now):
        got = may_resume(sched, lease, now)
        assert lease.state is LeaseState.SUSPENDED
        if not got:    # the definition: the placement itself fails
            tx = sched.st.begin()
            placed = besteffort.place_besteffort(sched, lease, now, allow_future=False)
            sched.st.rollback(tx)
            assert not placed, (lease.id, now)
        counts[got] += 1
        return got
    return checked


def test_may_resume_no_means_the_resumption_cannot_be_placed():
    """On VM-REUSE-UNIFORM with 30 % ARs (suspensions before each AR), every skipped
    resumption could not have been placed."""
    counts = {True: 0, False: 0}
    with pytest.MonkeyPatch.context() as m:
        m.setattr(besteffort, "_may_resume", _checked_may_resume(counts))
        simulate(workload(500, "uniform"), uniform_site(144, 1, 1024), LeaseConfig(GOLDEN["VM-REUSE-UNIFORM"][0]))
    assert counts[False] > 0


def test_may_resume_bounds_each_path_and_skips_more_than_one_bound_for_both():
    """Session 9: each resumption path is bounded with its own length (own nodes; elsewhere
    with the migration estimate). On the same calls, the session 8 bound (VM slots free now
    for the minimum slot length, ``min_slot_length``) would have let more resumptions be
    tried; every no is a failed placement (checked as above)."""
    counts = {True: 0, False: 0}
    seen = {"session8_no": 0, "no": 0}
    checked = _checked_may_resume(counts)

    def compared(sched, lease, now):
        got = checked(sched, lease, now)
        length = besteffort.min_slot_length(sched, lease)
        old = (sched.mapper.count_now_upper(lease.per_vm, now, length) >= lease.n_vms
               or len(set(lease.mapping)) < len(lease.mapping))
        seen["session8_no"] += not old
        seen["no"] += not got
        return got
    with pytest.MonkeyPatch.context() as m:
        m.setattr(besteffort, "_may_resume", compared)
        simulate(workload(500, "uniform"), uniform_site(144, 1, 1024), LeaseConfig(GOLDEN["VM-REUSE-UNIFORM"][0]))
    assert seen["no"] > seen["session8_no"] > 0, seen


@SETTINGS
@given(wl=workloads(), opts=configs)
def test_may_resume_no_means_the_resumption_cannot_be_placed_in_random_simulations(wl, opts):
    n_nodes, cpus, leases = wl
    opts = dict(opts, **{"lease-preparation": "imagetransfer"})
    with pytest.MonkeyPatch.context() as m:
        m.setattr(besteffort, "_may_resume", _checked_may_resume({True: 0, False: 0}))
        simulate(leases, uniform_site(n_nodes, cpus, 2048), LeaseConfig(opts))


@SETTINGS
@given(wl=workloads(), opts=join_configs, full=st.sampled_from(["fail", "uncached"]))
def test_cached_ready_times_with_multicast_join_equal_fresh_ones(wl, opts, full):
    """``multicastjoin.ready`` keeps its answer while the image's pool entries
    (``ImagePools.image_version``), the FIFO tail and its pending multicasts stay as they are;
    every answer (queue pass and placement) must equal one computed with empty caches. (Session
    8 tried ``copies_version`` there, as ``Staging._ready`` has: no measurable gain, not kept.)"""
    n_nodes, cpus, leases = wl
    ready = Staging._ready

    def checked(stg, lease, now, n):
        got = ready(stg, lease, now, n)
        kept = stg._ready_cache, stg._copies_cache
        stg._ready_cache, stg._copies_cache = {}, {}
        try:
            assert ready(stg, lease, now, n)[0] == got[0], (lease.id, now)
        finally:
            stg._ready_cache, stg._copies_cache = kept
        return got
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Staging, "_ready", checked)
        simulate(leases, uniform_site(n_nodes, cpus, 2048), LeaseConfig({**opts, "diskimage-cache-full": full}))
