"""The Lublin-Feitelson workload model of rigid parallel jobs (1999): sizes, runtimes, arrivals.

Source: U. Lublin and D. G. Feitelson, "The workload on parallel supercomputers: modeling the
characteristics of rigid jobs", JPDC 63(11):1105-1122, 2003 (Hebrew University tech. report,
1999), and its published generator ``m_lublin99.c`` (Parallel Workloads Archive, "Models"),
whose constants are the parameter values below. Seed 002 (Amini Salehi, Javadi, Buyya) Section
7.2 uses this model ("Lublin99") for its workloads; ``LublinModel.adjusted`` reproduces that
use (see its docstring). Our own code: the same distributions, not a translation.

The model, per job class (batch or interactive; the "whole sample" set has no classes):

* **Size** (nodes): serial (1 node) with probability ``serial_prob``; otherwise ``U`` is drawn
  from the *two-stage uniform* on log2 sizes: uniform on [u_low, u_med] with probability
  ``u_prob``, else uniform on [u_med, u_hi]; with probability ``pow2_prob`` (of all jobs) the
  size is ``2^round(U)``, else ``round(2^U)``. u_hi = log2 of the machine size.
* **Runtime** (seconds): ``exp(G)`` where ``G`` is *hyper-Gamma*: Gamma(a1, b1) with
  probability ``p = pa * size + pb`` (clipped to [0, 1]), else Gamma(a2, b2) (shape, scale);
  draws with ``G > 12`` are redrawn (runtime <= e^12 s ~ 1.9 days).
* **Arrivals**: inter-arrival "points" ``exp(G) / 1800`` with ``G ~ Gamma(aarr * arar,
  barr)`` (redrawn if ``G > 13``) are spent on the day's 48 half-hour buckets, bucket ``j``
  costing weight ``w_j`` (normalised to mean 1) per 1,800 s, where ``w_j = F(i + 1/2) -
  F(i - 1/2)``, ``F`` the Gamma(anum, bnum) CDF and ``i`` the bucket's index in the day
  cyclically re-started at bucket 11 (``CYCLIC_DAY_START``; evaluated per bucket index, as the
  published generator does). Busy buckets are expensive, so arrivals crowd there. The two
  classes arrive as independent streams merged by time; time 0 is midnight.

Units: seconds, nodes. Everything is deterministic given the seed (numpy PCG64).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

SECONDS_PER_BUCKET = 1800.0
BUCKETS_PER_DAY = 48
CYCLIC_DAY_START = 11
RUNTIME_LOG_CAP = 12.0    #: log runtime above this is redrawn (m_lublin99.c TOO_MUCH_TIME)
ARRIVAL_LOG_CAP = 13.0    #: log inter-arrival above this is redrawn (TOO_MUCH_ARRIVE_TIME)
REFERENCE_NODES = 128     #: the machine the parameters were fitted for (u_hi = 7)


@dataclass(frozen=True)
class ClassParams:
    """One job class's parameters (m_lublin99.c constants; shapes and scales of Gamma laws)."""
    name: str
    serial_prob: float
    pow2_prob: float
    u_low: float
    u_med: float
    u_hi: float
    u_prob: float
    a1: float
    b1: float
    a2: float
    b2: float
    pa: float
    pb: float
    aarr: float
    barr: float
    anum: float
    bnum: float
    arar: float


#: Batch jobs (the model's batch fit; 128-node machine).
BATCH = ClassParams("batch", 0.2927, 0.6686, 1.2, 5.0, 7.0, 0.875,
                    6.57, 0.823, 639.1, 0.0156, -0.003, 0.6986,
                    6.0415, 0.8531, 6.1271, 5.2740, 1.0519)
#: Interactive jobs.
INTERACTIVE = ClassParams("interactive", 0.1541, 0.625, 1.0, 3.0, 5.5, 0.705,
                          3.8351, 0.6605, 7.073, 0.6856, -0.0118, 0.9156,
                          6.5510, 0.6621, 8.9186, 3.6680, 0.9797)
#: The "whole sample" fit (no job classes); the bundled ``lublin-256`` trace uses it.
WHOLE_SAMPLE = ClassParams("whole-sample", 0.244, 0.576, 0.8, 4.5, 7.0, 0.86,
                           4.2, 0.94, 312.0, 0.03, -0.0054, 0.78,
                           10.2303, 0.4871, 8.1737, 3.9631, 1.0225)
CLASS_SETS = {"batch+interactive": (BATCH, INTERACTIVE), "whole-sample": (WHOLE_SAMPLE,)}


