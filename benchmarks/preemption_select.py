"""Benchmark: seed 002 preemption policy selection time vs the number of running leases.

    .venv/bin/python benchmarks/preemption_select.py [--leases 100 1000 10000] [--need 32]
        [--repeat 5] [--out DIR] [--json]

For each size N a full site runs N external leases (1-4 VMs of one core each, 64-2,048 MB,
cancellable / suspendable / migratable / non-preemptable drawn uniformly; seed 2026; as many
8-core nodes as the VMs need), built by the lease engine itself (not timed). A local request
for ``--need`` VMs then arrives; the timed step is the whole decision of
``localpreemption.preempt_for_local`` for each policy: collect the candidates from the slot
table, enumerate the candidate sets (eq. (1)-(2), bounded by ``max-candidate-sets`` /
``max-candidate-leases``), score them, preempt the best set and map the request -- inside a
slot-table transaction that is rolled back after each repetition. Reported: the median wall
and CPU (time.process_time) milliseconds, the number of candidate leases and sets.

Writes ``preemption_select.csv`` and ``preemption_select.png`` into ``--out`` (default
``out/benchmarks``, git-ignored). A rich progress bar is shown on a TTY.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from vgrid_runtime.clock import SimulatedClock  # noqa: E402
from vwn_agents.leasing import LeaseConfig, LeaseScheduler, LeaseState, LeaseType, SimulatedNodes  # noqa: E402
from vwn_agents.leasing.candidates import enumerate_candidate_sets  # noqa: E402
from vwn_agents.leasing.localpreemption import collect_candidates, free_vms, preempt_for_local  # noqa: E402
from vwn_agents.leasing.model import Lease, resource_vector  # noqa: E402
from vwn_agents.leasing.overhead import OverheadModel  # noqa: E402
from vwn_agents.leasing.requesttypes import RequestType  # noqa: E402
from vwn_agents.leasing.traces import uniform_site  # noqa: E402

POLICIES = ("mov", "mlip", "moml")


def full_site(n_leases: int, policy: str, seed: int = 2026) -> LeaseScheduler:
    """A scheduler at t = 0 whose nodes are filled by ``n_leases`` running external leases."""
    rnd = random.Random(seed)
    leases = []
    for i in range(n_leases):
        vms = rnd.randint(1, 4)
        leases.append(Lease(i + 1, LeaseType.BEST_EFFORT, 0.0, 3600.0 * rnd.randint(1, 8), vms,
                            resource_vector(cpu=100, memory=rnd.choice([64, 128, 256, 512, 1024, 2048])),
                            request_type=rnd.choice(list(RequestType))))
    total = sum(l.n_vms for l in leases)
    cfg = LeaseConfig({"policy-preemption": policy, "backfilling": "aggressive"})
    nodes = uniform_site((total + 7) // 8, 8, 16384)
    clock = SimulatedClock(0.0)
    sched = LeaseScheduler(nodes, cfg, clock, SimulatedNodes(nodes))
    for lease in leases:
        sched.submit(lease)
    sched.process(0.0)
    clock.advance_to(600.0)
    sched.process(600.0)
    return sched


def measure(sched: LeaseScheduler, need: int, repeat: int) -> dict:
    """Median wall / CPU ms of one decision for a local request of ``need`` VMs at t = 600 s."""
    req = Lease(10**9, LeaseType.ADVANCE_RESERVATION, 600.0, 1800.0, need, resource_vector(cpu=100, memory=512),
                requested_start_s=600.0, local=True)
    walls, cpus, mapped = [], [], None
    for _ in range(repeat):
        tx = sched.st.begin()
        w0, c0 = time.perf_counter(), time.process_time()
        mapped = preempt_for_local(sched, req, 600.0, 2400.0, 600.0, None, [])
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
        sched.st.rollback(tx)
        sched.preemption_log.clear()
    model = OverheadModel.from_config(sched.cfg)
    cands = collect_candidates(sched, 600.0, 2400.0, model)
    sets, complete = enumerate_candidate_sets(cands, need - free_vms(sched, req.per_vm, 600.0, 2400.0),
                                              sched.cfg.max_candidate_sets, sched.cfg.max_candidate_leases)
    return {"wall_ms": 1000 * statistics.median(walls), "cpu_ms": 1000 * statistics.median(cpus),
            "candidates": len(cands), "sets": len(sets), "complete": complete, "served": mapped is not None,
            "running": sum(1 for l in sched.leases.values() if l.state is LeaseState.ACTIVE)}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for policy in POLICIES:
        pts = [(r["leases"], r["wall_ms"]) for r in rows if r["policy"] == policy]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=policy.upper())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("running external leases")
    ax.set_ylabel("selection time (ms, median wall)")
    ax.set_title("seed 002 policy selection for one local request")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leases", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--need", type=int, default=32, help="VMs of the local request")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "out" / "benchmarks"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    work = [(n, p) for n in args.leases for p in POLICIES]
    rows = []
    progress = None
    if sys.stderr.isatty() and not args.json:
        from rich.progress import Progress
        progress = Progress(transient=True)
        progress.start()
        task = progress.add_task("preemption selection", total=len(work))
    try:
        for n, policy in work:
            rows.append({"leases": n, "policy": policy, **measure(full_site(n, policy), args.need, args.repeat)})
            if progress is not None:
                progress.advance(task)
    finally:
        if progress is not None:
            progress.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "preemption_select.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot(rows, out / "preemption_select.png")
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'leases':>7} {'policy':>6} {'wall ms':>9} {'cpu ms':>9} {'cands':>6} {'sets':>6} complete served")
        for r in rows:
            print(f"{r['leases']:>7} {r['policy']:>6} {r['wall_ms']:>9.1f} {r['cpu_ms']:>9.1f} {r['candidates']:>6} "
                  f"{r['sets']:>6} {str(r['complete']):>8} {r['served']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
