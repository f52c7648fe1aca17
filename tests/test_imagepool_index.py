"""The image pools' indexes (issue 16) answer exactly as scanning every pool would.

``ImagePools`` finds entries by image (and owner lease), by pinning lease and by transfer, and
keeps each node's pool size as a sum (``vwn_agents/leasing/imagepool.py``). Two property tests:

* random sequences of pool operations -- add (with and without a transfer, evicting when a
  pool is full), pin, release, arrival, lease end, forgetting a transfer -- some inside
  transactions that are rolled back; after every step each indexed query equals its scan;
* random small workloads simulated with image transfers, where every ``Staging.be_ready``
  answer (the hot query of the HPDC'08 image configurations) is compared with the per-node scan
  it replaced, and every queued lease the queue pass skips (``besteffort._may_start`` False)
  is checked to be one that placement would indeed refuse.
"""
import math

import pytest

from hypothesis import HealthCheck, given, settings, strategies as st

from vwn_agents.leasing import LeaseConfig, simulate, uniform_site
from vwn_agents.leasing import besteffort
from vwn_agents.leasing.imagepool import ImagePools
from vwn_agents.leasing.slottable import INF, Reservation, ResKind, SlotTable
from vwn_agents.leasing.staging import Staging

from .test_leasing_properties import configs, workloads

