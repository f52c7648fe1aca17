"""The task queues' choice alone (issue 12, session 7): class matching and selection per job,
without the store, the parse or dispatch.

    .venv/bin/python benchmarks/taskqueue_choose.py [--ces 100,1000,10000] [--jobs 10000]
        [--classes 50] [--seed 1]

For each CE count: the CE ads of ``benchmarks/broker_match.py`` (GIP LDIF parsed back, a real
ISM), one parsed job per class of its 50 classes (same JDLs, owners of three VOs), then
``--jobs`` choices (``TaskQueues.choose`` + the feedback increment the broker makes, classes in
turn) twice on the same snapshot: **cold** (each class filtered on its first job) and **warm**
(classes matched already). Prints one JSON line per CE count: CPU (``time.process_time()``)
and wall µs per job of each pass, the class-filter evaluations (Requirements + Rank), the SFETE
orders shared by the classes, and a digest of the chosen CEs (equal digests = equal choices,
e.g. before/after a change). Exits 2 when the ads cannot be built.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import broker_match as bm  # noqa: E402
import jdl  # noqa: E402
from broker.matchmaker import Matchmaker  # noqa: E402
from broker.taskqueues import TaskQueues  # noqa: E402
from infosys.ism import ISM  # noqa: E402
from infosys.sources import StaticSource  # noqa: E402
from vgrid_runtime.clock import SimulatedClock  # noqa: E402


def run(n: int, jobs: int, classes: int, seed: int) -> dict:
    clock = SimulatedClock(1_700_000_000.0)
    ism = ISM([StaticSource(bm.ce_ads(n, seed))], refresh_s=3600, clock=clock)
    ism.refresh()
    ads = ism.candidates(clock.now())
    if len(ads) != n:
        raise SystemExit(2)
    mm = Matchmaker(ism.feedback, rng=random.Random(seed))
    queues = TaskQueues(mm)
    reps = []
    for c in range(classes):
        text, vo = bm.class_jdl(c, c, False)
        reps.append((jdl.parse_jdl(text, "job.jdl", local_files=False), vo))

    def one_pass() -> tuple[float, float, list[str]]:
        chosen = []
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(jobs):
            desc, vo = reps[i % classes]
            cand = queues.choose(desc, ads, now=clock.now(), vo=vo, fqans=(f"/{vo}",))
            if cand is not None:
                mm.feedback.increment(cand.ce_id)
                chosen.append(cand.ce_id)
        return time.perf_counter() - wall, time.process_time() - cpu, chosen

    cold_wall, cold_cpu, first = one_pass()
    warm_wall, warm_cpu, second = one_pass()
    return {"benchmark": "taskqueue_choose", "ces": n, "jobs": jobs, "classes": classes, "seed": seed,
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "cold_cpu_us_per_job": round(1e6 * cold_cpu / jobs, 1),
            "cold_wall_us_per_job": round(1e6 * cold_wall / jobs, 1),
            "warm_cpu_us_per_job": round(1e6 * warm_cpu / jobs, 1),
            "warm_wall_us_per_job": round(1e6 * warm_wall / jobs, 1),
            "matched": len(second), "evaluations": getattr(mm, "evaluations", None),
            "sfete_orders": len(getattr(queues, "_orders", {})),
            "choices_digest": hashlib.sha256("\n".join(first + second).encode()).hexdigest()[:16]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ces", default="100,1000,10000", help="comma-separated CE counts")
    ap.add_argument("--jobs", type=int, default=10_000, help="choices per pass")
    ap.add_argument("--classes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        counts = [int(x) for x in args.ces.split(",") if x]
    except ValueError:
        print(f"taskqueue_choose: --ces must be comma-separated integers, got {args.ces!r}", file=sys.stderr)
        return 2
    for n in counts:
        print(json.dumps(run(n, args.jobs, args.classes, args.seed)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
