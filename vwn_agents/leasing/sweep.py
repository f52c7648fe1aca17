"""Seed 002 Section 7.3's experiments: sweeps of the four preemption policies on Lublin workloads.

Seed 002 (Amini Salehi, Javadi, Buyya, CCPE 2013) Section 7.2 varies one characteristic of a
Lublin-Feitelson workload at a time (Table I, Figures 6-8):

* ``best-effort``: the percentage of best-effort external requests (Best-Effort-Cancellable +
  Best-Effort-Suspendable, half each), 10-50 %, the rest deadline-constrained (Deadline-
  Constraint-Migratable + Non-Preemptable, half each); local requests fixed at 1,000 of 3,000
  (here: one third of ``jobs``);
* ``deadline``: the percentage of deadline-constrained external requests, 10-50 %, the rest
  best-effort; local requests one third;
* ``local``: the percentage of local requests, 20-70 % of the workload; the four external types
  25 % each;
* ``arrival`` (vgrid, issue 13's "sweep over arrival rate"): the arrival rate in percent of the
  paper's 3,000 requests per 14 days, 50-150 % (``days`` x 100 / value); local one third, the
  external types 25 % each.

One :class:`Run` is (axis, value, policy, seed, workload size); its :meth:`Run.key` is a hash of
all of these and of the engine constants (:data:`SECTION_7_2`), so a result row is valid exactly
for its parameters. Every policy of one (axis, value, seed) sees the same workload (paired
comparison, as Table I's t-test). Results are rows of :data:`FIELDS` appended to a CSV, one
flushed and fsynced line per run (:func:`append_row`); :func:`load_done` reads what is done, so a
re-run computes only missing rows, and a line cut by a kill is dropped and recomputed.

Units: seconds; rates and utilization as fractions (0-1). ``cpu_s`` is the CPU time of the run
(``time.process_time``), beside which the sweep reports wall time.
"""
from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .config import LeaseConfig
from .requestmix import (BEST_EFFORT_CANCELLABLE, BEST_EFFORT_SUSPENDABLE, DEADLINE_MIGRATABLE,
                         DEADLINE_NON_PREEMPTABLE, UNIFORM_MIX, section_7_2_requests, to_lwf)
from .simulate import simulate
from .traces import read_lwf_xml

#: The swept axes and their values (seed 002 Section 7.2 / Figures 6-8 (a), (b), (c)), percent.
AXES = {"best-effort": (10, 20, 30, 40, 50), "deadline": (10, 20, 30, 40, 50),
        "local": (20, 30, 40, 50, 60, 70), "arrival": (50, 75, 100, 125, 150)}
POLICIES = ("nop", "mov", "mlip", "moml")
#: Engine options of Section 7.2: VM images replicated (no transfers), conservative backfilling,
#: B = 6.36 MB/s, r = 8.12 MB/s, t_p = 5 ms, delta = 2.3 s; memory snapshots on a shared file
#: system (resume anywhere, one suspension/resumption at a time, as eq. (5)-(6) sum M / B).
SECTION_7_2 = {"lease-preparation": "unmanaged", "backfilling": "conservative", "suspend-rate": 6.36,
               "resume-rate": 8.12, "pause-time": 0.005, "rescheduling-time": 2.3,
               "suspendresume-exclusion": "global", "migration": "yes-notransfer"}
METRICS = ("local_rejection_rate", "external_rejection_rate", "utilization_eq11", "preemptions",
           "preemption_overhead_s", "makespan_external_s", "last_end_s")
FIELDS = ("key", "axis", "value", "policy", "seed", "jobs", "days", "nodes", "exact_mean_runtime",
          *METRICS, "local_requests", "external_requests", "cpu_s")
#: Bump when a change of the engine or of the workload makes old rows invalid.
VERSION = 1


