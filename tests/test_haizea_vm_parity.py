"""Haizea 1.1 compatibility with image transfers (issue 16, HPDC'08 VM-MULT): same inputs on
both sides (``lwfwrite.py``), Haizea's transfer rules in compat mode (``compat_staging.py``).

The golden per-lease file ``tests/data/haizea/blue3-vm-mult.csv`` is Haizea 1.1's own output on
the first 3 days of the 30-day Blue trace with the images vgrid's sweep draws (37 of 4,096 MB,
uniform, seed 1) and ``examples/haizea/vm-mult.conf`` (tests/data/haizea/README.md).
"""
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from vwn_agents.leasing import read_trace, simulate, uniform_site
from vwn_agents.leasing.compat_staging import last_transfer_slot, next_transfer_slot
from vwn_agents.leasing.haizeaconf import load_haizea
from vwn_agents.leasing.lwfwrite import hms, write_lwf
from vwn_agents.leasing.model import Lease, LeaseType, resource_vector
from vwn_agents.leasing.parity import compare, read_haizea_csv
from vwn_agents.leasing.slottable import Reservation, ResKind
from vwn_agents.leasing.tracefile import assign_images

from .paths import DATA, REPO, TRACES

BLUE = TRACES / "haizea/blue/30days.swf"
AR20 = TRACES / "haizea/injected_leases/30days/work_20-dur_3h-size_2medium.lwf"
AR30 = TRACES / "haizea/injected_leases/30days/work_30-dur_3h-size_2medium.lwf"
VM_MULT = REPO / "examples/haizea/vm-mult.conf"
VM_REUSE = REPO / "examples/haizea/vm-reuse.conf"
FIELDS = ("id", "type", "submit_s", "duration_s", "n_vms", "per_vm", "image_id", "image_mb", "preemptible",
          "requested_start_s", "real_duration_s")


def _blue3_with_images(tmp_path, inject=None):
    leases = list(read_trace(BLUE, memory_mb=1024).leases)
    if inject is not None:
        leases += read_trace(inject, id_offset=max(l.id for l in leases)).leases
    leases = assign_images(leases, 37, 4096.0, "uniform", 1)
    leases = [l for l in leases if l.submit_s < 3 * 86400]
    xml = tmp_path / "blue3-vm.xml"
    write_lwf(leases, xml)
    return list(read_trace(xml).leases)


def test_vm_mult_3_days_as_haizea(tmp_path):
    """527 leases: Haizea 1.1's start and end for all (526 before session 9's rule 17, the queue
    passes at a migration's rounds); without the compat rules none (every transfer is 0.4 s
    shorter than Haizea's, which rounds up to the second)."""
    leases = _blue3_with_images(tmp_path)
    cfg = load_haizea(VM_MULT).config
    golden = read_haizea_csv(DATA / "haizea/blue3-vm-mult.csv")
    out = compare(golden, simulate(leases, uniform_site(144, 1, 1024), cfg).report()["leases"])
    assert out["leases"] == 527 and out["missing"] == []
    assert out["identical"] == 527, out["first_difference"]
    assert out["all_best_effort_s"]["vgrid"] == out["all_best_effort_s"]["haizea"]
    own = compare(golden, simulate(leases, uniform_site(144, 1, 1024), cfg.with_options(compat="none"))
                  .report()["leases"])
    assert own["identical"] < 100, own["first_difference"]


def test_vm_mult_3_days_with_20_percent_ars_towards_haizea(tmp_path):
    """With the 26 ARs of work_20-dur_3h-size_2medium: all 553 leases as Haizea 1.1 (552 before
    session 12's rule 24 -- a finished migration moved the images the next one starts from --,
    516 before session 10's rule 18 -- migration rounds in Haizea's node pairs, counted in the host
    score --, 490 before session 9's rules 15 and 16, without the compat rules 29), all 26 AR
    decisions (lease 8741 at t = 212,530 s needs rule 16) and the same all-best-effort time."""
    leases = _blue3_with_images(tmp_path, AR20)
    out = compare(read_haizea_csv(DATA / "haizea/blue3-ar20-vm-mult.csv"),
                  simulate(leases, uniform_site(144, 1, 1024), load_haizea(VM_MULT).config).report()["leases"])
    assert out["leases"] == 553 and out["missing"] == []
    assert out["identical"] == 553, out["first_difference"]
    assert out["ar"]["agree"] == 26
    assert out["all_best_effort_s"]["vgrid"] == out["all_best_effort_s"]["haizea"]


