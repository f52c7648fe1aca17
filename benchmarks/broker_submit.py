"""Broker submission and status reads under many clients, over mutual TLS (issue 12, "Bulk
paths", "Reads that scale"; docs/benchmarks.md, "broker submission").

Starts a real ``vgrid serve broker`` process on loopback over mutual TLS (a demo CA, the
broker's host certificate, a VOMS proxy of the demo user, made at run time) and measures, each
``--repeat`` times:

- ``submit``: single-job submissions (``POST /jobs``, ``[ Executable = "/bin/true"; ]``) from 1, 8
  and 32 clients (``--clients``), ``--jobs`` jobs per level; every client is a thread with its
  own kept-alive TLS session, the threads spread over ``--procs`` client processes;
- ``collection``: one gLite collection of ``--nodes`` nodes submitted in one request (stored in
  one transaction: one parent and one id per node);
- ``read``: ``--readers`` clients reading job status (``GET /jobs/<key>`` of random submitted jobs,
  ``--reads`` each) through ``requests`` sessions (15-18 ms of client CPU per read at 100
  clients before session 7, when cheroot closed kept-alive connections beyond 10 idle ones and
  each read paid a handshake; 0.8 ms after; ``benchmarks/status_reads.py`` measures reads with
  lean clients, front ends and an open-loop schedule);
- ``rss``: a second broker over a database holding ``--rss-jobs`` ended jobs (3 history rows
  each, written directly into the SQLite file before it starts) and an ISM of ``--rss-ces`` CEs
  (GLUE 1.3 LDIF rendered by the GIP, served by a loopback HTTP source the broker's ISM reads);
  after the ISM holds every CE and a few pages and jobs were read, the broker's VmRSS and VmHWM
  (peak) from /proc.

The submit/collection/read broker runs with ``matcher = false`` (a submission front end; the
matcher is measured by ``benchmarks/broker_match.py``), so its CPU is the submission path's
alone; the RSS broker runs the matcher. Broker CPU (user+system from /proc/<pid>/stat) is
reported beside every wall rate. Targets (issue 12): >= 500 jobs/s at 8 clients with p99 <= 100 ms;
a 1,000-node collection <= 1 s; >= 1,000 reads/s with p99 <= 100 ms at 100 clients; RSS <= 500 MB.

Rates and CPU are counted from the moment every client holds its TLS session (a barrier
across the client processes) to the last answer; latencies are of successful requests; a
request that failed (HTTP error, connection closed) is counted in ``errors``. Prints one JSON
line ``{"benchmark": "broker_submit", "runs": [{"submit": [{"clients", "requests", "errors",
"per_s", "p50_ms", "p99_ms", "wall_s", "broker_cpu_ms_per_request", "client_cpu_ms_per_request"}],
"collection": {"nodes", "wall_s", "broker_cpu_s"}, "read": {...}}], "rss": {"jobs", "ces",
"rss_mb", "hwm_mb"}}``. Exit 1 when a broker does not start, every request of a kind failed,
the collection is refused or the ISM never holds the CEs.

    .venv/bin/python benchmarks/broker_submit.py [--jobs 2000] [--clients 1,8,32] [--nodes 1000]
        [--readers 100] [--reads 20] [--rss-jobs 100000] [--rss-ces 10000] [--repeat 2]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vgrid_cli.demo_pki import make_demo_pki  # noqa: E402
from vgrid_cli.services import ServiceError, ServiceGroup  # noqa: E402
from vgrid_runtime.clock import WallClock  # noqa: E402

JDL = '[ Executable = "/bin/true"; ]'
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User+system CPU seconds of process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def mem_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid`` in MB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = round(int(line.split()[1]) / 1024, 1)
    return {"rss_mb": out["VmRSS"], "hwm_mb": out["VmHWM"]}


def pct(sorted_ms: list[float], q: float) -> float:
    return round(sorted_ms[min(len(sorted_ms) - 1, int(q * (len(sorted_ms) - 1) + 0.5))], 1)


# -- client processes ---------------------------------------------------------------------------
def _client_proc(url: str, creds: dict, kind: str, threads: int, per: int, keys: list[str],
                 seed: int, start, out) -> None:
    """One client process: ``threads`` threads, each with its own kept-alive TLS session, doing
    ``per`` requests of ``kind`` once every client of every process has shaken hands (``start``,
    a multiprocessing Barrier the parent also waits at); puts on ``out`` ((ms, status, key) per
    request, the CPU seconds after the barrier, the monotonic time the last request ended). A
    request that raised has status 0 and the error as its key."""
    from vgrid_runtime.httpclient import new_session
    from vgrid_runtime.tls import TLSFiles
    tls = TLSFiles(**creds)
    results: list[tuple[float, int, str]] = []
    lock = threading.Lock()
    cpu0: list[float] = []
    local = threading.Barrier(threads)

    def worker(i: int) -> None:
        s, rng, mine = new_session(tls), random.Random(seed * 1000 + i), []
        for _attempt in range(5):   # the TLS handshake, not counted: a session that did not get
            try:                    # one (header_timeout_s on a starved host) tries again
                s.get(f"{url}/health", timeout=300)
                break
            except Exception:   # noqa: BLE001 - its requests will fail and be counted; never block the others
                pass
        if local.wait() == 0:
            start.wait()                                # every process's handshakes done
            cpu0.append(time.process_time())
        local.wait()
        for _ in range(per):
            t = time.perf_counter()
            try:
                if kind == "submit":
                    r = s.post(f"{url}/jobs", data={"jdl": JDL, "filename": "b.jdl"}, timeout=300)
                    key = r.json().get("key", "") if r.status_code == 201 else r.text[:200]
                else:
                    key = rng.choice(keys)
                    r = s.get(f"{url}/jobs/{key}", timeout=300)
                status = r.status_code
            except Exception as exc:       # counted by the parent
                status, key = 0, f"{type(exc).__name__}: {exc}"
            mine.append(((time.perf_counter() - t) * 1000, status, key))
        with lock:
            results.extend(mine)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((results, time.process_time() - cpu0[0], time.monotonic()))


def load(url: str, creds: dict, kind: str, clients: int, per_client: int, procs: int,
         keys: list[str], pid: int, ok: int) -> tuple[dict, list[str]]:
    """Run ``clients`` clients over up to ``procs`` processes, timed from the moment every
    client has its TLS session; the summary and the keys of the successful requests."""
    nprocs = max(1, min(procs, clients))
    split = [clients // nprocs + (1 if i < clients % nprocs else 0) for i in range(nprocs)]
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(nprocs + 1), ctx.Queue()
    ps = [ctx.Process(target=_client_proc, args=(url, creds, kind, n, per_client, keys, i, start, out))
          for i, n in enumerate(split)]
    for p in ps:
        p.start()
    try:
        start.wait(timeout=900)
    except threading.BrokenBarrierError:
        for p in ps:
            p.kill()
        raise SystemExit(f"broker_submit: {kind}: the clients did not connect within 900 s") from None
    c0, t0 = cpu_s(pid), time.monotonic()
    parts = [out.get(timeout=1800) for _ in ps]
    cpu, wall = cpu_s(pid) - c0, max(end for _, _, end in parts) - t0
    for p in ps:
        p.join()
    rows = [r for p, _, _ in parts for r in p]
    client_cpu = sum(c for _, c, _ in parts)
    good = [r for r in rows if r[1] == ok]
    bad = [r for r in rows if r[1] != ok]
    if not good:
        raise SystemExit(f"broker_submit: {kind}: every request failed, e.g. HTTP {bad[0][1]} {bad[0][2]}")
    ms = sorted(r[0] for r in good)
    n = len(rows)
    return ({"clients": clients, "requests": n, "errors": len(bad),
             "error_example": f"HTTP {bad[0][1]} {bad[0][2][:160]}" if bad else None,
             "per_s": round(len(good) / wall, 1),
             "p50_ms": round(statistics.median(ms), 1), "p99_ms": pct(ms, 0.99),
             "wall_s": round(wall, 3), "broker_cpu_ms_per_request": round(cpu * 1000 / n, 3),
             "client_cpu_ms_per_request": round(client_cpu * 1000 / n, 3)},
            [r[2] for r in good])


def collection_jdl(nodes: int) -> str:
    body = ",\n".join(f'  [ Executable = "/bin/echo"; Arguments = "node {i}"; ]' for i in range(nodes))
    return f'[\n Type = "collection";\n Nodes = {{\n{body}\n }};\n]\n'


def submit_collection(url: str, creds: dict, nodes: int, pid: int) -> dict:
    from vgrid_runtime.httpclient import new_session
    from vgrid_runtime.tls import TLSFiles
    s = new_session(TLSFiles(**creds))
    s.get(f"{url}/health", timeout=60)
    text = collection_jdl(nodes)
    c0, t0 = cpu_s(pid), time.perf_counter()
    r = s.post(f"{url}/jobs", data={"jdl": text, "filename": "coll.jdl"}, timeout=300)
    wall, cpu = time.perf_counter() - t0, cpu_s(pid) - c0
    if r.status_code != 201:
        raise SystemExit(f"broker_submit: collection: HTTP {r.status_code} {r.text[:300]}")
    parent = r.json()["key"]
    page = s.get(f"{url}/jobs", params={"limit": 1000, "since": 0}, timeout=300).json()
    return {"nodes": nodes, "wall_s": round(wall, 3), "broker_cpu_s": round(cpu, 3), "parent": parent,
            "first_page": len(page["jobs"])}


# -- the RSS broker -----------------------------------------------------------------------------
def glue_ldif(n: int) -> bytes:
    """GLUE 1.3 LDIF of ``n`` CE queues as the GIP renders it (no HTTP contact: never dispatched)."""
    from infosys.gip import CEState, render_glue13
    rnd = random.Random(1)
    out = []
    for i in range(n):
        total = rnd.choice([8, 16, 64, 128, 512])
        out.append(render_glue13(CEState(
            ce_id=f"ce{i:05d}.site{i % 97}.example.org:8443/vgrid-vwn-q{i % 4}",
            host=f"ce{i:05d}.site{i % 97}.example.org", site=f"SITE-{i % 97}", queue=f"q{i % 4}",
            total_cpus=total, free_cpus=rnd.randint(0, total), waiting=rnd.randint(0, 50),
            si00=rnd.randint(1000, 3000), ram_mb=rnd.choice([1024, 2048, 4096]),
            max_wallclock_s=43200, vos=["dteam", "atlas"])))
    return "\n".join(out).encode()


def serve_glue(ldif: bytes, served: list[float]) -> ThreadingHTTPServer:
    """A loopback HTTP source answering every GET with ``ldif`` (appends to ``served``)."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server naming
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(ldif)))
            self.end_headers()
            self.wfile.write(ldif)
            served.append(time.monotonic())

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def fill_database(path: Path, n: int) -> None:
    """``n`` ended jobs in the SQLite file ``path``: rows planned as the broker stores a
    submission (:func:`broker.job_insert.plan_insert`), written Aborted with a Submitted, Waiting,
    Aborted history (5,000 a transaction)."""
    from sqlalchemy import insert

    from broker.db import HistoryRow, JobRow, JobStore, new_key
    from broker.job_insert import plan_insert
    from vgrid_runtime.job_states import JobState
    store = JobStore(f"sqlite:///{path}")
    t = 1.7e9
    for start in range(0, n, 5000):
        plan = plan_insert([{"jdl": JDL, "filename": f"r{i}.jdl", "state": JobState.WAITING}
                            for i in range(start, min(n, start + 5000))], t + start, new_key)
        for row in plan.rows:
            row.update(state=JobState.ABORTED.value, reason="no compatible resources", outcome="no-resources")
        ended = [{"key": r["key"], "state": JobState.ABORTED.value, "time": t + start + 1,
                  "reason": "no compatible resources"} for r in plan.rows]
        with store.engine.begin() as c:
            c.execute(insert(JobRow.__table__), plan.rows)
            c.execute(insert(HistoryRow.__table__), plan.history + ended)
    store.close()


