"""``vgrid report seed000``: seed 000 Section 8.3 (Tables 8.3-8.7) regenerated (issue 16).

Runs the 36 traces x 4 configurations of :mod:`vwn_agents.leasing.seed000` for ``--seeds``
seeds on ``--workers`` processes, writes ``seed000.md``, ``seed000_ratios.png`` and
``seed000_runs.json`` into ``--out``. Exit codes: 0 ok; 2 a bad option or a missing input.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import click

from vgrid_runtime.traces import TRACES_DIR

from .gridsim_cmds import _progress

PAPER_CSV = TRACES_DIR.parent / "papers" / "seed000_section8_3.csv"


def _one(args):
    from vwn_agents.leasing.seed000 import run
    return run(*args)


@click.command("seed000")
@click.option("--out", type=click.Path(file_okay=False), default="docs/experiments", show_default=True)
@click.option("--seeds", type=click.IntRange(min=1), default=1, show_default=True, help="traces per cell")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="processes (default: every core)")
@click.option("--durations", default="long,medium,short", show_default=True,
              help="best-effort duration classes to run (a reduced input for tests)")
def seed000_cmd(out, seeds, workers, durations) -> None:
    """Seed 000 Section 8.3: best-effort and AR workloads mixed (Tables 8.3-8.7)."""
    from vwn_agents.leasing.seed000 import CONFIGS, DURATIONS, cells, paper_tables
    from vwn_agents.leasing.seed000doc import figure, page

    if not PAPER_CSV.is_file():
        raise click.ClickException(f"missing input {PAPER_CSV} (the thesis's Tables 8.3-8.6)")
    wanted = [d.strip() for d in durations.split(",") if d.strip()]
    bad = [d for d in wanted if d not in DURATIONS]
    if bad or not wanted:
        raise click.BadParameter(f"unknown {', '.join(bad) or 'empty list'}; choose from "
                                 f"{', '.join(DURATIONS)}", param_hint="--durations")
    paper = paper_tables(PAPER_CSV)
    jobs = [(*cell, c, s) for cell in cells() if cell[0] in wanted for c in CONFIGS for s in range(seeds)]
    rows = []
    with _progress("simulations", True) as update, \
            ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        for fut in as_completed([pool.submit(_one, j) for j in jobs]):
            rows.append(fut.result())
            if update is not None:
                update(len(rows), len(jobs))
    rows.sort(key=lambda r: (r["duration"], r["ar_size"], r["mix"], r["config"], r["seed"]))
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "seed000_runs.json").write_text(json.dumps(rows, indent=0) + "\n", encoding="utf-8")
    figure(rows, paper, out_dir)
    command = f"vgrid report seed000 --seeds {seeds}" + (f" --durations {durations}" if len(wanted) < 3 else "")
    (out_dir / "seed000.md").write_text(page(rows, paper, command), encoding="utf-8")
    click.echo(f"wrote {out_dir / 'seed000.md'} ({len(rows)} runs)")
