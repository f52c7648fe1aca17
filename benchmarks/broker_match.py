"""Benchmark of the broker's matcher (issue 12): the whole pass -- claim, match, select, bulk
dispatch over HTTP, record Scheduled -- by 1 or 2 matcher workers.

    .venv/bin/python benchmarks/broker_match.py [--jobs 10000] [--classes 50]
        [--ces 10,100,1000,10000] [--workers 1,2] [--store sqlite|postgresql]
        [--repeat 2] [--per-job-jobs N] [--seed 1] [--out DIR] [--legacy] [--quick]

For each CE count: N GLUE 1.3 CEs are rendered as LDIF by the GIP renderer
(``infosys.gip.render_glue13``), parsed back (``infosys.ldif.parse_ldif`` +
``infosys.glue.glue13_ce_ads``, the path of a live CE's ``GET /glue``) and loaded into a real
ISM (StaticSource, one refresh). Every CE's contact string points at one loopback receiver,
``vwn_agents.bulk_receiver`` (SimulatedCEs: 10,000 CE agents cannot run on one machine), a
real HTTP server in its own process (its CPU is not the broker's) that accepts ``POST
/ce/<i>/jobs/bulk`` as a CE agent does. ``--jobs`` Waiting jobs (``--classes`` distinct
Requirements / Rank / owner classes, every job with its own Arguments, so no two JDL texts are
equal) are stored in a real JobStore (SQLite file, or ``--store postgresql``: a throw-away
PostgreSQL server from tests/pg_server.py), then ``--workers`` matcher workers
(``broker.matcher_worker.match_pass``, each in a thread with its own JobStore) run one pass:
claim ``--batch`` jobs at once, parse, choose a CE (task queues), one POST per CE per batch
(``--senders`` of them in flight at once, over kept-alive connections), record Scheduled (one keyed UPDATE per 500 jobs, each row with its CE). Checked: every matched job is Scheduled, the receiver
got each dispatch key exactly once (``duplicates`` 0).

CPU = ``time.process_time()`` of the broker process (all its threads; the receiver excluded);
the split (``claim``, ``parse`` of the JDL, ``choose`` (of which ``class_matching``, the
filtering of each class once), ``dispatch`` = building the bodies + HTTP, ``record``) is
thread CPU inside each step, timed per batch, per POST and per class, never per job (session
6: timing every job's choice cost ~10 µs/job itself); ``choose`` = the batch loop minus
parse, dispatch and record (class matching, the per-job loop and selection). The per-job matcher (``Matchmaker.match`` + ``select`` per job,
the matcher before task queues) runs the same pipeline on the first ``--per-job-jobs`` jobs
(1 worker, first repeat) and its choices must equal the task queues' (``same_choices``, exit 1
otherwise). Prints one JSON line per run; ``--out DIR`` also writes ``broker_match.csv`` and
``broker_match.png``. Exits 2 when an input or a service (the receiver, PostgreSQL) is missing.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests  # noqa: E402

from broker import matcher_worker  # noqa: E402
from broker.db import Base, JobStore  # noqa: E402
from broker.matchmaker import Matchmaker  # noqa: E402
from broker.service import Broker, BrokerSettings  # noqa: E402
from broker.taskqueues import match_fields  # noqa: E402
import jdl  # noqa: E402
from infosys.gip import CEState, render_glue13  # noqa: E402
from infosys.glue import glue13_ce_ads  # noqa: E402
from infosys.ism import ISM  # noqa: E402
from infosys.ldif import parse_ldif  # noqa: E402
from infosys.sources import StaticSource  # noqa: E402
from vgrid_runtime.clock import SimulatedClock  # noqa: E402
from vgrid_runtime.job_states import JobState  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VOS = ("dteam", "atlas", "cms", "vgrid")
SOFTWARE = ("VO-dteam-ROOT-5.34", "VO-atlas-release-17", "VO-cms-CMSSW_5_3_11", "MPI-START", "OPENMPI")


def ce_ads(n: int, seed: int, receiver: str = "http://127.0.0.1:9") -> list[dict]:
    """``n`` CE ads: GIP LDIF text parsed back as the ISM reads it; CE ``i``'s contact string
    is ``<receiver>/ce/<i>`` (one SimulatedCEs server stands for every CE agent)."""
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
            contact_string=f"{receiver}/ce/{i}")))
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


@contextlib.contextmanager
def receiver_process(tmp: Path):
    """The SimulatedCEs receiver in its own process; yields its URL (exit 2 if it cannot start)."""
    ready = tmp / "receiver.json"
    proc = subprocess.Popen([sys.executable, "-m", "vwn_agents.bulk_receiver", "--ready-file", str(ready)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"broker_match: the receiver did not start: {proc.stderr.read().decode()[-500:]}")
            time.sleep(0.05)
        yield json.loads(ready.read_text())["url"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def database(kind: str, tmp: Path):
    """Yield a function ``fresh(name) -> URL`` of an empty job database."""
    if kind == "sqlite":
        yield lambda name: f"sqlite:///{tmp / name}.sqlite"
        return
    from tests.pg_server import postgres_server, unavailable_reason
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"broker_match: no PostgreSQL: {reason}")
    with postgres_server() as url:
        def fresh(_name: str) -> str:
            store = JobStore(url)
            Base.metadata.drop_all(store.engine)
            store.close()
            return url
        yield fresh


class Timer:
    """Thread CPU seconds spent inside wrapped functions, summed over threads."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self._lock = threading.Lock()

    def wrap(self, name: str, fn):
        def timed(*a, **kw):
            t = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                with self._lock:
                    self.spent[name] = self.spent.get(name, 0.0) + time.thread_time() - t
        return timed