# ---- the Gamma law, as much as the model needs ------------------------------------------

def gamma_cdf(x: float, shape: float, scale: float) -> float:
    """P(G <= x) for G ~ Gamma(shape, scale) (mean shape * scale): the regularized lower
    incomplete gamma function by its power series (converges for every x >= 0).
    ValueError if shape or scale <= 0."""
    if shape <= 0 or scale <= 0:
        raise ValueError(f"Gamma shape and scale must be > 0, got {shape}, {scale}")
    z = x / scale
    if z <= 0:
        return 0.0
    term = total = 1.0 / shape
    n = 0
    while term > total * 1e-16 and n < 100_000:
        n += 1
        term *= z / (shape + n)
        total += term
    return min(1.0, math.exp(shape * math.log(z) - z - math.lgamma(shape)) * total)


def truncated_exp_mean(shape: float, scale: float, cap: float) -> float:
    """E[exp(G) | G <= cap] for G ~ Gamma(shape, scale), scale < 1 (ValueError otherwise).

    exp(x) times the Gamma(shape, scale) density is (1 - scale)^-shape times the Gamma(shape,
    scale / (1 - scale)) density, so the mean is (1 - scale)^-shape * F'(cap) / F(cap).
    This is the mean runtime of a Gamma branch and the mean inter-arrival "points" x 1,800 s.
    """
    if not 0 < scale < 1:
        raise ValueError(f"E[exp(G)] needs a Gamma scale in (0, 1), got {scale}")
    tilted = gamma_cdf(cap, shape, scale / (1 - scale))
    return math.exp(-shape * math.log1p(-scale)) * tilted / gamma_cdf(cap, shape, scale)


def _two_stage_cdf(x, low: float, med: float, hi: float, prob: float):
    """CDF of the two-stage uniform (a zero-width stage is a point mass), vectorised."""
    x = np.asarray(x, dtype=float)
    first = np.where(x >= low, 1.0, 0.0) if med <= low else np.clip((x - low) / (med - low), 0, 1)
    second = np.where(x >= med, 1.0, 0.0) if hi <= med else np.clip((x - med) / (hi - med), 0, 1)
    return prob * first + (1 - prob) * second


def daily_weights(anum: float, bnum: float) -> np.ndarray:
    """The 48 half-hour bucket weights of the daily cycle (mean 1), bucket 0 = 00:00-00:30."""
    w = np.empty(BUCKETS_PER_DAY)
    for j in range(BUCKETS_PER_DAY):
        i = (j + 1 - CYCLIC_DAY_START) % BUCKETS_PER_DAY + CYCLIC_DAY_START
        w[j] = gamma_cdf(i + 0.5, anum, bnum) - gamma_cdf(i - 0.5, anum, bnum)
    return w / w.mean()


# ---- the model ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelJob:
    """One generated job: arrival (s from midnight of day 0), size (nodes), runtime (s), class."""
    submit_s: int
    size: int
    runtime_s: int
    job_class: str


