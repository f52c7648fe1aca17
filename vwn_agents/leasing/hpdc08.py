"""HPDC'08 Table 1 and figures from a sweep's stored results (``vgrid report hpdc08``).

Sotomayor, Keahey, Foster, "Combining batch execution and leasing using virtual machines", HPDC
2008: the 30-day SDSC Blue Horizon trace on 144 nodes with injected advance reservations
(reservation load rho = 5..30 %, 1-4 h, small/medium/large, 24 h notice; the AR set's file stem
``work_RR-dur_Dh-size_S`` names its point), in six configurations (the spec
``examples/sweeps/hpdc08.toml``). Table 1 is the all-best-effort time (the end of the last
best-effort lease, s) of each configuration for rho = 10 / 20 / 30 %, 3-hour medium ARs,
relative to the all-best-effort time of NOVM-NOSR without ARs, in percent.

A configuration named ``CONF.haizea`` (``COMPAT_SUFFIX``) is CONF in vgrid's Haizea-compatible
mode; its cells are relative to ``NOVM-NOSR.haizea``'s baseline. Haizea 1.1's own measured
cells come from the committed table ``examples/haizea/hpdc08-table1-haizea11.csv``.

``points(rows)`` turns store rows into one record per (configuration, rho, hours, size);
``table1(points, suffix, haizea)`` one engine mode's cells with the paper's value, Haizea's and
the differences in percentage points; hpdc08doc.py writes the page docs/experiments/hpdc08.md.
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
#: A configuration name ending in this suffix is the configuration run in vgrid's
#: Haizea-compatible mode (``[general] compat = "haizea-1.1"``): ``NOVM-SR.haizea``.
COMPAT_SUFFIX = ".haizea"
#: (label, configuration-name suffix) of the two engine modes a Table 1 shows.
MODES = (("vgrid", ""), ("vgrid, Haizea-compatible", COMPAT_SUFFIX))
#: The committed table of Haizea 1.1's own results (examples/haizea, read_haizea_reference).
HAIZEA_REFERENCE = "hpdc08-table1-haizea11.csv"
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
    pts = {}
    for k, results in acc.items():
        ref = baselines.get("NOVM-NOSR" + mode_suffix(k[0]))
        abe = sum(x["all_best_effort_s"] for x in results) / len(results)
        a = sum(x["ar_accepted"] for x in results) / len(results)
        rj = sum(x["ar_rejected"] for x in results) / len(results)
        pts[k] = {"all_best_effort_s": abe, "rel_pct": 100.0 * (abe / ref - 1.0) if ref else None,
                  "accepted": a, "rejected": rj, "acceptance_pct": 100.0 * a / (a + rj) if a + rj else None}
    return baselines, pts


def mode_suffix(configuration: str) -> str:
    """``COMPAT_SUFFIX`` when ``configuration`` names a Haizea-compatible run, else ""."""
    return COMPAT_SUFFIX if configuration.endswith(COMPAT_SUFFIX) else ""


class HaizeaReferenceError(ValueError):
    """A bad Haizea reference table: the message names the file, the line and the field."""


def read_haizea_reference(path) -> dict:
    """Haizea 1.1's measured Table 1 cells from the committed CSV (``HAIZEA_REFERENCE``):
    ``{(configuration, rho): {"all_best_effort_s": s or None, "rel_pct": % or None,
    "rejected": n or None, "total": n or None, "cpu_s": s or None, "conf": str, "source": str}}``,
    rho 0 for the baseline. Lines starting with ``#`` are comments. Raises ``HaizeaReferenceError``
    (a ValueError) naming ``file:line: field`` for a bad value or header, OSError when missing."""
    import csv
    from pathlib import Path
    path = Path(path)
    lines = [(i, ln) for i, ln in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if ln.strip() and not ln.startswith("#")]
    if not lines:
        raise HaizeaReferenceError(f"{path}: no header")
    fields = ("configuration", "rho", "all_best_effort_s", "rel_pct", "ar_rejected", "ar_total", "cpu_s",
              "conf", "source")
    header = next(csv.reader([lines[0][1]]))
    if tuple(header) != fields:
        raise HaizeaReferenceError(f"{path}:{lines[0][0]}: header must be {','.join(fields)}")
    out = {}
    for no, ln in lines[1:]:
        row = dict(zip(fields, next(csv.reader([ln]))))
        def num(name, kind=float, row=row, no=no):
            v = (row.get(name) or "").strip()
            try:
                return kind(v) if v else None
            except ValueError:
                raise HaizeaReferenceError(f"{path}:{no}: {name}: not a number: {v!r}") from None
        conf = row["configuration"]
        if conf not in CONFIGURATIONS:
            raise HaizeaReferenceError(f"{path}:{no}: configuration: unknown {conf!r}")
        rho = num("rho", int)
        if rho is None:
            raise HaizeaReferenceError(f"{path}:{no}: rho: missing")
        out[(conf, rho)] = {"all_best_effort_s": num("all_best_effort_s"), "rel_pct": num("rel_pct"),
                            "rejected": num("ar_rejected", int), "total": num("ar_total", int),
                            "cpu_s": num("cpu_s"), "conf": row.get("conf", ""), "source": row.get("source", "")}
    return out


def table1(pts: dict, suffix: str = "", haizea: dict | None = None) -> list[dict]:
    """One cell per (configuration, rho) of Table 1 (3-hour medium ARs) for the engine mode of
    ``suffix`` ("" vgrid's own, ``COMPAT_SUFFIX`` Haizea-compatible): ours, the paper's, ours -
    paper (pp), Haizea 1.1's (from ``haizea``, :func:`read_haizea_reference`) where it was run
    and ours - Haizea (pp); None where missing."""
    haizea = haizea or {}
    cells = []
    for conf in CONFIGURATIONS:
        for i, rho in enumerate(TABLE1_RHO):
            p = pts.get((conf + suffix, rho, 3, "medium"))
            ours = p["rel_pct"] if p else None
            paper = PAPER_TABLE1[conf][i]
            hz = (haizea.get((conf, rho)) or {}).get("rel_pct")
            cells.append({"configuration": conf, "rho": rho, "ours": ours, "paper": paper,
                          "diff_pp": None if ours is None else ours - paper, "haizea": hz,
                          "diff_haizea_pp": None if ours is None or hz is None else ours - hz,
                          "accepted": p["accepted"] if p else None, "rejected": p["rejected"] if p else None})
    return cells


def _f(v, fmt="{:+.2f}") -> str:
    return "-" if v is None else fmt.format(round(v, 2) + 0.0)     # + 0.0: no "-0.00"


def table1_markdown(by_mode: dict, haizea: dict | None = None) -> str:
    """Table 1 as Markdown: per configuration one row per engine mode (``by_mode``: label ->
    :func:`table1` cells) and a row of Haizea 1.1's measured cells; each rho's value / paper /
    difference (pp, from the paper; for Haizea's row its own difference from the paper)."""
    haizea = haizea or {}
    head = "| configuration | engine | " + " | ".join(f"rho {r} %: value | paper | diff pp" for r in TABLE1_RHO) + " |"
    lines = [head, "|---|---|" + "---|---|---|" * len(TABLE1_RHO)]
    for conf in CONFIGURATIONS:
        for label, cells in by_mode.items():
            row = [c for c in cells if c["configuration"] == conf]
            parts = [f"{_f(c['ours'])} | {_f(c['paper'])} | {_f(c['diff_pp'])}" for c in row]
            lines.append(f"| {conf} | {label} | " + " | ".join(parts) + " |")
        hz = [(haizea.get((conf, rho)) or {}).get("rel_pct") for rho in TABLE1_RHO]
        if any(v is not None for v in hz):
            parts = [f"{_f(v)} | {_f(PAPER_TABLE1[conf][i])} | {_f(None if v is None else v - PAPER_TABLE1[conf][i])}"
                     for i, v in enumerate(hz)]
            lines.append(f"| {conf} | Haizea 1.1 | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def haizea_markdown(baselines: dict, by_mode: dict, haizea: dict) -> str:
    """The cells Haizea 1.1 was run for (``haizea``), each engine mode next to it, and who ran
    it (the reference table's source and configuration file)."""
    labels = list(by_mode)
    lines = ["| quantity | " + " | ".join(labels) + " | Haizea 1.1 | paper | " +
             " | ".join(f"{l} - Haizea" for l in labels) + " | Haizea run |",
             "|---|" + "---|" * (2 * len(labels) + 3)]
    hb = (haizea.get(("NOVM-NOSR", 0)) or {}).get("all_best_effort_s")
    ours_b = [baselines.get("NOVM-NOSR" + sfx) for label, sfx in MODES if label in by_mode]
    src = haizea.get(("NOVM-NOSR", 0)) or {}
    lines.append("| NOVM-NOSR baseline, all-best-effort s | " + " | ".join(_f(b, "{:,.0f}") for b in ours_b) +
                 f" | {_f(hb, '{:,.0f}')} | {PAPER_BASELINE_S:,} | " +
                 " | ".join(_f(None if b is None or hb is None else 100 * (b / hb - 1), "{:+.2f} %") for b in ours_b) +
                 f" | {_run(src)} |")
    for (conf, rho), ref in sorted(haizea.items(), key=lambda kv: (CONFIGURATIONS.index(kv[0][0]), kv[0][1])):
        if rho == 0:
            continue
        cells = [next((c for c in by_mode[l] if c["configuration"] == conf and c["rho"] == rho), None) for l in labels]
        rej = ""
        if ref["rejected"] is not None:
            ours = ", ".join(f"{l} {c['rejected']:.0f}" for l, c in zip(labels, cells) if c and c["rejected"] is not None)
            rej = f" (ARs rejected: {ours}; Haizea {ref['rejected']} of {ref['total']})"
        paper = PAPER_TABLE1[conf][TABLE1_RHO.index(rho)] if rho in TABLE1_RHO else None
        lines.append(f"| {conf} rho {rho} %, % vs baseline{rej} | " + " | ".join(_f(c and c["ours"]) for c in cells) +
                     f" | {_f(ref['rel_pct'])} | {_f(paper)} | " +
                     " | ".join(_f(c and c["diff_haizea_pp"], "{:+.2f} pp") for c in cells) + f" | {_run(ref)} |")
    return "\n".join(lines)


def _run(ref: dict) -> str:
    if not ref:
        return "-"
    conf = f"`examples/haizea/{ref['conf']}`" if ref.get("conf") else "configuration not recorded"
    cpu = f", {ref['cpu_s']:,.0f} CPU s" if ref.get("cpu_s") else ""
    return f"{ref.get('source') or '-'}; {conf}{cpu}"


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
