"""PNG figures of the HPDC'08 sweep (``hpdc08.points``), laid out as the paper's figures.

``write_figures(pts, out_dir)`` draws, for the all-best-effort time (percent relative to the
NOVM-NOSR baseline) and for the AR acceptance rate (percent of ARs accepted), one figure with a
panel per AR duration (1-4 h, mean over the three sizes) and one with a panel per AR size
(small/medium/large, mean over the four durations): x = reservation load rho (%), a line per
configuration. Files: ``hpdc08_besteffort_by_duration.png``, ``hpdc08_besteffort_by_size.png``,
``hpdc08_acceptance_by_duration.png``, ``hpdc08_acceptance_by_size.png``. Returns their paths.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .hpdc08 import CONFIGURATIONS  # noqa: E402

METRICS = {"besteffort": ("rel_pct", "all-best-effort vs NOVM-NOSR baseline (%)"),
           "acceptance": ("acceptance_pct", "ARs accepted (%)")}
SIZES = ("small", "medium", "large")


def _series(pts, conf, metric, pick):
    by_rho: dict = {}
    for (c, rho, hours, size), p in pts.items():
        if c == conf and pick(hours, size) and p.get(metric) is not None:
            by_rho.setdefault(rho, []).append(p[metric])
    xs = sorted(by_rho)
    return xs, [sum(by_rho[x]) / len(by_rho[x]) for x in xs]


def write_figures(pts: dict, out_dir, prefix: str = "hpdc08_") -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hours = sorted({k[2] for k in pts})
    sizes = [s for s in SIZES if any(k[3] == s for k in pts)]
    written = []
    if not pts:
        return written
    for stem, (metric, ylabel) in METRICS.items():
        for by, panels in (("duration", [(f"{h} h ARs", (lambda hh: lambda h, s: h == hh)(h)) for h in hours]),
                           ("size", [(f"{s} ARs", (lambda ss: lambda h, s: s == ss)(s)) for s in sizes])):
            fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.3), sharey=True, squeeze=False)
            for ax, (title, pick) in zip(axes[0], panels):
                for conf in CONFIGURATIONS:
                    xs, ys = _series(pts, conf, metric, pick)
                    if xs:
                        ax.plot(xs, ys, marker="o", ms=3, lw=1, label=conf)
                ax.set_title(title, fontsize=9)
                ax.set_xlabel("reservation load rho (%)")
                ax.grid(alpha=0.3)
            axes[0][0].set_ylabel(ylabel)
            axes[0][-1].legend(fontsize=6)
            fig.tight_layout()
            path = out / f"{prefix}{stem}_by_{by}.png"
            fig.savefig(path, dpi=90)
            plt.close(fig)
            written.append(path)
    return written
