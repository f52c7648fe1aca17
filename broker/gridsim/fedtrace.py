"""The LCG trace split into Grids for the simulated federation, its metrics and its report
(issue 15; docs/experiments/federation.md "Simulated federation").

The split (:func:`build`):

- **sites to Grids, balanced by CPUs**: sites (one CE each, CPUs = the site's peak concurrency
  x ``cpu_scale``, :func:`broker.gridsim.model.ces_from_sites`) sorted by CPUs, largest first,
  each to the Grid with the fewest CPUs so far -- three Grids of about equal capacity;
- **a CE admits the VOs that ran at its site** in the trace (field 13, the group, is the VO:
  ``vo<group>``), so some VOs exist in one Grid only;
- **users to Grids, uneven on purpose** (as the live experiment loads Grid A most): a user's
  jobs are submitted to one home Grid; users sorted by job count, largest first, each to the
  Grid furthest below its target share ``weights`` (default 60/30/10 % of the jobs). A job
  whose VO no CE of its home Grid admits is rejected without peering -- the live
  experiment's atlas jobs at Grid A.

Metrics per run (:func:`run_metrics`), overall and per home Grid: wait (submission to the
start at a CE, s: mean, p50, p95), rejected fraction, forwarded fraction (ran outside the home
Grid), jobs per Grid, hops.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .engine import SimulationError
from .federation import FedConfig, FedJob, FedResult, simulate_federation
from .model import CESpec, SpecError, site_ce_id
from .workloads import read_swf

GRID_NAMES = ("a", "b", "c")
DEFAULT_WEIGHTS = (0.6, 0.3, 0.1)


@dataclass(frozen=True)
class Split:
    """How the trace becomes Grids: ``limit`` first jobs (None: all), ``cpu_scale`` (> 0) x
    each site's peak concurrency as its CPUs, ``weights`` of the users' jobs per Grid."""

    trace: str = "lcg-2005-1"
    limit: int | None = 20000
    cpu_scale: float = 0.25
    weights: tuple[float, ...] = DEFAULT_WEIGHTS

    def __post_init__(self) -> None:
        if not self.cpu_scale > 0:
            raise SpecError(f"cpu_scale must be > 0, got {self.cpu_scale}")
        if len(self.weights) < 2 or min(self.weights) < 0 or not sum(self.weights) > 0:
            raise SpecError(f"weights: need >= 2 Grids with shares >= 0, got {self.weights}")


def _greedy(items: Sequence[tuple[str, float]], targets: Sequence[float]) -> list[int]:
    """Assign items (name, size), largest first, each to the bin furthest below its target
    share of the total; ties to the lower index. Returns the bin of each item, in input order."""
    total = sum(s for _, s in items) or 1.0
    filled = [0.0] * len(targets)
    out = [0] * len(items)
    for i in sorted(range(len(items)), key=lambda i: (-items[i][1], items[i][0])):
        b = max(range(len(targets)), key=lambda b: (targets[b] * total - filled[b], -b))
        filled[b] += items[i][1]
        out[i] = b
    return out


def build(split: Split) -> tuple[dict[str, tuple[list[CESpec], list[list[str]]]], list[FedJob]]:
    """``(grid_specs, jobs)`` for :func:`broker.gridsim.federation.simulate_federation`."""
    trace = read_swf(split.trace)
    rows = trace.jobs if split.limit is None else trace.jobs[:split.limit]
    if not rows:
        raise SpecError(f"{split.trace}: no jobs")
    n = len(split.weights)
    names = GRID_NAMES[:n] if n <= len(GRID_NAMES) else tuple(f"g{i}" for i in range(n))
    vos: dict[str, set] = {}
    for jid, _user, _s, _r, _q, site in trace.jobs:
        vos.setdefault(site, set()).add("vo" + trace.groups.get(jid, "0"))
    sites = sorted(trace.peak_jobs)
    cpus = {s: max(1, round(trace.peak_jobs[s] * split.cpu_scale)) for s in sites}
    site_bin = _greedy([(s, cpus[s]) for s in sites], [1.0 / n] * n)
    grid_specs: dict[str, tuple[list[CESpec], list[list[str]]]] = {g: ([], []) for g in names}
    for s, b in zip(sites, site_bin):
        grid_specs[names[b]][0].append(CESpec(site_ce_id(s), cpus[s], 1000.0, f"trace site {s}"))
        grid_specs[names[b]][1].append(sorted(vos.get(s, ())))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row[1]] = counts.get(row[1], 0) + 1
    users = sorted(counts)
    wsum = sum(split.weights)
    user_bin = dict(zip(users, _greedy([(u, counts[u]) for u in users], [w / wsum for w in split.weights])))
    jobs = [FedJob(jid, user, submit, run * 1000.0, None, site, vo="vo" + trace.groups.get(jid, "0"),
                   home=names[user_bin[user]], limit_s=req if req >= run else run)
            for jid, user, submit, run, req, site in rows]
    return grid_specs, jobs


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _summary(jobs: Sequence[FedJob]) -> dict[str, Any]:
    ran = [j for j in jobs if not j.rejected]
    waits = [j.start_s - j.submit_s for j in ran]
    n = max(1, len(jobs))
    return {"jobs": len(jobs), "rejected": sum(j.rejected for j in jobs),
            "rejected_fraction": sum(j.rejected for j in jobs) / n,
            "forwarded_fraction": sum(len(j.path) > 1 for j in jobs) / n,
            "wait_mean_s": statistics.fmean(waits) if waits else 0.0,
            "wait_p50_s": _pct(waits, 0.5), "wait_p95_s": _pct(waits, 0.95),
            "waited_fraction": sum(w > 0 for w in waits) / n}


def run_metrics(result: FedResult) -> dict[str, Any]:
    """``{"all": summary, "by_home": {grid: summary}, "ran_at": {grid: n}, "hops": {h: n},
    "cpus": {grid: n}, "loop_refusals"}``; a summary: jobs, rejected, rejected/forwarded/waited
    fractions, wait mean/p50/p95 (s, jobs that ran). ValueError for a job that neither ran
    nor was rejected (a bug)."""
    for j in result.jobs:
        if not j.rejected and (j.start_s is None or j.end_s is None):
            raise ValueError(f"job {j.job_id} neither ran nor was rejected")
    ran_at = {g: 0 for g in result.grids}
    hops: dict[int, int] = {}
    for j in result.jobs:
        if not j.rejected:
            ran_at[j.grid] += 1
        hops[len(j.path) - 1] = hops.get(len(j.path) - 1, 0) + 1
    return {"all": _summary(result.jobs),
            "by_home": {g: _summary([j for j in result.jobs if j.home == g]) for g in result.grids},
            "ran_at": ran_at, "hops": dict(sorted(hops.items())), "cpus": dict(result.cpus),
            "loop_refusals": result.loop_refusals}


def run_label(config: FedConfig) -> str:
    if not config.peering:
        return "isolated"
    return "peering, unmatched only" if config.threshold_s < 0 else f"peering, threshold {config.threshold_s:g} s"


def run_all(split: Split, base: FedConfig, thresholds: Sequence[float],
            progress: Callable[[int, int], None] | None = None) -> list[tuple[FedConfig, dict, FedResult]]:
    """The isolated run and one peering run per threshold, on the same split and jobs
    (rebuilt per run: outcomes are written into the jobs). SimulationError, SpecError."""
    from dataclasses import replace
    configs = [replace(base, peering=False)] + [replace(base, peering=True, threshold_s=t) for t in thresholds]
    out = []
    for i, cfg in enumerate(configs):
        grid_specs, jobs = build(split)
        result = simulate_federation(grid_specs, jobs, cfg)
        out.append((cfg, run_metrics(result), result))
        if progress is not None:
            progress(i + 1, len(configs))
    return out


def check_runs(runs) -> list[str]:
    """The properties every run must have (empty list: all hold): peering never rejects more
    jobs than isolation; no job passes a Grid twice or more than max_hops gateways; every job
    ran exactly once or was rejected."""
    problems = []
    iso = runs[0][1]["all"]["rejected"]
    for c, m, r in runs:
        if c.peering and m["all"]["rejected"] > iso:
            problems.append(f"threshold {c.threshold_s:g} s: {m['all']['rejected']} rejected > {iso} isolated")
        for j in r.jobs:
            if len(set(j.path)) != len(j.path) or len(j.path) - 1 > c.max_hops:
                problems.append(f"job {j.job_id} looped or exceeded the hop limit: {j.path}")
                break
        twice = [j.job_id for j in r.jobs if j.placed != (0 if j.rejected else 1)]
        if twice:
            problems.append(f"jobs placed other than once: {twice[:5]}")
        ran = sum(m["ran_at"].values())
        if ran + m["all"]["rejected"] != m["all"]["jobs"] or m["loop_refusals"]:
            problems.append(f"{c}: {ran} ran + {m['all']['rejected']} rejected != {m['all']['jobs']} jobs "
                            f"(loop refusals {m['loop_refusals']})")
    return problems


__all__ = ["Split", "build", "check_runs", "run_metrics", "run_all", "run_label", "SimulationError"]
