"""Sweep specifications (``vgrid sweep SPEC.toml``): a grid of lease-engine simulations.

A spec is TOML::

    name = "hpdc08"                       # the store's default file name and the report's
    [site]                                # uniform_site(nodes, cpus-per-node, mem-per-node)
    nodes = 144
    cpus-per-node = 1
    mem-per-node = 1024
    [grid]
    traces = ["blue-30days"]              # bundled names or files (relative to the spec)
    inject-ar = ["none", "work_*"]        # "none", names, files, or shell patterns over names
    configurations = ["NOVM-NOSR"]        # default: every [configurations.*], in file order
    seeds = [1]                           # seeds of the image draws (ignored without images)
    [configurations.NOVM-NOSR.scheduling] # lease options, as in a --config file's sections
    suspension = "none"
    [configurations.VM-MULT.workload]     # workload options (below)
    images = 37

Workload options of a configuration: ``images`` (count, 0 = keep the trace's), ``image-size``
(MB), ``image-distribution`` (``uniform`` or ``"COUNT,WEIGHT ..."``, ``tracefile.py``),
``swf-cpus-per-node``. One ``SimRun`` is (trace, injected ARs, configuration, seed); its
``key`` is SHA-256 over the contents of the trace and AR files, the site, the configuration's
options and workload, the seed (only when the run draws images) and ``ENGINE_VERSION``: a
result is valid exactly for its inputs, so a re-run computes only what changed.

Errors: ``SpecError`` with the file and the field (``spec.toml: [grid] inject-ar: no bundled
trace matches 'work_99*'``).
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from vgrid_runtime import traces as catalogue
from vgrid_runtime.config import read_toml

from .config import COMPAT_RULES, HAIZEA_11, ConfigError, LeaseConfig, _BY_NAME
from .simulate import simulate
from .tracefile import assign_images, parse_distribution
from .traces import TraceError, read_with_injection, uniform_site

#: Bump when an engine change makes stored results invalid.
ENGINE_VERSION = 1
WORKLOAD_OPTIONS = {"images": int, "image-size": float, "image-distribution": str, "swf-cpus-per-node": int}
SITE_OPTIONS = {"nodes": 144, "cpus-per-node": 1, "mem-per-node": 1024}
#: Result fields of a run (``run_simulation``), all numbers.
RESULT_FIELDS = ("all_best_effort_s", "ar_accepted", "ar_rejected", "mean_wait_s", "mean_bounded_slowdown",
                 "utilization", "mb_transferred", "suspensions", "leases", "events", "cpu_s", "wall_s")


class SpecError(ValueError):
    """A bad sweep specification: the message names the file and the field."""


_DIGESTS: dict[tuple, str] = {}


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (cached per process by path, size and modification time)."""
    st = Path(path).stat()
    k = (path, st.st_size, st.st_mtime_ns)
    if k not in _DIGESTS:
        _DIGESTS[k] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return _DIGESTS[k]


@dataclass(frozen=True)
class SimRun:
    """One simulation: ``trace`` and ``inject`` are file paths ("" = no injected ARs);
    ``options`` the configuration's lease options, ``workload`` its workload options (both as
    sorted tuples of (name, value) so a run is hashable and picklable)."""
    sweep: str
    trace: str
    inject: str
    configuration: str
    options: tuple
    workload: tuple
    seed: int
    site: tuple
    labels: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def draws_images(self) -> bool:
        return dict(self.workload).get("images", 0) > 0

    def key(self) -> str:
        """24 hex digits of SHA-256 over the inputs' contents and the configuration (and, for a
        Haizea-compatible run, ``config.COMPAT_RULES``)."""
        blob = {"trace": file_digest(self.trace), "inject": file_digest(self.inject) if self.inject else "",
                "options": self.options, "workload": self.workload, "site": self.site,
                "seed": self.seed if self.draws_images else None, "engine": ENGINE_VERSION}
        if dict(self.options).get("compat") == HAIZEA_11:
            blob["compat_rules"] = COMPAT_RULES
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:24]

    def params(self) -> dict:
        """What a store row shows of the run (names, not digests)."""
        return {"sweep": self.sweep, "trace": self.labels.get("trace", self.trace),
                "inject": self.labels.get("inject", self.inject), "configuration": self.configuration,
                "seed": self.seed, "options": dict(self.options), "workload": dict(self.workload),
                "site": dict(self.site)}