def cpu_over(pid: int, wait_s: float = 2.0) -> float:
    """The CPU seconds ``pid`` uses over the next ``wait_s`` seconds."""
    c0 = cpu_s(pid)
    time.sleep(wait_s)
    return cpu_s(pid) - c0


def rss_run(group: ServiceGroup, d: Path, pki, creds: dict, jobs: int, ces: int) -> dict:
    state = d / "rss-broker"
    state.mkdir()
    os.chmod(state, 0o700)
    t0 = time.perf_counter()
    fill_database(state / "jobs.db", jobs)
    fill_s = time.perf_counter() - t0
    served: list[float] = []
    srv = serve_glue(glue_ldif(ces), served)
    try:
        svc = group.start("broker", "rss-broker",
                          f'port = 0\nstate_dir = "{state}"\n'
                          f'ce_urls = ["http://127.0.0.1:{srv.server_address[1]}"]\n'
                          f'ism_refresh_s = 600.0\nism_timeout_s = 120.0\n' + pki.toml("broker"))
        from vgrid_runtime.httpclient import new_session
        from vgrid_runtime.tls import TLSFiles
        s = new_session(TLSFiles(**creds))
        pid, deadline = svc.pids()[0], time.monotonic() + 600
        while not served or cpu_over(pid) > 0.05:   # ISM fetched and built: CPU idle
            time.sleep(0.5)
            if time.monotonic() > deadline:
                raise SystemExit("broker_submit: the ISM did not refresh within 600 s")
        page = s.get(f"{svc.url}/jobs", params={"limit": 1000}, timeout=300).json()
        for j in page["jobs"][:50]:
            s.get(f"{svc.url}/jobs/{j['key']}", timeout=300)
        mem = mem_mb(pid)      # before /ism, whose answer (every ad as JSON) would inflate the peak
        doc = s.get(f"{svc.url}/ism", params={"vo": "nobody"}, timeout=300).json()
        group.stop(svc)
    finally:
        srv.shutdown()
    return {"jobs": jobs, "ces": ces, "ism_ces": len(doc["ads"]), "fill_s": round(fill_s, 1), **mem}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000, help="single submissions per client level")
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--procs", type=int, default=4, help="client processes the client threads share")
    ap.add_argument("--nodes", type=int, default=1000, help="nodes of the collection")
    ap.add_argument("--readers", type=int, default=100)
    ap.add_argument("--reads", type=int, default=20, help="status reads per reader")
    ap.add_argument("--threads", type=int, default=16, help="the broker's worker threads")
    ap.add_argument("--rss-jobs", type=int, default=100_000)
    ap.add_argument("--rss-ces", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--workdir", default=None,
                    help="keep the brokers' configs, logs and state here (default: a temporary directory)")
    ap.add_argument("--idle-timeout-s", type=float, default=600.0,
                    help="the broker's idle_timeout_s (the service default, 10, closes sessions "
                         "waiting at the start barrier and the clients then reconnect)")
    ap.add_argument("--quick", action="store_true",
                    help="the lead's re-run in < 3 min: --jobs 1000 --clients 1,8 --reads 10 --repeat 1 "
                         "(collection, 100 readers and the RSS run at full size)")
    args = ap.parse_args(argv)
    if args.quick:
        args.jobs, args.clients, args.reads, args.repeat = 1000, "1,8", 10, 1
    levels = [int(x) for x in args.clients.split(",") if x]
    out: dict = {"benchmark": "broker_submit", "tls": "mutual", "threads": args.threads, "runs": [],
                 "cpus": os.cpu_count(), "load_avg_1m_start": round(os.getloadavg()[0], 2)}
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=False)
    with (contextlib.nullcontext(args.workdir) if args.workdir
          else tempfile.TemporaryDirectory(prefix="vgrid-submit-")) as tmp:
        d = Path(tmp)
        pki = make_demo_pki(d / "pki", ["broker"], WallClock().now())
        user = pki.user_credentials()
        creds = {"cert": user.cert, "key": user.key, "cert_dir": user.cert_dir, "voms_dir": user.voms_dir}
        try:
            with ServiceGroup(d) as group:
                for run in range(args.repeat):
                    svc = group.start("broker", f"broker{run}",
                                      f'port = 0\nstate_dir = "{d / f"broker{run}"}"\nce_urls = []\n'
                                      f'matcher = false\nthreads = {args.threads}\n'
                                      # kept-alive sessions wait at the barrier until every client
                                      # has shaken hands (tens of s for 100 on a busy host): not idle
                                      f'idle_timeout_s = {args.idle_timeout_s}\n' + pki.toml("broker"))
                    pid = svc.pids()[0]
                    res: dict = {"submit": []}
                    keys: list[str] = []
                    for n in levels:
                        per = max(1, args.jobs // n)
                        row, got = load(svc.url, creds, "submit", n, per, args.procs, [], pid, 201)
                        res["submit"].append(row)
                        keys += got
                    res["collection"] = submit_collection(svc.url, creds, args.nodes, pid)
                    res["read"], _ = load(svc.url, creds, "read", args.readers, args.reads, args.procs,
                                          keys, pid, 200)
                    out["runs"].append(res)
                    group.stop(svc)
                if args.rss_jobs:
                    out["rss"] = rss_run(group, d, pki, creds, args.rss_jobs, args.rss_ces)
        except ServiceError as exc:
            print(f"broker_submit: a broker did not start: {exc}", file=sys.stderr)
            return 1
    out["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
