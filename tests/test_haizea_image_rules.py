"""Haizea 1.1's image-pool and node-order rules in compat mode (issue 16, session 9):
``compat_pools.py`` (rule 13: a full pool is purged when an image arrives) and
``compat_order.py`` (rule 14: equal host scores in CPython 2.7's set order). Their effect on
whole runs is in tests/test_haizea_vm_parity.py (VM-REUSE 3 days: 237 -> 527 of 527). Also
the migration rounds of ``compat_staging`` (rules 17 and 18, session 10: VM-MULT + 20 % ARs
3 days 516 -> 552 of 553), rules 21-22 (session 11) and 23-25 (session 12: the greedy mapper's
too-short start, where a migration starts, a queue pass at every time step).
"""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vwn_agents.leasing import uniform_site
from vwn_agents.leasing.compat_order import Py2IntSet, _final_size, haizea_node_order
from vwn_agents.leasing.imagepool import ImagePools
from vwn_agents.leasing.slottable import Reservation, ResKind, SlotTable

MB = 4096.0


def _pools(capacity=2 * MB, purge=True, n=2):
    st_ = SlotTable(uniform_site(n, 1, 1024))
    return st_, ImagePools(n, st_, reuse=True, capacity_mb=capacity, when_full="uncached", purge_on_arrival=purge)


def _transfer(image, end, node=0):
    return Reservation(ResKind.TRANSFER, None, end - 410.0, end, image_id=image, mb=MB, dest=(node,))


def _arrive(pools, image, lease, t_end, arrival, node=0):
    tr = _transfer(image, arrival, node)
    e = pools.add(node, image, MB, tr, lease, t_end, arrival)
    pools.arrived(tr, arrival)
    return e


def _images(pools, node=0):
    return sorted((e.image_id, e.uncached) for e in pools.pools[node].values())


def test_a_full_pool_is_purged_when_the_image_arrives_not_when_it_is_planned():
    _st, pools = _pools()
    _arrive(pools, "a", 1, 100.0, 10.0)
    _arrive(pools, "b", 2, 200.0, 20.0)
    pools.lease_ended(1, [0], 100.0)
    pools.lease_ended(2, [0], 200.0)
    tr = _transfer("c", 1000.0)
    pools.add(0, "c", MB, tr, 3, 2000.0, 1000.0)
    # planned: nothing flagged, both images still reusable (vgrid's own mode flags "a" here)
    assert all(e.evicted_by is None for e in pools.pools[0].values())
    assert pools.usable(0, "a", 4, 500.0) is not None
    pools.arrived(tr, 1000.0)
    # arrived: the oldest unused image (smallest timeout) went, one image for one
    assert _images(pools) == [("b", False), ("c", False)]
    assert (1000.0, 0, -MB) in pools.disk_events


def test_vgrids_own_pools_flag_the_victim_when_the_transfer_is_planned():
    _st, pools = _pools(purge=False)
    _arrive(pools, "a", 1, 100.0, 10.0)
    _arrive(pools, "b", 2, 200.0, 20.0)
    pools.lease_ended(1, [0], 100.0)
    pools.lease_ended(2, [0], 200.0)
    pools.add(0, "c", MB, _transfer("c", 1000.0), 3, 2000.0, 1000.0)
    assert pools.usable(0, "a", 4, 500.0) is None


def test_the_victim_is_the_smallest_timeout_even_if_a_reuse_raised_another():
    _st, pools = _pools()
    a = _arrive(pools, "a", 1, 100.0, 10.0)
    _arrive(pools, "b", 2, 200.0, 20.0)
    pools.pin(a, 5, 900.0)          # a later lease reused "a": its timeout is now 900
    for lid, t in ((1, 100.0), (2, 200.0), (5, 900.0)):
        pools.lease_ended(lid, [0], t)
    _arrive(pools, "c", 3, 2000.0, 1000.0)
    assert _images(pools) == [("a", False), ("c", False)]


def test_an_ar_reusing_an_image_raises_its_timeout_to_the_ars_start():
    _st, pools = _pools()
    a = _arrive(pools, "a", 1, 100.0, 10.0)
    _arrive(pools, "b", 2, 200.0, 20.0)
    pools.pin(a, 5, 900.0, 150.0)    # Haizea's __schedule_deadline: timeout = the AR's start
    for lid, t in ((1, 100.0), (2, 200.0), (5, 900.0)):
        pools.lease_ended(lid, [0], t)
    _arrive(pools, "c", 3, 2000.0, 1000.0)
    assert _images(pools) == [("b", False), ("c", False)]


