"""benchmarks/faults.py with N = 100: SIGKILL of the broker, a CE agent and a node agent (each
restarted from its command line) and a node agent that never comes back, while 100 jobs with
RetryCount = 3 and ShallowRetryCount = 3 run; no job is lost, stuck or run twice by accident.

It needs all of issue 11 (persistent agents, heartbeats and Stalled, gLite resubmission)."""
import json
import subprocess
import sys

import pytest

from .paths import REPO


@pytest.mark.slow
def test_faults_100_jobs_none_lost_stuck_or_duplicated(tmp_path):
    # match_expiry_s: faults.py sets it to the deadline, but a job whose attempts failed (or
    # stalled, which a loaded host makes likely) at both CEs has no CE left to match (gLite
    # excludes them) and can only end by match expiry: counted from its last Waiting, that fell
    # after the deadline and the job counted as stuck (CI at load ~40: 99 Done, 1 Waiting).
    cmd = [sys.executable, str(REPO / "benchmarks" / "faults.py"), "--jobs", "100", "--seed", "11",
           "--deadline", "120", "--iterations", "500000", "--fault-window", "2", "20",
           "--restart-delay", "1", "6", "--set", "broker.match_expiry_s=30", "--keep", str(tmp_path / "run")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=240)
    except subprocess.TimeoutExpired:     # SIGTERM: faults.py stops the site it started
        p.terminate()
        out, err = p.communicate(timeout=50)
        pytest.fail(f"faults.py did not finish in 240 s; its stderr ends with {err[-2000:]}")
    doc = json.loads(out)
    summary = {k: doc[k] for k in ("acknowledged", "states", "aborted", "lost", "stuck", "stuck_jobs",
                                   "duplicated", "duplicated_jobs", "resubmissions", "faults")}
    assert doc["acknowledged"] == 100, summary
    assert all("killed_at" in f for f in doc["faults"]), summary   # every fault happened
    assert doc["broker_answered_at_end"], summary
    assert (doc["lost"], doc["stuck"], doc["duplicated"]) == (0, 0, 0), json.dumps(summary, indent=1)
    assert p.returncode == 0, err[-2000:]


def _faults_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("faults", REPO / "benchmarks" / "faults.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _job(key, state, waitings=1, outcome=None, reason=None):
    """A job dispatched ``waitings`` times (each accepted by a CE), after one dispatch retry."""
    history = [{"state": s} for s in ["Submitted", "Waiting", "Ready", "Waiting"]]
    history += [{"state": s} for s in ["Ready", "Scheduled", "Running", "Waiting"] * waitings][:-1]
    return {"key": key, "state": state, "history": history + [{"state": state}],
            "outcome": outcome, "reason": reason}


def test_summary_counts_lost_stuck_duplicated_and_resubmissions(tmp_path):
    faults = _faults_module()
    acked = {"t1": "k1", "t2": "k2", "t3": "k3", "t4": "k4", "t5": "k5"}
    final = {"k1": _job("k1", "Done"), "k2": _job("k2", "Done", waitings=2),
             "k3": _job("k3", "Running"), "k5": _job("k5", "Aborted", outcome="node-lost", reason="node x lost")}
    markers = tmp_path / "m"
    markers.mkdir()
    for name in ["t1.a.start", "t1.a.end", "t2.a.start", "t2.b.start", "t2.b.end",   # k2: 2 runs, 2 attempts
                 "t3.a.start", "t3.b.start", "t5.a.start"]:                           # k3: 2 runs, 1 attempt
        (markers / name).touch()
    starts, ends = faults.count_runs(markers)
    assert starts == {"t1": 1, "t2": 2, "t3": 2, "t5": 1} and ends == {"t1": 1, "t2": 1}
    doc = faults.summarise(acked, [], final, starts, ends)
    assert doc["acknowledged"] == 5 and doc["lost"] == 1 and doc["lost_keys"] == ["k4"]
    assert doc["stuck"] == 1 and doc["stuck_jobs"][0]["key"] == "k3"
    assert doc["duplicated"] == 1 and doc["duplicated_jobs"] == [{"key": "k3", "runs": 2, "attempts": 1}]
    assert doc["resubmissions"] == 1 and doc["dispatch_retries"] == 4 and doc["done"] == 2
    assert doc["aborted"] == {"node-lost": {"count": 1, "reasons": ["node x lost"]}}
    assert doc["runs"] == {"started": 6, "ended": 2} and doc["done_without_run"] == 0


def test_fault_plan_is_seeded_and_hits_four_distinct_services():
    faults = _faults_module()

    class FakeSite:
        doc = {"ces": [{"nodes": [{}, {}]}, {"nodes": [{}, {}]}]}
    plans = [faults.fault_plan(FakeSite(), faults.random.Random(7), (2, 20), (1, 6)) for _ in range(2)]
    assert plans[0] == plans[1]
    targets = [tuple(f["path"]) for f in plans[0]]
    assert len(set(targets)) == 4 and ("broker",) in targets
    nodes = [f for f in plans[0] if f["path"][0] == "node"]
    assert len(nodes) == 2 and sum(bool(f.get("never_back")) for f in nodes) == 1
    assert all(2 <= f["kill_at"] <= 20 for f in plans[0])
    assert [f["kill_at"] for f in plans[0]] == sorted(f["kill_at"] for f in plans[0])
