"""The cost of mutual TLS on the broker's submit path, measured side by side in one run.

Starts the same broker twice on loopback (plain HTTP, then HTTPS with client certificates and a
VOMS proxy), submits N small jobs from 1 and from 8 client threads to each, and prints one JSON
line: per mode and concurrency, submissions per second (wall), p50/p99 latency (ms), and the
process CPU time per submission (ms; client and server share the process, so both sides' TLS
work is counted). Credentials are made at run time. Usage:

    .venv/bin/python benchmarks/tls_cost.py [--jobs 400] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.api import create_app  # noqa: E402
from broker.config import BrokerConfig  # noqa: E402
from broker.server import build_broker  # noqa: E402
from vgrid_cli.demo_pki import make_demo_pki  # noqa: E402
from vgrid_runtime.clock import WallClock  # noqa: E402
from vgrid_runtime.httpclient import new_session  # noqa: E402
from vgrid_runtime.wsgi import BackgroundServer  # noqa: E402

JDL = '[ Executable = "/bin/true"; ]'


def run(url: str, session_factory, jobs: int, threads: int) -> dict:
    latencies: list[float] = []
    lock = threading.Lock()
    per = jobs // threads

    def worker():
        s = session_factory()
        mine = []
        for _ in range(per):
            t0 = time.perf_counter()
            r = s.post(f"{url}/jobs", data={"jdl": JDL, "filename": "b.jdl"}, timeout=60)
            mine.append(time.perf_counter() - t0)
            if r.status_code != 201:
                raise SystemExit(f"submit failed: HTTP {r.status_code} {r.text[:200]}")
        with lock:
            latencies.extend(mine)

    cpu0, t0 = time.process_time(), time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    latencies.sort()
    n = len(latencies)
    return {"threads": threads, "jobs": n, "jobs_per_s": round(n / wall, 1),
            "p50_ms": round(1000 * statistics.median(latencies), 2),
            "p99_ms": round(1000 * latencies[min(n - 1, int(0.99 * n))], 2),
            "cpu_ms_per_job": round(1000 * cpu / n, 2), "wall_s": round(wall, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="vgrid-tls-bench-") as tmp:
        pki = make_demo_pki(Path(tmp) / "pki", ["broker"], WallClock().now())
        for mode in ("plain", "tls"):
            fields = {}
            if mode == "tls":
                d = pki.dir / "hosts" / "broker"
                fields = {"tls_cert": str(d / "hostcert.pem"), "tls_key": str(d / "hostkey.pem"),
                          "cert_dir": str(pki.cert_dir), "voms_dir": str(pki.voms_dir)}
            cfg = BrokerConfig(state_dir=str(Path(tmp) / mode), **fields)
            broker = build_broker(cfg)
            host = pki.address("broker") if mode == "tls" else "127.0.0.1"
            srv = BackgroundServer(create_app(broker, tls=cfg.tls_files()), host=host, tls=cfg.tls_files(),
                                   threads=16)
            broker.settings.base_url = srv.url
            factory = (lambda: new_session(pki.user_credentials())) if mode == "tls" else new_session
            try:
                results[mode] = [run(srv.url, factory, args.jobs, th) for th in (1, 8)]
            finally:
                srv.close()
                broker.store.close()
    line = json.dumps({"benchmark": "tls_cost", "jobs": args.jobs, "results": results})
    print(line)
    if not args.json:
        for mode, rows in results.items():
            for r in rows:
                print(f"{mode:5} {r['threads']:2} client(s): {r['jobs_per_s']:7.1f} jobs/s  "
                      f"p50 {r['p50_ms']:6.1f} ms  p99 {r['p99_ms']:6.1f} ms  "
                      f"CPU {r['cpu_ms_per_job']:5.2f} ms/job", file=sys.stderr)


if __name__ == "__main__":
    main()