@dataclass(frozen=True)
class Run:
    """One simulation of a sweep: ``policy`` on the workload of (axis, value, seed, size)."""
    axis: str
    value: int
    policy: str
    seed: int
    jobs: int = 3000
    days: float = 14.0
    nodes: int = 32
    exact_mean_runtime: bool = True

    def key(self) -> str:
        """16 hex digits of SHA-256 over the parameters, the engine constants and VERSION."""
        blob = json.dumps({"run": asdict(self), "config": SECTION_7_2, "version": VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def local_and_mix(self) -> tuple:
        """(local requests -- a count or "N%" --, external type mix in percent) of this point.
        ValueError for an unknown axis."""
        if self.axis == "local":
            return f"{self.value}%", dict(UNIFORM_MIX)
        if self.axis == "arrival":
            return round(self.jobs / 3), dict(UNIFORM_MIX)
        if self.axis == "best-effort":
            be = float(self.value)
        elif self.axis == "deadline":
            be = 100.0 - self.value
        else:
            raise ValueError(f"unknown axis {self.axis!r}; expected one of {sorted(AXES)}")
        mix = {BEST_EFFORT_CANCELLABLE: be / 2, BEST_EFFORT_SUSPENDABLE: be / 2,
               DEADLINE_MIGRATABLE: (100 - be) / 2, DEADLINE_NON_PREEMPTABLE: (100 - be) / 2}
        return round(self.jobs / 3), mix

    def workload_lwf(self) -> str:
        """The LWF text of this run's workload (what ``vgrid workload lublin`` writes for the same
        seed, size, ``--local`` and ``--mix``)."""
        local, mix = self.local_and_mix()
        days = self.days * 100 / self.value if self.axis == "arrival" else self.days
        reqs = section_7_2_requests(self.seed, self.jobs, days, self.nodes, local, mix,
                                    exact_mean_runtime=self.exact_mean_runtime)
        return to_lwf(reqs, self.nodes, f"lublin-seed{self.seed}")


def plan(axes=tuple(AXES), policies=POLICIES, seeds=(1, 2, 3), **size) -> list[Run]:
    """Every run of the sweep, in a stable order (axis, value, seed, policy)."""
    return [Run(a, v, p, s, **size) for a in axes for v in AXES[a] for s in seeds for p in policies]


def config() -> LeaseConfig:
    """The engine configuration of the sweep (SECTION_7_2 over the defaults)."""
    return LeaseConfig().with_options(**{k.replace("-", "_"): v for k, v in SECTION_7_2.items()})


def run_one(run: Run) -> dict:
    """Generate the workload, simulate ``run.policy`` on it, return the CSV row (FIELDS)."""
    cpu0 = time.process_time()
    wl = read_lwf_xml(run.workload_lwf(), Path(f"<sweep {run.key()}>"))
    cfg = config().with_options(policy_preemption=run.policy)
    metrics = simulate(list(wl.leases), wl.nodes, cfg).report()["metrics"]
    n_local = sum(1 for l in wl.leases if l.local)
    row = {"key": run.key(), **asdict(run), **{m: metrics[m] for m in METRICS},
           "local_requests": n_local, "external_requests": len(wl.leases) - n_local,
           "cpu_s": round(time.process_time() - cpu0, 3)}
    return row


def _truncate_partial_line(path: Path) -> None:
    """Drop a last line that a kill cut before its newline."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def load_done(path: str | Path) -> dict:
    """``{key: row}`` of the complete rows of the CSV at ``path`` ({} if absent); values are strings."""
    path = Path(path)
    if not path.exists():
        return {}
    _truncate_partial_line(path)
    with path.open(newline="", encoding="utf-8") as f:
        return {r["key"]: r for r in csv.DictReader(f) if r.get("key") and None not in r.values()
                and len(r) == len(FIELDS)}


def append_row(path: str | Path, row: dict) -> None:
    """Append one row (header first if the file is new), flushed and fsynced: a row written
    survives kill -9."""
    path = Path(path)
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow({k: ("" if row[k] is None else row[k]) for k in FIELDS})
        f.flush()
        os.fsync(f.fileno())


def _num(v) -> float | None:
    if v in ("", None):
        return None
    return float(v)


def means(rows) -> dict:
    """``{(axis, value, policy): {metric: mean over seeds (None-valued runs left out),
    metric + "_ci": the half-width of its 95 % t confidence interval (``mean_ci``)}}``."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["axis"], int(float(r["value"])), r["policy"]), []).append(r)
    out = {}
    for k, rs in groups.items():
        out[k] = {"runs": len(rs)}
        for m in METRICS:
            vals = [x for x in (_num(r[m]) for r in rs) if x is not None]
            out[k][m], out[k][m + "_ci"] = mean_ci(vals) if vals else (None, None)
    return out


def _t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t with ``df`` degrees of freedom (bisection on a numerically
    integrated CDF; 1e-6 accuracy is ample for a confidence interval)."""
    logc = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:            # P(0 <= T <= x) by Simpson's rule, plus 1/2
        n = 2000
        h = x / n
        f = [math.exp(logc - (df + 1) / 2 * math.log1p((i * h) ** 2 / df)) for i in range(n + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))
    lo, hi = 0.0, 1000.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def mean_ci(values, level: float = 0.95) -> tuple[float, float]:
    """``(mean, half-width)`` of the ``level`` Student-t confidence interval of the mean of
    ``values`` (half-width 0 for a single value). ValueError on no values."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no values")
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean, 0.0
    sd = math.sqrt(sum((x - mean) ** 2 for x in vals) / (len(vals) - 1))
    return mean, _t_quantile(1 - (1 - level) / 2, len(vals) - 1) * sd / math.sqrt(len(vals))


def paired_difference(rows, axis: str, metric: str, base: str = "nop", other: str = "moml") -> dict | None:
    """Seed 002 Table I: the mean of ``base - other`` for ``metric`` over every (value, seed) of
    ``axis`` that both policies ran, with a 95 % t confidence interval. None if fewer than 2
    pairs. Shape: {"n", "mean", "ci_low", "ci_high"} (fractions, as the metric)."""
    by = {}
    for r in rows:
        if r["axis"] == axis and r["policy"] in (base, other) and _num(r[metric]) is not None:
            by.setdefault((r["value"], r["seed"]), {})[r["policy"]] = _num(r[metric])
    d = [v[base] - v[other] for v in by.values() if base in v and other in v]
    if len(d) < 2:
        return None
    mean, half = mean_ci(d)
    return {"n": len(d), "mean": mean, "ci_low": mean - half, "ci_high": mean + half}
