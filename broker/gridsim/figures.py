"""seed 004's Figures 8a, 8b, 9, 10 and 11 (and the refresh ablation) as PNG, with matplotlib.

Every function takes a :class:`broker.gridsim.report.Report` and a directory and returns the
path written. matplotlib runs on the non-interactive Agg backend (no display needed).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .report import Report, series_name  # noqa: E402

LABELS = {"max": "Max Rank", "fuzzy": "Fuzzy Rank", "sfete": "SFETE + feedback",
          "sfete-nofb": "SFETE without feedback"}
STYLES = {"max": ("tab:red", "s"), "fuzzy": ("tab:orange", "^"), "sfete": ("tab:blue", "o"),
          "sfete-nofb": ("tab:green", "D")}


def _save(fig, out: Path, name: str, tight: bool = True) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _by_rate(report: Report, out: Path, metric: str, name: str, title: str, ylabel: str,
             scale: float) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for policy in ("max", "fuzzy", "sfete"):
        pts = report.series[policy]
        rates = sorted(pts)
        color, marker = STYLES[policy]
        ax.errorbar(rates, [getattr(pts[r], metric) / scale for r in rates],
                    yerr=[getattr(pts[r], metric + "_sd") / scale for r in rates], marker=marker,
                    color=color, label=LABELS[policy], capsize=3)
    ax.set_xlabel("job submission rate (jobs/min)")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title} (ISM refresh {report.params.ism_refresh_s:g} s)", fontsize=10)
    ax.text(0.99, 0.01, f"mean and s.d. over {report.params.seeds} runs", transform=ax.transAxes,
            ha="right", va="bottom", fontsize=7, color="0.4")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, out, name)


def fig9(report: Report, out: Path) -> Path:
    """Figure 9: job percentage per CE for (a) Max, (b) Fuzzy, (c) SFETE, per rate."""
    caps = {ce.ce_id: ce.capacity for ce in report.ces}
    total = sum(caps.values())
    ce_ids = list(caps)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.4), sharey=True)
    width = 0.8 / len(ce_ids)
    for ax, policy, tag in zip(axes, ("max", "fuzzy", "sfete"), "abc"):
        pts = report.series[policy]
        rates = sorted(pts)
        for i, ce in enumerate(ce_ids):
            xs = [k + (i - (len(ce_ids) - 1) / 2) * width for k in range(len(rates))]
            ax.bar(xs, [pts[r].job_share[ce] * 100 for r in rates], width,
                   label=_short(ce), color=f"C{i % 10}")
            ax.axhline(caps[ce] / total * 100, color=f"C{i % 10}", ls="--", lw=0.8)
        ax.set_xticks(range(len(rates)), [f"{r:g}" for r in rates])
        ax.set_xlabel("job submission rate (jobs/min)")
        ax.set_title(f"({tag}) {LABELS[policy]}")
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("jobs per CE (%)  -- dashed: capacity share")
    if len(ce_ids) <= 12:
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=len(ce_ids),
                   fontsize=8)
    else:
        fig.tight_layout()
    return _save(fig, out, "fig9_distribution.png", tight=False)


def _short(ce_id: str) -> str:
    host = ce_id.split(":")[0]
    return host.split(".")[0] if host.endswith(".vgrid.local") else host


def fig11(report: Report, out: Path) -> Path:
    """Figure 11: queue time (and total delay) against the maximum number of VWNs per CE."""
    pts = report.series["sfete-vwn"]
    ks = sorted(pts)
    base = next(iter(report.series["sfete-lrms"].values()))
    p = report.params
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(ks, [pts[k].mean_queue_s / 60 for k in ks], "o-", color="tab:blue",
            label="queue time, VWNs")
    ax.plot(ks, [pts[k].mean_delay_s / 60 for k in ks], "s-", color="tab:purple",
            label="total delay, VWNs")
    ax.axhline(base.mean_queue_s / 60, color="tab:blue", ls=":", label="queue time, LRMS (no VWN)")
    ax.axhline(base.mean_delay_s / 60, color="tab:purple", ls=":", label="total delay, LRMS (no VWN)")
    ax.set_xlabel("maximum number of VWNs per CE (K)")
    ax.set_ylabel("minutes")
    ax.set_title(f"SFETE + VWNs, {p.vwn_rate:g} jobs/min, F={p.vwn_overhead:g}, "
                 f"start-up {p.vwn_startup_s:g} s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out, "fig11_vwns.png")


def ablation(report: Report, out: Path) -> Path:
    """SFETE with and without feedback against Max Rank at each ablation refresh interval."""
    refreshes = report.params.ablation_refresh_s
    fig, axes = plt.subplots(1, len(refreshes), figsize=(4.5 * len(refreshes), 4), sharey=True)
    axes = list(axes) if len(refreshes) > 1 else [axes]
    for ax, r in zip(axes, refreshes):
        for policy, fb in (("max", True), ("sfete", False), ("sfete", True)):
            key = "sfete-nofb" if not fb else policy
            pts = report.series[series_name(policy, fb, r)]
            rates = sorted(pts)
            color, marker = STYLES[key]
            ax.plot(rates, [pts[x].mean_delay_s / 60 for x in rates], marker=marker, color=color,
                    label=LABELS[key])
        ax.set_title(f"ISM refresh R = {r:g} s")
        ax.set_xlabel("job submission rate (jobs/min)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("average job total delay (min)")
    axes[0].legend(fontsize=8)
    return _save(fig, out, "ablation_refresh.png")


def distribution(counts: dict[str, int], shares: dict[str, float], path: str | Path,
                 title: str) -> Path:
    """One run's job share per CE against its capacity share (bar chart; top 40 CEs by share)."""
    total = max(1, sum(counts.values()))
    ces = sorted(shares, key=lambda c: -shares[c])[:40]
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(ces) + 2), 4))
    xs = range(len(ces))
    ax.bar([x - 0.2 for x in xs], [counts[c] / total * 100 for c in ces], 0.4, label="jobs")
    ax.bar([x + 0.2 for x in xs], [shares[c] * 100 for c in ces], 0.4, label="capacity")
    ax.set_xticks(list(xs), [_short(c) for c in ces], rotation=60 if len(ces) > 6 else 0,
                  fontsize=7 if len(ces) > 6 else 9)
    ax.set_ylabel("% of jobs / of capacity")
    ax.set_title(title)
    ax.legend()
    path = Path(path)
    return _save(fig, path.parent, path.name)


def write_figures(report: Report, out: str | Path) -> list[Path]:
    """Write every figure of the report into ``out``; the paths written."""
    out = Path(out)
    return [
        _by_rate(report, out, "mean_delay_s", "fig8a_delay.png", "Fig. 8a: average job total delay",
                 "average job total delay (min)", 60),
        _by_rate(report, out, "makespan_s", "fig8b_makespan.png", "Fig. 8b: makespan", "makespan (h)",
                 3600),
        fig9(report, out),
        _by_rate(report, out, "mean_queue_s", "fig10_queue.png", "Fig. 10: time in CE queues",
                 "average queue time at the CE (min)", 60),
        fig11(report, out),
        ablation(report, out),
    ]
