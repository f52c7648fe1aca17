"""HPDC'08 configurations on a reduced input (issue 16): the first 300 leases of the 30-day SDSC
Blue trace (bundled) with the 30 % 3-hour medium AR set's ARs that start within them, on the
paper's 144 nodes, in each configuration family of examples/sweeps/hpdc08.toml. The all-best-
effort times are pinned (a change of the engine that moves them must be looked at and the
values updated deliberately), and the relations the paper's Table 1 rests on are asserted:
suspension beats cancellation, node-to-node migration is never slower than the serial link,
Haizea's 7-day horizon can only reject more ARs, and images move only with image transfers.
"""
import pytest

from vgrid_runtime import traces as catalogue
from vwn_agents.leasing import LeaseConfig, simulate, uniform_site
from vwn_agents.leasing.tracefile import assign_images
from vwn_agents.leasing.traces import read_trace

SR = {"backfilling": "aggressive", "suspension": "all", "suspend-rate": 50.0, "resume-rate": 50.0,
      "migration": "yes", "migration-transfer": "node-to-node"}
VM = {**SR, "add-overhead": "all", "runtime-slowdown-overhead": 5.0, "bootshutdown-overhead": 20.0}
IMG = {**VM, "lease-preparation": "imagetransfer", "transfer-mechanism": "multicast",
       "avoid-redundant-transfers": True, "imagetransfer-bandwidth": 80.0}
CONFIGS = {
    "NOVM-NOSR": ({"backfilling": "aggressive", "suspension": "none"}, None),
    "NOVM-SR-link": ({**SR, "migration-transfer": "link"}, None),
    "NOVM-SR": (SR, None),
    "NOVM-SR-aging": ({**SR, "preemption-horizon": 604800.0}, None),
    "VM-PREDEPLOY": (VM, None),
    "VM-MULT": ({**IMG, "diskimage-reuse": "none"}, "uniform"),
    "VM-REUSE-SKEWED": ({**IMG, "diskimage-reuse": "image-caches", "diskimage-cache-size": 20480.0}, "7,10 30,1"),
}


def reduced_workload() -> list:
    """Fresh lease objects (a simulation changes their states)."""
    be = read_trace(catalogue.bundled("blue-30days")).leases[:300]
    horizon = be[-1].submit_s + 86400.0
    ars = read_trace(catalogue.resolve("work_30-dur_3h-size_2medium"), id_offset=10**6).leases
    return be + [a for a in ars if a.requested_start_s < horizon]


@pytest.fixture(scope="module")
def workload():
    return reduced_workload()


@pytest.fixture(scope="module")
def results():
    out = {}
    for name, (opts, images) in CONFIGS.items():
        fresh = reduced_workload()
        leases = assign_images(fresh, 37, 4096.0, images, 1) if images else fresh
        m = simulate(leases, uniform_site(144, 1, 1024), LeaseConfig(opts)).report()["metrics"]
        out[name] = m
    return out


#: Measured 2026-11-24 (engine of this commit); 31 ARs, none rejected except 1 with images.
PINNED = {"NOVM-NOSR": 320436, "NOVM-SR-link": 287278, "NOVM-SR": 287278, "NOVM-SR-aging": 287278,
          "VM-PREDEPLOY": 289283, "VM-MULT": 289693, "VM-REUSE-SKEWED": 289693}


def test_the_reduced_input_has_ars(workload):
    assert sum(1 for l in workload if l.is_ar) >= 10


def test_pinned_all_best_effort_times(results):
    got = {k: round(v["all_best_effort_s"]) for k, v in results.items()}
    assert got == PINNED


def test_suspension_and_node_to_node_migration(results):
    abe = {k: v["all_best_effort_s"] for k, v in results.items()}
    assert abe["NOVM-SR"] <= abe["NOVM-NOSR"]
    assert abe["NOVM-SR"] <= abe["NOVM-SR-link"]
    assert results["NOVM-SR"]["ar_rejected"] == 0
    assert results["NOVM-SR-aging"]["ar_rejected"] >= results["NOVM-SR"]["ar_rejected"]


def test_images_move_only_with_image_transfers(results):
    assert results["VM-PREDEPLOY"]["mb_transferred"] == 0
    for name in ("VM-MULT", "VM-REUSE-SKEWED"):         # at least one 4 GB image per 144-node wave
        assert results[name]["mb_transferred"] >= 4096.0 * 100
