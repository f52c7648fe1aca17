"""Workloads and CE specs of the grid simulator, from command-line spec strings.

Workload specs (``--workload``):

- ``poisson:rate=15,jobs=250,users=5,means=5/6.5/8.5/10.5/12.5[,deadline_factor=F]``: seed 004
  Section 6.2.1: users with equal rights submit Poisson arrivals at ``rate`` jobs/min in total,
  user u's jobs last exponentially distributed times of mean ``means[u]`` minutes when run
  alone on the fastest CPU of the grid; ``jobs`` jobs in all. With ``deadline_factor`` F a job's
  deadline is its submission + F x its duration on the fastest CPU.
- ``swf:PATH[,limit=N][,deadline=requested]``: a Standard Workload Format trace (plain or .gz;
  PATH may be a bundled trace's name, e.g. ``swf:lcg-2005-1``, see :mod:`vgrid_runtime.traces`):
  field 2 submit time, 4 run time, 12 user, 16 partition = site; a job's work is its run time
  on a CPU of the site's benchmark. ``deadline=requested`` uses submit + field 9 (requested time).

CE specs (``--ces``): ``seed004`` (seed 004 Table II), ``swf:PATH`` or ``swf:NAME`` (one CE per trace site, see
:func:`broker.gridsim.model.ces_from_sites`) or the path of a TOML file
(:func:`broker.gridsim.model.ces_from_toml`).
"""
from __future__ import annotations

import functools
import gzip
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from vgrid_runtime import traces

from .model import BUILTIN_CES, CESpec, Job, SpecError, ces_from_sites, ces_from_toml, site_ce_id

#: seed 004 Section 6.2.1: mean job durations (minutes, on the fastest CE) of the five users.
SEED004_MEANS_MIN = (5.0, 6.5, 8.5, 10.5, 12.5)


@dataclass(frozen=True)
class PoissonSpec:
    """Poisson workload parameters; ``rate_per_min`` > 0 is the total arrival rate (jobs/min)."""

    rate_per_min: float = 15.0
    jobs: int = 250
    users: int = 5
    means_min: tuple[float, ...] = SEED004_MEANS_MIN
    deadline_factor: float | None = None

    def __post_init__(self) -> None:
        if not self.rate_per_min > 0:
            raise SpecError(f"poisson workload: rate must be > 0 jobs/min, got {self.rate_per_min}")
        if self.jobs < 1 or self.users < 1:
            raise SpecError("poisson workload: jobs and users must be >= 1")
        if len(self.means_min) not in (1, self.users) or min(self.means_min) <= 0:
            raise SpecError(f"poisson workload: means must give 1 or {self.users} durations > 0 "
                            f"(minutes), got {'/'.join(map(str, self.means_min))}")
        if self.deadline_factor is not None and not self.deadline_factor > 0:
            raise SpecError("poisson workload: deadline_factor must be > 0")


def poisson_jobs(spec: PoissonSpec, fastest_si00: float, rng: random.Random) -> list[Job]:
    """The jobs of ``spec``; ``fastest_si00`` is the benchmark of the grid's fastest CPU."""
    means = spec.means_min if len(spec.means_min) == spec.users else spec.means_min * spec.users
    rate_s = spec.rate_per_min / 60.0
    t = 0.0
    jobs = []
    for i in range(spec.jobs):
        t += rng.expovariate(rate_s)
        u = rng.randrange(spec.users)
        duration = rng.expovariate(1.0 / (means[u] * 60.0))
        deadline = None if spec.deadline_factor is None else t + spec.deadline_factor * duration
        jobs.append(Job(i + 1, f"user{u + 1}", t, duration * fastest_si00, deadline))
    return jobs


@dataclass(frozen=True)
class SwfTrace:
    """A parsed SWF trace: jobs (``site`` set, ``work`` = run time in CPU-seconds at 1 SI00),
    the site names, each site's peak number of concurrently running jobs, and each job's
    group (field 13; the VO in the LCG trace) by job id."""

    jobs: tuple[tuple[int, str, float, float, float, str], ...]  # id, user, submit, run, req, site
    sites: tuple[str, ...]
    peak_jobs: dict[str, int]
    skipped: int
    groups: dict[int, str] = field(default_factory=dict)


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return path.open("r", encoding="utf-8", errors="replace")


def _peaks(starts_ends: dict[str, list[tuple[float, int]]]) -> dict[str, int]:
    peaks = {}
    for site, events in starts_ends.items():
        events.sort()
        cur = best = 0
        for _, delta in events:
            cur += delta
            best = max(best, cur)
        peaks[site] = best
    return peaks