def run(path: str, ads: list[dict], jobs: int, classes: int, seed: int, workers: int, batch: int, url: str,
        receiver: str, prefix: str, tmp: Path, legacy: bool = False, warm: bool = False,
        senders: int = BrokerSettings.dispatch_senders) -> dict:
    """One pass over ``jobs`` Waiting jobs by ``workers`` matcher workers; its figures.
    The jobs carry the class id and input sandbox the submission path stores
    (``broker.taskqueues.match_fields``, its CPU reported as ``submit_class_us``: the part
    added to a submission, the parse excluded), unless ``legacy`` (rows of an older broker). ``warm``: then store as many jobs again (key
    prefix ``W``) and run a second pass on the same ISM snapshot, whose classes are matched
    already: ``warm_cpu_per_job_us`` and ``warm_split_us_per_job``."""
    clock = SimulatedClock(1_700_000_000.0)
    store = JobStore(url)

    def queue(key_prefix: str) -> float:
        specs, class_cpu = [], 0.0
        for i in range(jobs):
            text, vo = class_jdl(i % classes, i, classes >= jobs)
            spec = {"jdl": text, "filename": "job.jdl", "key": f"{key_prefix}{i:07d}", "state": JobState.WAITING,
                    "owner": {"dn": f"/DC=org/CN=user{i % classes % 7}", "vo": vo, "fqans": [f"/{vo}"]}}
            if not legacy:
                desc = jdl.parse_jdl(text, "job.jdl", local_files=False)
                t = time.process_time()
                spec.update(match_fields(desc, text))
                class_cpu += time.process_time() - t
            specs.append(spec)
        for k in range(0, jobs, 1000):
            store.create_many(specs[k:k + 1000], clock.now())
        return class_cpu

    class_cpu = queue(prefix)
    ism = ISM([StaticSource(ads)], refresh_s=3600, clock=clock)
    ism.refresh()
    mm = Matchmaker(ism.feedback, rng=random.Random(seed))
    broker = Broker(store, ism, mm, clock, tmp / f"{prefix}sandboxes",
                    BrokerSettings(base_url="https://broker.example.org:8440", match_expiry_s=3600,
                                   match_batch=batch, matcher_workers=workers, dispatch_senders=senders))
    matcher_worker.tune_gc(broker.settings)   # as the broker does when it starts its workers
    if path == "per_job":
        broker.queues = PerJob(mm)
    timer = Timer()   # per batch, per POST, per class: never per job (its own cost would be measured)
    real_batch = matcher_worker.match_batch
    matcher_worker.match_batch = timer.wrap("batch", real_batch)
    mm.filtered = timer.wrap("class_matching", mm.filtered)
    broker.dispatcher.dispatch = timer.wrap("dispatch", broker.dispatcher.dispatch)   # in the sender threads
    broker.dispatcher.dispatch_all = timer.wrap("dispatch_all", broker.dispatcher.dispatch_all)   # the batch's share
    broker.dispatcher.record_all = timer.wrap("record", broker.dispatcher.record_all)
    real_parse = matcher_worker.jdlmod.parse_jdl
    matcher_worker.jdlmod.parse_jdl = timer.wrap("parse", real_parse)   # the JDL parse per job
    stores = [JobStore(url) for _ in range(workers)]
    for s in stores:
        s.claim = timer.wrap("claim", s.claim)
    def one_pass() -> tuple[float, float]:
        threads = [threading.Thread(target=matcher_worker.match_pass, args=(broker, s)) for s in stores]
        wall, cpu = time.perf_counter(), time.process_time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - wall, time.process_time() - cpu

    def split(spent: dict[str, float]) -> dict[str, float]:
        # the choose step: what the batch loop spent outside parse, dispatch and record (it
        # includes class matching and the per-job loop: signature lookup, selection, grouping);
        # dispatch_all: the batch thread's own time in dispatch (all of it with one sender)
        sp = dict(spent, choose=spent.get("batch", 0.0) - sum(spent.get(k, 0.0) for k in ("parse", "dispatch_all", "record")))
        return {k: round(1e6 * sp.get(k, 0.0) / jobs, 1)
                for k in ("claim", "parse", "choose", "class_matching", "dispatch", "record")}

    before = requests.get(f"{receiver}/stats", timeout=30).json()
    wall, cpu = one_pass()
    after = requests.get(f"{receiver}/stats", timeout=30).json()
    first = dict(timer.spent)
    warm_figures = {}
    if warm:
        queue("W" + prefix)
        timer.spent.clear()
        w_wall, w_cpu = one_pass()
        w_after = requests.get(f"{receiver}/stats", timeout=30).json()
        warm_figures = {"warm_jobs_per_s": round(jobs / w_wall, 1), "warm_cpu_per_job_us": round(1e6 * w_cpu / jobs, 1),
                        "warm_split_us_per_job": split(timer.spent),
                        "warm_received": w_after["jobs"] - after["jobs"],
                        "warm_duplicates": w_after["duplicates"] - after["duplicates"]}
    broker.dispatcher.close()   # its sender threads
    matcher_worker.jdlmod.parse_jdl = real_parse
    matcher_worker.match_batch = real_batch
    scheduled = [j for j in store.list(states=[JobState.SCHEDULED], history=False) if j.key.startswith(prefix)]
    chosen = sorted((j.key, j.ce_id) for j in scheduled)
    for s in stores:
        s.close()
    store.close()
    return {"path": path, "workers": workers, "jobs": jobs, "scheduled": len(scheduled),
            "rows": "legacy (no class stored)" if legacy else "class stored at submission",
            "submit_class_us": round(1e6 * class_cpu / jobs, 1),
            "jobs_per_s": round(jobs / wall, 1), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "cpu_per_job_us": round(1e6 * cpu / jobs, 1),
            "split_us_per_job": split(first),
            "posts": after["posts"] - before["posts"], "received": after["jobs"] - before["jobs"],
            "duplicates": after["duplicates"] - before["duplicates"],
            "classes_matched": getattr(broker.queues, "matched", None), "_chosen": chosen,
            "evaluations": mm.evaluations,   # Requirements + Rank run by the class filtering (both passes)
            "peak_rss_mb": peak_rss_mb(), **warm_figures}


