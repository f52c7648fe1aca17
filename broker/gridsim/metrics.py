"""Metrics of a simulation run (seed 004 Section 6.2.1).

- mean job total delay: from the job's creation (submission) to the end of its execution (s);
- makespan: from the first submission to the last completion (s);
- mean queue time: from the job's arrival at the CE (its submission: dispatch is immediate) to
  leaving the CE's queue, i.e. getting a CPU (FCFS LRMS) or a virtual worker node (s);
- deadline misses: jobs that finished after their deadline (None when no job has one);
- jobs per CE against the CEs' capacity shares C_j / sum C.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import SimResult


def run_metrics(result: "SimResult") -> dict[str, Any]:
    """The four metrics of ``result`` as ``{"mean_delay_s", "makespan_s", "mean_queue_s",
    "deadline_misses"}``; ValueError when a job did not finish (a bug in the simulator)."""
    jobs = result.jobs
    if not jobs:
        return {"mean_delay_s": 0.0, "makespan_s": 0.0, "mean_queue_s": 0.0,
                "deadline_misses": None}
    delay = queue = 0.0
    first, last = float("inf"), float("-inf")
    misses, with_deadline = 0, 0
    for j in jobs:
        if j.end_s is None or j.start_s is None:
            raise ValueError(f"job {j.job_id} did not finish")
        delay += j.end_s - j.submit_s
        queue += j.start_s - j.submit_s
        first = min(first, j.submit_s)
        last = max(last, j.end_s)
        if j.deadline_s is not None:
            with_deadline += 1
            misses += j.end_s > j.deadline_s
    n = len(jobs)
    return {"mean_delay_s": delay / n, "makespan_s": last - first, "mean_queue_s": queue / n,
            "deadline_misses": misses if with_deadline else None}


def jobs_per_ce(result: "SimResult") -> dict[str, int]:
    """Number of jobs dispatched to each CE (every CE listed, 0 included)."""
    counts = {ce.ce_id: 0 for ce in result.ces}
    for j in result.jobs:
        if j.ce is not None:
            counts[j.ce] += 1
    return counts


def capacity_share(result: "SimResult") -> dict[str, float]:
    """C_j / sum of C over the CEs."""
    total = sum(ce.capacity for ce in result.ces)
    return {ce.ce_id: ce.capacity / total for ce in result.ces}


def max_share_gap(result: "SimResult") -> float:
    """Largest |job share - capacity share| over the CEs, in fractions (0.05 = 5 points)."""
    counts, shares = jobs_per_ce(result), capacity_share(result)
    n = max(1, sum(counts.values()))
    return max(abs(counts[c] / n - shares[c]) for c in shares)


def result_json(result: "SimResult") -> dict[str, Any]:
    """The ``--json`` document of ``vgrid simulate-grid`` (issue 6):
    ``{"policy", "feedback", "metrics": {...}, "jobs_per_ce": {ce: count},
    "capacity_share": {ce: fraction}}``."""
    return {"policy": result.config.policy, "feedback": result.config.feedback,
            "metrics": run_metrics(result), "jobs_per_ce": jobs_per_ce(result),
            "capacity_share": capacity_share(result)}
