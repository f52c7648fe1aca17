"""benchmarks/faults.py with N = 100: SIGKILL of the broker, a CE agent and a node agent (each
restarted from its command line) and a node agent that never comes back, while 100 jobs with
RetryCount = 3 and ShallowRetryCount = 3 run; no job is lost, stuck or run twice by accident.

It needs all of issue 11 (persistent agents, heartbeats and Stalled, gLite resubmission)."""
import json
import subprocess
import sys

import pytest

from .paths import REPO

pytestmark = pytest.mark.slow


def test_faults_100_jobs_none_lost_stuck_or_duplicated(tmp_path):
    cmd = [sys.executable, str(REPO / "benchmarks" / "faults.py"), "--jobs", "100", "--seed", "11",
           "--deadline", "120", "--iterations", "500000", "--fault-window", "2", "20",
           "--restart-delay", "1", "6", "--keep", str(tmp_path / "run")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    doc = json.loads(p.stdout)
    summary = {k: doc[k] for k in ("acknowledged", "states", "aborted", "lost", "stuck", "stuck_jobs",
                                   "duplicated", "duplicated_jobs", "resubmissions", "faults")}
    assert doc["acknowledged"] == 100, summary
    assert all("killed_at" in f for f in doc["faults"]), summary   # every fault happened
    assert doc["broker_answered_at_end"], summary
    assert (doc["lost"], doc["stuck"], doc["duplicated"]) == (0, 0, 0), json.dumps(summary, indent=1)
    assert p.returncode == 0, p.stderr[-2000:]
