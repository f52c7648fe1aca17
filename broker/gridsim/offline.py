"""Seed 004 Table I: SFETE against FCFS/ECT, EDF/ECT and LLF/ECT, centralised and offline.

Seed 004 Section 6.1 compares SFETE with three list-scheduling algorithms in GridSim before its
testbed: a central scheduler with exact knowledge of the resources; "all (waiting to be
scheduled) tasks are first ordered and then assigned to the appropriate resource". Orderings:
FCFS (arrival), EDF (most imminent deadline first), LLF (least length = smallest workload
first); assignment: ECT, the resource on which the task completes earliest. SFETE orders FCFS
and assigns to argmin (N_j + 1) / C_j (:func:`broker.selection.sfete_rank`, the one
implementation of seed 004 eq. (1)); its resources share their capacity fairly between their
tasks, the virtual worker nodes of Section 5.1 (:class:`broker.gridsim.ce_models.FairShareVwn`).

What the paper leaves unstated is chosen here and named in :class:`OfflineSpec` (and in
docs/experiments/sfete.md, "Table I baselines"): the resources, the task workloads and
deadlines, and how often the central scheduler runs (``interval_s``: the tasks that arrived
since the previous instant are the "waiting tasks" it orders).

Resources under ECT are FCFS batch queues, one task per CPU (:class:`FcfsLrms`); the scheduler
knows every CPU's planned free time exactly (work is known), so a task's completion time on a
resource is max(now, earliest free CPU) + work / speed, and the plan is what happens.
"""
from __future__ import annotations

import heapq
import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Callable, Sequence

from broker.selection import cpu_capacity, sfete_rank

from .ce_models import CEEventQueue, make_ce
from .model import CESpec, Job

#: Seed 004 Section 6.1: mean task submission rates (tasks/s).
SEED004_RATES = (12.0, 20.0, 25.0, 33.0, 40.0, 50.0, 55.0, 60.0, 65.0, 70.0)

#: Algorithms of Table I, plus SFETE on FCFS batch resources (SFETE's selection without VWNs).
ALGORITHMS = ("sfete", "fcfs-ect", "edf-ect", "llf-ect", "sfete-batch")

#: Our nonuniform resources (the paper gives none): 10 clusters, 248 CPUs of 1,000-3,000 SI00,
#: 480,000 SI00 in all.
NONUNIFORM: tuple[CESpec, ...] = tuple(
    CESpec(f"r{i + 1}.offline.vgrid.local:8443/batch", cpus, si00, f"resource {i + 1}")
    for i, (cpus, si00) in enumerate([(4, 3000.0), (4, 1000.0), (8, 2500.0), (8, 1500.0),
                                      (16, 2000.0), (16, 1000.0), (32, 3000.0), (32, 1500.0),
                                      (64, 2000.0), (64, 1750.0)]))

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class OfflineSpec:
    """The unstated parameters of seed 004 Section 6.1, chosen.

    ``tasks`` per run; ``load_at_max`` the offered load (work arriving / capacity) at the
    highest rate of ``rates`` (tasks/s), which fixes the mean task work (SI00-seconds,
    exponential); a task's deadline is its creation + f x its run time on the fastest CPU,
    f uniform in ``deadline_factor`` (non-critical deadlines); ``interval_s`` (s) the central
    scheduler's period (0: every task is scheduled on arrival, so all orderings are FCFS);
    ``resources`` the CEs. ValueError on a bad value.
    """

    tasks: int = 20_000
    rates: tuple[float, ...] = SEED004_RATES
    load_at_max: float = 0.95
    deadline_factor: tuple[float, float] = (2.0, 6.0)
    interval_s: float = 1.0
    resources: tuple[CESpec, ...] = NONUNIFORM

    def __post_init__(self) -> None:
        if self.tasks < 1 or not self.rates or min(self.rates) <= 0:
            raise ValueError("offline spec: tasks >= 1 and rates > 0 tasks/s are needed")
        if not 0 < self.load_at_max:
            raise ValueError(f"offline spec: load_at_max must be > 0, got {self.load_at_max}")
        lo, hi = self.deadline_factor
        if not 0 < lo <= hi:
            raise ValueError(f"offline spec: deadline_factor needs 0 < lo <= hi, got {lo}, {hi}")
        if self.interval_s < 0:
            raise ValueError(f"offline spec: interval_s must be >= 0 s, got {self.interval_s}")

    @property
    def capacity(self) -> float:
        """Total capacity (SI00): sum of CPUs x SI00."""
        return sum(cpu_capacity(r.cpus, r.si00) for r in self.resources)

    @property
    def mean_work(self) -> float:
        """Mean task work (SI00-seconds) giving ``load_at_max`` at the highest rate."""
        return self.load_at_max * self.capacity / max(self.rates)


def tasks_for(spec: OfflineSpec, rate: float, seed: int) -> list[Job]:
    """``spec.tasks`` tasks: Poisson arrivals at ``rate`` tasks/s, exponential work of mean
    ``spec.mean_work``, deadlines as :class:`OfflineSpec` says; deterministic in ``seed``."""
    rng = random.Random(f"offline:{seed}:{rate}")
    fastest = max(r.si00 for r in spec.resources)
    lo, hi = spec.deadline_factor
    t, jobs = 0.0, []
    for i in range(spec.tasks):
        t += rng.expovariate(rate)
        work = rng.expovariate(1.0 / spec.mean_work)
        jobs.append(Job(i + 1, "user", t, work, t + rng.uniform(lo, hi) * work / fastest))
    return jobs


