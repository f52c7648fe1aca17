"""HPDC'08 Table 1 and figures from a sweep's stored results (``vgrid report hpdc08``).

Sotomayor, Keahey, Foster, "Combining batch execution and leasing using virtual machines", HPDC
2008: the 30-day SDSC Blue Horizon trace on 144 nodes with injected advance reservations
(reservation load rho = 5..30 %, 1-4 h, small/medium/large, 24 h notice; the AR set's file stem
``work_RR-dur_Dh-size_S`` names its point), in six configurations (the spec
``examples/sweeps/hpdc08.toml``). Table 1 is the all-best-effort time (the end of the last
best-effort lease, s) of each configuration for rho = 10 / 20 / 30 %, 3-hour medium ARs,
relative to the all-best-effort time of NOVM-NOSR without ARs, in percent.

``points(rows)`` turns store rows into one record per (configuration, rho, hours, size);
``table1(points)`` the cells with the paper's value and the difference in percentage points;
``markdown(...)`` the page docs/experiments/hpdc08.md.
"""
from __future__ import annotations

import re

CONFIGURATIONS = ("NOVM-NOSR", "NOVM-SR", "VM-PREDEPLOY", "VM-MULT", "VM-REUSE-UNIFORM", "VM-REUSE-SKEWED")
TABLE1_RHO = (10, 20, 30)
#: The paper's Table 1: all-best-effort relative to its NOVM-NOSR baseline, percent, rho = 10/20/30 %.
PAPER_BASELINE_S = 2_674_265
PAPER_TABLE1 = {"NOVM-NOSR": (3.91, 8.66, 23.93), "NOVM-SR": (-0.76, 0.10, 4.14),
                "VM-PREDEPLOY": (-0.27, 1.58, 7.19), "VM-MULT": (0.60, 3.95, 12.21),
                "VM-REUSE-UNIFORM": (0.03, 3.15, 10.74), "VM-REUSE-SKEWED": (-0.36, 2.48, 10.43)}
#: Haizea 1.1 on the same inputs (issue 16): baseline, and the cells it was run for.
HAIZEA_BASELINE_S = 2_668_402
HAIZEA_TABLE1 = {("NOVM-NOSR", 10): 4.57, ("NOVM-NOSR", 30): 24.80, ("NOVM-SR", 10): -0.60}
HAIZEA_REJECTED = {("NOVM-NOSR", 30): (27, 291)}
_AR_SET = re.compile(r"work_(\d+)-dur_(\d+)h-size_\d?(\w+)$")


def ar_point(inject: str) -> tuple[int, int, str] | None:
    """(rho %, hours, size) of an AR set's name (``work_10-dur_3h-size_2medium`` -> (10, 3,
    "medium")); None for "none" or another name."""
    m = _AR_SET.search(inject)
    return (int(m.group(1)), int(m.group(2)), m.group(3)) if m else None


def points(rows) -> tuple[dict, dict]:
    """From store rows (``SweepStore.rows``, status done): ``(baselines, pts)`` with
    ``baselines[configuration]`` = the all-best-effort s without ARs and ``pts[(configuration,
    rho, hours, size)]`` = {all_best_effort_s, rel_pct (vs NOVM-NOSR's baseline), accepted,
    rejected, acceptance_pct}. Several seeds of one point are averaged."""
    base, acc = {}, {}
    for r in rows:
        if r["status"] != "done":
            continue
        conf, res = r["configuration"], r["result"]
        pt = ar_point(r["inject"])
        if r["inject"] == "none":
            base.setdefault(conf, []).append(res["all_best_effort_s"])
        elif pt is not None:
            acc.setdefault((conf, *pt), []).append(res)
    baselines = {c: sum(v) / len(v) for c, v in base.items()}
    ref = baselines.get("NOVM-NOSR")
    pts = {}
    for k, results in acc.items():
        abe = sum(x["all_best_effort_s"] for x in results) / len(results)
        a = sum(x["ar_accepted"] for x in results) / len(results)
        rj = sum(x["ar_rejected"] for x in results) / len(results)
        pts[k] = {"all_best_effort_s": abe, "rel_pct": 100.0 * (abe / ref - 1.0) if ref else None,
                  "accepted": a, "rejected": rj, "acceptance_pct": 100.0 * a / (a + rj) if a + rj else None}
    return baselines, pts


