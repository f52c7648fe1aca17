"""Seed 004 Figures 4, 5 and 6 (and Table I's delay spread) from an :class:`OfflineReport`.

Each function writes one PNG (matplotlib, Agg backend) into a directory and returns its path;
:func:`markdown_table` gives the numbers as a Markdown table.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .offline import OfflineReport  # noqa: E402

LABELS = {"sfete": "SFETE (fair-share VWNs)", "fcfs-ect": "FCFS/ECT", "edf-ect": "EDF/ECT",
          "llf-ect": "LLF/ECT", "sfete-batch": "SFETE on batch queues"}
STYLES = {"sfete": ("tab:blue", "o", "-"), "fcfs-ect": ("tab:red", "s", "-"),
          "edf-ect": ("tab:orange", "^", "-"), "llf-ect": ("tab:green", "D", "-"),
          "sfete-batch": ("tab:blue", "o", ":")}
#: figure file -> (metric, title, y label)
FIGURES = {
    "table1_fig4_delay.png": ("avg_delay_s", "Figure 4: average task delay", "average delay (s)"),
    "table1_delay_sd.png": ("std_delay_s", "Table I: standard deviation of the delay", "delay s.d. (s)"),
    "table1_fig5_excess.png": ("avg_excess_s", "Figure 5: average excess time", "average excess time (s)"),
    "table1_fig6_missed.png": ("missed", "Figure 6: deadlines missed", "tasks past their deadline"),
}


def _algorithms(report: OfflineReport) -> list[str]:
    return list(dict.fromkeys(r.algorithm for r in report.results))


def figure(report: OfflineReport, out: Path, name: str) -> Path:
    """One of :data:`FIGURES` (by file name): the metric against the submission rate, one line
    per algorithm, mean and s.d. over the report's seeds."""
    metric, title, ylabel = FIGURES[name]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    seeds = len({r.seed for r in report.results})
    for a in _algorithms(report):
        rates = sorted({r.rate for r in report.results if r.algorithm == a})
        means = [report.mean(a, rate, metric) for rate in rates]
        color, marker, line = STYLES.get(a, ("0.3", "x", "-"))
        ax.errorbar(rates, [m for m, _ in means], yerr=[s for _, s in means], color=color,
                    marker=marker, linestyle=line, capsize=3, label=LABELS.get(a, a))
    ax.set_xlabel("task submission rate (tasks/s)")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title} ({report.spec.tasks} tasks per run)", fontsize=10)
    ax.text(0.01, 0.99, f"mean and s.d. over {seeds} seeds", transform=ax.transAxes, ha="left",
            va="top", fontsize=7, color="0.4")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def all_figures(report: OfflineReport, out: Path) -> list[Path]:
    """Every figure of :data:`FIGURES`."""
    return [figure(report, out, name) for name in FIGURES]


def markdown_table(report: OfflineReport, metric: str, digits: int = 2) -> str:
    """Rows = rates, columns = algorithms, cells = mean over seeds of ``metric``."""
    algos = _algorithms(report)
    rates = sorted({r.rate for r in report.results})
    lines = ["| rate (tasks/s) | " + " | ".join(LABELS.get(a, a) for a in algos) + " |",
             "|---:|" + "---:|" * len(algos)]
    for rate in rates:
        cells = [f"{report.mean(a, rate, metric)[0]:.{digits}f}" for a in algos]
        lines.append(f"| {rate:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