def test_no_unused_image_gives_an_uncached_copy_and_it_leaves_with_its_lease():
    _st, pools = _pools()
    _arrive(pools, "a", 1, 100.0, 10.0)
    _arrive(pools, "b", 2, 200.0, 20.0)
    c = _arrive(pools, "c", 3, 300.0, 30.0)       # "a" and "b" still in use
    assert c.uncached and _images(pools) == [("a", False), ("b", False), ("c", True)]
    assert pools.usable(0, "c", 4, 500.0) is None  # nobody else reuses it
    assert pools.used_mb(0) == pools.scan_used_mb(0) == 2 * MB
    pools.lease_ended(3, [0], 300.0)
    assert _images(pools) == [("a", False), ("b", False)]


def test_a_second_copy_arriving_is_merged_into_the_pools_copy():
    _st, pools = _pools()
    first = _arrive(pools, "a", 1, 100.0, 10.0)
    _arrive(pools, "a", 2, 500.0, 20.0)
    assert _images(pools) == [("a", False)]
    assert first.users == {1: 100.0, 2: 500.0} and first.timeout == 500.0
    assert {e.key for _n, e in pools.entries_pinned_by(2)} == {first.key}
    pools.lease_ended(1, [0], 100.0)
    pools.lease_ended(2, [0], 500.0)
    assert _images(pools) == [("a", False)] and not first.users


# ---------------------------------------------------------------- CPython 2.7 set order
# Orders printed by CPython 2.7.18 for ``list(set(range(1, 145)) & set(n + 1 for n in nodes))``
# (Haizea's ids are vgrid's + 1), minus one.
PY27 = [
    (list(range(96, 112)) + [56, 120, 121], [56] + list(range(96, 112)) + [120, 121]),
    ([31, 0, 64, 32, 7, 8, 127, 15, 143], [143, 0, 7, 8, 15, 31, 32, 64, 127]),
    (list(range(127, 144)) + list(range(100, 127)), list(range(100, 144))),
    ([1, 3, 5], [5, 3, 1]),
    ([33, 1, 65, 97, 129], [33, 1, 65, 97, 129]),
]


def test_node_order_is_cpython_27_set_order():
    for want, nodes in PY27:
        pos = haizea_node_order(nodes)
        assert sorted(pos, key=pos.get) == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 143), min_size=1, max_size=144, unique=True))
def test_node_order_is_a_permutation_and_ascending_when_ids_fit_the_table(nodes):
    pos = haizea_node_order(nodes)
    assert sorted(pos) == sorted(nodes) and sorted(pos.values()) == list(range(len(nodes)))
    if max(nodes) + 1 < _final_size(len(nodes)):
        assert sorted(pos, key=pos.get) == sorted(nodes)
    # the fast path agrees with the replay
    assert [k - 1 for k in Py2IntSet(Py2IntSet(n + 1 for n in nodes))] == sorted(pos, key=pos.get)


def test_every_node_of_the_site_is_ascending():
    nodes = list(range(144))
    pos = haizea_node_order(nodes[::-1])
    assert sorted(pos, key=pos.get) == nodes


def test_migration_rounds_are_haizeas_image_then_memory_rounds():
    """Rule 17: 2 VMs moving to 2 other nodes at 80 Mb/s: one image round of ceil(4,096 / 10)
    = 410 s, then one memory round of ceil(1,024 / 10) = 103 s, from now; time steps only."""
    from vwn_agents.leasing import LeaseConfig
    from vwn_agents.leasing.compat_staging import migration_rounds
    from vwn_agents.leasing.model import Lease, LeaseType, resource_vector
    from vwn_agents.leasing.slottable import ResKind

    lease = Lease(id=7, type=LeaseType.BEST_EFFORT, submit_s=0.0, duration_s=100.0, n_vms=2,
                  per_vm=resource_vector(cpu=100, memory=1024), image_id="image_1", image_mb=MB)
    lease.mapping = (36, 37)
    cfg = LeaseConfig({"imagetransfer-bandwidth": 80.0})
    rounds = migration_rounds(lease, (104, 105), cfg, 1000.0)
    assert [(r.kind, r.start, r.end, r.use) for r in rounds] == [
        (ResKind.COPY, 1000.0, 1410.0, {}), (ResKind.COPY, 1410.0, 1513.0, {})]
    assert migration_rounds(lease, (36, 37), cfg, 1000.0) == []     # no VM changes node


