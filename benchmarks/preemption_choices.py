"""Analysis: which candidate set MOV, MLIP and MOML would take at each preemption decision of the
seed 002 sweep's workloads (why the three policies barely differ; docs/experiments/preemption.md).

    .venv/bin/python benchmarks/preemption_choices.py [--axis best-effort] [--values 10 30 50]
        [--seeds 1 2 3] [--policy moml] [--jobs 3000] [--days 14] [--nodes 32]

Each run simulates ``--policy`` on the sweep's workload (``sweep.Run``: same generator, constants
and seeds as ``vgrid sweep-preemption``). At every decision of ``localpreemption.preempt_for_local``
the enumerated candidate sets (eq. (1)-(2)) are recorded and the first choice of each of the
three policies is computed on them (``candidatepolicy``): how many leases the sets have, whether
the enumeration hit its bound, alpha (MOML's median of the overheads) and whether the policies
agree. The simulated schedule itself is the one ``--policy`` makes. Prints one JSON line:
the aggregate counts and fractions, CPU and wall seconds. Exit 2 on a bad argument.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from vwn_agents.leasing import candidatepolicy, localpreemption, sweep  # noqa: E402


def _run(run: sweep.Run, log: list) -> None:
    real = localpreemption.enumerate_candidate_sets

    def recording(cands, need, max_sets, max_leases):
        sets, complete = real(cands, need, max_sets, max_leases)
        if sets:
            pick = {name: candidatepolicy.candidate_set_policy(name).choose(sets) for name in ("mov", "mlip", "moml")}
            log.append({"leases": len(cands), "sets": len(sets), "complete": complete, "need": need,
                        "min_size": min(c.size for c in sets),
                        "alpha": candidatepolicy.MOML.alpha(sets),
                        "sizes": {n: c.size for n, c in pick.items()},
                        "overheads": {n: c.overhead_s for n, c in pick.items()},
                        "ids": {n: c.ids for n, c in pick.items()}})
        return sets, complete
    localpreemption.enumerate_candidate_sets = recording
    try:
        sweep.run_one(run)
    finally:
        localpreemption.enumerate_candidate_sets = real


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--axis", default="best-effort", choices=sorted(sweep.AXES))
    ap.add_argument("--values", type=int, nargs="+", default=None)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--policy", default="moml", choices=("mov", "mlip", "moml"))
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--nodes", type=int, default=32)
    a = ap.parse_args(argv)
    values = a.values or list(sweep.AXES[a.axis])
    if any(v not in sweep.AXES[a.axis] for v in values):
        print(f"--values must be among {sweep.AXES[a.axis]}", file=sys.stderr)
        return 2
    cpu0, wall0 = time.process_time(), time.monotonic()
    log: list = []
    for v in values:
        for s in a.seeds:
            _run(sweep.Run(a.axis, v, a.policy, s, a.jobs, a.days, a.nodes), log)
    n = len(log)

    def frac(pred) -> float | None:
        return round(sum(1 for d in log if pred(d)) / n, 4) if n else None
    out = {"benchmark": "preemption_choices", "axis": a.axis, "values": values, "seeds": a.seeds,
           "policy_simulated": a.policy, "decisions": n,
           "mean_candidate_leases": round(statistics.mean(d["leases"] for d in log), 2) if n else None,
           "mean_sets": round(statistics.mean(d["sets"] for d in log), 2) if n else None,
           "enumeration_incomplete": frac(lambda d: not d["complete"]),
           "one_lease_set_exists": frac(lambda d: d["min_size"] == 1),
           "mov_set_size_1": frac(lambda d: d["sizes"]["mov"] == 1),
           "moml_eq_mlip": frac(lambda d: d["ids"]["moml"] == d["ids"]["mlip"]),
           "moml_eq_mov": frac(lambda d: d["ids"]["moml"] == d["ids"]["mov"]),
           "all_three_same": frac(lambda d: d["ids"]["mov"] == d["ids"]["mlip"] == d["ids"]["moml"]),
           "moml_more_leases_than_mlip": frac(lambda d: d["sizes"]["moml"] > d["sizes"]["mlip"]),
           "alpha_zero": frac(lambda d: d["alpha"] == 0),
           "mean_overhead_s": {p: round(statistics.mean(d["overheads"][p] for d in log), 2) for p in
                               ("mov", "mlip", "moml")} if n else None,
           "cpu_s": round(time.process_time() - cpu0, 2), "wall_s": round(time.monotonic() - wall0, 2)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
