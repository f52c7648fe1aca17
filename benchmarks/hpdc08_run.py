"""One run of a sweep spec, timed, with its per-lease digest; optionally beside a reference checkout.

    .venv/bin/python benchmarks/hpdc08_run.py CONFIGURATION INJECT [--spec examples/sweeps/hpdc08.toml]
                                              [--reference DIR]

``INJECT`` is the injected AR set's name as in the spec (``none`` for no ARs). Prints one JSON
line: ``{"configuration", "inject", "cpu_s" (the run's own process_time), "wall_s",
"all_best_effort_s", "ar_accepted", "digest" (SHA-256 prefix of every lease's id, state, start,
end, nodes, suspensions, transfers and MB, as tests/test_hpdc08_fast_paths.py computes it),
"code"}``. With ``--reference DIR`` (e.g. a ``git worktree`` of an older commit) the same run
is made at the same time in a second process that imports vgrid from DIR; the line then has
``"reference": {...}`` and ``"same_schedule"`` (equal digests). Exit 1 when the schedules
differ, 2 when the spec, a trace or the run is missing. Issue 16, session 9.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if not os.environ.get("PYTHONPATH"):    # else: the checkout named there (a reference)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vwn_agents.leasing.sweepspec import SpecError, check_inputs, load_spec  # noqa: E402
from vwn_agents.leasing.traces import TraceError  # noqa: E402

try:
    from vwn_agents.leasing.sweepspec import simulate_run  # noqa: E402
except ImportError:     # a reference checkout from before session 9: what run_simulation did there
    def simulate_run(run):
        from vwn_agents.leasing import LeaseConfig, simulate, uniform_site
        from vwn_agents.leasing.tracefile import assign_images
        from vwn_agents.leasing.traces import read_with_injection
        wl, site = dict(run.workload), dict(run.site)
        leases = read_with_injection(run.trace, run.inject, cpus_per_node=wl.get("swf-cpus-per-node", 1),
                                     memory_mb=site["mem-per-node"])
        if run.draws_images:
            leases = assign_images(leases, wl["images"], wl.get("image-size", 4096.0),
                                   wl.get("image-distribution", "uniform"), run.seed)
        cfg = LeaseConfig(dict(run.options), f"<configuration {run.configuration}>")
        return leases, simulate(leases, uniform_site(site["nodes"], site["cpus-per-node"], site["mem-per-node"]), cfg)


def digest(leases) -> str:
    rows = [(l.id, l.state.name, round(l.start_s or -1, 3), round(l.end_s or -1, 3), list(l.mapping), l.suspensions,
             l.transfers, round(l.mb_transferred, 3)) for l in sorted(leases, key=lambda l: l.id)]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:32]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configuration")
    ap.add_argument("inject")
    ap.add_argument("--spec", default=str(Path(__file__).resolve().parents[1] / "examples/sweeps/hpdc08.toml"))
    ap.add_argument("--reference", default=None, help="a vgrid checkout to run the same beside this one")
    a = ap.parse_args()
    try:
        runs = [r for r in load_spec(a.spec).runs
                if r.configuration == a.configuration and r.labels.get("inject", "") == a.inject]
        if not runs:
            raise SpecError(f"{a.spec}: no run {a.configuration} / {a.inject}")
        check_inputs(runs[:1])
    except (SpecError, TraceError, OSError) as exc:
        print(f"hpdc08_run: {exc}", file=sys.stderr)
        return 2
    ref = None
    if a.reference:
        env = dict(os.environ, PYTHONPATH=a.reference)
        ref = subprocess.Popen([sys.executable, __file__, a.configuration, a.inject, "--spec", a.spec],
                               env=env, stdout=subprocess.PIPE, text=True)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    _, result = simulate_run(runs[0])
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    import vwn_agents
    m = result.report()["metrics"]
    out = {"configuration": a.configuration, "inject": a.inject, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
           "all_best_effort_s": round(m["all_best_effort_s"], 3), "ar_accepted": m["ar_accepted"],
           "digest": digest(result.scheduler.leases.values()), "code": str(Path(vwn_agents.__file__).parents[1])}
    if ref is not None:
        text, _ = ref.communicate()
        if ref.returncode != 0:
            print(f"hpdc08_run: the reference run failed (exit {ref.returncode})", file=sys.stderr)
            return 2
        out["reference"] = json.loads(text)
        out["same_schedule"] = out["reference"]["digest"] == out["digest"]
    print(json.dumps(out))
    return 1 if ref is not None and not out["same_schedule"] else 0


if __name__ == "__main__":
    sys.exit(main())