def _lease(n=2, duration=100.0):
    from vwn_agents.leasing.model import Lease, LeaseType, resource_vector
    return Lease(id=7, type=LeaseType.BEST_EFFORT, submit_s=0.0, duration_s=duration, n_vms=n,
                 per_vm=resource_vector(cpu=100, memory=1024), image_id="image_1", image_mb=MB)


def test_migration_rounds_pair_virtual_nodes_as_haizea():
    """Rule 18: virtual node i moves from the node it ran on to the i-th node of the mapper's
    order; a pair joins a round when neither node is in it yet, and each round carries the
    nodes whose network it reserves. Rule 24: a virtual node whose images are already on its
    new node is not copied (``schedule_migration`` keeps only the virtual nodes whose mapping
    differs; session 10 had it take part in a round). (Rule 17 alone paired the nodes that
    change in index order: one round for both cases below, reserving nothing.)"""
    from vwn_agents.leasing import LeaseConfig
    from vwn_agents.leasing.compat_staging import haizea_rounds, migration_rounds
    from vwn_agents.leasing.model import Segment

    cfg = LeaseConfig({"imagetransfer-bandwidth": 80.0})
    lease = _lease()
    lease.mapping = (36, 37)
    lease.segments = [Segment(0.0, 10.0, (36, 37), (37, 36))]     # vnode 0 ran on 37, vnode 1 on 36
    # to (37, 50) with vnode 0 on 50 and vnode 1 on 37: 37 -> 50, then 36 -> 37 (37 busy in round 1)
    rounds = migration_rounds(lease, (37, 50), cfg, 0.0, vnodes=(50, 37))
    assert [(r.kind, r.start, r.end, r.dest, r.link) for r in rounds] == [
        (ResKind.COPY, 0.0, 410.0, (37, 50), "disk"), (ResKind.COPY, 410.0, 820.0, (36, 37), "disk"),
        (ResKind.COPY, 820.0, 923.0, (37, 50), "memory"), (ResKind.COPY, 923.0, 1026.0, (36, 37), "memory")]
    assert [r.moves for r in rounds[:2]] == [((0, 37, 50),), ((1, 36, 37),)]
    # vnode 1 stays on 36: only vnode 0 is copied, 37 -> 50, one round of each kind on two nodes
    rounds = migration_rounds(lease, (36, 50), cfg, 0.0, vnodes=(50, 36))
    assert [(r.start, r.end, r.dest) for r in rounds] == [(0.0, 410.0, (37, 50)), (410.0, 513.0, (37, 50))]
    # the same nodes in another vnode order is a migration (Haizea's vnode swap: two rounds)
    assert len(migration_rounds(lease, (36, 37), cfg, 0.0, vnodes=(36, 37))) == 4
    assert migration_rounds(lease, (36, 37), cfg, 0.0, vnodes=(37, 36)) == []
    assert haizea_rounds([(1, 2), (2, 3), (4, 5), (3, 1), (6, 6)]) == [
        [(0, 1, 2), (2, 4, 5)], [(1, 2, 3)], [(3, 3, 1)]]


