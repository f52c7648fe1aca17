"""What a Prometheus scrape of the broker costs as its job store grows (docs/benchmarks.md,
"metrics scrape").

Builds a broker (``broker.server.build_broker``, SQLite in a temporary state directory, no CE
agents) whose store holds ``--jobs`` jobs with three history rows each (Submitted, Waiting,
Scheduled: what the collectors count), serves it on loopback (cheroot, plain HTTP) with
``GET /metrics`` installed, and times ``--scrapes`` sequential scrapes; as the reference, the
same number of ``GET /jobs?limit=100`` (the first page, what ``vgrid status`` shows).

Prints one JSON line ``{"benchmark": "metrics_scrape", "jobs", "history_rows", "kinds": {kind:
{"requests", "p50_ms", "p99_ms", "cpu_ms_per_request", "bytes"}}}``; CPU is this process's
(server threads included, ``time.process_time``). Exit 1 when a request fails.

    .venv/bin/python benchmarks/metrics_scrape.py [--jobs 100000] [--scrapes 50]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.api import create_app  # noqa: E402
from broker.config import BrokerConfig  # noqa: E402
from broker.db import HistoryRow, JobRow  # noqa: E402
from broker.metrics import install_broker_metrics  # noqa: E402
from broker.server import build_broker  # noqa: E402
from vgrid_runtime.wsgi import BackgroundServer  # noqa: E402


def fill(store, n: int) -> None:
    """``n`` Scheduled jobs with their three history rows, inserted in bulk (10,000 a batch)."""
    with store.engine.begin() as c:
        for start in range(0, n, 10_000):
            rows = range(start, min(n, start + 10_000))
            c.execute(JobRow.__table__.insert(), [
                {"key": f"bench{i:08d}", "jdl": '[ Executable = "/bin/true"; ]', "filename": "b.jdl",
                 "state": "Scheduled", "submitted_at": float(i), "updated_at": float(i),
                 "cpu_caps": "[]", "dispatch_attempts": 1, "kind": "job", "depends_on": "[]",
                 "owner_fqans": "[]", "attempt": 0, "deep_count": 0, "shallow_count": 0,
                 "failed_ces": "[]"} for i in rows])
            c.execute(HistoryRow.__table__.insert(), [
                {"key": f"bench{i:08d}", "state": s, "time": float(i), "reason": None}
                for i in rows for s in ("Submitted", "Waiting", "Scheduled")])


def timed(url: str, n: int) -> dict:
    s, ms, size = requests.Session(), [], 0
    cpu0 = time.process_time()
    for _ in range(n):
        t = time.perf_counter()
        r = s.get(url, timeout=300)
        ms.append((time.perf_counter() - t) * 1000)
        if r.status_code != 200:
            raise SystemExit(f"metrics_scrape: {url}: HTTP {r.status_code} {r.text[:200]}")
        size = len(r.content)
    cpu = (time.process_time() - cpu0) * 1000 / n
    ms.sort()
    return {"requests": n, "p50_ms": round(statistics.median(ms), 2),
            "p99_ms": round(ms[min(n - 1, int(n * 0.99))], 2), "cpu_ms_per_request": round(cpu, 2),
            "bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--scrapes", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vgrid-bench-metrics-") as tmp:
        broker = build_broker(BrokerConfig(state_dir=tmp))
        fill(broker.store, args.jobs)
        app = create_app(broker)
        install_broker_metrics(app, broker)
        srv = BackgroundServer(app)
        try:
            timed(f"{srv.url}/metrics", 2)                  # warm up (first connection, imports)
            kinds = {"metrics": timed(f"{srv.url}/metrics", args.scrapes),
                     "jobs_page": timed(f"{srv.url}/jobs?limit=100", args.scrapes)}
        finally:
            srv.close()
            broker.store.close()
    print(json.dumps({"benchmark": "metrics_scrape", "jobs": args.jobs, "history_rows": 3 * args.jobs,
                      "kinds": kinds}))


if __name__ == "__main__":
    main()
