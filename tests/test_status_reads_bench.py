"""benchmarks/status_reads.py's open-loop mode (issue 12): a tiny run against a real broker over
mutual TLS. Latency counts from each read's scheduled send time, so it is never below the
latency from the actual send, and the reads offered are the schedule's (rate x duration).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_open_loop_run_reports_latency_from_the_schedule():
    p = subprocess.run([sys.executable, str(REPO / "benchmarks" / "status_reads.py"), "--clients", "4",
                        "--procs", "2", "--jobs", "5", "--rate", "40", "--duration", "1"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    assert doc["mode"] == "open" and doc["offered_per_s"] == 40.0
    assert doc["reads"] == 40 and doc["errors"] == 0             # 4 clients x ceil(1 s x 40/s / 4)
    assert doc["p50_ms"] >= doc["service_p50_ms"] and doc["p99_ms"] >= doc["service_p99_ms"]
    assert doc["wall_s"] >= 0.9                                  # the schedule spans 1 s
    assert doc["broker_cpu_ms_per_read"] > 0
