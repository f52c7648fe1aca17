"""Sweeps behind seed 004's Figures 8-11 and the acceptance checks of issue 6.

``run_report(params)`` runs, for every submission rate and ``seeds`` replications each:
Max Rank, Fuzzy Rank and SFETE with feedback on FCFS LRMS CEs (Figures 8a, 8b, 9, 10); SFETE
without feedback and Max Rank at several ISM refresh intervals (the ablation); SFETE with
feedback on fair-share VWN CEs for several maximum numbers of VWNs (Figure 11). Every point is
the mean over the replications (seeds 0 .. seeds-1, the same workloads for every policy).
The figures themselves are drawn by :mod:`broker.gridsim.figures`.
"""
from __future__ import annotations

import random
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from .engine import SimConfig, simulate
from .metrics import capacity_share, jobs_per_ce, run_metrics
from .model import CESpec
from .workloads import PoissonSpec, poisson_jobs


@dataclass(frozen=True)
class ReportParams:
    """What to sweep. Rates in jobs/min, times in s; ``vwn_rate`` is Figure 11's rate."""

    rates: tuple[float, ...] = (5, 10, 15, 20, 25, 30)
    jobs: int = 250
    seeds: int = 10
    ism_refresh_s: float = 240.0
    ablation_refresh_s: tuple[float, ...] = (30.0, 240.0, 480.0)
    vwns: tuple[int, ...] = (2, 3, 4, 6, 8, 12, 16)
    vwn_rate: float = 15.0
    vwn_overhead: float = 0.01
    vwn_startup_s: float = 30.0
    share_tolerance: float = 0.05

    def __post_init__(self) -> None:
        for name in ("rates", "ablation_refresh_s", "vwns"):
            if not getattr(self, name):
                raise ValueError(f"report: {name} needs at least one value")
        if self.seeds < 1 or self.jobs < 1:
            raise ValueError("report: seeds and jobs must be >= 1")


@dataclass
class Point:
    """Means over the replications of one configuration at one rate (or one K)."""

    mean_delay_s: float
    makespan_s: float
    mean_queue_s: float
    job_share: dict[str, float]
    worst_share_gap: float
    mean_delay_s_sd: float = 0.0  # standard deviations over the replications
    makespan_s_sd: float = 0.0
    mean_queue_s_sd: float = 0.0
    runs: list[dict[str, float]] = field(default_factory=list)  # per seed: the three metrics


@dataclass
class Report:
    """All sweep results: ``series[name][x] -> Point``; ``checks``: acceptance results."""

    params: ReportParams
    ces: tuple[CESpec, ...]
    series: dict[str, dict[float, Point]] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"params": asdict(self.params),
                "capacity_share": _capacity_share(self.ces),
                "series": {name: {str(x): asdict(p) for x, p in pts.items()}
                           for name, pts in self.series.items()},
                "checks": self.checks}


def _capacity_share(ces: Sequence[CESpec]) -> dict[str, float]:
    total = sum(ce.capacity for ce in ces)
    return {ce.ce_id: ce.capacity / total for ce in ces}


def series_name(policy: str, feedback: bool = True, refresh_s: float | None = None,
                vwns: bool = False) -> str:
    """Key of a series, e.g. ``sfete`` / ``sfete-nofb@R=240`` / ``sfete-vwn``."""
    name = policy if feedback or policy != "sfete" else f"{policy}-nofb"
    if refresh_s is not None:
        name += f"@R={refresh_s:g}"
    return name + ("-vwn" if vwns else "")


def _point(ces: Sequence[CESpec], rate: float, params: ReportParams, config: dict) -> Point:
    delays, makespans, queues, gaps = [], [], [], []
    share_sum = {ce.ce_id: 0.0 for ce in ces}
    fastest = max(ce.si00 for ce in ces)
    for seed in range(params.seeds):
        jobs = poisson_jobs(PoissonSpec(rate_per_min=rate, jobs=params.jobs), fastest,
                            random.Random(f"workload:{seed}"))
        result = simulate(ces, jobs, SimConfig(seed=seed, **config))
        m = run_metrics(result)
        delays.append(m["mean_delay_s"])
        makespans.append(m["makespan_s"])
        queues.append(m["mean_queue_s"])
        counts, caps = jobs_per_ce(result), capacity_share(result)
        gaps.append(max(abs(counts[c] / len(jobs) - caps[c]) for c in caps))
        for c, n in counts.items():
            share_sum[c] += n / len(jobs) / params.seeds
    runs = [{"mean_delay_s": d, "makespan_s": m, "mean_queue_s": q}
            for d, m, q in zip(delays, makespans, queues)]
    return Point(statistics.fmean(delays), statistics.fmean(makespans), statistics.fmean(queues),
                 share_sum, max(gaps), statistics.pstdev(delays), statistics.pstdev(makespans),
                 statistics.pstdev(queues), runs)


def _plan(params: ReportParams) -> list[tuple[str, float, dict]]:
    """(series name, x, SimConfig keywords) of every point of the report."""
    plan = []
    for rate in params.rates:
        for policy in ("max", "fuzzy", "sfete"):
            plan.append((series_name(policy), rate,
                         {"policy": policy, "ism_refresh_s": params.ism_refresh_s}))
        for r in params.ablation_refresh_s:
            for policy, fb in (("max", True), ("sfete", False), ("sfete", True)):
                plan.append((series_name(policy, fb, r), rate,
                             {"policy": policy, "feedback": fb, "ism_refresh_s": r}))
    for k in params.vwns:
        plan.append(("sfete-vwn", float(k), {"policy": "sfete", "ism_refresh_s": params.ism_refresh_s,
                                              "vwns": k, "vwn_overhead": params.vwn_overhead,
                                              "vwn_startup_s": params.vwn_startup_s}))
    plan.append(("sfete-lrms", params.vwn_rate, {"policy": "sfete",
                                                "ism_refresh_s": params.ism_refresh_s}))
    return plan


