"""What the web dashboard costs the broker: page renders against the JSON API they show, and the
304 answers of its polls (issue 17; docs/benchmarks.md, "dashboard pages").

Starts one ``vgrid serve broker`` process on loopback (plain HTTP, no CE agents: the jobs end
Aborted "no compatible resources"), submits ``--jobs`` jobs, then runs each kind with
``--clients`` threads (open browser tabs), ``--requests`` requests per client, each thread on its
own kept-alive session:

- ``api_page``: ``GET /jobs?limit=100`` (the reference: the same 100 jobs as JSON);
- ``dash_page``: ``GET /dashboard/jobs?limit=100`` (the jobs view, rendered);
- ``dash_page_poll``: the same with ``If-None-Match`` of its ETag (what a tab's poll costs
  while nothing changes: 304, no body);
- ``api_job`` / ``dash_job`` / ``dash_job_poll``: ``GET /jobs/<key>``, ``/dashboard/jobs/<key>``
  and its poll, over random jobs;
- ``dash_grid``: ``GET /dashboard/grid``.

Prints one JSON line ``{"benchmark": "dashboard_pages", "jobs", "clients", "kinds": {kind:
{"requests", "rps", "p50_ms", "p99_ms", "broker_cpu_ms_per_request", "bytes", "statuses"}}}``;
broker CPU (user + system) from /proc/<pid>/stat, wall from the first request to the last.
Exit 1 when the broker does not start or a request fails.

    .venv/bin/python benchmarks/dashboard_pages.py [--jobs 500] [--clients 20] [--requests 10]
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
KINDS = ("api_page", "dash_page", "dash_page_poll", "api_job", "dash_job", "dash_job_poll", "dash_grid")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def request_of(kind: str, url: str, key: str, tags: dict) -> tuple[str, dict, dict]:
    """(URL, params, headers) of one request of ``kind`` for job ``key``."""
    page = {"limit": 100}
    return {"api_page": (f"{url}/jobs", page, {}),
            "dash_page": (f"{url}/dashboard/jobs", page, {}),
            "dash_page_poll": (f"{url}/dashboard/jobs", page, {"If-None-Match": tags.get("page", "")}),
            "api_job": (f"{url}/jobs/{key}", {}, {}),
            "dash_job": (f"{url}/dashboard/jobs/{key}", {}, {}),
            "dash_job_poll": (f"{url}/dashboard/jobs/{key}", {}, {"If-None-Match": tags.get(key, "")}),
            "dash_grid": (f"{url}/dashboard/grid", {}, {})}[kind]


def run_kind(url: str, kind: str, keys: list[str], tags: dict, clients: int, per_client: int,
             pid: int) -> dict:
    local = threading.local()

    def one(i: int) -> tuple[float, int, int]:
        if not hasattr(local, "s"):
            local.s = requests.Session()
        target, params, headers = request_of(kind, url, random.Random(i).choice(keys), tags)
        t = time.perf_counter()
        r = local.s.get(target, params=params, headers=headers, timeout=300)
        ms = (time.perf_counter() - t) * 1000
        if r.status_code not in (200, 304) or (kind.endswith("_poll") and r.status_code != 304):
            raise SystemExit(f"dashboard_pages: {kind}: HTTP {r.status_code} {r.text[:200]}")
        return ms, r.status_code, len(r.content)

    n = clients * per_client
    c0, t0 = cpu_s(pid), time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        results = list(pool.map(one, range(n)))
    wall, cpu = time.perf_counter() - t0, cpu_s(pid) - c0
    ms = sorted(m for m, _, _ in results)
    return {"requests": n, "rps": round(n / wall, 1), "p50_ms": round(statistics.median(ms), 1),
            "p99_ms": round(ms[int(0.99 * (n - 1))], 1),
            "broker_cpu_ms_per_request": round(cpu * 1000 / n, 2),
            "bytes": round(statistics.mean(b for _, _, b in results)),
            "statuses": dict(Counter(str(c) for _, c, _ in results))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--clients", type=int, default=20, help="concurrent clients (open tabs)")
    ap.add_argument("--requests", type=int, default=10, help="requests per client and kind")
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vgrid-dash-") as d:
        try:
            with ServiceGroup(Path(d)) as group:
                svc = group.start("broker", "broker", f'port = 0\nstate_dir = "{Path(d) / "broker"}"\n'
                                  'ce_urls = []\nthreads = 16\nmatch_expiry_s = 0.5\n')
                url, pid = svc.url, svc.pids()[0]
                s = requests.Session()
                with ThreadPoolExecutor(max_workers=8) as pool:
                    keys = list(pool.map(lambda i: s.post(f"{url}/jobs", data={
                        "jdl": '[ Executable = "/bin/true"; ]', "filename": f"d{i}.jdl"}, timeout=300).json()["key"],
                        range(args.jobs)))
                deadline = time.monotonic() + 300       # every job ended: pages stop changing
                busy = "Submitted,Waiting,Ready"
                while s.get(f"{url}/jobs", params={"state": busy, "limit": 1}, timeout=300).json()["jobs"]:
                    if time.monotonic() > deadline:
                        raise SystemExit("dashboard_pages: jobs still waiting after 300 s")
                    time.sleep(0.2)
                keys = keys[:200]
                tags = {k: s.get(f"{url}/dashboard/jobs/{k}", timeout=300).headers.get("ETag", "") for k in keys}
                tags["page"] = s.get(f"{url}/dashboard/jobs", params={"limit": 100}, timeout=300).headers["ETag"]
                kinds = {k: run_kind(url, k, keys, tags, args.clients, args.requests, pid)
                         for k in args.kinds.split(",") if k}
        except ServiceError as exc:
            print(f"dashboard_pages: {exc}", file=sys.stderr)
            return 1
    print(json.dumps({"benchmark": "dashboard_pages", "jobs": args.jobs, "clients": args.clients,
                      "load_avg": os.getloadavg()[0], "kinds": kinds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
