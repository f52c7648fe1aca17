"""Time a sweep spec (default: HPDC'08's 438 runs) on Dask; print one JSON line.

    .venv/bin/python benchmarks/hpdc08_sweep.py [--spec examples/sweeps/hpdc08.toml] [--store FILE]
                                               [--workers N] [--scheduler tcp://HOST:8786]
                                               [--configurations A,B] [--inject GLOB,GLOB]

``--configurations`` / ``--inject`` keep only the runs of those configurations / injected AR
sets (names as in the spec, ``none`` for no ARs, shell globs allowed): a sample of the sweep.
To time another checkout of vgrid side by side (e.g. a ``git worktree`` of an older commit), set
``PYTHONPATH`` to it: the script and its Dask workers then import vgrid from there.

Runs what ``--store`` lacks (a fresh temporary store by default: everything), then prints
``{"spec", "runs", "computed", "failed", "wall_s", "cpu_s" (sum over the runs computed now),
"cpu_s_per_configuration", "load_1min_before", "load_1min_after", "workers"}``. Wall time
includes waiting for a core on a shared machine; CPU is each run's own ``process_time``.
Exit 1 if a run failed, 2 if the spec or a trace is missing.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import tempfile
from pathlib import Path

if not os.environ.get("PYTHONPATH"):    # else: the checkout named there (a side-by-side reference)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vwn_agents.leasing.sweeprunner import run_sweep  # noqa: E402
from vwn_agents.leasing.sweepspec import SpecError, check_inputs, load_spec  # noqa: E402
from vwn_agents.leasing.sweepstore import SweepStore  # noqa: E402
from vwn_agents.leasing.traces import TraceError  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(Path(__file__).resolve().parents[1] / "examples/sweeps/hpdc08.toml"))
    ap.add_argument("--store", default=None, help="resume this store (default: a fresh temporary one)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--scheduler", default=None)
    ap.add_argument("--configurations", default=None, help="comma-separated configuration names (globs)")
    ap.add_argument("--inject", default=None, help="comma-separated injected AR set names (globs; none = no ARs)")
    a = ap.parse_args()
    try:
        spec = load_spec(a.spec)
        runs = _select(spec.runs, a.configurations, a.inject)
        check_inputs(runs)
    except (SpecError, TraceError, OSError) as exc:
        print(f"hpdc08_sweep: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        store = SweepStore(a.store or Path(tmp) / "bench.sqlite")
        before = {r["key"] for r in store.rows(status="done")}
        load0 = os.getloadavg()[0]
        s = run_sweep(runs, store, scheduler=a.scheduler, workers=a.workers)
        load1 = os.getloadavg()[0]
        new = [r for r in store.rows(status="done") if r["key"] not in before]
        per_conf: dict = {}
        for r in new:
            per_conf[r["configuration"]] = round(per_conf.get(r["configuration"], 0.0) + r["cpu_s"], 2)
        import vwn_agents
        print(json.dumps({"spec": a.spec, "code": str(Path(vwn_agents.__file__).parents[1]), "runs": s["planned"], "computed": s["computed_now"],
                          "failed": len(s["failed"]), "wall_s": s["wall_s"],
                          "cpu_s": round(sum(r["cpu_s"] for r in new), 2), "cpu_s_per_configuration": per_conf,
                          "load_1min_before": load0, "load_1min_after": load1, "workers": s["workers"]}))
        store.close()
    return 1 if s["failed"] else 0


def _select(runs: list, configurations: str | None, inject: str | None) -> list:
    """The runs whose configuration and injected AR set match the comma-separated globs (all
    when None). SpecError when nothing matches."""
    def match(value: str, globs: str | None) -> bool:
        return globs is None or any(fnmatch.fnmatchcase(value, g.strip()) for g in globs.split(","))
    out = [r for r in runs if match(r.configuration, configurations) and match(r.labels.get("inject", ""), inject)]
    if not out:
        raise SpecError(f"no run matches --configurations {configurations!r} --inject {inject!r}")
    return out


if __name__ == "__main__":
    sys.exit(main())
