"""Plots and CSV of VOC simulations (matplotlib, Agg backend): one PNG per workload, the VOC size
and busy nodes of each VO over time under each policy, as the paper's Figures 7, 10 and 11 draw
them (nodes on the y axis, seconds on the x axis); plus ``voc_series.csv``."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .sim import SimResult  # noqa: E402


def write_series_csv(results: list[SimResult], path: Path) -> Path:
    """Rows ``workload, policy, vo, time_s, voc_size, busy_nodes, queue`` (one per change)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "policy", "vo", "time_s", "voc_size", "busy_nodes", "queue"])
        for r in results:
            for vo, series in r.series.items():
                for t, size, busy, queue in series:
                    w.writerow([r.workload, r.policy, vo, t, size, busy, queue])
    return path


def plot_workload(results: list[SimResult], title: str, path: Path) -> Path:
    """One panel per policy: per VO the VOC size (solid) and the queue (dotted), step plots."""
    fig, axes = plt.subplots(len(results), 1, figsize=(8, 2.8 * len(results)), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        for i, (vo, series) in enumerate(r.series.items()):
            ts = [p[0] for p in series]
            color = f"C{i}"
            ax.step(ts, [p[1] for p in series], where="post", color=color, label=f"{vo} VOC nodes")
            ax.step(ts, [p[3] for p in series], where="post", color=color, linestyle=":", label=f"{vo} queue")
        vac = f"{r.vacated_s:.0f} s" if r.vacated_s is not None else "never"
        ax.set_title(f"{r.policy}: makespan {r.makespan_s:.0f} s, vacated {vac}, {r.boots} boots", fontsize=9)
        ax.set_ylabel("nodes / jobs")
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time (s)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
