"""Output files of a simulation: per-lease CSV and PNG plots (matplotlib, Agg backend).

``write_outputs(sched, report, out_dir)`` writes ``leases.csv``, ``metrics.csv`` (the run's
metrics, one ``metric,value`` row each; a per-node metric as ``name[node]``), ``utilization.csv``,
``utilization.png`` (fraction of site CPU in use over time), ``gantt.png`` (leases per node,
only for traces small enough to read: <= ``GANTT_MAX_LEASES`` leases and <= ``GANTT_MAX_NODES``
nodes) and, when images were staged, ``disk.csv``/``disk.png`` (MB of images per node over
time, seed 000 Figure 8.4). Returns the list of paths written.

``workload_histograms`` draws two workloads' size, runtime and inter-arrival histograms side by
side (``vgrid workload lublin --plot``).
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .accounting import disk_series, reported, utilization_series  # noqa: E402
from .model import CPU  # noqa: E402

GANTT_MAX_LEASES = 300
GANTT_MAX_NODES = 64
CSV_FIELDS = ["id", "type", "state", "submit_s", "requested_start_s", "start_s", "end_s", "nodes", "wait_s",
              "suspensions", "transfers", "mb_transferred", "origin", "request_type", "deadline_s", "preemptions",
              "overhead_s", "slowdown", "reject_reason", "segments"]


def write_outputs(sched, report: dict, out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [_leases_csv(report, out / "leases.csv"), _metrics_csv(report, out / "metrics.csv")]
    written += _utilization(sched, out)
    if len(reported(sched)) <= GANTT_MAX_LEASES and len(sched.nodes) <= GANTT_MAX_NODES:
        written.append(_gantt(sched, out / "gantt.png"))
    disk = disk_series(sched)
    if disk:
        written += _disk(sched, disk, out)
    return written


def _leases_csv(report: dict, path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for rec in report["leases"]:
            row = dict(rec)
            row["nodes"] = " ".join(rec["nodes"])
            row["segments"] = ";".join(f"{g['start_s']:g}-{g['end_s']:g}@{'+'.join(g['nodes'])}"
                                       for g in rec["segments"])
            w.writerow(row)
    return path


def _metrics_csv(report: dict, path: Path) -> Path:
    """``metric,value`` rows of ``report["metrics"]`` (None as empty; dicts one row per key)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["metric", "value"])
        for k, v in report["metrics"].items():
            for name, value in ([(f"{k}[{n}]", x) for n, x in v.items()] if isinstance(v, dict) else [(k, v)]):
                w.writerow([name, "" if value is None else value])
    return path


def _utilization(sched, out: Path) -> list[Path]:
    total = sum(n.capacity[CPU] for n in sched.nodes)
    series = utilization_series(reported(sched), total)
    csv_path = out / "utilization.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["time_s", "cpu_fraction"])
        w.writerows(series)
    fig, ax = plt.subplots(figsize=(9, 3.5))
    if series:
        xs = [t / 3600 for t, _ in series]
        ax.step(xs, [u for _, u in series], where="post", lw=0.8)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("CPU in use (fraction)")
    ax.set_ylim(0, 1.05)
    ax.set_title("Utilization")
    fig.tight_layout()
    png = out / "utilization.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return [csv_path, png]


def _gantt(sched, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.45 * len(sched.nodes) + 1)))
    cmap = plt.get_cmap("tab20")
    for lease in reported(sched):
        color = cmap(lease.id % 20)
        for seg in lease.segments:
            for node in sorted(set(seg.nodes)):
                ax.broken_barh([(seg.start / 60, (seg.end - seg.start) / 60)], (node - 0.4, 0.8),
                               facecolors=color, edgecolors="black", linewidth=0.4,
                               hatch="//" if lease.is_ar else None)
                ax.text((seg.start + seg.end) / 120, node, str(lease.id), ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(sched.nodes)))
    ax.set_yticklabels([n.name for n in sched.nodes])
    ax.set_xlabel("time (min)")
    ax.set_title("Leases per node (hatched: advance reservations)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _disk(sched, disk: dict, out: Path) -> list[Path]:
    csv_path = out / "disk.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["time_s", "node", "mb"])
        for n, series in sorted(disk.items()):
            for t, mb in series:
                w.writerow([t, sched.nodes[n].name, mb])
    fig, ax = plt.subplots(figsize=(9, 3.5))
    horizon = max([l.end_s for l in reported(sched) if l.end_s is not None] + [t for v in disk.values() for t, _ in v])
    for n, series in sorted(disk.items())[:GANTT_MAX_NODES]:
        pts = [(0.0, 0.0)] + series + [(horizon, series[-1][1])]  # from the start to the end
        ax.step([t / 3600 for t, _ in pts], [mb for _, mb in pts], where="post", lw=0.8,
                label=sched.nodes[n].name)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("image MB on node")
    ax.set_title("Disk usage per node")
    if len(disk) <= 16:
        ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    png = out / "disk.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return [csv_path, png]


def workload_histograms(generated: list, reference: list, stats: dict, path: str | Path,
                        labels: tuple = ("generated", "reference")) -> Path:
    """PNG of two workloads side by side (columns) for job size (nodes, log2 bins), runtime and
    inter-arrival time (s, log10 bins), rows sharing bins and y-axes; ``stats`` is
    ``lublin.compare``'s dict, its KS statistic and bound are printed in each row's titles.
    Jobs are ``lublin.ModelJob``s."""
    import numpy as np

    def columns(jobs):
        t = np.array([j.submit_s for j in jobs], dtype=float)
        return {"size": np.array([j.size for j in jobs], dtype=float),
                "runtime_s": np.array([j.runtime_s for j in jobs], dtype=float),
                "interarrival_s": np.maximum(np.diff(t), 1.0)}
    data = [columns(generated), columns(reference)]
    rows = (("size", "job size (nodes)", 2.0), ("runtime_s", "runtime (s)", 10.0),
            ("interarrival_s", "inter-arrival time (s)", 10.0))
    fig, axes = plt.subplots(len(rows), 2, figsize=(10, 9), sharey="row")
    for r, (key, label, base) in enumerate(rows):
        hi = max(float(d[key].max()) for d in data)
        bins = base ** np.linspace(0, math.log(max(hi, base), base) + 1e-9, 40)
        st = stats.get(key, {})
        for c, (d, name) in enumerate(zip(data, labels)):
            ax = axes[r][c]
            ax.hist(d[key], bins=bins, weights=np.full(len(d[key]), 1 / len(d[key])),
                    color=("tab:blue", "tab:orange")[c])
            ax.set_xscale("log", base=base)
            ax.set_xlabel(label)
            ax.set_title(f"{name} ({len(d[key]):,} values)"
                         + (f"  KS D={st['ks']:.3f} (bound {st['bound']:.3f})" if st and c == 0 else ""),
                         fontsize=9)
        axes[r][0].set_ylabel("fraction of jobs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