def test_vm_mult_3_days_with_30_percent_ars_towards_haizea(tmp_path):
    """With the 40 ARs of work_30-dur_3h-size_2medium (session 10, golden from Haizea 1.1 itself):
    all 567 leases as Haizea (session 12, rule 25; 566 before: lease 1169's resumption, placed
    by Haizea at t = 245,012 s, a time step where vgrid ran no queue pass, ended 183 s later),
    all 40 AR decisions (it rejects 8719, as vgrid does) and the same all-best-effort time
    (377,983 s)."""
    leases = _blue3_with_images(tmp_path, AR30)
    out = compare(read_haizea_csv(DATA / "haizea/blue3-ar30-vm-mult.csv"),
                  simulate(leases, uniform_site(144, 1, 1024), load_haizea(VM_MULT).config).report()["leases"])
    assert out["leases"] == 567 and out["missing"] == []
    assert out["identical"] == 567, out["first_difference"]
    assert out["ar"]["agree"] == 40 and out["ar"]["haizea_rejected"] == 1
    assert out["all_best_effort_s"]["vgrid"] == out["all_best_effort_s"]["haizea"] == 377983.0


def test_vm_reuse_3_days_with_30_percent_ars_towards_haizea(tmp_path):
    """VM-REUSE with the same 40 ARs (session 10): all 40 AR decisions and the same
    all-best-effort time (376,753 s), 556 of 567 leases as Haizea 1.1: 246 before rule 19 (AR
    8738's arrival at t = 61,888 s is a time step where Haizea processes the queue and places
    leases 576 and 577; vgrid placed them at the next step, 62,076 s), 287 before rule 20 (at
    t = 80,131 s lease 624's transfer, starting at once, gave vgrid a second queue pass that
    placed lease 623 behind it; Haizea processes the queue once per step and places 623 at
    80,601 s); 294 before rule 22 and 556 with rules 21 and 22 (session 11: AR 8734 pinned
    image_29 on node 18 although its pool timeout was earlier than the AR's start, and lease 525
    kept image_19 pinned on the 16 nodes it migrated away from, so the pools purged other
    images than Haizea's and lease 584 went to node 26 instead of 28 at t = 64,817 s), 559 with
    rule 23 (session 12: at lease 1087's resumption, t = 205,797 s, Haizea's greedy mapper takes
    nodes free for too short a time and rejects the start) and all 567 with rule 25 (lease
    1085's transfer starts at t = 214,016 s, where only lease 780's resumption starts: Haizea
    processes its queue at every time step)."""
    leases = _blue3_with_images(tmp_path, AR30)
    out = compare(read_haizea_csv(DATA / "haizea/blue3-ar30-vm-reuse.csv"),
                  simulate(leases, uniform_site(144, 1, 1024), load_haizea(VM_REUSE).config).report()["leases"])
    assert out["leases"] == 567 and out["missing"] == []
    assert out["identical"] == 567, out["first_difference"]
    assert out["ar"]["agree"] == 40 and out["ar"]["haizea_rejected"] == 1
    assert out["all_best_effort_s"]["vgrid"] == out["all_best_effort_s"]["haizea"] == 376753.0


def test_vm_reuse_3_days_as_haizea(tmp_path):
    """VM-REUSE (pools of 20,480 MB): all 527 leases as Haizea 1.1 (237 before session 9's rules
    13 -- a full pool is purged when an image arrives, not when its transfer is planned -- and
    14 -- equal host scores in Python 2.7's set order; 101 before session 8's)."""
    leases = _blue3_with_images(tmp_path)
    out = compare(read_haizea_csv(DATA / "haizea/blue3-vm-reuse.csv"),
                  simulate(leases, uniform_site(144, 1, 1024), load_haizea(VM_REUSE).config).report()["leases"])
    assert out["leases"] == 527 and out["missing"] == []
    assert out["identical"] == 527, out["first_difference"]
    assert out["all_best_effort_s"]["vgrid"] == out["all_best_effort_s"]["haizea"]


leases_st = st.builds(
    lambda i, kind, submit, dur, real, n, img, pre, start: Lease(
        id=i, type=kind, submit_s=float(submit), duration_s=float(dur), n_vms=n,
        per_vm=resource_vector(cpu=100, memory=1024), image_id=f"image_{img}" if img else "none.img",
        image_mb=4096.0 if img else 0.0, preemptible=pre,
        requested_start_s=float(submit + start) if kind is LeaseType.ADVANCE_RESERVATION else None,
        real_duration_s=float(real) if real and real <= dur and kind is LeaseType.BEST_EFFORT else None),
    st.integers(1, 10**6), st.sampled_from([LeaseType.BEST_EFFORT, LeaseType.ADVANCE_RESERVATION, LeaseType.IMMEDIATE]),
    st.integers(0, 40 * 86400), st.integers(1, 5 * 86400), st.integers(0, 5 * 86400), st.integers(1, 144),
    st.integers(0, 37), st.booleans(), st.integers(0, 86400))


