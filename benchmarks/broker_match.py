"""Benchmark of the broker's matcher (issue 12): task queues beside the per-job matcher.

    .venv/bin/python benchmarks/broker_match.py [--jobs 10000] [--classes 50]
        [--ces 10,100,1000] [--per-job-jobs N] [--seed 1]

For each CE count: N GLUE 1.3 CEs are rendered as LDIF by the GIP renderer
(``infosys.gip.render_glue13``), parsed back (``infosys.ldif.parse_ldif`` +
``infosys.glue.glue13_ce_ads``, the path of a live CE's ``GET /glue``) and loaded into a real
ISM (StaticSource, one refresh). ``--jobs`` Waiting jobs (``--classes`` distinct Requirements /
Rank / owner classes, every job with its own Arguments, so no two JDL texts are equal) are
stored in a real JobStore (SQLite, a temporary file), then one pass of the real
``Broker.match_pending`` claims each job (Waiting -> Ready), parses its JDL, chooses a CE and
records it as Scheduled. Dispatch is stubbed by an in-process function that records the chosen
CE and makes the Scheduled transition (the bulk dispatch to CE agents is not part of this
slice: no HTTP). The same pass runs twice in the same process:

- ``classes``: the broker as it is (``broker.taskqueues.TaskQueues``: a class is matched once
  per ISM snapshot, per job only the selection runs);
- ``per_job``: ``Matchmaker.match`` + ``Matchmaker.select`` per job (the matcher before task
  queues), on the first ``--per-job-jobs`` jobs only (default: as many as take about the same
  time), since it costs O(CEs) per job.

Both use the same seed, so the chosen CEs must be equal (``same_choices``). Prints one JSON line
per CE count: jobs/s (wall) and CPU seconds of the pass, per-job CPU cost of the whole pass and
of the choice alone (``choose_us``; for task queues split into ``class_matching_cpu_s``, the
filtering of each class once, and ``selection_us``, the rest per job), for both paths. Exits 2 when an input is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jdl as jdlmod  # noqa: E402
from broker.db import JobStore  # noqa: E402
from broker.matchmaker import Matchmaker  # noqa: E402
from broker.service import Broker, BrokerSettings  # noqa: E402
from infosys.gip import CEState, render_glue13  # noqa: E402
from infosys.glue import glue13_ce_ads  # noqa: E402
from infosys.ism import ISM  # noqa: E402
from infosys.ldif import parse_ldif  # noqa: E402
from infosys.sources import StaticSource  # noqa: E402
from vgrid_runtime.clock import SimulatedClock  # noqa: E402
from vgrid_runtime.job_states import JobState  # noqa: E402

VOS = ("dteam", "atlas", "cms", "vgrid")
SOFTWARE = ("VO-dteam-ROOT-5.34", "VO-atlas-release-17", "VO-cms-CMSSW_5_3_11", "MPI-START", "OPENMPI")


def ce_ads(n: int, seed: int) -> list[dict]:
    """``n`` CE ads: GIP LDIF text parsed back as the ISM reads it."""
    rnd = random.Random(seed)
    ldif = []
    for i in range(n):
        total = rnd.choice([8, 16, 64, 128, 512])
        running = rnd.randint(0, total)
        ldif.append(render_glue13(CEState(
            ce_id=f"ce{i:05d}.site{i % 97}.example.org:8443/vgrid-vwn-q{i % 4}",
            host=f"ce{i:05d}.site{i % 97}.example.org", site=f"SITE-{i % 97}", queue=f"q{i % 4}",
            status=rnd.choices(["Production", "Draining"], [95, 5])[0], total_cpus=total,
            free_cpus=total - running, running=running, waiting=rnd.randint(0, 50),
            ert_s=rnd.randint(0, 3600), max_wallclock_s=rnd.choice([3600, 43200, 172800]),
            si00=rnd.randint(1000, 3000), ram_mb=rnd.choice([1024, 2048, 4096, 16384]),
            vos=rnd.sample(VOS, rnd.randint(1, 4)), software=rnd.sample(SOFTWARE, rnd.randint(1, 4)),
            contact_string=f"http://127.0.0.1:9/ce{i}")))
    ads, rejected = glue13_ce_ads(parse_ldif("\n".join(ldif), "gip"))
    if rejected or len(ads) != n:
        raise SystemExit(f"broker_match: GIP LDIF gave {len(ads)} ads for {n} CEs, rejected {rejected[:3]}")
    return ads


def class_jdl(c: int, i: int, distinct: bool) -> tuple[str, str]:
    """JDL text of job ``i`` in class ``c`` and its owner VO. ``distinct``: every job its own
    class (a unique constant in its Requirements)."""
    vo = VOS[c % 3]
    ram = (1024, 2048, 4096)[c % 3]
    policy = ("" if c % 5 else "FeteRank = false;\n") if c % 7 else "FuzzyRank = true;\n"
    extra = f" && other.GlueCEStateWaitingJobs < {1000 + i}" if distinct else ""
    return (f"[\n Executable = \"/bin/sh\";\n Arguments = \"-c 'echo job {i}'\";\n"
            f" VirtualOrganisation = \"{vo}\";\n"
            f" Requirements = other.GlueCEStateStatus == \"Production\"\n"
            f"   && other.GlueHostMainMemoryRAMSize >= {ram}\n"
            f"   && other.GlueCEInfoTotalCPUs >= {8 * (1 + c % 4)}\n"
            f"   && other.GlueCEPolicyMaxWallClockTime >= {60 * (c % 10)}{extra};\n"
            f" Rank = other.GlueCEStateFreeCPUs - {c % 11} * other.GlueCEStateWaitingJobs;\n"
            f" {policy}]\n", vo)


class PerJob:
    """The matcher before task queues: ``match`` + ``select`` for every job."""

    def __init__(self, matchmaker: Matchmaker) -> None:
        self.matchmaker = matchmaker

    def choose(self, desc, ads, blacklist=frozenset(), *, now, vo=None, fqans=(), exclude=frozenset()):
        mm = self.matchmaker
        return mm.select(mm.match(desc, ads, blacklist, now=now, vo=vo, fqans=tuple(fqans), exclude=exclude))


def run(path: str, ads: list[dict], jobs: int, classes: int, seed: int, tmp: Path) -> dict:
    """One matcher pass over ``jobs`` Waiting jobs with the ``path`` matcher; its figures."""
    clock = SimulatedClock(1_700_000_000.0)
    db = tmp / f"{path}.sqlite"
    store = JobStore(f"sqlite:///{db}")
    specs = []
    for i in range(jobs):
        text, vo = class_jdl(i % classes, i, classes >= jobs)
        specs.append({"jdl": text, "filename": "job.jdl", "key": f"bm{i:08d}", "state": JobState.WAITING,
                      "owner": {"dn": f"/DC=org/CN=user{i % classes % 7}", "vo": vo, "fqans": [f"/{vo}"]}})
    for k in range(0, jobs, 1000):
        store.create_many(specs[k:k + 1000], clock.now())
    ism = ISM([StaticSource(ads)], refresh_s=3600, clock=clock)
    ism.refresh()
    mm = Matchmaker(ism.feedback, rng=random.Random(seed))
    broker = Broker(store, ism, mm, clock, tmp / f"{path}-sandboxes", BrokerSettings())
    if path == "per_job":
        broker.queues = PerJob(mm)
    chosen: list[tuple[str, str]] = []   # (job key, CE id) in dispatch order
    spent = [0.0]
    real_choose = broker.queues.choose

    def timed_choose(*a, **kw):
        t = time.process_time()
        try:
            return real_choose(*a, **kw)
        finally:
            spent[0] += time.process_time() - t

    def dispatch(job, desc, ce_id, url):   # the stub: record the choice, then Scheduled
        chosen.append((job.key, ce_id))
        broker.move(job, JobState.SCHEDULED, clock.now(), ce_id=ce_id, ce_url=url,
                    dispatch_attempts=job.dispatch_attempts + 1, last_heard=clock.now())
        return True

    filtering = [0.0]
    real_filtered = mm.filtered

    def timed_filtered(*a, **kw):   # the class matching inside choose (task queues only)
        t = time.process_time()
        try:
            return real_filtered(*a, **kw)
        finally:
            filtering[0] += time.process_time() - t

    mm.filtered = timed_filtered
    broker.queues.choose = timed_choose
    broker._dispatch = dispatch
    wall, cpu = time.perf_counter(), time.process_time()
    broker.match_pending()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    scheduled = len(store.list(states=[JobState.SCHEDULED], history=False))
    store.close()
    return {"jobs": jobs, "scheduled": scheduled, "jobs_per_s": round(jobs / wall, 1),
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "cpu_per_job_us": round(1e6 * cpu / jobs, 1),
            "choose_cpu_s": round(spent[0], 3), "choose_us": round(1e6 * spent[0] / jobs, 1),
            "choose_jobs_per_cpu_s": round(jobs / spent[0], 1) if spent[0] else None,
            "class_matching_cpu_s": round(filtering[0], 3),
            "selection_us": round(1e6 * (spent[0] - filtering[0]) / jobs, 1),
            "classes_matched": getattr(broker.queues, "matched", None), "_chosen": chosen}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--classes", type=int, default=50, help="distinct classes (>= jobs: one per job)")
    ap.add_argument("--ces", default="10,100,1000", help="comma-separated CE counts")
    ap.add_argument("--per-job-jobs", type=int, default=None,
                    help="jobs of the per-job path (default min(jobs, 2,000,000 / CEs); 0: skip it)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    for n in [int(x) for x in a.ces.split(",") if x]:
        ads = ce_ads(n, a.seed)
        with tempfile.TemporaryDirectory(prefix="vgrid-broker-match-") as tmp:
            out = {"benchmark": "broker_match", "ces": n, "jobs": a.jobs, "classes": min(a.classes, a.jobs),
                   "store": "sqlite", "dispatch": "in-process stub (no HTTP)", "cpus": os.cpu_count()}
            classes = run("classes", ads, a.jobs, a.classes, a.seed, Path(tmp))
            per = a.per_job_jobs if a.per_job_jobs is not None else min(a.jobs, max(100, 2_000_000 // n))
            out["classes_path"] = {k: v for k, v in classes.items() if not k.startswith("_")}
            if per > 0:
                per_job = run("per_job", ads, per, a.classes, a.seed, Path(tmp))
                out["per_job_path"] = {k: v for k, v in per_job.items() if not k.startswith("_")}
                first = {f"bm{i:08d}" for i in range(per)}   # the jobs both paths saw, in order
                out["same_choices"] = per_job["_chosen"] == [c for c in classes["_chosen"] if c[0] in first]
                out["choose_speedup"] = round(per_job["choose_us"] / max(classes["choose_us"], 1e-9), 1)
            print(json.dumps(out), flush=True)
            if per > 0 and not out["same_choices"]:
                print("broker_match: the two paths chose different CEs", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
