"""VM overheads and image draws before a simulation (``vwn_agents/leasing/tracefile.py``; HPDC'08
Section 5: 5 % runtime slowdown, 20 s boot and shutdown, 37 images uniform or skewed)."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vwn_agents.leasing import Lease, LeaseConfig, LeaseType, resource_vector, simulate, uniform_site
from vwn_agents.leasing.tracefile import apply_overheads, assign_images, image_sequence, parse_distribution

VM = resource_vector(cpu=100, memory=1024)


def _leases():
    return [Lease(1, LeaseType.BEST_EFFORT, 0, 1000, 1, VM, real_duration_s=400),
            Lease(2, LeaseType.ADVANCE_RESERVATION, 0, 600, 1, VM, requested_start_s=5000)]


def test_overheads_lengthen_requested_and_real_durations_of_the_chosen_leases():
    cfg = LeaseConfig({"add-overhead": "besteffort", "runtime-slowdown-overhead": 5.0, "bootshutdown-overhead": 20.0})
    be, ar = apply_overheads(_leases(), cfg)
    assert (be.duration_s, be.real_duration_s) == (1070.0, 440.0)     # 1000 x 1.05 + 20, 400 x 1.05 + 20
    assert (ar.duration_s, ar.real_duration_s) == (600, None)
    be, ar = apply_overheads(_leases(), cfg.with_options(add_overhead="all"))
    assert (ar.duration_s, ar.real_duration_s) == (650.0, None)
    assert apply_overheads(_leases(), LeaseConfig({"runtime-slowdown-overhead": 5.0}))[0].duration_s == 1000
    original = _leases()
    report = simulate(original, uniform_site(1, 1, 1024), cfg).report()
    by_id = {r["id"]: r for r in report["leases"]}
    assert by_id[1]["end_s"] - by_id[1]["start_s"] == 440.0            # ran its slowed-down real time
    assert original[0].duration_s == 1000                              # the caller's leases untouched


def test_image_distributions():
    assert parse_distribution("uniform", 3) == [1.0, 1.0, 1.0]
    assert parse_distribution("7,10 30,1", 37) == [10.0] * 7 + [1.0] * 30
    for bad in ("7,10 29,1", "7;10", "2,0 35,1"):
        with pytest.raises(ValueError, match="image distribution"):
            parse_distribution(bad, 37)
    draws = [img for img, _ in image_sequence(37, 4096, "7,10 30,1", 20000, seed=3)]
    popular = sum(1 for d in draws if int(d.split("_")[1]) <= 7) / len(draws)
    assert 0.68 < popular < 0.72                                       # 70 % expected


@given(st.integers(1, 40), st.integers(0, 200), st.integers(0, 2**31))
def test_image_draws_are_deterministic_and_valid(n_images, count, seed):
    a = image_sequence(n_images, 512.0, "uniform", count, seed)
    assert a == image_sequence(n_images, 512.0, "uniform", count, seed) and len(a) == count
    assert all(mb == 512.0 and 1 <= int(img.split("_")[1]) <= n_images for img, mb in a)


def test_images_are_assigned_in_submission_order():
    leases = [Lease(i, LeaseType.BEST_EFFORT, 100 - i, 10, 1, VM) for i in range(1, 6)]
    out = assign_images(leases, 37, 4096, "uniform", 9)
    seq = image_sequence(37, 4096, "uniform", 5, 9)
    assert [l.id for l in out] == [5, 4, 3, 2, 1]
    assert [(l.image_id, l.image_mb) for l in out] == seq