def peak_rss_mb() -> float:
    """VmHWM of this process (MB): the broker side's peak, with the matcher's class state,
    its memo of every ad per class and the generated LDIF of the CEs."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def plot(rows: list[dict], out: Path) -> None:
    """``broker_match.csv`` and (matplotlib) ``broker_match.png``: jobs/s and CPU/job vs CEs."""
    fields = ["ces", "store", "workers", "repeat", "jobs", "jobs_per_s", "cpu_per_job_us", "posts", "duplicates"]
    with (out / "broker_match.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for key in sorted({(r["store"], r["workers"]) for r in rows}):
        pts = sorted((r["ces"], r["jobs_per_s"], r["cpu_per_job_us"]) for r in rows if (r["store"], r["workers"]) == key)
        label = f"{key[0]}, {key[1]} worker(s)"
        a1.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
        a2.plot([p[0] for p in pts], [p[2] for p in pts], "o-", label=label)
    for ax, title in ((a1, "jobs/s (wall), higher is better"), (a2, "broker CPU per job (µs)")):
        ax.set_xscale("log")
        ax.set_xlabel("CEs")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    a1.axhline(5000, color="grey", ls="--", lw=1, label="target 5,000/s")
    a1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "broker_match.png", dpi=100)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--classes", type=int, default=50, help="distinct classes (>= jobs: one per job)")
    ap.add_argument("--ces", default="10,100,1000,10000", help="comma-separated CE counts")
    ap.add_argument("--workers", default="1", help="comma-separated matcher worker counts")
    ap.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each configuration")
    ap.add_argument("--per-job-jobs", type=int, default=0,
                    help="jobs of the per-job matcher's pass (choices compared; 0: skip it)")
    ap.add_argument("--batch", type=int, default=None,
                    help="match_batch: jobs a worker claims at once (default jobs / workers)")
    ap.add_argument("--senders", type=int, default=BrokerSettings.dispatch_senders,
                    help="dispatch_senders: bulk POSTs in flight at once (1: one after another)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="directory for broker_match.csv and .png")
    ap.add_argument("--legacy", action="store_true",
                    help="store the jobs without their class id (rows of an older broker: parsed once, written back)")
    ap.add_argument("--warm", action="store_true",
                    help="after each pass, as many jobs again on the same ISM snapshot (classes matched): warm_* figures")
    ap.add_argument("--quick", action="store_true",
                    help="the lead's re-run in < 3 min: --ces 100,1000 --workers 1,2 --repeat 1 --per-job-jobs 100")
    a = ap.parse_args(argv)
    if a.quick:
        a.ces, a.workers, a.repeat, a.per_job_jobs = "100,1000", "1,2", 1, 100
    rows, status = [], 0
    with tempfile.TemporaryDirectory(prefix="vgrid-broker-match-") as tmpdir:
        tmp = Path(tmpdir)
        with receiver_process(tmp) as receiver, database(a.store, tmp) as fresh:
            for n in [int(x) for x in a.ces.split(",") if x]:
                ads = ce_ads(n, a.seed, receiver)
                for workers in [int(x) for x in a.workers.split(",") if x]:
                    batch = a.batch or max(1, a.jobs // workers)
                    for rep in range(a.repeat):
                        prefix = f"c{n}w{workers}r{rep}-"
                        res = run("classes", ads, a.jobs, a.classes, a.seed, workers, batch, fresh(prefix), receiver, prefix, tmp,
                                  a.legacy, a.warm, a.senders)
                        out = {"benchmark": "broker_match", "ces": n, "jobs": a.jobs,
                               "classes": min(a.classes, a.jobs), "store": a.store, "workers": workers,
                               "batch": batch, "repeat": rep + 1, "dispatch": "POST /jobs/bulk to one loopback receiver (HTTP)",
                               "senders": a.senders,
                               "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
                               **{k: v for k, v in res.items() if not k.startswith("_") and k != "path"}}
                        ok = res["received"] == res["scheduled"] and res["duplicates"] == 0 and \
                            res.get("warm_duplicates", 0) == 0
                        if a.per_job_jobs > 0 and workers == 1 and rep == 0:
                            pj = run("per_job", ads, a.per_job_jobs, a.classes, a.seed, 1, batch, fresh(prefix + "pj"),
                                     receiver, prefix + "pj", tmp)
                            out["per_job_path"] = {k: v for k, v in pj.items() if not k.startswith("_")}
                            mine = {k[len(prefix):]: ce for k, ce in res["_chosen"]}
                            theirs = {k[len(prefix) + 2:]: ce for k, ce in pj["_chosen"]}
                            out["same_choices"] = all(mine.get(k) == ce for k, ce in theirs.items()) and \
                                len(theirs) == sum(1 for k in mine if int(k) < a.per_job_jobs)
                            ok = ok and out["same_choices"]
                        out["ok"] = ok
                        rows.append(out)
                        print(json.dumps(out), flush=True)
                        if not ok:
                            print("broker_match: a check failed (see the JSON line)", file=sys.stderr)
                            status = 1
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        plot(rows, Path(a.out))
    return status


if __name__ == "__main__":
    sys.exit(main())
