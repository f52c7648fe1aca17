"""The lease engine's fast paths for the HPDC'08 image configurations change no schedule (issue 16).

Session 6 made VM-MULT and VM-REUSE runs several times cheaper (docs/benchmarks.md, "HPDC'08
sweep on Dask"): ready times shared by every lease without a pool copy, each image's copies
cached by a per-image version (``ImagePools.image_version``), ``_may_start`` bounded by every
node's free slots (``Mapper.count_free_at``), and ``Mapper.could_start_before`` restricted to
the slots that can count. Two kinds of test:

* golden per-lease values: the first 500 leases of the 30-day SDSC Blue trace with the 30 %
  3-hour medium ARs that start within them, in VM-MULT, VM-REUSE-UNIFORM and VM-REUSE-SKEWED:
  the SHA-256 of every lease's (id, state, start, end, mapping, suspensions, transfers, MB)
  computed by the engine *before* these changes (commit deba032) must be reproduced exactly;
* property tests on random small workloads with image transfers: every ``_may_start`` and
  ``could_start_before`` answer equals its definition (the code they replaced), evaluated on the
  same slot table.
"""
import hashlib
import json

import numpy as np
import pytest
from hypothesis import given

from vgrid_runtime import traces as catalogue
from vwn_agents.leasing import LeaseConfig, besteffort, simulate, uniform_site
from vwn_agents.leasing.mapper import Mapper
from vwn_agents.leasing.queuescan import QueueScan
from vwn_agents.leasing.slottable import INF
from vwn_agents.leasing.tracefile import assign_images
from vwn_agents.leasing.traces import read_trace

from .test_imagepool_index import SETTINGS
from .test_leasing_properties import configs, workloads

SR = {"backfilling": "aggressive", "suspension": "all", "suspend-rate": 50.0, "resume-rate": 50.0,
      "migration": "yes", "migration-transfer": "node-to-node"}
IMG = {**SR, "add-overhead": "all", "runtime-slowdown-overhead": 5.0, "bootshutdown-overhead": 20.0,
       "lease-preparation": "imagetransfer", "transfer-mechanism": "multicast",
       "avoid-redundant-transfers": True, "imagetransfer-bandwidth": 80.0}
REUSE = {**IMG, "diskimage-reuse": "image-caches", "diskimage-cache-size": 20480.0}
#: (options, image distribution or None, per-lease SHA-256 prefix, all-best-effort s), computed at
#: commit deba032 (before the fast paths) with the ``per_lease`` rows below.
GOLDEN = {
    "VM-MULT": ({**IMG, "diskimage-reuse": "none"}, "uniform", "cefb051439de77e4c16637822d7180d2", 384125.8),
    "VM-REUSE-UNIFORM": (REUSE, "uniform", "16bd1e445a8f1ae21140df87c6e1dfca", 395247.2),
    "VM-REUSE-SKEWED": (REUSE, "7,10 30,1", "e2a0883f214e582cb0bf1ef331267923", 369432.6),
    # Session 7 (before its queue-pass changes, commit 42b8e5e): the configurations without image
    # transfers, with no images drawn (as ``vgrid sweep`` runs them).
    "NOVM-NOSR": ({"backfilling": "aggressive", "suspension": "none"}, None, "00db49c5c0275345ebeb071448e6c67f",
                  417026.0),
    "NOVM-SR": (SR, None, "f02a69bdc8aecbd1147aa2f0ecd34b8b", 367028.0),
    "VM-PREDEPLOY": ({**SR, "add-overhead": "all", "runtime-slowdown-overhead": 5.0, "bootshutdown-overhead": 20.0},
                     None, "aa5bb62e7d93c5bc16f4d666ec1ade92", 369023.0),
}


def reduced_workload(n: int = 500) -> list:
    be = read_trace(catalogue.bundled("blue-30days")).leases[:n]
    horizon = be[-1].submit_s + 86400.0
    ars = read_trace(catalogue.resolve("work_30-dur_3h-size_2medium"), id_offset=10**6).leases
    return be + [a for a in ars if a.requested_start_s < horizon]


