"""Seed 000 Section 8.3: mixing best-effort and advance-reservation workloads (Tables 8.3-8.7).

The thesis generates 36 traces (best-effort durations short / medium / long x AR sizes
1-4 / 5-8 / 9-12 / 13-16 VMs x best-effort/AR mixes 25-75 / 50-50 / 75-25, measured in
VM-time) for 8 dual-CPU nodes of 1 GB (two 512 MB VMs each) on a 100 Mb/s network, 37 images
of 600 MB of which 7 take 10 % of the requests each and 30 take 1 % each, about 10-10.5 h of
work at 100 % utilization, all ARs known at the start and best-effort requests arriving at
even intervals; each best-effort request is n VMs of duration t "scheduled serially". It runs
them in four configurations (:data:`CONFIGS`): no virtualization (backfilling only), VMs with
predeployed images (suspend/resume around ARs, 10 % runtime overhead), VMs with image
prefetching (EDF/JIT for ARs, FIFO for best-effort) without and with image reuse.

What the thesis leaves unstated is chosen here (:class:`TraceSpec`) and named in
docs/experiments/seed000.md: AR durations and start times, the number of VMs of a
best-effort request, the spread of durations, the suspend/resume rate. The traces are random,
so cells are compared with the thesis by their ratios and signs, not by seconds.
"""
from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

from .config import LeaseConfig
from .model import Lease, LeaseType, resource_vector
from .simulate import simulate
from .traces import uniform_site

DURATIONS = {"short": 300.0, "medium": 600.0, "long": 900.0}    # mean best-effort VM duration, s
AR_SIZES = {"000-025": (1, 4), "025-050": (5, 8), "050-075": (9, 12), "075-100": (13, 16)}
MIXES = {"25-75": 0.25, "50-50": 0.50, "75-25": 0.75}            # best-effort share of VM-time
SLOTS = 16                                                       # 8 nodes x 2 VMs
IMAGE_MB = 600.0
#: 37 images: img1-img7 10 % of the requests each, img8-img37 1 % each (Section 8.3).
IMAGE_WEIGHTS = tuple([10.0] * 7 + [1.0] * 30)

#: configuration -> (label, LeaseConfig options)
CONFIGS: dict[str, tuple[str, dict]] = {
    "novm": ("no virtualization", {"suspension": "none", "policy-preemption": "no-preemption"}),
    "predeploy": ("VMs, predeployed images", {}),
    "prefetch": ("VMs, prefetching, no reuse", {"lease-preparation": "imagetransfer",
                                                 "diskimage-reuse": "none"}),
    "reuse": ("VMs, prefetching and reuse", {"lease-preparation": "imagetransfer",
                                             "diskimage-reuse": "image-caches"}),
}
#: Section 4 (Tables 4.1, 4.2): VMs scheduled as jobs, no suspend/resume, no managed staging;
#: run on the traces (long | short, 075-100, 75-25) only (:data:`TABLE4`).
JOB_CONFIGS: dict[str, tuple[str, dict]] = {
    "vm-jobs": ("VMs as jobs, predeployed", {"suspension": "none", "policy-preemption": "no-preemption",
                                             "add-overhead": "besteffort", "runtime-slowdown-overhead": 10.0}),
    "vm-jobs-transfer": ("VMs as jobs, images transferred", {
        "suspension": "none", "policy-preemption": "no-preemption", "add-overhead": "besteffort",
        "runtime-slowdown-overhead": 10.0, "lease-preparation": "imagetransfer",
        "diskimage-reuse": "none", "ar-transfer-strategy": "job-style"}),
}
#: Table -> (trace cell, the thesis's (no VM, VMs predeployed, VMs with transfers) times in s and VMs)
TABLE4 = {"4.1": (("long", "075-100", "75-25"), (45_780, 48_240, 52_020), 830),
          "4.2": (("short", "075-100", "75-25"), (41_040, 44_640, 87_000), 1876)}
_COMMON = {"besteffort-mode": "serial", "backfilling": "aggressive", "imagetransfer-bandwidth": 100.0,
           "ar-transfer-strategy": "edf-jit", "stop-when": "besteffort-done"}
_VM = {"suspension": "all", "add-overhead": "besteffort", "runtime-slowdown-overhead": 10.0}


@dataclass(frozen=True)
class TraceSpec:
    """Our choices where Section 8.3 is silent (durations in s).

    ``hours``: the trace's work at 100 % utilization, uniform in this range (thesis: 10-10.5 h);
    ``ar_duration_s``: AR durations, uniform, rounded to the minute; ``ar_earliest_s``: no AR
    starts before this (images must be stageable); ARs start uniformly in [ar_earliest_s,
    horizon - duration], moved to the next minute where they fit the 16 VM slots beside the
    ARs already drawn, and are dropped when none is left (the thesis's offline admission); ``be_vms``: VMs per best-effort request,
    uniform; ``be_spread``: a VM's duration is uniform in mean x [1 - spread, 1 + spread],
    rounded to the minute; ``suspend_rate``: MB/s for suspending and resuming a 512 MB VM.
    """

    hours: tuple[float, float] = (10.0, 10.5)
    ar_duration_s: tuple[float, float] = (1800.0, 5400.0)
    ar_earliest_s: float = 1800.0
    be_vms: tuple[int, int] = (1, 4)
    be_spread: float = 0.5
    suspend_rate: float = 32.0


