"""Time a sweep spec (default: HPDC'08's 438 runs) on Dask; print one JSON line.

    .venv/bin/python benchmarks/hpdc08_sweep.py [--spec examples/sweeps/hpdc08.toml] [--store FILE]
                                               [--workers N] [--scheduler tcp://HOST:8786]

Runs what ``--store`` lacks (a fresh temporary store by default: everything), then prints
``{"spec", "runs", "computed", "failed", "wall_s", "cpu_s" (sum over the runs computed now),
"cpu_s_per_configuration", "load_1min_before", "load_1min_after", "workers"}``. Wall time
includes waiting for a core on a shared machine; CPU is each run's own ``process_time``.
Exit 1 if a run failed, 2 if the spec or a trace is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

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
    a = ap.parse_args()
    try:
        spec = load_spec(a.spec)
        check_inputs(spec.runs)
    except (SpecError, TraceError, OSError) as exc:
        print(f"hpdc08_sweep: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        store = SweepStore(a.store or Path(tmp) / "bench.sqlite")
        before = {r["key"] for r in store.rows(status="done")}
        load0 = os.getloadavg()[0]
        s = run_sweep(spec.runs, store, scheduler=a.scheduler, workers=a.workers)
        load1 = os.getloadavg()[0]
        new = [r for r in store.rows(status="done") if r["key"] not in before]
        per_conf: dict = {}
        for r in new:
            per_conf[r["configuration"]] = round(per_conf.get(r["configuration"], 0.0) + r["cpu_s"], 2)
        print(json.dumps({"spec": a.spec, "runs": s["planned"], "computed": s["computed_now"],
                          "failed": len(s["failed"]), "wall_s": s["wall_s"],
                          "cpu_s": round(sum(r["cpu_s"] for r in new), 2), "cpu_s_per_configuration": per_conf,
                          "load_1min_before": load0, "load_1min_after": load1, "workers": s["workers"]}))
        store.close()
    return 1 if s["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
