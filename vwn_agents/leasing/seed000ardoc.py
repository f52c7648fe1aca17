"""Seed 000 Section 8.1 on docs/experiments/seed000.md: client satisfaction of the staging
strategies (Figures 8.2, 8.3) and disk usage of EDF against EDF/JIT (Figure 8.4).

``satisfaction_rows`` are :func:`seed000_ar.satisfaction` results, ``disk_rows``
:func:`seed000_ar.disk_usage` results; each function writes one PNG or returns Markdown.
"""
from __future__ import annotations

import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .seed000_ar import STRATEGIES  # noqa: E402

def save_png(fig, out: Path, name: str, dpi: int = 100) -> Path:
    """Lay ``fig`` out, write ``out/name`` (creating ``out``), close it; the path."""
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


LABELS = {"edf": "EDF (scheduled)", "jit": "JIT", "aggressive": "Aggressive", "job-style": "Job-style"}


def satisfaction_figure(rows, out: Path) -> Path:
    """``seed000_fig8_2_8_3.png``: per AR, the fraction of its reserved time the client got,
    per strategy, Trace I left and Trace II right."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, kind, fig_no in zip(axes, ("I", "II"), ("8.2", "8.3")):
        for i, s in enumerate(STRATEGIES):
            vals = [v for r in rows if r["trace"] == kind and r["strategy"] == s for v in r["satisfaction"]]
            xs = [i + 0.3 * ((k % 7) / 6 - 0.5) for k in range(len(vals))]
            ax.scatter(xs, [100 * v for v in vals], s=10, alpha=0.6)
            if vals:
                ax.hlines(100 * statistics.fmean(vals), i - 0.3, i + 0.3, color="k", lw=1.5)
        ax.set_xticks(range(len(STRATEGIES)), [LABELS[s] for s in STRATEGIES], fontsize=8)
        ax.set_title(f"Figure {fig_no}: Trace {kind} (dots: ARs, bar: mean)", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("client satisfaction (% of the reserved time)")
    return save_png(fig, out, "seed000_fig8_2_8_3.png")


def disk_figure(rows, out: Path) -> Path:
    """``seed000_fig8_4.png``: images on disk (MB) over time on the node with the highest peak,
    EDF against EDF/JIT (first seed)."""
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for s, color in (("edf", "tab:red"), ("edf-jit", "tab:blue")):
        r = next((r for r in rows if r["strategy"] == s), None)
        if r is None or not r["series"]:
            continue
        ts = [t / 3600 for t, _ in r["series"]]
        ax.step(ts, [v / 1000 for _, v in r["series"]], where="post", color=color,
                label=f"{s.upper()} (node P{r['node'] + 1}, peak {r['peak_mb'] / 1000:.1f} GB)")
    ax.set_xlabel("time (h)")
    ax.set_ylabel("images on disk (GB)")
    ax.set_title("Figure 8.4: disk usage with EDF and EDF/JIT (94 ARs, 10 h)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_png(fig, out, "seed000_fig8_4.png")


def satisfaction_table(rows) -> str:
    """Per trace and strategy: ARs, mean satisfaction, share of ARs fully satisfied, worst."""
    lines = ["| trace | strategy | ARs | mean satisfaction | ARs at 100 % | worst |", "|---|---|---:|---:|---:|---:|"]
    for kind in ("I", "II"):
        for s in STRATEGIES:
            vals = [v for r in rows if r["trace"] == kind and r["strategy"] == s for v in r["satisfaction"]]
            if vals:
                full = sum(1 for v in vals if v >= 0.9999)
                lines.append(f"| {kind} | {LABELS[s]} | {len(vals)} | {100 * statistics.fmean(vals):.1f} % | "
                             f"{100 * full / len(vals):.0f} % | {100 * min(vals):.1f} % |")
    return "\n".join(lines)


def disk_table(rows) -> str:
    """Peak disk per node (max over nodes and time), mean over seeds, per strategy."""
    lines = ["| strategy | peak images on one node (GB), ours | thesis |", "|---|---:|---:|"]
    for s, theirs in (("edf", "31.2"), ("edf-jit", "2.4")):
        peaks = [r["peak_mb"] for r in rows if r["strategy"] == s]
        if peaks:
            lines.append(f"| {s.upper()} | {statistics.fmean(peaks) / 1000:.1f} (max {max(peaks) / 1000:.1f}) | {theirs} |")
    return "\n".join(lines)
