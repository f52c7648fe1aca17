"""Pictures of a demo run: the CPU cap of every VWN over time, one panel per worker node.

``write_caps_plot(jobs, path)`` draws, for each job record of the broker (``cpu_caps`` and
``cpu_caps_t``: the fraction of one core its VWN was capped at, from each readjustment on), a
step line from the first cap until the job's Done/Aborted time. Seed 004 Figure 2 is the same
picture in theory: capacities C/n readjusted at every arrival and departure.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from vgrid_runtime.job_states import JobState  # noqa: E402

_VWN_ENDED = {s.value for s in (JobState.DONE, JobState.ABORTED, JobState.CANCELLED)}


def _end_time(job: dict) -> float | None:
    """When the VWN ended: the node agent's time (same clock as the caps), else the broker's."""
    if job.get("vwn_ended_at") is not None:
        return job["vwn_ended_at"]
    for h in reversed(job.get("history") or []):
        if h["state"] in _VWN_ENDED:
            return h["time"]
    return None


def _cap_steps(job: dict, t0: float) -> list[tuple[float, float]]:
    """[(t, cap)] from the first cap on, ending with (end, 0.0) when the job has ended."""
    steps = [(t - t0, c) for t, c in zip(job["cpu_caps_t"], job["cpu_caps"])]
    end = _end_time(job)
    if end is not None:
        steps.append((end - t0, 0.0))
    return steps


def _cap_at(steps: list[tuple[float, float]], t: float) -> float:
    value = 0.0
    for ts, cap in steps:
        if ts <= t:
            value = cap
        else:
            break
    return value


def write_caps_plot(jobs: list[dict], path: Path) -> Path | None:
    """Write the PNG; returns its path, or None when no job ran in a VWN."""
    ran = [j for j in jobs if j.get("cpu_caps") and j.get("cpu_caps_t") and j.get("node")]
    if not ran:
        return None
    t0 = min(j["cpu_caps_t"][0] for j in ran)
    nodes = sorted({j["node"] for j in ran})
    fig, axes = plt.subplots(len(nodes), 1, figsize=(10, 2.2 * len(nodes)), sharex=True, squeeze=False)
    for ax, node in zip(axes[:, 0], nodes):
        on_node = [j for j in ran if j["node"] == node]
        lines = [_cap_steps(j, t0) for j in on_node]
        times = sorted({t for steps in lines for t, _ in steps})
        base = [0.0] * len(times)
        for j, steps in zip(on_node, lines):
            top = [b + _cap_at(steps, t) for b, t in zip(base, times)]
            label = f"{j.get('vwn')} {Path(str(j.get('filename') or j['key'])).name}"
            ax.fill_between(times, base, top, step="post", alpha=0.75, label=label)
            base = top
        ax.set_ylabel("CPU cap\n(cores)")
        ax.set_ylim(0, 1.15 * max(max(base), max(c for j in on_node for c in j["cpu_caps"])))
        ax.set_title(f"{node} (stacked: the VWNs' caps add up to the node capacity C)",
                     fontsize=9, loc="left")
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the first VWN started")
    fig.suptitle("VWN CPU caps C/n over time, readjusted at every arrival and departure (seed 004 Sec. 5.1)",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