@dataclass(frozen=True)
class LublinModel:
    """The model for a machine of ``nodes`` nodes, with the three adjustments seed 002 needs.

    ``classes``: (BATCH, INTERACTIVE) or (WHOLE_SAMPLE,). Each class's u_med and u_hi are
    shifted by log2(nodes / 128) (the fit was for 128 nodes; u_hi = log2(nodes), as the
    generator's instructions ask) and u_med further by ``u_med_shift`` (clipped to [u_low,
    u_hi]); runtimes are multiplied by ``runtime_scale`` and inter-arrival times by
    ``arrival_scale``. Sizes never exceed ``nodes``. ValueError on a non-positive argument.
    """
    nodes: int = REFERENCE_NODES
    classes: tuple = (BATCH, INTERACTIVE)
    u_med_shift: float = 0.0
    runtime_scale: float = 1.0
    arrival_scale: float = 1.0

    def __post_init__(self):
        if self.nodes < 1 or not self.classes or self.runtime_scale <= 0 or self.arrival_scale <= 0:
            raise ValueError("nodes >= 1, at least one job class, and positive scales are required")

    def params(self) -> tuple:
        """The classes' parameters for this machine (sizes in log2 nodes)."""
        d = math.log2(self.nodes) - math.log2(REFERENCE_NODES)
        out = []
        for c in self.classes:
            hi = c.u_hi + d
            low = min(c.u_low, hi)
            out.append(replace(c, u_low=low, u_hi=hi, u_med=min(max(c.u_med + d + self.u_med_shift, low), hi)))
        return tuple(out)

    # -- analytic moments (used to adjust the model; tests check them against samples)
    def size_pmf(self, c: ClassParams) -> np.ndarray:
        """P(size = s), s = 0..nodes, of class ``c`` (already scaled by ``params``)."""
        pmf = np.zeros(self.nodes + 1)
        pmf[1] += c.serial_prob
        cdf = lambda x: _two_stage_cdf(x, c.u_low, c.u_med, c.u_hi, c.u_prob)  # noqa: E731
        ks = np.arange(math.floor(c.u_low - 0.5), math.ceil(c.u_hi + 0.5) + 1)
        for k, p in zip(ks, cdf(ks + 0.5) - cdf(ks - 0.5)):   # 2^round(U): round(U) = k
            pmf[min(2 ** max(int(k), 0), self.nodes)] += c.pow2_prob * p
        s = np.arange(1, self.nodes + 2)
        p = cdf(np.log2(s + 0.5)) - cdf(np.log2(s - 0.5))      # round(2^U) = s
        other = 1 - c.serial_prob - c.pow2_prob
        pmf[1:] += other * p[:-1]
        pmf[self.nodes] += other * (p[-1] + 1 - cdf(np.log2(self.nodes + 1.5)))
        return pmf

    def class_weights(self) -> np.ndarray:
        """Long-run fraction of jobs of each class (its arrival rate over the total)."""
        rates = np.array([1 / _mean_interarrival(c) for c in self.params()])
        return rates / rates.sum()

    def arrival_rate(self) -> float:
        """Long-run jobs per second of all classes (each class: 1 / E[inter-arrival])."""
        return sum(1 / (self.arrival_scale * _mean_interarrival(c)) for c in self.params())

    def mean_size(self) -> float:
        """Expected nodes per job."""
        sizes = np.arange(self.nodes + 1)
        return float(sum(w * (self.size_pmf(c) @ sizes) for w, c in zip(self.class_weights(), self.params())))

    def mean_runtime(self) -> float:
        """Expected runtime, seconds (the model's continuous value, before rounding down)."""
        sizes = np.arange(self.nodes + 1)
        total = 0.0
        for w, c in zip(self.class_weights(), self.params()):
            p = np.clip(c.pa * sizes + c.pb, 0, 1)
            m1 = truncated_exp_mean(c.a1, c.b1, RUNTIME_LOG_CAP)
            m2 = truncated_exp_mean(c.a2, c.b2, RUNTIME_LOG_CAP)
            total += w * float(self.size_pmf(c) @ (p * m1 + (1 - p) * m2))
        return self.runtime_scale * total

    # -- sampling
    def sample(self, n_jobs: int, seed: int) -> list[ModelJob]:
        """``n_jobs`` jobs sorted by arrival, the same for the same seed. ValueError if n < 0."""
        if n_jobs < 0:
            raise ValueError("the number of jobs must be >= 0")
        streams = np.random.SeedSequence(seed).spawn(3)
        arr_rng, size_rng, run_rng = (np.random.Generator(np.random.PCG64(s)) for s in streams)
        params = self.params()
        times, kinds = [], []
        for k, c in enumerate(params):
            times.append(self._arrivals(c, n_jobs, arr_rng))
            kinds.append(np.full(n_jobs, k))
        t = np.concatenate(times)
        kind = np.concatenate(kinds)
        order = np.lexsort((kind, t))[:n_jobs]
        t, kind = t[order], kind[order]
        size = np.empty(n_jobs, dtype=np.int64)
        runtime = np.empty(n_jobs, dtype=np.int64)
        for k, c in enumerate(params):
            mask = kind == k
            size[mask] = self._sizes(c, int(mask.sum()), size_rng)
            runtime[mask] = self._runtimes(c, size[mask], run_rng)
        submit = np.floor(t).astype(np.int64)
        return [ModelJob(int(a), int(s), int(r), params[k].name)
                for a, s, r, k in zip(submit, size, runtime, kind)]

    def _sizes(self, c: ClassParams, n: int, rng) -> np.ndarray:
        u = rng.random(n)
        first = rng.random(n) < c.u_prob
        lo = np.where(first, c.u_low, c.u_med)
        hi = np.where(first, c.u_med, c.u_hi)
        par = lo + (hi - lo) * rng.random(n)
        pow2 = (u > c.serial_prob) & (u <= c.serial_prob + c.pow2_prob)
        par = np.where(pow2, np.floor(par + 0.5), par)
        size = np.floor(np.exp2(par) + 0.5).astype(np.int64)
        size = np.where(u <= c.serial_prob, 1, size)
        return np.clip(size, 1, self.nodes)

    def _runtimes(self, c: ClassParams, sizes: np.ndarray, rng) -> np.ndarray:
        p = np.clip(c.pa * sizes + c.pb, 0, 1)
        first = rng.random(len(sizes)) <= p
        g = np.where(first, _capped_gamma(rng, c.a1, c.b1, len(sizes), RUNTIME_LOG_CAP),
                     _capped_gamma(rng, c.a2, c.b2, len(sizes), RUNTIME_LOG_CAP))
        return np.maximum(1, np.floor(self.runtime_scale * np.exp(g))).astype(np.int64)

    def _arrivals(self, c: ClassParams, n: int, rng) -> np.ndarray:
        """Arrival times (s) of ``n`` jobs of one class: cumulative points mapped through the
        inverse of the weighted clock W(t) = integral of the bucket weights."""
        g = _capped_gamma(rng, c.aarr * c.arar, c.barr, n, ARRIVAL_LOG_CAP)
        points = np.cumsum(self.arrival_scale * np.exp(g) / SECONDS_PER_BUCKET)
        w = daily_weights(c.anum, c.bnum)
        cum = np.concatenate(([0.0], np.cumsum(w)))
        day, rest = np.divmod(points, cum[-1])
        b = np.clip(np.searchsorted(cum, rest, side="right") - 1, 0, BUCKETS_PER_DAY - 1)
        return SECONDS_PER_BUCKET * (day * BUCKETS_PER_DAY + b + (rest - cum[b]) / w[b])

    @classmethod
    def adjusted(cls, nodes: int, n_jobs: int | None = None, days: float | None = None,
                 mean_size: float | None = None, mean_runtime_s: float | None = None,
                 classes: tuple = (BATCH, INTERACTIVE)) -> "LublinModel":
        """The model adjusted as seed 002 Section 7.2 does ("a two-week-long workload that
        includes 3000 parallel requests ... we adjusted the average number of VMs of leases to
        be 4 and the average duration of requests to be 2 hours"); each target is optional:

        * mean size: u_med (the change point of the size CDF, the knob m_lublin99.c names for
          the mean size) of every class is shifted by the same amount, found by bisection on
          the exact mean (``mean_size``); ValueError if the target is out of reach;
        * mean runtime: runtimes are multiplied by one factor (the runtime CV and the
          size-runtime correlation stay the model's);
        * arrivals: inter-arrival times are multiplied by one factor so that ``n_jobs`` jobs
          take ``days`` days *in expectation* (the daily cycle is kept).

        The targets hold for the model's expectation; a sample's means scatter around them.
        """
        model = cls(nodes=nodes, classes=tuple(classes))
        if mean_size is not None:
            model = replace(model, u_med_shift=_solve_u_med_shift(model, mean_size))
        if mean_runtime_s is not None:
            if mean_runtime_s <= 0:
                raise ValueError("the mean runtime must be > 0 s")
            model = replace(model, runtime_scale=float(mean_runtime_s / model.mean_runtime()))
        if days is not None or n_jobs is not None:
            if not days or not n_jobs or days <= 0 or n_jobs <= 0:
                raise ValueError("give both the number of jobs and the days (> 0) to set the arrival rate")
            model = replace(model, arrival_scale=model.arrival_rate() * days * 86400.0 / n_jobs)
        return model


