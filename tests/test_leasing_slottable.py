"""Slot table: fit queries, next change point, due transitions, transactions with rollback."""
import math

from vwn_agents.leasing.model import Node, resource_vector
from vwn_agents.leasing.slottable import Reservation, ResKind, ResState, SlotTable
from vwn_agents.leasing.mapper import Mapper

VM = resource_vector(cpu=100, memory=1024)


def table(n=2, cpus=2):
    return SlotTable([Node(i, f"P{i + 1}", (100 * cpus, 1024 * cpus, 0, 0)) for i in range(n)])


def vm(st, node, start, end, k=1):
    return st.add(Reservation(ResKind.VM, None, start, end, use={node: (100 * k, 1024 * k, 0, 0)}))


def test_free_and_vms_fit_over_interval():
    st = table()
    vm(st, 0, 10, 20)
    vm(st, 0, 15, 30)
    assert st.vms_fit(0, VM, 0, 10) == 2
    assert st.vms_fit(0, VM, 0, 11) == 1
    assert st.vms_fit(0, VM, 15, 20) == 0
    assert st.vms_fit(0, VM, 20, 40) == 1
    assert st.vms_fit(1, VM, 0, 100) == 2
    assert st.free(0, 16, 17) == (0, 0, 0, 0)


def test_fits_checks_every_node_of_a_mapping():
    st = table()
    vm(st, 0, 10, 20)
    assert st.fits((0, 1, 1), VM, 0, 30)
    assert not st.fits((0, 0, 1), VM, 0, 30)
    assert st.fits((0, 0, 1), VM, 20, 30)


def test_free_until_is_first_time_need_stops_fitting():
    st = table()
    vm(st, 0, 10, 20, k=2)
    assert st.free_until(0, VM, 0) == 10
    assert st.free_until(0, VM, 12) == 12
    assert st.free_until(0, VM, 20) == math.inf


def test_rollback_restores_adds_removes_moves_and_attributes():
    st = table()
    keep = vm(st, 0, 0, 10)
    class Obj:
        x = 1
    o = Obj()
    tx = st.begin()
    new = vm(st, 1, 0, 5)
    st.remove(keep)
    st.set(o, "x", 2)
    inner = st.begin()
    st.move(new, 3, 9)
    st.rollback(inner)
    assert (new.start, new.end) == (0, 5)
    st.rollback(tx)
    assert keep in st and new not in st
    assert o.x == 1
    assert st.vms_fit(0, VM, 0, 10) == 1 and st.vms_fit(1, VM, 0, 10) == 2


def test_commit_keeps_changes():
    st = table()
    tx = st.begin()
    r = vm(st, 0, 0, 5)
    st.commit(tx)
    assert r in st and st._undo is None


def test_next_change_point_and_pop_due_order():
    st = table()
    a = vm(st, 0, 10, 20)
    b = st.add(Reservation(ResKind.TRANSFER, None, 5, 10, link="ar"))
    assert st.next_change_point() == 5
    due = st.pop_due(10)
    assert [(t, s, r.kind) for t, s, r in due] == [(5, True, ResKind.TRANSFER), (10, True, ResKind.VM)]
    b.state = ResState.ACTIVE
    st.repush(b)
    a.state = ResState.ACTIVE
    st.repush(a)
    assert st.next_change_point() == 10
    ends = st.pop_due(20)
    assert [(t, s) for t, s, _ in ends] == [(10, False), (20, False)]


def test_mapper_slots_match_brute_force():
    st = table(n=3, cpus=2)
    vm(st, 0, 10, 20)
    vm(st, 0, 15, 25)
    vm(st, 1, 0, 50, k=2)
    m = Mapper(st)
    for s in [0, 5, 10, 15, 20, 25, 30]:
        for length in [1, 5, 10, 40]:
            brute = sum(st.vms_fit(n, VM, s, s + length) for n in range(3))
            A, B, N, _ = m.slot_arrays(VM)
            fast = int(((A <= s) & (B >= s + length)).sum())
            assert fast == brute, (s, length)


def test_earliest_finds_first_time_n_vms_fit():
    st = table(n=2, cpus=1)
    vm(st, 0, 0, 100)
    vm(st, 1, 0, 50)
    m = Mapper(st)
    assert m.earliest(VM, 2, 30, 0, allow_future=False) is None
    s, e, mapping = m.earliest(VM, 2, 30, 0)
    assert s == 100 and e == 130 and mapping == (0, 1)
    s, e, mapping = m.earliest(VM, 1, 30, 0)
    assert s == 50 and mapping == (1,)
    # a lease that may be suspended can start earlier for at least min_duration
    st2 = table(n=1, cpus=1)
    vm(st2, 0, 40, 100)
    s, e, mapping = Mapper(st2).earliest(VM, 1, 60, 0, min_duration=20)
    assert (s, e) == (0, 40)


def test_stop_when_besteffort_done_leaves_later_ars_unfinished():
    from vwn_agents.leasing import LeaseConfig, LeaseState, simulate, uniform_site
    from vwn_agents.leasing.model import Lease, LeaseType
    leases = lambda: [Lease(1, LeaseType.BEST_EFFORT, 0, 100, 1, VM),
                      Lease(2, LeaseType.ADVANCE_RESERVATION, 0, 100, 1, VM, preemptible=False,
                            requested_start_s=1000)]
    site = uniform_site(1, 1, 1024)
    early = simulate(leases(), site, LeaseConfig({"stop-when": "besteffort-done"})).scheduler.leases
    assert early[1].state is LeaseState.DONE and early[2].state is LeaseState.SCHEDULED
    full = simulate(leases(), site, LeaseConfig()).scheduler.leases
    assert full[2].state is LeaseState.DONE and full[2].end_s == 1100


def test_after_commit_runs_at_the_outermost_commit_and_never_for_a_rolled_back_part():
    st, ran = table(), []
    st.after_commit(lambda: ran.append("now"))           # no transaction: at once
    assert ran == ["now"]
    outer = st.begin()
    st.after_commit(lambda: ran.append("outer"))
    inner = st.begin()
    vm(st, 0, 0, 10)
    st.after_commit(lambda: ran.append("inner"))
    st.commit(inner)                                     # an inner commit is not final
    dropped = st.begin()
    st.after_commit(lambda: ran.append("dropped"))
    st.rollback(dropped)
    assert ran == ["now"]
    st.commit(outer)
    assert ran == ["now", "outer", "inner"]
    tx = st.begin()                                      # the enclosing one rolled back: nothing
    inner = st.begin()
    st.after_commit(lambda: ran.append("undone"))
    st.commit(inner)
    st.rollback(tx)
    assert ran == ["now", "outer", "inner"]
    st.commit(st.begin())                                # nothing left to run
    assert ran == ["now", "outer", "inner"]
