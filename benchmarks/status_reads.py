"""100 clients reading job status over mutual TLS (issue 12: >= 1,000 requests/s, p99 <= 100 ms;
docs/benchmarks.md, "session 6: reads" and "session 7: reads").

Starts a real ``vgrid serve broker`` on loopback over mutual TLS (a demo CA, the broker's host
certificate and a VOMS proxy of the demo user, made at run time) with ``matcher = false`` and
``--front-ends`` processes on its port (:mod:`broker.front_ends`), submits ``--jobs`` jobs, then
``--clients`` clients read ``GET /jobs/<random key>`` ``--reads`` times each. Each client is a
thread holding one kept-alive TLS connection (``--client http``: ``http.client`` over the
client context of :mod:`vgrid_runtime.tls`, the lean client; ``--client requests``: a
``requests`` session from :func:`vgrid_runtime.httpclient.new_session`, as ``broker.client``),
the threads spread over ``--procs`` client processes. ``--etag``: each client sends the ETag
it saw last for that job (a poller; the broker answers 304 without a body). ``--lean-reads
off``: the broker answers every read through Flask (:mod:`broker.read_path` off).

Two load models. Closed loop (default): each client sends its next read when the previous
answer arrived, with no think time, so by Little's law the mean latency is clients / throughput
and the run measures the broker's maximum rate. Open loop (``--rate R``): the clients together
offer R reads/s, each on a fixed schedule (R/clients per second, the clients' schedules
staggered by 1/R); a read whose previous answer is late is sent as soon as that answer arrives,
and its latency is counted from its *scheduled* send time, so a stalled server shows in the
percentiles instead of slowing the load (no coordinated omission; ``service_p50_ms`` and
``service_p99_ms`` are from the actual send). ``--duration`` seconds of schedule.

Timed from the moment every client holds its connection (a barrier across the client
processes) to the last answer. CPU from /proc: ``broker_cpu_ms_per_read`` sums every broker
process (the front ends too), ``client_cpu_ms_per_read`` every client process;
``broker_cores`` and ``client_cores`` are the cores each side used over the run. Prints one
JSON line ``{"benchmark": "status_reads", "mode": "closed"|"open", "front_ends", "client",
"clients", "reads", "errors", "per_s", "p50_ms", "p99_ms", "max_ms", "wall_s",
"broker_cpu_ms_per_read", "broker_sys_cpu_ms_per_read" (its kernel part: TCP, syscalls),
"client_cpu_ms_per_read", "broker_cores", "client_cores", "cpus",
"load_avg_1m_start", "load_avg_1m_end"}`` (open loop also ``offered_per_s``,
``service_p50_ms``, ``service_p99_ms``). Exit 1 when the broker does not start or every read
failed.

    .venv/bin/python benchmarks/status_reads.py [--front-ends 1] [--clients 100] [--reads 50]
        [--procs 4] [--client http|requests] [--etag] [--jobs 500] [--threads 16]
        [--lean-reads on|off] [--rate R --duration S] [--quick]
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vgrid_cli.demo_pki import make_demo_pki  # noqa: E402
from vgrid_cli.services import ServiceError, ServiceGroup  # noqa: E402
from vgrid_runtime.clock import WallClock  # noqa: E402

JDL = '[ Executable = "/bin/true"; ]'
TICK = os.sysconf("SC_CLK_TCK")
#: open loop: seconds between the start barrier and the first scheduled read
LEAD_S = 0.2


def cpu_s(pid: int, system_only: bool = False) -> float:
    """User+system (``system_only``: system) CPU seconds of process ``pid`` (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[12]) + (0 if system_only else int(fields[11]))) / TICK