SETTINGS = settings(max_examples=int(__import__("os").environ.get("LEASING_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
IMAGES = ("a", "b", "c")
N_NODES = 3

op = st.one_of(
    st.tuples(st.just("add"), st.integers(0, N_NODES - 1), st.sampled_from(IMAGES), st.integers(1, 4),
              st.booleans(), st.integers(0, 20), st.integers(0, 20)),
    st.tuples(st.just("pin"), st.integers(0, 50), st.integers(1, 4), st.integers(0, 30)),
    st.tuples(st.just("release"), st.integers(0, 50), st.integers(1, 4), st.integers(0, 30)),
    st.tuples(st.just("arrive"), st.integers(0, 50), st.integers(0, 30)),
    st.tuples(st.just("forget"), st.integers(0, 50)),
    st.tuples(st.just("end"), st.integers(1, 4), st.integers(0, 30)),
    st.tuples(st.just("begin"),),
    st.tuples(st.just("rollback"),),
    st.tuples(st.just("commit"),),
)


def check_equal(pools: ImagePools, seen: dict) -> None:
    """Every indexed query equals its definition by scanning; ``seen`` remembers each image
    version's copies."""
    for node in range(N_NODES):
        assert math.isclose(pools.used_mb(node), pools.scan_used_mb(node), abs_tol=1e-6)
        for image in IMAGES:
            for lease in range(1, 5):
                for t in (-INF, 5.0, 15.0, INF):
                    for use_at in (None, 10.0):
                        assert pools.usable(node, image, lease, t, use_at) is pools.scan_usable(
                            node, image, lease, t, use_at)
                scan_arrived = any(e.arrived and e.image_id == image and lease in e.users
                                   for e in pools.pools[node].values())
                assert pools.has_arrived(node, image, lease) == scan_arrived
                if pools.scan_usable(node, image, lease, INF) is not None:
                    assert node in pools.nodes_with(image, lease)
    for lease in range(1, 5):
        for image in IMAGES:     # an unchanged image version means unchanged copies (Staging._copies)
            copies = tuple((n, e.key, e.ready_by(), e.arrived, e.transfer is None)
                           for n in range(N_NODES) for use_at in (None, 10.0)
                           for e in [pools.scan_usable(n, image, lease, INF, use_at)] if e is not None)
            version = pools.image_version(image, lease)
            before = seen.setdefault((image, lease, version), copies)
            assert before == copies
        scan = {(n, e.key) for n in range(N_NODES) for e in pools.pools[n].values() if lease in e.users}
        assert {(n, e.key) for n, e in pools.entries_pinned_by(lease)} == scan


@SETTINGS
@given(reuse=st.booleans(), capacity=st.sampled_from([0.0, 250.0]), strict=st.booleans(), purge=st.booleans(),
       ops=st.lists(op, min_size=1, max_size=40))
def test_indexed_pool_queries_equal_the_scan(reuse, capacity, strict, purge, ops):
    """``purge``: Haizea 1.1's pools (compat mode), room made when an image arrives."""
    st_ = SlotTable(uniform_site(N_NODES, 1, 1024))
    pools = ImagePools(N_NODES, st_, reuse=reuse, capacity_mb=capacity, remove_on_expire=strict,
                       purge_on_arrival=purge)
    transfers: list[Reservation] = []
    txs: list[int] = []
    seen: dict = {}
    for o in ops:
        kind = o[0]
        if kind == "add":
            _, node, image, lease, with_transfer, t_end, arrival = o
            tr = None
            if with_transfer:
                tr = Reservation(ResKind.TRANSFER, None, 0.0, float(arrival), image_id=image, mb=100.0,
                                 dest=(node,))
                transfers.append(tr)
            pools.add(node, image, 100.0, tr, lease, float(t_end), float(arrival))
        elif kind in ("pin", "release"):
            _, i, lease, t = o
            entries = [e for n in range(N_NODES) for e in pools.pools[n].values()]
            if entries:
                e = entries[i % len(entries)]
                if kind == "pin":
                    pools.pin(e, lease, float(t))
                else:
                    pools.release(e, lease, float(t))
        elif kind == "arrive" and transfers and not txs:   # real events happen outside transactions
            tr = transfers.pop(o[1] % len(transfers))
            pools.arrived(tr, float(o[2]))
        elif kind == "forget" and transfers:
            pools.forget_transfer(transfers[o[1] % len(transfers)])
        elif kind == "end" and not txs:
            pools.lease_ended(o[1], range(N_NODES), float(o[2]))
        elif kind == "begin":
            txs.append(st_.begin())
        elif kind == "rollback" and txs:
            st_.rollback(txs.pop())
        elif kind == "commit" and txs:
            st_.commit(txs.pop())
        check_equal(pools, seen)
    while txs:
        st_.rollback(txs.pop())
        check_equal(pools, seen)


def scan_be_ready(staging: Staging, lease, now: float, n_nodes: int):
    """``Staging.be_ready`` as it was before the index: every node's pool scanned."""
    dur = staging.transfer_time(lease.image_mb, "be")
    tail = staging._be_start(now, dur) + dur
    copy = staging.copy_time(lease)
    out = []
    for node in range(n_nodes):
        e = staging.pools.scan_usable(node, lease.image_id, lease.id, INF, now)
        if e is not None and not e.arrived and e.transfer is not None and not staging.piggyback:
            e = None
        out.append((tail if e is None else max(now, e.ready_by())) + copy)
    return out


@SETTINGS
@given(wl=workloads(), opts=configs)
def test_be_ready_equals_the_scan_in_random_simulations(wl, opts):
    n_nodes, cpus, leases = wl
    opts = dict(opts, **{"lease-preparation": "imagetransfer"})
    indexed = Staging.be_ready

    def checked(self, lease, now, n):
        got = indexed(self, lease, now, n)
        assert got == scan_be_ready(self, lease, now, n)
        return got
    may_start = besteffort._may_start

    def checked_skip(sched, lease, now):
        answer = may_start(sched, lease, now)
        if not answer:               # a skipped lease: placing it (then undone) must fail too
            tx = sched.st.begin()
            placed = besteffort._place(sched, lease, now, False, False)
            sched.st.rollback(tx)
            assert not placed
        return answer
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Staging, "be_ready", checked)
        m.setattr(besteffort, "_may_start", checked_skip)
        simulate(leases, uniform_site(n_nodes, cpus, 2048), LeaseConfig(opts))