def _order_key(algorithm: str) -> Callable[[Job], tuple]:
    if algorithm.startswith("edf"):
        return lambda j: (j.deadline_s, j.submit_s, j.job_id)
    if algorithm.startswith("llf"):
        return lambda j: (j.work, j.submit_s, j.job_id)
    return lambda j: (j.submit_s, j.job_id)


def _batches(jobs: Sequence[Job], interval_s: float):
    """(scheduling instant, tasks that arrived since the previous one), in time order."""
    ordered = sorted(jobs, key=lambda j: (j.submit_s, j.job_id))
    if interval_s == 0:
        for j in ordered:
            yield j.submit_s, [j]
        return
    batch: list[Job] = []
    k = None
    for j in ordered:
        kj = math.ceil(j.submit_s / interval_s)
        if k is not None and kj != k and batch:
            yield k * interval_s, batch
            batch = []
        k = kj
        batch.append(j)
    if batch:
        yield k * interval_s, batch


def _run_ect(jobs: Sequence[Job], spec: OfflineSpec, algorithm: str) -> None:
    free = [[0.0] * r.cpus for r in spec.resources]      # per resource: its CPUs' free times (heap)
    key = _order_key(algorithm)
    for now, batch in _batches(jobs, spec.interval_s):
        for job in sorted(batch, key=key):
            best, best_end = 0, math.inf
            for i, r in enumerate(spec.resources):
                end = max(now, free[i][0]) + job.work / r.si00
                if end < best_end:
                    best, best_end = i, end
            r = spec.resources[best]
            job.ce, job.start_s, job.end_s = r.ce_id, best_end - job.work / r.si00, best_end
            heapq.heapreplace(free[best], best_end)


def _run_sfete(jobs: Sequence[Job], spec: OfflineSpec, vwns: int | None, seed: int) -> None:
    models = [make_ce(r, vwns) for r in spec.resources]
    caps = [cpu_capacity(r.cpus, r.si00) for r in spec.resources]
    events = CEEventQueue(models)
    rng = random.Random(f"offline-sfete:{seed}")
    for now, batch in _batches(jobs, spec.interval_s):
        events.run_until(now)
        for job in batch:     # FCFS
            scores = [sfete_rank(m.running + m.waiting, 0, c) for m, c in zip(models, caps)]
            low = min(scores)
            ties = [i for i, s in enumerate(scores) if s == low]
            i = ties[0] if len(ties) == 1 else rng.choice(ties)
            job.ce = spec.resources[i].ce_id
            models[i].submit(job, now)
            events.reschedule(i)
    events.run_until(math.inf)


@dataclass(frozen=True)
class OfflineResult:
    """One run's metrics (seed 004 Section 6.1): ``avg_delay_s`` (finish - creation), its
    standard deviation ``std_delay_s``, ``avg_excess_s`` (finish - deadline, over the tasks
    that missed theirs; 0 when none did), ``missed`` (tasks past their deadline)."""

    algorithm: str
    rate: float
    seed: int
    avg_delay_s: float
    std_delay_s: float
    avg_excess_s: float
    missed: int
    tasks: int


def run_one(spec: OfflineSpec, algorithm: str, rate: float, seed: int = 0) -> OfflineResult:
    """One algorithm of :data:`ALGORITHMS` at one rate (tasks/s); ValueError for an unknown
    algorithm."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose from {', '.join(ALGORITHMS)}")
    jobs = tasks_for(spec, rate, seed)
    if algorithm.endswith("-ect"):
        _run_ect(jobs, spec, algorithm)
    else:     # every task gets a VWN at once (K = tasks); sfete-batch: FCFS batch queues
        _run_sfete(jobs, spec, spec.tasks if algorithm == "sfete" else None, seed)
    delays = [j.end_s - j.submit_s for j in jobs]
    excess = [j.end_s - j.deadline_s for j in jobs if j.end_s > j.deadline_s + 1e-9]
    return OfflineResult(algorithm, rate, seed, statistics.fmean(delays), statistics.pstdev(delays),
                         statistics.fmean(excess) if excess else 0.0, len(excess), len(jobs))


@dataclass
class OfflineReport:
    """Every (algorithm, rate, seed) run of a comparison."""

    spec: OfflineSpec
    results: list[OfflineResult] = field(default_factory=list)

    def mean(self, algorithm: str, rate: float, metric: str) -> tuple[float, float]:
        """(mean, standard deviation over seeds) of ``metric`` for one algorithm and rate."""
        vals = [getattr(r, metric) for r in self.results if r.algorithm == algorithm and r.rate == rate]
        return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def compare(spec: OfflineSpec, algorithms: Sequence[str] = ALGORITHMS, seeds: Sequence[int] = (0,),
            progress: ProgressFn | None = None) -> OfflineReport:
    """Run every algorithm at every rate of ``spec`` for every seed."""
    report = OfflineReport(spec)
    total = len(algorithms) * len(spec.rates) * len(seeds)
    for a in algorithms:
        for rate in spec.rates:
            for s in seeds:
                report.results.append(run_one(spec, a, rate, s))
                if progress is not None:
                    progress(len(report.results), total)
    return report
