"""The simulated federation's outputs: ``federation_sim.json``, ``federation_sim.csv`` and two
PNG figures (matplotlib, Agg), from :func:`broker.gridsim.fedtrace.run_all`'s runs.

- ``federation_sim_rates.png``: rejected and forwarded fractions per run (bars, %);
- ``federation_sim_wait.png``: mean wait per home Grid per run (bars, hours) and the wait CDF
  of every run (log time axis, jobs that ran).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .fedtrace import run_label  # noqa: E402


def write_outputs(runs: Sequence, out: Path, meta: dict) -> list[Path]:
    """Write the JSON document (``meta`` + per run its label, config and metrics), the CSV
    (one row per run and home Grid, plus ``all``) and the figures; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    doc = {**meta, "runs": [{"run": run_label(c), "peering": c.peering, "threshold_s": c.threshold_s,
                             "metrics": m} for c, m, _ in runs]}
    paths = [out / "federation_sim.json", out / "federation_sim.csv"]
    paths[0].write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    with paths[1].open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["run", "home", "jobs", "rejected", "rejected_fraction", "forwarded_fraction",
                    "wait_mean_s", "wait_p50_s", "wait_p95_s"])
        for c, m, _ in runs:
            for home, s in [("all", m["all"]), *m["by_home"].items()]:
                w.writerow([run_label(c), home, s["jobs"], s["rejected"], f"{s['rejected_fraction']:.5f}",
                            f"{s['forwarded_fraction']:.5f}", f"{s['wait_mean_s']:.1f}",
                            f"{s['wait_p50_s']:.1f}", f"{s['wait_p95_s']:.1f}"])
    labels = [run_label(c) for c, _, _ in runs]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    x = range(len(runs))
    ax.bar([i - 0.2 for i in x], [m["all"]["rejected_fraction"] * 100 for _, m, _ in runs], 0.4,
           label="rejected", color="tab:red")
    ax.bar([i + 0.2 for i in x], [m["all"]["forwarded_fraction"] * 100 for _, m, _ in runs], 0.4,
           label="forwarded", color="tab:blue")
    ax.set_xticks(list(x), labels, rotation=15, fontsize=8)
    ax.set_ylabel("% of jobs")
    ax.set_title(meta.get("title", "simulated federation"), fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "federation_sim_rates.png", dpi=110)
    plt.close(fig)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    homes = list(runs[0][1]["by_home"])
    width = 0.8 / len(runs)
    for k, (c, m, _) in enumerate(runs):
        a1.bar([h + k * width for h in range(len(homes))],
               [m["by_home"][g]["wait_mean_s"] / 3600 for g in homes], width, label=labels[k])
        waits = sorted(max(1.0, j.start_s - j.submit_s) for j in runs[k][2].jobs if not j.rejected)
        n = len(waits)
        a2.step(waits, [(i + 1) / n for i in range(n)], where="post", label=labels[k])
    a1.set_xticks([h + 0.4 - width / 2 for h in range(len(homes))], [f"home Grid {g}" for g in homes])
    a1.set_ylabel("mean wait (h)")
    a1.legend(fontsize=7)
    a2.set_xscale("log")
    a2.set_xlabel("wait (s; 0 drawn at 1 s)")
    a2.set_ylabel("fraction of jobs that ran")
    a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "federation_sim_wait.png", dpi=110)
    plt.close(fig)
    return paths + [out / "federation_sim_rates.png", out / "federation_sim_wait.png"]
