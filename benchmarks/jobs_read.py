"""Broker reads under many clients: ``GET /jobs`` pages and ``GET /jobs/<key>`` with ETags
(issue 12, "Reads that scale"; docs/benchmarks.md, "jobs read").

Starts one ``vgrid serve broker`` process on loopback (no CE agents: the jobs end Aborted "no
compatible resources", three history rows each), submits ``--jobs`` jobs, then runs each read
kind with ``--clients`` threads for ``--requests`` requests per client:

- ``page``: ``GET /jobs?limit=100`` (the first page, what ``vgrid status`` shows first);
- ``all``: every page of ``GET /jobs?limit=1000`` (what the unpaginated list used to answer;
  one request per client);
- ``job``: ``GET /jobs/<random key>``;
- ``job_etag``: the same with ``If-None-Match`` of the tag seen before (304, no body).

Prints one JSON line ``{"benchmark": "jobs_read", "jobs", "clients", "kinds": {kind: {"requests",
"rps", "p50_ms", "p99_ms", "broker_cpu_ms_per_request", "statuses": {code: n}}}}``; broker CPU
from /proc. Exit 1 when the broker does not start or a request fails.

    .venv/bin/python benchmarks/jobs_read.py [--jobs 1055] [--clients 100] [--requests 10]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vgrid_cli.services import ServiceError, ServiceGroup  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run_kind(url: str, kind: str, keys: list[str], tags: dict, clients: int, per_client: int,
             pid: int) -> dict:
    local = threading.local()

    def session() -> requests.Session:
        if not hasattr(local, "s"):
            local.s = requests.Session()
        return local.s

    def one(i: int) -> tuple[float, int]:
        s, rng = session(), random.Random(i)
        t = time.perf_counter()
        if kind == "page":
            r = s.get(f"{url}/jobs", params={"limit": 100}, timeout=300)
        elif kind == "all":
            after = None
            while True:
                r = s.get(f"{url}/jobs", params={"limit": 1000, **({"after": after} if after else {})},
                          timeout=300)
                after = r.json().get("next") if r.status_code == 200 else None
                if after is None:
                    break
        else:
            key = rng.choice(keys)
            headers = {"If-None-Match": tags[key]} if kind == "job_etag" else {}
            r = s.get(f"{url}/jobs/{key}", headers=headers, timeout=300)
        ms = (time.perf_counter() - t) * 1000
        if r.status_code not in (200, 304):
            raise SystemExit(f"jobs_read: {kind}: HTTP {r.status_code} {r.text[:200]}")
        return ms, r.status_code

    n = clients * per_client
    c0, t0 = cpu_s(pid), time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        results = list(pool.map(one, range(n)))
    wall, cpu = time.perf_counter() - t0, cpu_s(pid) - c0
    ms = sorted(m for m, _ in results)
    return {"requests": n, "rps": round(n / wall, 1), "p50_ms": round(statistics.median(ms), 1),
            "p99_ms": round(ms[int(0.99 * (n - 1))], 1),
            "broker_cpu_ms_per_request": round(cpu * 1000 / n, 2),
            "statuses": dict(Counter(str(c) for _, c in results))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1055)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--requests", type=int, default=10, help="requests per client and kind")
    ap.add_argument("--kinds", default="page,job,job_etag,all")
    ap.add_argument("--quick", action="store_true",
                    help="the lead's re-run in < 3 min: --jobs 500 --requests 5 --kinds page,job,job_etag")
    args = ap.parse_args(argv)
    if args.quick:
        args.jobs, args.requests, args.kinds = 500, 5, "page,job,job_etag"
    with tempfile.TemporaryDirectory(prefix="vgrid-read-") as d:
        try:
            with ServiceGroup(Path(d)) as group:
                svc = group.start("broker", "broker",
                                  f'port = 0\nstate_dir = "{Path(d) / "broker"}"\nce_urls = []\n'
                                  'threads = 16\n')
                url, pid = svc.url, svc.pids()[0]
                s = requests.Session()
                with ThreadPoolExecutor(max_workers=8) as pool:
                    keys = list(pool.map(lambda _: s.post(f"{url}/jobs", data={
                        "jdl": '[ Executable = "/bin/true"; ]', "filename": "r.jdl"}, timeout=300).json()["key"],
                        range(args.jobs)))
                deadline = time.monotonic() + 300       # every job ended: their tags are final
                busy = {"Submitted", "Waiting", "Ready"}      # (a broker without filters lists all)
                while any(j["state"] in busy for j in s.get(
                        f"{url}/jobs", params={"state": ",".join(busy), "limit": 1}, timeout=300).json()["jobs"]):
                    if time.monotonic() > deadline:
                        raise SystemExit("jobs_read: jobs still waiting after 300 s")
                    time.sleep(0.2)
                tags = {k: s.get(f"{url}/jobs/{k}", timeout=300).headers.get("ETag", "") for k in keys[:200]}
                keys = list(tags)
                out = {"benchmark": "jobs_read", "jobs": args.jobs, "clients": args.clients, "kinds": {},
                       "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}
                for kind in args.kinds.split(","):
                    per_client = 1 if kind == "all" else args.requests     # "all" reads every job
                    out["kinds"][kind] = run_kind(url, kind, keys, tags, args.clients, per_client, pid)
        except ServiceError as exc:
            print(f"jobs_read: the broker did not start: {exc}", file=sys.stderr)
            return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
