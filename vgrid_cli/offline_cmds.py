"""``vgrid report sfete-table1``: seed 004 Table I and Figures 4-6 (issue 16, seed 004 baselines).

A thin adapter over :mod:`broker.gridsim.offline`: runs SFETE, FCFS/ECT, EDF/ECT, LLF/ECT (and
SFETE on batch queues) at every rate for every seed, writes the PNGs, ``table1.json`` and the
page ``sfete-table1.md`` (``broker.gridsim.offline_doc``: seed 004's claims beside our numbers)
into ``--out`` and prints the tables in Markdown. Exit codes: 0 ok; 2 a bad option.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from broker.gridsim.offline import ALGORITHMS, SEED004_RATES, OfflineSpec, compare

from .gridsim_cmds import _input_errors, _progress


def _floats(text: str, opt: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"expected numbers separated by commas, got {text!r}",
                                 param_hint=opt) from None
    if not values:
        raise click.BadParameter("at least one value is needed", param_hint=opt)
    return values


@click.command("sfete-table1")
@click.option("--out", type=click.Path(file_okay=False), default="docs/experiments", show_default=True,
              help="directory for sfete-table1.md, the PNGs and table1.json")
@click.option("--seeds", type=click.IntRange(min=1), default=5, show_default=True, help="runs per point")
@click.option("--tasks", type=click.IntRange(min=1), default=20_000, show_default=True, help="tasks per run")
@click.option("--rates", default=",".join(f"{r:g}" for r in SEED004_RATES), show_default=True,
              help="mean submission rates, tasks/s")
@click.option("--interval", "interval_s", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="the central scheduler's period (s); 0 schedules each task on arrival")
@click.option("--load", "load_at_max", type=click.FloatRange(min=0, min_open=True), default=0.95,
              show_default=True, help="offered load at the highest rate (sets the mean task work)")
@click.option("--algorithms", default=",".join(ALGORITHMS), show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the results as JSON")
@_input_errors
def table1_cmd(out, seeds, tasks, rates, interval_s, load_at_max, algorithms, as_json) -> None:
    """Seed 004 Section 6.1: SFETE against FCFS/ECT, EDF/ECT, LLF/ECT (Figures 4-6)."""
    from broker.gridsim.offline_figures import all_figures, markdown_table

    spec = OfflineSpec(tasks=tasks, rates=_floats(rates, "--rates"), interval_s=interval_s,
                       load_at_max=load_at_max)
    algos = [a.strip() for a in algorithms.split(",") if a.strip()]
    unknown = [a for a in algos if a not in ALGORITHMS]
    if unknown or not algos:
        raise click.BadParameter(f"unknown {', '.join(unknown) or 'empty list'}; choose from "
                                 f"{', '.join(ALGORITHMS)}", param_hint="--algorithms")
    with _progress("runs", not as_json) as update:
        report = compare(spec, algos, range(seeds), progress=update)
    paths = all_figures(report, Path(out))
    doc = {"spec": {**dataclasses.asdict(spec), "resources": [dataclasses.asdict(r) for r in spec.resources],
                    "mean_work_si00_s": spec.mean_work},
           "results": [dataclasses.asdict(r) for r in report.results],
           "figures": [str(p) for p in paths]}
    Path(out, "table1.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    from broker.gridsim.offline_doc import page
    command = (f"vgrid report sfete-table1 --seeds {seeds} --tasks {tasks} --rates {rates} --interval {interval_s:g} "
               f"--load {load_at_max:g} --algorithms {','.join(algos)}")
    Path(out, "sfete-table1.md").write_text(page(report, paths, command), encoding="utf-8")
    if as_json:
        click.echo(json.dumps(doc))
        return
    for metric, title in (("avg_delay_s", "average delay (s), Figure 4"),
                          ("std_delay_s", "delay standard deviation (s), Table I"),
                          ("avg_excess_s", "average excess time (s), Figure 5"),
                          ("missed", "deadlines missed (tasks), Figure 6")):
        click.echo(f"\n{title}\n\n{markdown_table(report, metric, 0 if metric == 'missed' else 2)}")
    click.echo("\nfigures: " + ", ".join(str(p) for p in paths))