def _mean_interarrival(c: ClassParams) -> float:
    return truncated_exp_mean(c.aarr * c.arar, c.barr, ARRIVAL_LOG_CAP)


def _capped_gamma(rng, shape: float, scale: float, n: int, cap: float) -> np.ndarray:
    """``n`` Gamma(shape, scale) draws, each above ``cap`` redrawn."""
    g = rng.gamma(shape, scale, n)
    bad = g > cap
    while bad.any():
        g[bad] = rng.gamma(shape, scale, int(bad.sum()))
        bad = g > cap
    return g


def _solve_u_med_shift(model: LublinModel, target: float) -> float:
    span = max(c.u_hi - c.u_low for c in model.params())
    lo, hi = -span, span
    at = lambda s: replace(model, u_med_shift=s).mean_size()  # noqa: E731
    low_mean, high_mean = at(lo), at(hi)
    if not low_mean <= target <= high_mean:
        raise ValueError(f"mean size {target} is out of reach on {model.nodes} nodes: "
                         f"the model gives {low_mean:.2f} to {high_mean:.2f} by moving u_med")
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at(mid) < target else (lo, mid)
    return (lo + hi) / 2


# ---- checking a sample against a trace ----------------------------------------------------

def swf_jobs(text: str) -> list[ModelJob]:
    """The jobs of SWF text (submit, allocated processors, run time, queue as the class
    "0"/"1"), ';' lines skipped; jobs with a run time or size <= 0 are left out.
    ValueError naming the line on a malformed one."""
    jobs = []
    for lineno, line in enumerate(text.splitlines(), 1):
        f = line.split()
        if not f or f[0].startswith(";"):
            continue
        try:
            submit, runtime, procs = int(f[1]), int(f[3]), int(f[4])
            queue = f[14] if len(f) > 14 else "-1"
        except (IndexError, ValueError):
            raise ValueError(f"SWF line {lineno}: expected integer fields 2, 4 and 5") from None
        if runtime > 0 and procs > 0:
            jobs.append(ModelJob(submit, procs, runtime, queue))
    return jobs