def _image(rng: random.Random) -> str:
    return f"img{rng.choices(range(1, 38), weights=IMAGE_WEIGHTS)[0]}"


def trace(duration: str, ar_size: str, mix: str, seed: int = 0,
          spec: TraceSpec = TraceSpec()) -> list[Lease]:
    """One of the 36 traces (names as in the thesis's tables), deterministic in ``seed``.
    KeyError names an unknown duration, AR size or mix."""
    rng = random.Random(f"seed000:{duration}:{ar_size}:{mix}:{seed}")
    horizon = rng.uniform(*spec.hours) * 3600.0
    total = horizon * SLOTS
    per_vm = resource_vector(cpu=100, memory=512)
    leases: list[Lease] = []
    minutes = int(horizon // 60) + 1
    used = [0] * minutes                        # VM slots taken by the ARs, per minute
    ar_work, target = 0.0, (1.0 - MIXES[mix]) * total
    lo, hi = AR_SIZES[ar_size]
    for _ in range(20_000):
        if ar_work >= target:
            break
        n = rng.randint(lo, hi)
        dur = 60.0 * round(rng.uniform(*spec.ar_duration_s) / 60.0)
        first = int(rng.uniform(spec.ar_earliest_s, horizon - dur) // 60)
        length = int(dur // 60)
        start = next((60.0 * m for m in range(first, int((horizon - dur) // 60) + 1)
                      if all(used[k] + n <= SLOTS for k in range(m, m + length))), None)
        if start is None:
            continue
        span = range(int(start // 60), int(start // 60) + length)
        for m in span:
            used[m] += n
        ar_work += n * dur
        leases.append(Lease(len(leases) + 1, LeaseType.ADVANCE_RESERVATION, 0.0, dur, n, per_vm,
                            _image(rng), IMAGE_MB, preemptible=False, requested_start_s=start))
    mean = DURATIONS[duration]
    be_target = MIXES[mix] * total
    requests: list[tuple[int, float]] = []
    be_work = 0.0
    while be_work < be_target:
        n = rng.randint(*spec.be_vms)
        dur = max(60.0, 60.0 * round(mean * rng.uniform(1 - spec.be_spread, 1 + spec.be_spread) / 60.0))
        requests.append((n, dur))
        be_work += n * dur
    gap = horizon / len(requests)               # evenly spaced arrivals over the experiment
    for k, (n, dur) in enumerate(requests):
        leases.append(Lease(len(leases) + 1, LeaseType.BEST_EFFORT, k * gap, dur, n, per_vm,
                            _image(rng), IMAGE_MB))
    return leases


def config(name: str, spec: TraceSpec = TraceSpec()) -> LeaseConfig:
    """The lease engine configuration of :data:`CONFIGS` or :data:`JOB_CONFIGS` ``name``
    (KeyError if unknown)."""
    _label, extra = CONFIGS[name] if name in CONFIGS else JOB_CONFIGS[name]
    opts = dict(_COMMON)
    if name in CONFIGS and name != "novm":
        opts.update(_VM, **{"suspend-rate": spec.suspend_rate, "resume-rate": spec.suspend_rate})
    opts.update(extra)
    return LeaseConfig(opts, f"seed000:{name}")


def run(duration: str, ar_size: str, mix: str, name: str, seed: int = 0,
        spec: TraceSpec = TraceSpec()) -> dict:
    """One cell: ``{"duration", "ar_size", "mix", "config", "seed", "all_best_effort_s",
    "utilization", "mb_transferred", "peak_disk_mb", "ar_rejected", "leases"}``."""
    leases = trace(duration, ar_size, mix, seed, spec)
    result = simulate(leases, uniform_site(8, cpus_per_node=2, mem_per_node=1024), config(name, spec))
    m = result.report()["metrics"]
    return {"duration": duration, "ar_size": ar_size, "mix": mix, "config": name, "seed": seed,
            "all_best_effort_s": m["all_best_effort_s"], "utilization": m["utilization"],
            "mb_transferred": m["mb_transferred"],
            "peak_disk_mb": max(m["peak_disk_mb_per_node"].values(), default=0.0),
            "ar_rejected": m["ar_rejected"], "leases": len(leases), "vms": sum(l.n_vms for l in leases)}


def cells():
    """The 36 (duration, AR size, mix) cells in the thesis's table order."""
    return [(d, a, x) for d in ("long", "medium", "short") for a in AR_SIZES for x in MIXES]


def paper_tables(path: Path) -> dict[tuple[str, str, str], dict[str, float]]:
    """The thesis's Tables 8.3-8.6 (``examples/papers/seed000_section8_3.csv``) by cell."""
    out = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            key = (row.pop("duration"), row.pop("ar_resources"), row.pop("batch_ar"))
            out[key] = {k: float(v) for k, v in row.items()}
    return out