def per_lease(leases) -> list:
    return [(l.id, l.state.name, round(l.start_s or -1, 3), round(l.end_s or -1, 3), list(l.mapping), l.suspensions,
             l.transfers, round(l.mb_transferred, 3)) for l in sorted(leases, key=lambda l: l.id)]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_per_lease_schedule_equals_the_engine_before_the_fast_paths(name):
    opts, dist, digest, abe = GOLDEN[name]
    leases = reduced_workload() if dist is None else assign_images(reduced_workload(), 37, 4096.0, dist, 1)
    result = simulate(leases, uniform_site(144, 1, 1024), LeaseConfig(opts))
    rows = per_lease(result.scheduler.leases.values())
    assert len(rows) == 539 and sum(1 for r in rows if r[0] >= 10**6) >= 10   # the ARs are in
    assert round(result.report()["metrics"]["all_best_effort_s"], 3) == abe
    assert hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:32] == digest


def reference_may_start(sched, lease, now: float) -> bool:
    """``_may_start`` as it was: every start counted on the ready nodes."""
    _, ready, times, _ = sched.staging._ready(lease, now, len(sched.nodes))
    starts = sorted({t for t in times if now < t < INF} | ({now} if min(times) <= now else set()))
    length = besteffort.min_slot_length(sched, lease)
    return any(sched.mapper.count_ready_at(lease.per_vm, t, length, ready) >= lease.n_vms for t in starts)


def reference_could_start_before(mapper, need, n, length, now, t) -> bool:
    """``could_start_before`` as it was: the full (starts x slots) matrix."""
    if t <= now:
        return False
    A, B, _, _ = mapper.slot_arrays(need)
    S = np.unique(np.concatenate([[now], A[(A > now) & (A < t)]]))
    ok = (A[None, :] <= S[:, None]) & (B[None, :] >= np.minimum(S + length, t)[:, None]) & (B[None, :] > S[:, None])
    return bool((ok.sum(axis=1) >= n).any())


@SETTINGS
@given(wl=workloads(), opts=configs)
def test_fast_paths_answer_as_their_definitions_in_random_simulations(wl, opts):
    n_nodes, cpus, leases = wl
    opts = dict(opts, **{"lease-preparation": "imagetransfer"})
    may_start, could = besteffort._may_start, Mapper.could_start_before

    def checked_may_start(sched, lease, now):
        got = may_start(sched, lease, now)
        assert got == reference_may_start(sched, lease, now)
        return got

    def checked_could(self, need, n, length, now, t):
        got = could(self, need, n, length, now, t)
        assert got == reference_could_start_before(self, need, n, length, now, t)
        return got
    with pytest.MonkeyPatch.context() as m:
        m.setattr(besteffort, "_may_start", checked_may_start)
        m.setattr(Mapper, "could_start_before", checked_could)
        simulate(leases, uniform_site(n_nodes, cpus, 2048), LeaseConfig(opts))


@SETTINGS
@given(wl=workloads(), opts=configs)
def test_queue_scan_answers_every_lease_as_may_start_would(wl, opts):
    """Session 7: ``QueueScan`` answers runs of the queue at once (a no for every lease without a
    copy of its image whose slot count at the FIFO ready time is too small, from slot arrays
    that may predate the pass's placements); each answer must equal ``_may_start``'s
    definition on the slot table as it is when the pass reaches that lease."""
    n_nodes, cpus, leases = wl
    opts = dict(opts, **{"lease-preparation": "imagetransfer"})
    allows = QueueScan.allows
    asked = []

    def checked_allows(self, i):
        got = allows(self, i)
        assert got == reference_may_start(self.sched, self.queue[i], self.now)
        asked.append(got)
        return got
    with pytest.MonkeyPatch.context() as m:
        m.setattr(QueueScan, "allows", checked_allows)
        simulate(leases, uniform_site(n_nodes, cpus, 2048), LeaseConfig(opts))
