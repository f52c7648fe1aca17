"""Seed 000 Section 8.1: accuracy of AR deployments (Table 8.1 Traces I and II, Figures 8.2-8.4).

Traces I and II are advance reservations of virtual clusters (2-4 VMs of one of six 600 MB
images, uniformly) over a 2-hour experiment: in Trace I the start times are uniform, in Trace II
they fall in 100 s windows every 900 s. Their images are staged by the scheduled EDF strategy
(seed 000 Algorithm 2) or by the naive job-style, JIT and aggressive strategies (Section 8.1,
Figure 8.1: no admission test, concurrent transfers share the 100 Mb/s link); images are not
reused. The metric is client satisfaction: the fraction of the reserved time the client got
(:func:`accounting.ar_satisfaction`). Figure 8.4's trace is 94 ARs of 1-16 VMs over 10 h, all
known at the start, staged by EDF and by EDF/JIT (Algorithm 3); the metric is each node's disk
used by images over time.

What the thesis leaves unstated is chosen in :class:`ArSpec` (docs/experiments/seed000.md).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from .accounting import ar_satisfaction, disk_series
from .config import LeaseConfig
from .model import Lease, LeaseType, resource_vector
from .simulate import simulate
from .traces import uniform_site

STRATEGIES = ("edf", "jit", "aggressive", "job-style")
IMAGE_MB = 600.0


@dataclass(frozen=True)
class ArSpec:
    """Our choices (s, MB) where Table 8.1 is garbled or silent.

    ``nodes`` x ``vms_per_node`` VM slots (8 worker nodes; 4 VMs of 128 MB per 512 MB node);
    ``horizon_s`` the experiment (7,200 s); ``duration_s`` each VW (1,800 s); ``vms`` per VW
    (2-4, uniform: about 110 images for 36 VWs, as Table 8.1); ``submissions`` per trace
    (36 and 35); ``notice_s``: an AR is submitted this long before its start, uniform;
    ``window_s``/``period_s`` Trace II's start windows. ARs the lease engine cannot admit
    (predeployed images) are dropped and redrawn, 20 rounds at most (the thesis's offline
    admission).
    """

    nodes: int = 8
    vms_per_node: int = 4
    horizon_s: float = 7200.0
    duration_s: float = 1800.0
    vms: tuple[int, int] = (2, 4)
    submissions: tuple[int, int] = (36, 35)
    notice_s: tuple[float, float] = (300.0, 900.0)
    window_s: float = 100.0
    period_s: float = 900.0


def _admitted(ars: list[Lease], site) -> list[Lease]:
    """The ARs the lease engine accepts with predeployed images, in submission order (the
    thesis's offline admission: a feasible schedule exists for what is kept)."""
    fresh = [Lease(l.id, l.type, l.submit_s, l.duration_s, l.n_vms, l.per_vm, l.image_id, l.image_mb,
                   preemptible=False, requested_start_s=l.requested_start_s) for l in ars]
    result = simulate(fresh, site, LeaseConfig({"suspension": "none"}, "seed000-ar:admission"))
    rejected = {l.id for l in result.scheduler.leases.values() if l.reject_reason}
    return [l for l in ars if l.id not in rejected]


def _renumber(ars: list[Lease]) -> list[Lease]:
    ars.sort(key=lambda l: (l.submit_s, l.requested_start_s, l.id))
    for i, lease in enumerate(ars):
        lease.id = i + 1
    return ars


def ar_trace(kind: str, seed: int = 0, spec: ArSpec = ArSpec()) -> list[Lease]:
    """Trace ``"I"`` (uniform starts) or ``"II"`` (starts in windows); ValueError otherwise.
    At most ``spec.submissions`` ARs: fewer when no more fit the site."""
    if kind not in ("I", "II"):
        raise ValueError(f"trace must be 'I' or 'II', got {kind!r}")
    rng = random.Random(f"seed000-ar:{kind}:{seed}")
    want = spec.submissions[0 if kind == "I" else 1]
    site = uniform_site(spec.nodes, cpus_per_node=spec.vms_per_node, mem_per_node=512)
    per_vm = resource_vector(cpu=100, memory=512 // spec.vms_per_node)
    latest = spec.horizon_s - spec.duration_s
    ars: list[Lease] = []
    for _round in range(20):
        while len(ars) < want:
            if kind == "I":
                start = rng.uniform(spec.notice_s[1], latest)
            else:
                windows = int((latest - spec.notice_s[1]) // spec.period_s) + 1
                start = spec.notice_s[1] + rng.randrange(windows) * spec.period_s + rng.uniform(0, spec.window_s)
            start = float(int(start))
            ars.append(Lease(10_000 * (_round + 1) + len(ars), LeaseType.ADVANCE_RESERVATION,
                             max(0.0, start - rng.uniform(*spec.notice_s)), spec.duration_s,
                             rng.randint(*spec.vms), per_vm, f"img{rng.randint(1, 6)}", IMAGE_MB,
                             preemptible=False, requested_start_s=start))
        ars = _admitted(ars, site)
    return _renumber(ars)


def _config(strategy: str, **extra) -> LeaseConfig:
    return LeaseConfig({"lease-preparation": "imagetransfer", "diskimage-reuse": "none",
                        "ar-transfer-strategy": strategy, "imagetransfer-bandwidth": 100.0,
                        "suspension": "none", **extra}, f"seed000-ar:{strategy}")


def satisfaction(kind: str, strategy: str, seed: int = 0, spec: ArSpec = ArSpec()) -> dict:
    """Figure 8.2 (Trace I) / 8.3 (Trace II) for one strategy of :data:`STRATEGIES`:
    ``{"trace", "strategy", "seed", "submitted", "rejected", "satisfaction": [per accepted AR,
    0..1, by AR id]}``. EDF refuses an AR whose image cannot arrive in time (admission); the
    naive strategies accept all."""
    leases = ar_trace(kind, seed, spec)
    result = simulate(leases, uniform_site(spec.nodes, cpus_per_node=spec.vms_per_node, mem_per_node=512),
                      _config(strategy))
    sat = ar_satisfaction(result.scheduler)
    m = result.report()["metrics"]
    return {"trace": kind, "strategy": strategy, "seed": seed, "submitted": len(leases),
            "rejected": m["ar_rejected"], "satisfaction": [sat[k] for k in sorted(sat)]}


def disk_trace(seed: int = 0, count: int = 94, hours: float = 10.0) -> list[Lease]:
    """Figure 8.4's trace: ``count`` ARs of 1-16 VMs (8 dual-CPU nodes), uniform starts over
    ``hours``, 5-15 min long (the thesis gives no durations; 94 ARs of 8.5 VMs on average fill
    16 VM slots for 10 h only if they average about 10 min), all submitted at t = 0, six 600 MB
    images; ARs the engine cannot admit are redrawn."""
    rng = random.Random(f"seed000-disk:{seed}")
    horizon = hours * 3600.0
    site = uniform_site(8, cpus_per_node=2, mem_per_node=1024)
    per_vm = resource_vector(cpu=100, memory=512)
    ars: list[Lease] = []
    for _round in range(20):
        while len(ars) < count:
            dur = 60.0 * rng.randint(5, 15)
            ars.append(Lease(10_000 * (_round + 1) + len(ars), LeaseType.ADVANCE_RESERVATION, 0.0,
                             dur, rng.randint(1, 16), per_vm, f"img{rng.randint(1, 6)}", IMAGE_MB,
                             preemptible=False,
                             requested_start_s=float(int(rng.uniform(1800.0, horizon - dur)))))
        ars = _admitted(ars, site)
    return _renumber(ars)


def disk_usage(strategy: str, seed: int = 0) -> dict:
    """Figure 8.4 for ``"edf"`` or ``"edf-jit"``: ``{"strategy", "seed", "peak_mb": max over
    nodes and time, "series": [(t, MB) of the node with the highest peak]}``."""
    result = simulate(disk_trace(seed), uniform_site(8, cpus_per_node=2, mem_per_node=1024),
                      _config(strategy))
    per_node = disk_series(result.scheduler)
    node, series = max(per_node.items(), key=lambda kv: max((v for _, v in kv[1]), default=0.0),
                       default=(None, []))
    return {"strategy": strategy, "seed": seed, "node": node,
            "peak_mb": max((v for _, v in series), default=0.0), "series": series}
