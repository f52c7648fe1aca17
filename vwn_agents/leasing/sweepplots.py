"""PNG figures of a preemption sweep (``sweep.py``), laid out as seed 002 Figures 6-8.

``write_figures(rows, out_dir, prefix)`` draws one PNG per metric -- local and external rejection
rate (Table I), utilization eq. (11) (Figure 6), number of preemptions (Figure 7), mean makespan of
best-effort external leases eq. (13) (Figure 8) -- each with a panel per swept axis, (a) % best-effort
external, (b) % deadline-constrained external, (c) % local requests, (d) arrival rate, and a line per policy (mean
over seeds, error bars the 95 % Student-t confidence interval of that mean, ``sweep.mean_ci``).
Returns the paths written. Rows are the CSV's (strings or numbers).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .sweep import AXES, POLICIES, _num, mean_ci  # noqa: E402

FIGURES = {  # file stem -> (metric, y label, scale)
    "local_rejection": ("local_rejection_rate", "local rejection rate (%)", 100.0),
    "external_rejection": ("external_rejection_rate", "external rejection rate (%)", 100.0),
    "utilization": ("utilization_eq11", "utilization, eq. (11) (%)", 100.0),
    "preemptions": ("preemptions", "lease preemptions", 1.0),
    "makespan": ("makespan_external_s", "BE makespan, eq. (13) (h)", 1 / 3600),
}
XLABEL = {"best-effort": "(a) best-effort external requests (%)",
          "deadline": "(b) deadline-constrained external requests (%)",
          "local": "(c) local requests (% of workload)",
          "arrival": "(d) arrival rate (% of 3,000 per 14 days)"}


def _series(rows, axis, policy, metric):
    pts = {}
    for r in rows:
        if r["axis"] == axis and r["policy"] == policy and _num(r[metric]) is not None:
            pts.setdefault(int(float(r["value"])), []).append(_num(r[metric]))
    xs = sorted(pts)
    return xs, [pts[x] for x in xs]


def _seeds(rows, axis) -> str:
    """The number of seeds per point of ``axis`` ("3" or "3-10" when it varies)."""
    counts: dict = {}
    for r in rows:
        if r["axis"] == axis:
            counts.setdefault((r["value"], r["policy"]), set()).add(str(r["seed"]))
    ns = sorted({len(s) for s in counts.values()}) or [0]
    return str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"


def write_figures(rows, out_dir, prefix: str = "sweep_") -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    axes_present = [a for a in AXES if any(r["axis"] == a for r in rows)]
    if not axes_present:
        return written
    for stem, (metric, ylabel, scale) in FIGURES.items():
        fig, panels = plt.subplots(1, len(axes_present), figsize=(4.2 * len(axes_present), 3.4), squeeze=False)
        for ax, axis in zip(panels[0], axes_present):
            for policy in POLICIES:
                xs, vals = _series(rows, axis, policy, metric)
                if not xs:
                    continue
                ci = [mean_ci(v) for v in vals]
                mean = [scale * m for m, _ in ci]
                half = [scale * h for _, h in ci]
                ax.errorbar(xs, mean, yerr=half, marker="o", ms=3, capsize=2, lw=1, label=policy.upper())
            ax.set_xlabel(XLABEL[axis])
            ax.set_title(f"mean, 95 % CI over {_seeds(rows, axis)} seeds", fontsize=8)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        panels[0][0].legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{prefix}{stem}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