def test_a_migration_that_ended_moved_the_images_the_next_plan_starts_from():
    """Rule 24: Haizea's ``_handle_end_migrate`` moves a round's disk (or memory) images to their
    destinations, and the next ``schedule_migration`` of the lease starts from there: a lease
    re-placed (``reevaluate``) on the nodes its finished migration went to needs no more
    rounds. vgrid paired from the last segment's nodes every time, so a 140-VM lease re-placed
    at each premature end put six rounds in the slot table again (3 days of VM-MULT + 20 % ARs:
    lease 640's rounds changed the greedy score of nodes 50-51 at t = 245,599 s, lease 1159
    resumed elsewhere; 552 -> 553 of 553 leases as Haizea 1.1)."""
    from vwn_agents.leasing import LeaseConfig
    from vwn_agents.leasing.compat_staging import copied, image_nodes, migration_rounds
    from vwn_agents.leasing.model import Segment

    cfg = LeaseConfig({"imagetransfer-bandwidth": 80.0})
    st_ = SlotTable(uniform_site(4, 1, 1024))
    lease = _lease()
    lease.mapping = (0, 1)
    lease.segments = [Segment(0.0, 10.0, (0, 1), (0, 1))]
    rounds = migration_rounds(lease, (2, 3), cfg, 20.0, vnodes=(2, 3))
    assert [r.link for r in rounds] == ["disk", "memory"] and rounds[0].moves == ((0, 0, 2), (1, 1, 3))
    copied(st_, lease, rounds[0])                       # the disk round ended: disks on 2 and 3
    assert image_nodes(lease) == ((2, 3), (0, 1))
    again = migration_rounds(lease, (2, 3), cfg, 500.0, vnodes=(2, 3))
    assert [(r.link, r.start, r.end) for r in again] == [("memory", 500.0, 603.0)]
    copied(st_, lease, again[0])
    assert image_nodes(lease) == ((2, 3), (2, 3))
    assert migration_rounds(lease, (2, 3), cfg, 700.0, vnodes=(2, 3)) == []
    assert len(migration_rounds(lease, (0, 1), cfg, 700.0, vnodes=(0, 1))) == 2   # and back: both kinds
    lease.segments.append(Segment(800.0, 900.0, (0, 1), (1, 0)))   # it ran again: images where it ran
    assert image_nodes(lease) == ((1, 0), (1, 0))


def test_the_greedy_score_counts_a_migration_round_as_a_lease_on_its_nodes():
    """Rule 18: Haizea's greedy host score sees a migration round (it reserves its nodes'
    network): a node whose round starts later has its availability changing then, a node in a
    round at the start holds one lease; the mapper's order (best first) gives the virtual nodes."""
    from vwn_agents.leasing.compat_staging import GreedyScore

    st_ = SlotTable(uniform_site(4, 1, 1024))
    other = _lease()
    st_.add(Reservation(ResKind.COPY, other, 100.0, 510.0, dest=(1, 2)))
    lease = _lease(n=4, duration=1000.0)
    score = GreedyScore(st_, lease, 0.0)
    at0 = score.at(0.0)
    assert at0(0, 1) == (1.0,) and at0(3, 1) == (1.0,)
    assert at0(1, 1) == at0(2, 1) == (0.5 + 0.25 + 0.25 * 100.0 / 1000.0,)   # changes at 100 s
    at200 = score.at(200.0)
    assert at200(1, 1) == (0.5 * 3 / 4 + 0.25 + 0.25 * 310.0 / 1000.0,)       # one lease until 510 s
    assert score.vnodes(0.0, (0, 1, 2, 3)) == (0, 3, 1, 2)


def _ar(lid, start, duration=600.0):
    from vwn_agents.leasing.model import Lease, LeaseType, resource_vector
    return Lease(id=lid, type=LeaseType.ADVANCE_RESERVATION, submit_s=0.0, duration_s=duration, n_vms=1,
                 per_vm=resource_vector(cpu=100, memory=1024), image_id="a", image_mb=MB,
                 requested_start_s=start)


def test_an_ar_reuses_a_pool_image_only_if_its_timeout_reaches_the_ars_start():
    """Rule 21: Haizea's ``__schedule_deadline`` reuses a pool image for an AR only when
    ``exists_reusable_image(pnode, image, after = start)``: the image's timeout (the latest end
    of its users) is at least the AR's start; otherwise it transfers the image again. (vgrid
    pinned any arrived copy: on 3 days of VM-REUSE + 30 % ARs, 288 -> 556 of 567 with rule 22.)"""
    from vwn_agents.leasing import LeaseConfig
    from vwn_agents.leasing.staging import Staging

    st_, pools = _pools()
    cfg = LeaseConfig({"compat": "haizea-1.1", "lease-preparation": "imagetransfer",
                       "diskimage-reuse": "image-caches", "imagetransfer-bandwidth": 80.0})
    staging = Staging(st_, pools, cfg)
    a = _arrive(pools, "a", 1, 1000.0, 10.0)           # timeout 1,000 s
    pools.lease_ended(1, [0], 1000.0)
    assert staging.stage_ar(_ar(8, 900.0), (0,), 900.0, 1500.0, 100.0)
    assert 8 in a.users and not [r for r in st_.reservations() if r.kind is ResKind.TRANSFER]
    assert staging.stage_ar(_ar(9, 5000.0), (0,), 5000.0, 5600.0, 100.0)
    assert 9 not in a.users                             # timeout 1,500 < 5,000: a new transfer
    assert [(r.kind, r.dest) for r in st_.reservations()] == [(ResKind.TRANSFER, (0,))]


