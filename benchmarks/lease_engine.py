"""Lease engine speed on the SDSC Blue Horizon workloads of Haizea's HPDC'08 evaluation (issue 5).

Each run is a fresh subprocess (so peak RSS is per run): read the SWF (Haizea's conversion),
simulate 144 nodes of 1 CPU and 1024 MB, best-effort only, aggressive backfilling, suspension
of all leases at 50 MB/s, no image transfers; report wall time, CPU time and peak RSS of the
whole process (import + trace reading + simulation), and the run's metrics.

    .venv/bin/python benchmarks/lease_engine.py [--days 30 60] [--repeat 3] [--inject NAME]
        [--decision-log] [--json]

``--decision-log`` runs with the per-decision log on (written to /dev/null; ``decision_records``
counts its lines): its cost beside a run without it.

Inputs are the bundled traces (examples/traces, names in vgrid_runtime/traces.py): blue-15days,
blue-30days, blue-60days, and for --inject an AR set of the 30-day trace (or an LWF file). A
missing input is named and the benchmark exits 2 before any run.

Haizea 1.1 reports all-best-effort = 2,651,340 s for the 30-day run (5,108 leases).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vgrid_runtime import traces  # noqa: E402

CHILD = r"""
import json, resource, sys, time
t0, c0 = time.perf_counter(), time.process_time()
sys.path.insert(0, sys.argv[2])
from vwn_agents.leasing import LeaseConfig, read_trace, simulate, uniform_site
w = read_trace(sys.argv[1])
leases = list(w.leases)
if sys.argv[3]:
    leases += read_trace(sys.argv[3], id_offset=10**6).leases
cfg = LeaseConfig({"backfilling": "aggressive", "suspension": "all", "suspend-rate": 50.0,
                   "resume-rate": 50.0, "lease-preparation": "unmanaged"})
site = uniform_site(144, 1, 1024)
log = None
if sys.argv[4] == "1":
    from vwn_agents.leasing.decisionlog import DecisionLog
    log = DecisionLog(open("/dev/null", "w"), site)
t1 = time.perf_counter()
r = simulate(leases, site, cfg, decisions=log)
t2 = time.perf_counter()
m = r.report()["metrics"]
print(json.dumps({"leases": len(leases), "ar_accepted": m["ar_accepted"], "ar_rejected": m["ar_rejected"], "wall_s": t2 - t0, "simulate_s": t2 - t1,
                  "cpu_s": time.process_time() - c0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "all_best_effort_s": m["all_best_effort_s"], "mean_wait_s": m["mean_wait_s"],
                  "utilization": m["utilization"], "mean_bounded_slowdown": m["mean_bounded_slowdown"],
                  "suspensions": sum(l.suspensions for l in r.scheduler.leases.values()),
                  "events": r.events, "decision_records": log.records if log else 0}))
"""


def inputs(days: int, inject: str = "") -> tuple[str, str]:
    """The trace and AR files of one run; exits 2 naming a missing one (never a fallback)."""
    try:
        if inject in traces.AR_SETS and days != 30:
            raise traces.TraceNameError(f"the AR set {inject} is for the 30-day trace, not {days} days")
        trace = traces.bundled(f"blue-{days}days")
        inj = traces.resolve(inject) if inject else None
        if inj is not None and not inj.is_file():
            raise traces.TraceNameError(f"--inject: {inj} not found")
    except traces.TraceNameError as exc:
        print(f"lease_engine.py: {exc}; no figures reported", file=sys.stderr)
        sys.exit(2)
    return str(trace), str(inj or "")


def run_once(days: int, inject: str = "", decision_log: bool = False) -> dict:
    trace, inj = inputs(days, inject)
    out = subprocess.run([sys.executable, "-c", CHILD, trace, str(ROOT), inj, "1" if decision_log else "0"],
                         capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, nargs="+", default=[30, 60], choices=[15, 30, 60])
    ap.add_argument("--repeat", type=int, default=3, help="runs per trace; the fastest is reported")
    ap.add_argument("--inject", default="", metavar="NAME",
                    help="also inject the ARs of NAME, a bundled AR set of the 30-day trace "
                         "(e.g. work_30-dur_4h-size_3large) or an LWF file")
    ap.add_argument("--decision-log", action="store_true",
                    help="run with the per-decision log on (to /dev/null)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    for days in args.days:
        inputs(days, args.inject)  # every input present before any run
    load = os.getloadavg()[0]
    results = []
    for days in args.days:
        runs = [run_once(days, args.inject, args.decision_log) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["wall_s"])
        best["days"] = days
        best["wall_s_all"] = [round(r["wall_s"], 2) for r in runs]
        results.append(best)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"load average (1 min) before the runs: {load:.2f} on {os.cpu_count()} cores")
    print("| trace | leases | wall s (best of runs) | all runs, wall s | CPU s | peak RSS MB | all-best-effort s "
          "| mean wait s | utilization | suspensions |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        name = f"{r['days']}days.swf" + (f" + {args.inject} ({r['ar_accepted']} ARs accepted, {r['ar_rejected']} rejected)" if args.inject else "")
        print(f"| {name} | {r['leases']} | {r['wall_s']:.2f} | {r['wall_s_all']} | {r['cpu_s']:.2f} "
              f"| {r['peak_rss_mb']:.0f} | {r['all_best_effort_s']:,.0f} | {r['mean_wait_s']:,.0f} "
              f"| {r['utilization']:.4f} | {r['suspensions']} |")


if __name__ == "__main__":
    main()