@functools.lru_cache(maxsize=4)
def _read_swf_cached(path: str, mtime: float) -> SwfTrace:
    names: dict[int, str] = {}
    groups: dict[int, str] = {}
    jobs = []
    events: dict[str, list[tuple[float, int]]] = {}
    skipped = 0
    with _open_text(Path(path)) as fh:
        for lineno, line in enumerate(fh, 1):
            if line.startswith(";"):
                head = line[1:].split()
                if len(head) >= 3 and head[0] == "Partition:" and head[1].isdigit():
                    names[int(head[1])] = head[2]
                continue
            f = line.split()
            if not f:
                continue
            if len(f) < 16:
                raise SpecError(f"{path}:{lineno}:1: SWF line has {len(f)} fields, expected 18")
            try:
                submit, wait, run, req = float(f[1]), float(f[2]), float(f[3]), float(f[8])
                part = int(f[15])
            except ValueError:
                raise SpecError(f"{path}:{lineno}:1: SWF fields must be numbers") from None
            if run < 0 or submit < 0:
                skipped += 1
                continue
            site = names.get(part, f"site-{part}")
            jobs.append((int(f[0]), f"user{f[11]}", submit, run, req, site))
            groups[int(f[0])] = f[12]
            start = submit + max(wait, 0.0)
            ev = events.setdefault(site, [])
            ev.append((start, 1))
            ev.append((start + run, -1))
    jobs.sort(key=lambda j: (j[2], j[0]))
    return SwfTrace(tuple(jobs), tuple(sorted(events)), _peaks(events), skipped, groups)


def read_swf(path: str | Path) -> SwfTrace:
    """Parse an SWF trace, a file or a bundled trace's name (cached per path and modification time).

    Jobs with a negative run or submit time are skipped (counted in ``skipped``). Raises
    SpecError naming ``path:line:column`` for malformed lines, the path when unreadable, and
    the known names for an unknown name.
    """
    try:
        path = traces.resolve(path)
    except traces.TraceNameError as exc:
        raise SpecError(str(exc)) from None
    try:
        mtime = os.stat(path).st_mtime
    except OSError as exc:
        raise SpecError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    return _read_swf_cached(str(path), mtime)


def swf_jobs(trace: SwfTrace, ces: Sequence[CESpec], limit: int | None = None,
             deadline_requested: bool = False) -> list[Job]:
    """The trace's jobs; work = run time x the SI00 of the CE built for the job's site
    (the mean SI00 of ``ces`` when the site has no CE of its own)."""
    by_id = {ce.ce_id: ce.si00 for ce in ces}
    default = sum(by_id.values()) / len(by_id)
    rows = trace.jobs if limit is None else trace.jobs[:limit]
    jobs = []
    for jid, user, submit, run, req, site in rows:
        si00 = by_id.get(site_ce_id(site), default)
        deadline = submit + req if deadline_requested and req > 0 else None
        jobs.append(Job(jid, user, submit, run * si00, deadline, site))
    return jobs


def _options(text: str, what: str) -> dict[str, str]:
    opts = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise SpecError(f"{what}: expected key=value, got {item!r}")
        opts[key.strip().lower()] = value.strip()
    return opts


def _number(opts: dict[str, str], key: str, what: str, cast=float):
    raw = opts.pop(key)
    try:
        return cast(raw)
    except ValueError:
        raise SpecError(f"{what}: {key}={raw!r} is not a valid number") from None


def parse_poisson(text: str) -> PoissonSpec:
    """``rate=..,jobs=..,users=..,means=a/b/..,deadline_factor=..`` -> PoissonSpec."""
    what = "--workload poisson"
    opts = _options(text, what)
    kw: dict = {}
    for key, name, cast in (("rate", "rate_per_min", float), ("jobs", "jobs", int),
                            ("users", "users", int), ("deadline_factor", "deadline_factor", float)):
        if key in opts:
            kw[name] = _number(opts, key, what, cast)
    if "means" in opts:
        raw = opts.pop("means")
        try:
            kw["means_min"] = tuple(float(x) for x in raw.split("/"))
        except ValueError:
            raise SpecError(f"{what}: means={raw!r} must be minutes separated by '/'") from None
    if opts:
        raise SpecError(f"{what}: unknown option(s) {', '.join(sorted(opts))}; "
                        "use rate, jobs, users, means, deadline_factor")
    return PoissonSpec(**kw)


def load_ces(spec: str) -> tuple[CESpec, ...]:
    """CEs from a ``--ces`` spec: ``seed004``, ``swf:PATH`` or a TOML file path."""
    if spec.lower() in BUILTIN_CES:
        return BUILTIN_CES[spec.lower()]
    if spec.startswith("swf:"):
        trace = read_swf(spec[4:].split(",")[0])
        return ces_from_sites(trace.peak_jobs)
    return ces_from_toml(spec)


def load_jobs(spec: str, ces: Sequence[CESpec], seed: int) -> list[Job]:
    """Jobs from a ``--workload`` spec (see the module docstring); ``seed`` drives Poisson draws."""
    kind, _, rest = spec.partition(":")
    kind = kind.lower()
    if kind == "poisson":
        p = parse_poisson(rest)
        return poisson_jobs(p, max(ce.si00 for ce in ces), random.Random(f"workload:{seed}"))
    if kind == "swf":
        path, _, opt_text = rest.partition(",")
        opts = _options(opt_text, "--workload swf")
        limit = _number(opts, "limit", "--workload swf", int) if "limit" in opts else None
        deadline = opts.pop("deadline", "") == "requested"
        if opts:
            raise SpecError(f"--workload swf: unknown option(s) {', '.join(sorted(opts))}; "
                            "use limit=N, deadline=requested")
        return swf_jobs(read_swf(path), ces, limit, deadline)
    raise SpecError(f"--workload: unknown kind {kind!r}; use poisson:... or swf:PATH (or swf:NAME of a bundled trace)")
