"""``vgrid report federation``: the simulated federation on the LCG trace (issue 15).

A thin adapter over :mod:`broker.gridsim.fedtrace` (the split and the runs) and
:mod:`broker.gridsim.fedfigures` (JSON, CSV, PNG). Exit codes: 0 ok; 1 a property of the runs
failed (peering rejected more than isolation, a job looped or was counted twice); 2 bad input.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from broker.gridsim.engine import SimulationError
from broker.gridsim.federation import FedConfig
from broker.gridsim.model import SpecError

from .common import exit_on
from .gridsim_cmds import _progress

console = Console()


def _floats(text: str, opt: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"expected numbers separated by commas, got {text!r}", param_hint=opt) from None


@click.command("federation")
@click.option("--trace", default="lcg-2005-1", show_default=True, help="SWF trace (file or bundled name)")
@click.option("--jobs", "limit", type=click.IntRange(0), default=40000, show_default=True,
              help="the first N jobs of the trace (0: all)")
@click.option("--cpu-scale", type=float, default=0.1, show_default=True,
              help="CPUs of a site = its peak concurrency in the trace x this")
@click.option("--weights", default="60,30,10", show_default=True,
              help="share of the users' jobs submitted to Grids a, b, c (users are split, not jobs)")
@click.option("--thresholds", default="-1,3600,600", show_default=True,
              help="forward_wait_threshold_s of the peering runs (< 0: only unmatched jobs leave)")
@click.option("--max-hops", type=click.IntRange(0), default=2, show_default=True, help="federation_max_hops")
@click.option("--share", "share_fraction", type=click.FloatRange(0, 1), default=0.25, show_default=True,
              help="share_cpus a Grid gives each peer, as a fraction of its CPUs")
@click.option("--gateway-delay", "gateway_delay_s", type=float, default=2.0, show_default=True,
              help="seconds one forwarding hop takes")
@click.option("--match-expiry", "match_expiry_s", type=float, default=1800.0, show_default=True,
              help="seconds an unmatched job waits at a Grid before it is rejected")
@click.option("--ism-refresh", "ism_refresh_s", type=float, default=240.0, show_default=True)
@click.option("--policy", type=click.Choice(["max", "fuzzy", "sfete"]), default="sfete", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False), default="docs/experiments", show_default=True,
              help="where federation_sim.{json,csv} and the PNGs are written")
@click.option("--json", "as_json", is_flag=True, help="print the JSON document")
@exit_on(((SpecError, SimulationError, ValueError, OSError), 2))
def federation_cmd(trace, limit, cpu_scale, weights, thresholds, max_hops, share_fraction, gateway_delay_s,
                   match_expiry_s, ism_refresh_s, policy, seed, out, as_json) -> None:
    """Three Grids from the LCG trace, each its own broker, with and without peering gateways."""
    from broker.gridsim.fedfigures import write_outputs
    from broker.gridsim.fedtrace import Split, check_runs, run_all, run_label
    split = Split(trace=trace, limit=limit or None, cpu_scale=cpu_scale, weights=_floats(weights, "--weights"))
    base = FedConfig(max_hops=max_hops, share_fraction=share_fraction, gateway_delay_s=gateway_delay_s,
                     match_expiry_s=match_expiry_s, ism_refresh_s=ism_refresh_s, policy=policy, seed=seed)
    cpu0, t0, load = os.times(), time.monotonic(), os.getloadavg()
    with _progress("runs", not as_json) as update:
        runs = run_all(split, base, _floats(thresholds, "--thresholds"), progress=update)
    cpu1 = os.times()
    meta = {"title": f"{trace}: {len(runs[0][2].jobs)} jobs, CPUs x {cpu_scale:g}, users {weights}",
            "split": {"trace": trace, "jobs": len(runs[0][2].jobs), "cpu_scale": cpu_scale,
                      "weights": split.weights},
            "config": {"max_hops": max_hops, "share_fraction": share_fraction, "gateway_delay_s": gateway_delay_s,
                       "match_expiry_s": match_expiry_s, "ism_refresh_s": ism_refresh_s, "policy": policy},
            "wall_s": round(time.monotonic() - t0, 1),
            "cpu_s": round(cpu1.user + cpu1.system - cpu0.user - cpu0.system, 1),
            "loadavg": [round(x, 2) for x in load]}
    problems = check_runs(runs)
    meta["problems"] = problems
    paths = write_outputs(runs, Path(out), meta)
    if as_json:
        click.echo(json.dumps(json.loads(paths[0].read_text(encoding="utf-8")), indent=2))
    else:
        table = Table(title=meta["title"])
        for col in ("run", "rejected", "forwarded", "wait mean / p50 / p95 (s)", "mean wait by home a / b / c (s)"):
            table.add_column(col, overflow="fold")
        for c, m, _ in runs:
            s = m["all"]
            table.add_row(run_label(c), f"{s['rejected']} ({s['rejected_fraction']:.2%})",
                          f"{s['forwarded_fraction']:.2%}",
                          f"{s['wait_mean_s']:.0f} / {s['wait_p50_s']:.0f} / {s['wait_p95_s']:.0f}",
                          " / ".join(f"{v['wait_mean_s']:.0f}" for v in m["by_home"].values()))
        console.print(table)
        console.print(f"wall {meta['wall_s']} s, CPU {meta['cpu_s']} s; written: "
                      + ", ".join(str(p) for p in paths), highlight=False)
        for p in problems:
            console.print(f"[red]property failed:[/] {p}")
    raise SystemExit(1 if problems else 0)