def run_report(ces: Sequence[CESpec], params: ReportParams,
               progress: Callable[[int, int], None] | None = None) -> Report:
    """Run every sweep of the report and the acceptance checks."""
    report = Report(params, tuple(ces))
    plan = _plan(params)
    done: dict[tuple, Point] = {}  # the same configuration at the same rate runs once
    for i, (name, x, config) in enumerate(plan):
        rate = params.vwn_rate if name in ("sfete-vwn", "sfete-lrms") else x
        key = (rate, tuple(sorted(config.items())))
        if key not in done:
            done[key] = _point(ces, rate, params, config)
        report.series.setdefault(name, {})[x] = done[key]
        if progress is not None:
            progress(i + 1, len(plan))
    report.checks = acceptance(report)
    return report


def _check(name: str, passed: bool, detail: str) -> dict[str, Any]:
    return {"check": name, "passed": bool(passed), "detail": detail}


def degradation(report: Report, refresh_s: float) -> float:
    """How far SFETE without feedback has fallen from SFETE with feedback toward Max Rank at
    ISM refresh interval ``refresh_s``: mean over rates of
    (D_nofb - D_fb) / (D_max - D_fb) with D the mean delay (0 = as good as with feedback,
    1 = as bad as Max Rank)."""
    s = report.series
    fb, nofb, mx = (s[series_name("sfete", True, refresh_s)], s[series_name("sfete", False, refresh_s)],
                    s[series_name("max", True, refresh_s)])
    ratios = []
    for rate in report.params.rates:
        span = mx[rate].mean_delay_s - fb[rate].mean_delay_s
        ratios.append((nofb[rate].mean_delay_s - fb[rate].mean_delay_s) / span if span > 0 else 1.0)
    return statistics.fmean(ratios)


def paired_wins(report: Report, metric: str) -> tuple[int, int]:
    """In how many (rate, seed, other policy) pairs SFETE+feedback's ``metric`` is lower than
    Max Rank's or Fuzzy Rank's on the same workload; and the number of pairs."""
    s, wins, pairs = report.series, 0, 0
    for rate in report.params.rates:
        for other in ("max", "fuzzy"):
            for mine, theirs in zip(s["sfete"][rate].runs, s[other][rate].runs):
                wins += mine[metric] < theirs[metric]
                pairs += 1
    return wins, pairs


def acceptance(report: Report) -> list[dict[str, Any]]:
    """The acceptance criteria of issue 6 evaluated on the report's sweeps."""
    p, s = report.params, report.series
    checks = []
    heavier = [r for r in p.rates if r > min(p.rates)]
    for metric, label in (("mean_delay_s", "average delay"), ("makespan_s", "makespan")):
        bad = [f"{r:g}/min" for r in heavier
               if not all(getattr(s["sfete"][r], metric) < getattr(s[o][r], metric)
                          for o in ("max", "fuzzy"))]
        wins, pairs = paired_wins(report, metric)
        checks.append(_check(f"SFETE+feedback {label} < Max and Fuzzy at every rate above the "
                             "lightest", not bad, ("fails at " + ", ".join(bad) if bad else
                             f"holds at {', '.join(f'{r:g}' for r in heavier)} jobs/min")
                             + f"; lower in {wins} of {pairs} paired runs (same workload)"))
    caps = _capacity_share(report.ces)
    gaps = {r: max(abs(s["sfete"][r].job_share[c] - caps[c]) for c in caps) for r in p.rates}
    worst = max(gaps.values())
    checks.append(_check(f"SFETE+feedback job share within {p.share_tolerance * 100:g} points of "
                         "capacity share at every rate", worst <= p.share_tolerance,
                         f"largest gap {worst * 100:.1f} points (mean share over seeds); "
                         f"largest single-run gap {max(s['sfete'][r].worst_share_gap for r in p.rates) * 100:.1f}"))
    deg = [degradation(report, r) for r in p.ablation_refresh_s]
    checks.append(_check("SFETE without feedback degrades toward Max Rank as the refresh interval "
                         "grows", all(a < b for a, b in zip(deg, deg[1:])),
                         ", ".join(f"R={r:g}s: {d:.2f}" for r, d in zip(p.ablation_refresh_s, deg))
                         + " (0 = as with feedback, 1 = as Max Rank)"))
    ks = sorted(s["sfete-vwn"])
    queue = [s["sfete-vwn"][k].mean_queue_s for k in ks]
    delay = [s["sfete-vwn"][k].mean_delay_s for k in ks]
    checks.append(_check("VWNs: queue time falls as the maximum number of VWNs grows",
                         all(a > b for a, b in zip(queue, queue[1:])),
                         ", ".join(f"K={k:g}: {q:.0f}s" for k, q in zip(ks, queue))))
    checks.append(_check("VWNs: average delay does not fall (largest K vs smallest K)",
                         delay[-1] >= delay[0],
                         ", ".join(f"K={k:g}: {d:.0f}s" for k, d in zip(ks, delay))))
    return checks
