"""Benchmark: replay the whole LCG trace through the grid simulator (issue 6, target <= 60 s).

The LCG-2005-1 trace (188,041 jobs, 170 sites, SWF field 16 = site) becomes one CE per site
(CPUs = the site's peak number of concurrently running jobs, see broker.gridsim.model), and every
job is matched by the live broker's code: ISM refresh every R s (infosys.ism.ISM), feedback
counters, the job's Requirements and Rank through jdl, selection through broker.selection.
Reports, per policy, the wall time of the trace load (first policy only: cached after) and of
the simulation, the CPU time of this process (the wall time on a busy shared machine includes
waiting for a core), the number of ISM refreshes and the metrics. Exit 1 if a replay took
more than 60 s of wall time; exit 2, naming it, if the trace is missing (no figures reported).

    .venv/bin/python benchmarks/grid_sim.py [--trace PATH|NAME] [--policies sfete,max,fuzzy]
        [--ism-refresh 240] [--limit N] [--json]

The trace defaults to the bundled examples/traces/swf/LCG-2005-1.swf.gz (name ``lcg-2005-1``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.gridsim.engine import SimConfig, simulate  # noqa: E402
from broker.gridsim.metrics import max_share_gap, run_metrics  # noqa: E402
from broker.gridsim.workloads import load_ces, load_jobs  # noqa: E402
from vgrid_runtime import traces  # noqa: E402

DEFAULT_TRACE = "lcg-2005-1"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=DEFAULT_TRACE, help="SWF file or bundled trace name (default lcg-2005-1)")
    ap.add_argument("--policies", default="sfete,max,fuzzy")
    ap.add_argument("--ism-refresh", type=float, default=240.0, help="ISM refresh interval, s")
    ap.add_argument("--limit", type=int, default=None, help="replay only the first N jobs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        trace = traces.resolve(args.trace)
    except traces.TraceNameError as exc:
        print(f"grid_sim.py: {exc}", file=sys.stderr)
        return 2
    if not trace.is_file():
        print(f"grid_sim.py: trace {trace} not found; no figures reported", file=sys.stderr)
        return 2
    args.trace = str(trace)

    t0, c0 = time.perf_counter(), time.process_time()
    ces = load_ces(f"swf:{args.trace}")
    spec = f"swf:{args.trace}" + (f",limit={args.limit}" if args.limit else "")
    load_s, load_cpu = time.perf_counter() - t0, time.process_time() - c0
    rows = []
    for policy in args.policies.split(","):
        jobs = load_jobs(spec, ces, 0)
        t1, c1 = time.perf_counter(), time.process_time()
        result = simulate(ces, jobs, SimConfig(policy=policy, ism_refresh_s=args.ism_refresh))
        sim_s, sim_cpu = time.perf_counter() - t1, time.process_time() - c1
        rows.append({"policy": policy, "jobs": len(jobs), "ces": len(ces),
                     "ism_refresh_s": args.ism_refresh, "refreshes": result.refreshes,
                     "load_s": round(load_s, 2), "simulate_s": round(sim_s, 2),
                     "total_s": round(load_s + sim_s, 2),
                     "cpu_s": round(load_cpu + sim_cpu, 2), "metrics": run_metrics(result),
                     "max_share_gap": round(max_share_gap(result), 4)})
        load_s = load_cpu = 0.0  # the trace is parsed once (cached) for the following policies
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            m = r["metrics"]
            print(f"{r['policy']:6s} {r['jobs']} jobs on {r['ces']} CEs, R={r['ism_refresh_s']:g} s: "
                  f"{r['refreshes']} ISM refreshes; load {r['load_s']:.1f} s + simulate "
                  f"{r['simulate_s']:.1f} s = {r['total_s']:.1f} s wall ({r['cpu_s']:.1f} s CPU)"
                  f" | mean delay "
                  f"{m['mean_delay_s']:.0f} s, makespan {m['makespan_s']:.0f} s, mean queue "
                  f"{m['mean_queue_s']:.0f} s, max share gap {r['max_share_gap'] * 100:.1f} pts")
    return 0 if all(r["total_s"] <= 60 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