def simulate_run(run: SimRun) -> tuple[list, object]:
    """Read the run's inputs and simulate them: (the leases read, the simulation result).
    Raises TraceError / ConfigError for bad inputs."""
    wl = dict(run.workload)
    site = dict(run.site)
    leases = read_with_injection(run.trace, run.inject, cpus_per_node=wl.get("swf-cpus-per-node", 1),
                                 memory_mb=site["mem-per-node"])
    if run.draws_images:
        leases = assign_images(leases, wl["images"], wl.get("image-size", 4096.0),
                               wl.get("image-distribution", "uniform"), run.seed)
    cfg = LeaseConfig(dict(run.options), f"<configuration {run.configuration}>")
    return leases, simulate(leases, uniform_site(site["nodes"], site["cpus-per-node"], site["mem-per-node"]), cfg)


def run_simulation(run: SimRun) -> dict:
    """Read the inputs, simulate, return the RESULT_FIELDS (seconds, counts, fractions).
    Raises TraceError / ConfigError for bad inputs (a failed run, reported by the runner)."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    leases, result = simulate_run(run)
    m = result.report()["metrics"]
    sched_leases = result.scheduler.leases.values()
    return {"all_best_effort_s": m["all_best_effort_s"], "ar_accepted": m["ar_accepted"],
            "ar_rejected": m["ar_rejected"], "mean_wait_s": m["mean_wait_s"],
            "mean_bounded_slowdown": m["mean_bounded_slowdown"], "utilization": m["utilization"],
            "mb_transferred": m["mb_transferred"], "suspensions": sum(l.suspensions for l in sched_leases),
            "leases": len(leases), "events": result.events,
            "cpu_s": round(time.process_time() - cpu0, 3), "wall_s": round(time.perf_counter() - wall0, 3)}


@dataclass
class SweepSpec:
    name: str
    path: Path
    runs: list[SimRun]


def _resolve(spec_path: Path, item: str, where: str) -> list[tuple[str, str]]:
    """(label, file path) of one trace entry: a file (relative to the spec), a bundled name, or a
    pattern over bundled names."""
    local = spec_path.parent / item
    if local.is_file():
        return [(local.stem, str(local))]
    if any(c in item for c in "*?["):
        names = sorted(n for n in catalogue.CATALOGUE if fnmatch.fnmatchcase(n, item))
        if not names:
            raise SpecError(f"{spec_path}: {where}: no bundled trace matches {item!r}")
        return [(n, str(catalogue.bundled(n))) for n in names]
    try:
        return [(item, str(catalogue.resolve(item)))]
    except catalogue.TraceNameError as exc:
        raise SpecError(f"{spec_path}: {where}: {exc}") from None


def _list(grid: dict, name: str, path: Path, default=None) -> list:
    value = grid.get(name, default)
    if not isinstance(value, list) or not value:
        raise SpecError(f"{path}: [grid] {name} must be a non-empty list, got {value!r}")
    return value


def _configuration(path: Path, name: str, body: dict) -> tuple[tuple, tuple]:
    if not isinstance(body, dict):
        raise SpecError(f"{path}: [configurations.{name}] must be a table")
    options, workload = {}, {}
    for section, values in body.items():
        where = f"[configurations.{name}.{section}]"
        if not isinstance(values, dict):
            raise SpecError(f"{path}: {where} must be a table of options")
        for opt, value in values.items():
            if section == "workload":
                if opt not in WORKLOAD_OPTIONS:
                    raise SpecError(f"{path}: {where} unknown option {opt!r}; expected one of "
                                    f"{', '.join(WORKLOAD_OPTIONS)}")
                kind = WORKLOAD_OPTIONS[opt]
                if kind is float and isinstance(value, int) and not isinstance(value, bool):
                    value = float(value)
                if not isinstance(value, kind) or isinstance(value, bool):
                    raise SpecError(f"{path}: {where} {opt} must be {kind.__name__}, got {value!r}")
                workload[opt] = value
                continue
            known = _BY_NAME.get(opt)
            if known is not None and known.section != section:
                raise SpecError(f"{path}: {where} option {opt!r} belongs in [{known.section}]")
            options[opt] = value
    try:
        LeaseConfig(options, f"{path}: [configurations.{name}]")
        if workload.get("images", 0) > 0:
            parse_distribution(workload.get("image-distribution", "uniform"), workload["images"])
    except (ConfigError, ValueError) as exc:
        raise SpecError(str(exc)) from None
    return tuple(sorted(options.items())), tuple(sorted(workload.items()))


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a spec; the runs in a stable order (trace, AR set, configuration,
    seed). Raises SpecError."""
    path = Path(path)
    data = read_toml(path, SpecError)
    unknown = set(data) - {"name", "description", "site", "grid", "configurations"}
    if unknown:
        raise SpecError(f"{path}: unknown top-level field(s) {sorted(unknown)}")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise SpecError(f"{path}: name must be a non-empty string")
    site = dict(SITE_OPTIONS)
    for k, v in data.get("site", {}).items():
        if k not in SITE_OPTIONS or not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SpecError(f"{path}: [site] {k} = {v!r}: expected one of {list(SITE_OPTIONS)}, an integer >= 1")
        site[k] = v
    confs = data.get("configurations", {})
    if not isinstance(confs, dict) or not confs:
        raise SpecError(f"{path}: no [configurations.NAME] tables")
    parsed = {n: _configuration(path, n, body) for n, body in confs.items()}
    grid = data.get("grid", {})
    unknown = set(grid) - {"traces", "inject-ar", "configurations", "seeds"}
    if unknown:
        raise SpecError(f"{path}: [grid] unknown field(s) {sorted(unknown)}")
    chosen = _list(grid, "configurations", path, list(confs))
    missing = [c for c in chosen if c not in parsed]
    if missing:
        raise SpecError(f"{path}: [grid] configurations: {missing} not defined; defined: {list(parsed)}")
    seeds = _list(grid, "seeds", path, [1])
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise SpecError(f"{path}: [grid] seeds must be integers, got {seeds!r}")
    trace_files = [t for item in _list(grid, "traces", path) for t in _resolve(path, str(item), "[grid] traces")]
    injects = []
    for item in _list(grid, "inject-ar", path, ["none"]):
        injects += [("none", "")] if item == "none" else _resolve(path, str(item), "[grid] inject-ar")
    site_t = tuple(sorted(site.items()))
    runs = []
    for tlabel, tfile in trace_files:
        for ilabel, ifile in injects:
            for conf in chosen:
                options, workload = parsed[conf]
                draws = dict(workload).get("images", 0) > 0
                for seed in (seeds if draws else seeds[:1]):
                    runs.append(SimRun(name, tfile, ifile, conf, options, workload, seed, site_t,
                                       labels={"trace": tlabel, "inject": ilabel}))
    return SweepSpec(name, path, runs)


def check_inputs(runs: list[SimRun]) -> None:
    """Read every distinct trace file once (TraceError naming file:line on a bad one)."""
    for f in sorted({r.trace for r in runs} | {r.inject for r in runs if r.inject}):
        try:
            file_digest(f)
        except OSError as exc:
            raise TraceError(f"{f}: {exc.strerror}") from None