def listens(pid: int, port: int) -> bool:
    """True when process ``pid`` holds a TCP socket listening on ``port`` (/proc/net/tcp{,6}:
    state 0A = LISTEN, matched by socket inode to the process's descriptors)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                for line in f.readlines()[1:]:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except OSError:
            continue
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    return any(link == f"socket:[{inode}]" for link in links for inode in inodes)


def broker_pids(main: int) -> list[int]:
    """The broker process and its front ends (children running ``broker.server``)."""
    out = [main]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if ppid == main and b"broker.server" in cmd:
                out.append(int(entry))
    return out


class _Lean:
    """One kept-alive mutual-TLS connection through ``http.client`` (no requests machinery)."""

    def __init__(self, url: str, ctx) -> None:
        import http.client
        u = urlsplit(url)
        self.conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=300)

    def get(self, path: str, headers: dict) -> tuple[int, dict]:
        self.conn.request("GET", path, headers=headers)
        r = self.conn.getresponse()
        body = r.read()
        return r.status, {"etag": r.getheader("ETag"), "body": body}


class _Requests:
    """One ``requests`` session (what ``broker.client.BrokerClient`` uses)."""

    def __init__(self, url: str, tls) -> None:
        from vgrid_runtime.httpclient import new_session
        self.url, self.s = url, new_session(tls)

    def get(self, path: str, headers: dict) -> tuple[int, dict]:
        r = self.s.get(f"{self.url}{path}", headers=headers, timeout=300)
        return r.status_code, {"etag": r.headers.get("ETag"), "body": r.content}


def _client_proc(url: str, creds: dict, kind: str, etag: bool, threads: int, per: int,
                 keys: list[str], seed: int, start, out, first: int = 0,
                 pace: tuple[float, float, int] | None = None) -> None:
    """``threads`` client threads, one connection each; after the barrier ``per`` reads each.
    Closed loop (``pace`` None): each read is sent when the previous answer arrived. Open loop
    (``pace`` = (rate, lead, clients)): client ``first + i`` of all sends its k-th read at
    ``t0 + lead + (first + i) / rate + k * clients / rate`` (``rate``: reads/s offered by all
    the clients together), or as soon as its previous answer arrived when that is later, and
    the latency is counted from the scheduled time (no coordinated omission).
    Puts ((ms, status, service ms) per read, CPU seconds after the barrier, monotonic end) on
    ``out``."""
    from vgrid_runtime.tls import TLSFiles, client_context
    tls = TLSFiles(**creds)
    ctx = client_context(tls)
    results: list[tuple[float, int]] = []
    lock = threading.Lock()
    cpu0: list[float] = []
    t0: list[float] = []
    clients = pace[2] if pace is not None else 0
    pace = pace[:2] if pace is not None else None
    local = threading.Barrier(threads)

    def connect():   # a new connection of the client kind asked for
        return _Lean(url, ctx) if kind == "http" else _Requests(url, tls)

    def worker(i: int) -> None:
        rng, mine, tags = random.Random(seed * 1000 + i), [], {}
        client = connect()
        for _attempt in range(5):        # the handshake, not timed
            try:
                client.get("/health", {})
                break
            except Exception:   # noqa: BLE001 - its reads fail and are counted
                client = connect()
        if local.wait() == 0:
            start.wait()
            cpu0.append(time.process_time())
            t0.append(time.monotonic())
        local.wait()
        if pace is not None:
            rate, lead = pace
            period, due = clients / rate, t0[0] + lead + (first + i) / rate
        for _ in range(per):
            key = rng.choice(keys)
            headers = {"If-None-Match": tags[key]} if etag and key in tags else {}
            if pace is not None:
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            t = time.monotonic()
            try:
                status, got = client.get(f"/jobs/{key}", headers)
                if got["etag"]:
                    tags[key] = got["etag"]
            except Exception:   # noqa: BLE001 - counted as an error; a new connection follows
                status = 0
                client = connect()
            end = time.monotonic()
            since = due if pace is not None else t        # open loop: from the scheduled send
            mine.append(((end - since) * 1000, status, (end - t) * 1000))
            if pace is not None:
                due += period
        with lock:
            results.extend(mine)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((results, time.process_time() - cpu0[0], time.monotonic()))


def pct(sorted_ms: list[float], q: float) -> float:
    return round(sorted_ms[min(len(sorted_ms) - 1, int(q * (len(sorted_ms) - 1) + 0.5))], 1)


def run(url: str, creds: dict, args, keys: list[str], pids: list[int]) -> dict:
    nprocs = max(1, min(args.procs, args.clients))
    split = [args.clients // nprocs + (1 if i < args.clients % nprocs else 0) for i in range(nprocs)]
    firsts = [sum(split[:i]) for i in range(nprocs)]
    pace = (args.rate, LEAD_S, args.clients) if args.rate else None
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(nprocs + 1), ctx.Queue()
    ps = [ctx.Process(target=_client_proc, args=(url, creds, args.client, args.etag, n, args.reads,
                                                 keys, i, start, out, firsts[i], pace))
          for i, n in enumerate(split)]
    for p in ps:
        p.start()
    start.wait(timeout=900)
    c0, t0 = sum(cpu_s(p) for p in pids), time.monotonic()
    s0 = sum(cpu_s(p, True) for p in pids)
    parts = [out.get(timeout=1800) for _ in ps]
    cpu, wall = sum(cpu_s(p) for p in pids) - c0, max(end for _, _, end in parts) - t0
    sys_cpu = sum(cpu_s(p, True) for p in pids) - s0
    for p in ps:
        p.join()
    rows = [r for part, _, _ in parts for r in part]
    client_cpu = sum(c for _, c, _ in parts)
    good = sorted(ms for ms, status, _ in rows if status in (200, 304))
    if not good:
        raise SystemExit("status_reads: every read failed")
    service = sorted(sv for _, status, sv in rows if status in (200, 304))
    n, cores = len(rows), os.cpu_count() or 1
    if pace is not None:      # the schedule starts LEAD_S after t0
        wall -= LEAD_S
    result = {"reads": n, "errors": n - len(good), "per_s": round(len(good) / wall, 1),
              "p50_ms": round(statistics.median(good), 1), "p99_ms": pct(good, 0.99),
              "max_ms": round(good[-1], 1),
              "wall_s": round(wall, 3), "broker_cpu_ms_per_read": round(cpu * 1000 / n, 3),
              "broker_sys_cpu_ms_per_read": round(sys_cpu * 1000 / n, 3),
              "client_cpu_ms_per_read": round(client_cpu * 1000 / n, 3),
              "broker_cores": round(cpu / wall, 2), "client_cores": round(client_cpu / wall, 2),
              "statuses": {str(s): sum(1 for _, x, _ in rows if x == s) for s in sorted({x for _, x, _ in rows})},
              "cpus": cores}
    if pace is not None:      # p50/p99 above: from the scheduled send; these: from the actual one
        result.update(mode="open", offered_per_s=args.rate,
                      service_p50_ms=round(statistics.median(service), 1),
                      service_p99_ms=pct(service, 0.99))
    else:
        result["mode"] = "closed"
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--front-ends", type=int, default=1, help="broker processes on the port")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--reads", type=int, default=50, help="reads per client")
    ap.add_argument("--procs", type=int, default=4, help="client processes the client threads share")
    ap.add_argument("--client", choices=("http", "requests"), default="http")
    ap.add_argument("--etag", action="store_true", help="send If-None-Match (pollers; 304 answers)")
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--threads", type=int, default=16, help="worker threads of each broker process")
    ap.add_argument("--record-cache-size", type=int, default=10_000,
                    help="the broker's record_cache_size (0: render every read, as before session 6)")
    ap.add_argument("--lean-reads", choices=("on", "off"), default="on",
                    help="the broker's lean_reads (off: every read through Flask, as before session 7)")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="open loop: reads/s offered by all the clients together, each client on a fixed "
                         "schedule of rate/clients per second; latency from the scheduled send time "
                         "(0: closed loop, each client sends when its previous answer arrived)")
    ap.add_argument("--duration", type=float, default=10.0,
                    help="open loop: seconds of schedule (sets --reads to duration * rate / clients)")
    ap.add_argument("--quick", action="store_true",
                    help="the lead's re-run in < 2 min: --clients 100 --reads 20 --jobs 300 "
                         "(open loop: --duration 5)")
    args = ap.parse_args(argv)
    if args.quick:
        args.clients, args.reads, args.jobs, args.duration = 100, 20, 300, 5.0
    if args.rate < 0 or args.duration <= 0:
        ap.error("--rate must be >= 0 and --duration > 0")
    if args.rate:
        args.reads = max(1, math.ceil(args.duration * args.rate / args.clients))
    out = {"benchmark": "status_reads", "front_ends": args.front_ends, "client": args.client,
           "threads": args.threads,
           "etag": args.etag, "clients": args.clients, "record_cache_size": args.record_cache_size,
           "lean_reads": args.lean_reads,
           "load_avg_1m_start": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="vgrid-reads-") as tmp:
        d = Path(tmp)
        pki = make_demo_pki(d / "pki", ["broker"], WallClock().now())
        user = pki.user_credentials()
        creds = {"cert": user.cert, "key": user.key, "cert_dir": user.cert_dir, "voms_dir": user.voms_dir}
        try:
            with ServiceGroup(d) as group:
                svc = group.start("broker", "broker",
                                  f'port = 0\nstate_dir = "{d / "broker"}"\nce_urls = []\nmatcher = false\n'
                                  f'threads = {args.threads}\nidle_timeout_s = 600\n'
                                  f'front_ends = {args.front_ends}\n'
                                  f'record_cache_size = {args.record_cache_size}\n'
                                  + ("lean_reads = false\n" if args.lean_reads == "off" else "")
                                  + pki.toml("broker"))
                from vgrid_runtime.httpclient import new_session
                from vgrid_runtime.tls import TLSFiles
                s = new_session(TLSFiles(**creds))
                keys = [s.post(f"{svc.url}/jobs", data={"jdl": JDL, "filename": "r.jdl"}, timeout=300).json()["key"]
                        for _ in range(args.jobs)]
                deadline, port = time.monotonic() + 120, int(svc.url.rsplit(":", 1)[1])
                while not ((pids := broker_pids(svc.pids()[0])) and len(pids) >= args.front_ends
                           and all(listens(pid, port) for pid in pids)):
                    if time.monotonic() > deadline:
                        raise SystemExit("status_reads: the front ends did not start listening")
                    time.sleep(0.2)
                out.update(run(svc.url, creds, args, keys, broker_pids(svc.pids()[0])))
        except ServiceError as exc:
            print(f"status_reads: the broker did not start: {exc}", file=sys.stderr)
            return 1
    out["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