@settings(max_examples=60, deadline=None)
@given(st.lists(leases_st, max_size=12, unique_by=lambda l: l.id))
def test_lwf_writes_what_read_trace_reads_back(tmp_path_factory, leases):
    path = tmp_path_factory.mktemp("lwf") / "t.xml"
    assert write_lwf(leases, path) == len(leases)
    back = sorted(read_trace(path).leases, key=lambda l: (l.submit_s, l.id))
    want = sorted(leases, key=lambda l: (l.submit_s, l.id))
    assert [[getattr(l, f) for f in FIELDS] for l in back] == [[getattr(l, f) for f in FIELDS] for l in want]


def test_hms_is_haizeas_time_format():
    assert hms(0) == "00:00:00.00" and hms(3661.5) == "01:01:01.50" and hms(40 * 3600) == "40:00:00.00"


class _St:
    """The one slot-table query the transfer-slot rules make (``reservations()``)."""

    def __init__(self, busy, link="be"):
        self.res = [Reservation(ResKind.TRANSFER, None, a, b, link=link, dest=(0,)) for a, b in busy]

    def reservations(self):
        return list(self.res)


def test_next_transfer_slot_takes_haizeas_first_hole():
    # now, before the first transfer if it ends in time; the first hole long enough; the tail
    assert next_transfer_slot(_St([]), 5.0, 10.0) == 5.0
    assert next_transfer_slot(_St([(20, 30)]), 5.0, 10.0) == 5.0
    assert next_transfer_slot(_St([(12, 30)]), 5.0, 10.0) == 30.0
    assert next_transfer_slot(_St([(0, 10), (15, 20), (40, 50)]), 5.0, 10.0) == 20.0
    # a transfer that ended is out of the list (its slot is free again)
    assert next_transfer_slot(_St([(0, 5), (30, 40)]), 5.0, 10.0) == 5.0


def test_last_transfer_slot_takes_haizeas_latest_hole_with_its_quirks():
    assert last_transfer_slot(_St([]), 100.0, 10.0, ("be",), 0.0) == 90.0
    assert last_transfer_slot(_St([(0, 50)]), 100.0, 10.0, ("be",), 0.0) == 90.0
    # the deadline falls inside the hole [50, 95): the transfer ends at the deadline
    assert last_transfer_slot(_St([(40, 50), (95, 120)]), 90.0, 10.0, ("be",), 0.0) == 80.0
    # the deadline falls inside a transfer: the latest earlier hole, ending at its end
    assert last_transfer_slot(_St([(10, 20), (60, 70), (85, 120)]), 90.0, 10.0, ("be",), 0.0) == 75.0
    # Haizea's quirk: before the first transfer only when the deadline is there too
    assert last_transfer_slot(_St([(80, 120)]), 90.0, 10.0, ("be",), 0.0) is None
    assert last_transfer_slot(_St([(80, 120)]), 70.0, 10.0, ("be",), 0.0) == 60.0


intervals = st.lists(st.tuples(st.integers(0, 500), st.integers(1, 60)), max_size=8).map(
    lambda xs: sorted({(float(a), float(a + d)) for a, d in xs}))


def _disjoint(xs):
    out = []
    for a, b in xs:
        if not out or a >= out[-1][1]:
            out.append((a, b))
    return out


@settings(max_examples=300, deadline=None)
@given(intervals.map(_disjoint), st.integers(0, 300), st.integers(1, 50), st.integers(0, 700))
def test_transfer_slots_never_overlap_a_transfer(busy, now, dur, deadline):
    """Both rules give a start at or after now (the last slot: or None) whose transfer of
    ``dur`` s overlaps no transfer still in the list; the last slot also ends by its deadline."""
    now, dur, deadline = float(now), float(dur), float(deadline)
    live = [(a, b) for a, b in busy if b > now]
    s = next_transfer_slot(_St(busy), now, dur)
    assert s >= now and all(s + dur <= a or s >= b for a, b in live)
    s = last_transfer_slot(_St(busy), deadline, dur, ("be",), now)
    if s is not None:
        assert math.isclose(s + dur, min(s + dur, deadline)) and s + dur <= deadline
        assert all(s + dur <= a or s >= b for a, b in live)