def test_a_migration_round_unpins_the_pool_images_it_leaves():
    """Rule 22: at the end of a disk-image round Haizea's ``_handle_end_migrate`` removes the
    lease from the pool images of the nodes it left, so they may be purged; a node a virtual node
    stays on keeps its pin. (Same run: lease 525 kept image_19 pinned on 16 nodes it had left.)"""
    from vwn_agents.leasing import LeaseConfig
    from vwn_agents.leasing.compat_staging import migration_rounds
    from vwn_agents.leasing.model import Segment

    cfg = LeaseConfig({"imagetransfer-bandwidth": 80.0})
    lease = _lease()
    lease.mapping = (36, 37)
    lease.segments = [Segment(0.0, 10.0, (36, 37), (37, 36))]
    assert [r.origins for r in migration_rounds(lease, (37, 50), cfg, 0.0, vnodes=(50, 37))] == [
        (37,), (36,), (), ()]                            # memory rounds move no disk image
    assert [r.origins for r in migration_rounds(lease, (36, 50), cfg, 0.0, vnodes=(50, 36))] == [(37,), ()]

    _st, pools = _pools(n=2)
    on0 = _arrive(pools, "a", 7, 5000.0, 10.0, node=0)
    on1 = _arrive(pools, "a", 7, 5000.0, 10.0, node=1)
    _arrive(pools, "b", 2, 200.0, 20.0, node=0)
    pools.lease_ended(2, [0], 200.0)
    pools.lease_ended(7, (0,), 300.0)             # what compat.copy_step does at a round's end
    assert 7 not in on0.users and 7 in on1.users
    _arrive(pools, "c", 3, 2000.0, 1000.0, node=0)     # full: the oldest unused goes, "b" (200 s)
    _arrive(pools, "d", 4, 2000.0, 1100.0, node=0)     # then "a", unpinned by the migration
    assert _images(pools) == [("c", False), ("d", False)]
    assert _images(pools, node=1) == [("a", False)]


def test_the_greedy_mapper_rejects_a_start_whose_best_node_is_too_short():
    """Rule 23: Haizea's ``GreedyMapper`` takes the best-scored nodes free at a start even when
    one is free for less than the minimum duration, shrinks the mapping's end to that node's
    (``latest_fit``), and ``__find_fit_at_points`` then rejects the start; the next candidate
    start is tried. vgrid offered only slots free for the minimum duration, so it started at 0
    on node 1 (3 days of VM-REUSE + 30 % ARs: lease 1087 at t = 205,797 s; 556 -> 559 / 567)."""
    from vwn_agents.leasing.mapper import Mapper, StartScore
    from vwn_agents.leasing.model import resource_vector

    vm = resource_vector(cpu=100, memory=1024)
    st_ = SlotTable(uniform_site(3, 1, 1024))
    st_.add(Reservation(ResKind.VM, None, 100.0, 1000.0, use={0: vm}))   # node 0 free for 100 s
    st_.add(Reservation(ResKind.VM, None, 0.0, 500.0, use={2: vm}))      # node 2 busy until 500 s

    class NodeZeroFirst(StartScore):
        score_order = True

        def at(self, s):
            return lambda node, k: ({0: 10, 1: 1, 2: 2}[node],)

    m = Mapper(st_)
    assert m.earliest(vm, 1, 600.0, 0.0, min_duration=300.0, score=NodeZeroFirst()) == (500.0, 1100.0, (2,))
    # a start whose best node is long enough is taken at once, and ends early where it must
    assert m.earliest(vm, 1, 600.0, 0.0, min_duration=80.0, score=NodeZeroFirst()) == (0.0, 100.0, (0,))
    # vgrid's own order (no score_order): the longest free slot at the first start that fits
    assert m.earliest(vm, 1, 600.0, 0.0, min_duration=300.0)[:2] == (0.0, 600.0)