def table1(pts: dict) -> list[dict]:
    """One cell per (configuration, rho) of Table 1 (3-hour medium ARs): ours, the paper's,
    ours - paper (pp), Haizea 1.1's where known and ours - Haizea (pp); None where missing."""
    cells = []
    for conf in CONFIGURATIONS:
        for i, rho in enumerate(TABLE1_RHO):
            p = pts.get((conf, rho, 3, "medium"))
            ours = p["rel_pct"] if p else None
            paper = PAPER_TABLE1[conf][i]
            hz = HAIZEA_TABLE1.get((conf, rho))
            cells.append({"configuration": conf, "rho": rho, "ours": ours, "paper": paper,
                          "diff_pp": None if ours is None else ours - paper, "haizea": hz,
                          "diff_haizea_pp": None if ours is None or hz is None else ours - hz,
                          "accepted": p["accepted"] if p else None, "rejected": p["rejected"] if p else None})
    return cells


def _f(v, fmt="{:+.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def table1_markdown(cells: list[dict]) -> str:
    """Table 1 as Markdown: per configuration, each rho's ours / paper / difference (pp)."""
    head = "| configuration | " + " | ".join(f"rho {r} %: ours | paper | diff pp" for r in TABLE1_RHO) + " |"
    lines = [head, "|---|" + "---|---|---|" * len(TABLE1_RHO)]
    for conf in CONFIGURATIONS:
        row = [c for c in cells if c["configuration"] == conf]
        parts = [f"{_f(c['ours'])} | {_f(c['paper'])} | {_f(c['diff_pp'])}" for c in row]
        lines.append(f"| {conf} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def haizea_markdown(baselines: dict, cells: list[dict]) -> str:
    """The cells Haizea 1.1 was run for, ours next to it, and the baselines."""
    lines = ["| quantity | vgrid | Haizea 1.1 | paper | vgrid - Haizea |", "|---|---|---|---|---|"]
    ours_b = baselines.get("NOVM-NOSR")
    lines.append(f"| NOVM-NOSR baseline, all-best-effort s | {_f(ours_b, '{:,.0f}')} | {HAIZEA_BASELINE_S:,} | "
                 f"{PAPER_BASELINE_S:,} | {_f(None if ours_b is None else 100 * (ours_b / HAIZEA_BASELINE_S - 1), '{:+.2f} %')} |")
    for c in cells:
        if c["haizea"] is None:
            continue
        extra = ""
        if (c["configuration"], c["rho"]) in HAIZEA_REJECTED and c["rejected"] is not None:
            rj, tot = HAIZEA_REJECTED[(c["configuration"], c["rho"])]
            extra = f" (ARs rejected: vgrid {c['rejected']:.0f} of {c['accepted'] + c['rejected']:.0f}, Haizea {rj} of {tot})"
        lines.append(f"| {c['configuration']} rho {c['rho']} %, % vs baseline{extra} | {_f(c['ours'])} | "
                     f"{_f(c['haizea'])} | {_f(c['paper'])} | {_f(c['diff_haizea_pp'], '{:+.2f} pp')} |")
    return "\n".join(lines)


def grid_markdown(pts: dict, metric: str, fmt: str) -> str:
    """Every (rho, hours, size) point as rows, one column per configuration."""
    keys = sorted({k[1:] for k in pts}, key=lambda k: (k[0], k[1], ("small", "medium", "large").index(k[2])
                                                       if k[2] in ("small", "medium", "large") else 9))
    lines = ["| rho % | hours | size | " + " | ".join(CONFIGURATIONS) + " |", "|---|---|---|" + "---|" * len(CONFIGURATIONS)]
    for rho, hours, size in keys:
        vals = [pts.get((c, rho, hours, size), {}).get(metric) for c in CONFIGURATIONS]
        lines.append(f"| {rho} | {hours} | {size} | " + " | ".join(_f(v, fmt) for v in vals) + " |")
    return "\n".join(lines)


def within(cells: list[dict], pp: float = 1.0) -> tuple[int, int]:
    """(cells within ``pp`` of the paper or of Haizea 1.1, cells computed)."""
    done = [c for c in cells if c["ours"] is not None]
    ok = [c for c in done if abs(c["diff_pp"]) <= pp or (c["diff_haizea_pp"] is not None and abs(c["diff_haizea_pp"]) <= pp)]
    return len(ok), len(done)