def weighted_clock(t, anum: float, bnum: float) -> np.ndarray:
    """W(t): the arrival "points" spent by time ``t`` (seconds from midnight) on the daily
    cycle of Gamma(anum, bnum). Differences of W at one class's arrivals are the model's
    i.i.d. inter-arrival points exp(G) / 1,800 (what ``compare`` tests)."""
    w = daily_weights(anum, bnum)
    cum = np.concatenate(([0.0], np.cumsum(w)))
    day, rest = np.divmod(np.asarray(t, dtype=float), 86400.0)
    b = np.minimum((rest // SECONDS_PER_BUCKET).astype(int), BUCKETS_PER_DAY - 1)
    return day * cum[-1] + cum[b] + (rest - b * SECONDS_PER_BUCKET) / SECONDS_PER_BUCKET * w[b]


def ks_statistic(x, y) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: max |F_x - F_y| over all values."""
    x, y = np.sort(np.asarray(x, dtype=float)), np.sort(np.asarray(y, dtype=float))
    if not len(x) or not len(y):
        raise ValueError("the KS statistic needs two non-empty samples")
    z = np.concatenate((x, y))
    return float(np.max(np.abs(np.searchsorted(x, z, "right") / len(x) - np.searchsorted(y, z, "right") / len(y))))


def ks_bound(n: int, m: int, delta: float = 1e-6) -> float:
    """A KS threshold exceeded with probability <= ``delta`` when both samples are i.i.d. from
    one law (any law, discrete included): by the Dvoretzky-Kiefer-Wolfowitz inequality with
    Massart's constant, P(sup|F_n - F| > e) <= 2 exp(-2 n e^2) for each sample; the triangle
    inequality and a union bound give e_n + e_m with e_k = sqrt(ln(4 / delta) / (2 k))."""
    return math.sqrt(math.log(4 / delta) / (2 * n)) + math.sqrt(math.log(4 / delta) / (2 * m))


def compare(sample: list[ModelJob], reference: list[ModelJob], params: ClassParams = WHOLE_SAMPLE,
            delta: float = 1e-6) -> dict:
    """KS statistics of a sample against a reference trace: sizes, runtimes, inter-arrival
    times (s) and inter-arrival points (inter-arrivals on the weighted clock of ``params``,
    i.i.d. for a single-class workload), each with its ``ks_bound`` at ``delta``."""
    def gaps(jobs):
        return np.diff(np.array([j.submit_s for j in jobs], dtype=float))

    def points(jobs):
        return np.diff(weighted_clock([j.submit_s for j in jobs], params.anum, params.bnum))

    out = {}
    for name, f in (("size", lambda js: [j.size for j in js]), ("runtime_s", lambda js: [j.runtime_s for j in js]),
                    ("interarrival_s", gaps), ("interarrival_points", points)):
        a, b = f(sample), f(reference)
        out[name] = {"ks": ks_statistic(a, b), "bound": ks_bound(len(a), len(b), delta)}
    return out


def rescale_runtimes(jobs: list[ModelJob], mean_runtime_s: float) -> list[ModelJob]:
    """The jobs with runtimes multiplied by one factor so that *this sample's* mean runtime is
    ``mean_runtime_s`` (up to rounding to whole seconds, each >= 1 s); ValueError if <= 0."""
    if mean_runtime_s <= 0:
        raise ValueError("the mean runtime must be > 0 s")
    if not jobs:
        return []
    k = mean_runtime_s * len(jobs) / sum(j.runtime_s for j in jobs)
    return [replace(j, runtime_s=max(1, round(j.runtime_s * k))) for j in jobs]