@pytest.mark.parametrize("compat, passes", [("haizea-1.1", 1), ("none", 0)])
def test_every_time_step_processes_the_queue_in_compat_mode(monkeypatch, compat, passes):
    """Rule 25: Haizea 1.1's simulated clock stops at every start and end of a reservation and
    processes its queue there (``process_ending_reservations``, ``process_requests``,
    ``process_starting_reservations`` at each step); vgrid ran a pass only when something it
    tracks changed, not when only a VM or a resumption started. Time matters to a pass (an
    image transfer starts at the first hole from now), so a lease placed at such a step starts
    earlier (3 days of VM-REUSE + 30 % ARs: lease 1085's transfer from t = 214,016 s, the start
    of lease 780's resumption, where vgrid waited for the next step, 214,020 s; 559 -> 567 / 567,
    and VM-MULT + 30 % 566 -> 567 / 567). Here an AR's VM start at 500 s is the only event."""
    from vgrid_runtime.clock import SimulatedClock
    from vwn_agents.leasing import LeaseConfig, LeaseScheduler, SimulatedNodes, scheduler as sched_mod
    from vwn_agents.leasing.model import Lease, LeaseState, LeaseType, resource_vector

    vm = resource_vector(cpu=100, memory=1024)
    site = uniform_site(2, 1, 1024)
    s = LeaseScheduler(site, LeaseConfig({"compat": compat, "backfilling": "off"}),
                       SimulatedClock(0.0), SimulatedNodes(site))
    s.submit(Lease(1, LeaseType.BEST_EFFORT, 0.0, 1000.0, 1, vm))
    s.submit(Lease(2, LeaseType.ADVANCE_RESERVATION, 0.0, 100.0, 1, vm, requested_start_s=500.0))
    s.process(0.0)
    s.submit(Lease(3, LeaseType.BEST_EFFORT, 0.0, 100.0, 2, vm))   # 2 VMs: waits for lease 1's end
    s.process(0.0)
    assert s.leases[3].state is LeaseState.QUEUED
    calls = []
    real = sched_mod.schedule_queue
    monkeypatch.setattr(sched_mod, "schedule_queue", lambda sch, now: (calls.append(now), real(sch, now)))
    s.clock.advance_to(500.0)
    s.process(500.0)
    assert s.leases[2].state is LeaseState.ACTIVE
    assert calls == [500.0] * passes


def test_a_lease_an_ar_cancels_before_its_start_loses_its_arrived_image():
    """Rule 26: Haizea's ``__preempt_lease`` cancels a lease that has not started and queues it
    again with ``cancel_preparation(lease)``, ``remove_files`` true (false only for a suspended
    lease), so the image that already arrived on its node is deleted and its new placement
    needs a new transfer. vgrid kept the copy (rule 2 dropped it only for ``reevaluate``):
    15 days of VM-MULT + 30 % ARs, AR 8776 at t = 423,457 s cancelled lease 638, whose new
    transfer in Haizea pushed lease 2096's 410 s later; 1,234 -> 1,348 of the 1,348 leases
    Haizea 1.1 completed by day 6 identical."""
    from vgrid_runtime.clock import SimulatedClock
    from vwn_agents.leasing import LeaseConfig, LeaseScheduler, SimulatedNodes
    from vwn_agents.leasing.model import Lease, LeaseState, LeaseType, resource_vector

    vm = resource_vector(cpu=100, memory=1024)
    site = uniform_site(1, 1, 1024)
    s = LeaseScheduler(site, LeaseConfig({"compat": "haizea-1.1", "lease-preparation": "imagetransfer",
                                          "imagetransfer-bandwidth": 80.0, "suspension": "none",
                                          "diskimage-reuse": "none"}),   # VM-MULT: private copies
                       SimulatedClock(0.0), SimulatedNodes(site))
    s.submit(Lease(1, LeaseType.BEST_EFFORT, 0.0, 500.0, 1, vm, "b", 100.0, True))
    s.submit(Lease(2, LeaseType.BEST_EFFORT, 0.0, 300.0, 1, vm, "a", 100.0, True))   # behind 1: a future lease
    s.process(0.0)
    while s.next_event_time() <= 100.0:        # both transfers arrive (10 s each)
        t = s.next_event_time()
        s.clock.advance_to(t)
        s.process(t)
    assert s.leases[2].state is LeaseState.SCHEDULED and s.leases[2].transfers == 1
    s.clock.advance_to(100.0)
    s.submit(Lease(3, LeaseType.ADVANCE_RESERVATION, 100.0, 200.0, 1, vm, "c", 100.0, True,
                   requested_start_s=520.0))   # over lease 2's reservation: 2 is cancelled, queued again
    s.process(100.0)
    assert s.leases[3].state is not LeaseState.REJECTED
    assert s.leases[2].transfers == 2          # its arrived copy is gone: a new transfer
