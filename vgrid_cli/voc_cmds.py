"""``vgrid voc-sim``: seed 003's VOC experiments (Figures 7, 10, 11) in simulated time.

A click adapter over ``vwn_agents.voc.sim`` (the same watchdog and policies the CE agent runs
with ``scheduler = "voc"``): runs each workload under each policy, prints a table (or ``--json``)
and, with ``--out DIR``, writes ``voc_summary.json``, ``voc_series.csv`` and ``voc_<workload>.png``.
Exit codes: 0 ok; 2 usage error (unknown workload, policy or option) or unwritable output.
"""
from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from vwn_agents.voc.policies import POLICIES
from vwn_agents.voc.sim import WORKLOADS, simulate

from .common import fail as _fail


def _options(pairs: tuple[str, ...]) -> dict:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"expected NAME=VALUE, got {pair!r}", param_hint="--damped")
        try:
            out[name.strip()] = float(value) if "." in value else int(value)
        except ValueError:
            raise click.BadParameter(f"{name}: expected a number, got {value!r}", param_hint="--damped") from None
    return out


@click.command("voc-sim")
@click.option("--workloads", default=",".join(WORKLOADS), show_default=True,
              help=f"workloads to run ({', '.join(WORKLOADS)})")
@click.option("--policies", default="greedy,damped", show_default=True, help=f"policies ({', '.join(POLICIES)})")
@click.option("--damped", "damped_opts", multiple=True, metavar="NAME=VALUE",
              help="an option of the damped policy, e.g. keep_warm_s=60 (repeatable)")
@click.option("--seed", type=int, default=1, show_default=True, help="seed of the simulated boot delays")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="write voc_summary.json, voc_series.csv and one PNG per workload here")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
def voc_sim_cmd(workloads, policies, damped_opts, seed, out_dir, as_json) -> None:
    """Reproduce seed 003's VOC watchdog experiments (Figures 7, 10, 11) and compare policies."""
    names = [w.strip() for w in workloads.split(",") if w.strip()]
    pols = [p.strip() for p in policies.split(",") if p.strip()]
    bad = [w for w in names if w not in WORKLOADS] + [p for p in pols if p not in POLICIES]
    if bad or not names or not pols:
        _fail(f"unknown workload or policy {bad}; workloads {list(WORKLOADS)}, policies {list(POLICIES)}", 2)
    opts = _options(damped_opts)
    results = {}
    try:
        for w in names:
            results[w] = [simulate(w, p, seed=seed, **(opts if p == "damped" else {})) for p in pols]
    except ValueError as exc:
        _fail(str(exc), 2)
    summary = [r.summary() | {"figure": WORKLOADS[r.workload].figure} for rs in results.values() for r in rs]
    if out_dir:
        from vwn_agents.voc.plots import plot_workload, write_series_csv
        out = Path(out_dir)
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / "voc_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            write_series_csv([r for rs in results.values() for r in rs], out / "voc_series.csv")
            for w, rs in results.items():
                plot_workload(rs, f"seed 003 {WORKLOADS[w].figure}: {w}", out / f"voc_{w}.png")
        except OSError as exc:
            _fail(f"{out}: {exc.strerror or exc}", 2)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    table = Table("workload", "figure", "policy", "makespan s", "vacated s", "boots", "node-s", "mean wait s")
    for s in summary:
        table.add_row(s["workload"], s["figure"], s["policy"], f"{s['makespan_s']:g}",
                      "never" if s["vacated_s"] is None else f"{s['vacated_s']:g}", str(s["boots"]),
                      f"{s['node_s']:g}", f"{s['mean_wait_s']:g}")
    Console().print(table)
