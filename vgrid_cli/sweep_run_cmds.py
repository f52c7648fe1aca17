"""``vgrid sweep SPEC.toml``: a grid of lease-engine simulations on Dask, resumable (issue 16).

A click adapter over ``vwn_agents.leasing.sweepspec`` (the spec, the runs and their keys),
``sweepstore`` (the SQLite result file) and ``sweeprunner`` (Dask, retries). A rich progress
bar (runs done / total, ETA) on a TTY, nothing in a pipe; then a summary table or ``--json``.

Exit codes: 0 every planned run is stored as done; 1 some runs failed after their retries (listed);
3 stopped by ``--max-runs`` with runs missing; 2 usage or input error (bad spec, unreachable
scheduler, unwritable store).
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from .common import err_console
from .common import fail as _fail


@contextmanager
def sweep_progress(show: bool, label: str = "sweep"):
    """A ``progress(done, total)`` callback drawing a rich bar on stderr when ``show``."""
    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                   console=err_console, transient=True, disable=not show)
    with bar:
        task = bar.add_task("runs", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)
        yield update


def execute(spec_paths, store_path: str | None, scheduler: str | None, workers: int | None, retries: int,
            max_runs: int | None, show: bool):
    """Load the spec(s) (a path or a list of paths), run what is missing; returns (runs, store,
    summary). Several specs are one sweep: the union of their runs (a run two specs share, same
    key, is run and stored once; the first spec names its configuration). Exits 2 on input errors."""
    from vwn_agents.leasing.sweeprunner import run_sweep
    from vwn_agents.leasing.sweepspec import SpecError, check_inputs, load_spec
    from vwn_agents.leasing.sweepstore import SweepStore
    from vwn_agents.leasing.traces import TraceError
    paths = [spec_paths] if isinstance(spec_paths, (str, Path)) else list(spec_paths)
    runs, seen, name = [], set(), None
    for spec_path in paths:
        try:
            spec = load_spec(spec_path)
            check_inputs(spec.runs)
        except (SpecError, TraceError) as exc:
            _fail(str(exc), 2)
        except OSError as exc:
            _fail(f"{spec_path}: {exc.strerror}", 2)
        name = name or spec.name
        for r in spec.runs:
            if r.key() not in seen:
                seen.add(r.key())
                runs.append(r)
    path = Path(store_path) if store_path else Path(f"{name}.sqlite")
    try:
        store = SweepStore(path)
    except Exception as exc:  # noqa: BLE001 -- sqlalchemy/OSError: the file cannot be opened
        _fail(f"{path}: cannot open the result store: {exc}", 2)
    try:
        with sweep_progress(show) as update:
            summary = run_sweep(runs, store, scheduler=scheduler, workers=workers, retries=retries,
                                progress=update, max_runs=max_runs)
    except OSError as exc:
        _fail(f"Dask scheduler {scheduler or 'LocalCluster'}: {exc}", 2)
    summary["store"] = str(path)
    return runs, store, summary


@click.command("sweep")
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--store", "store_path", type=click.Path(dir_okay=False), default=None,
              help="SQLite result file (default: NAME.sqlite in the current directory); resumed if present")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="an existing Dask scheduler, e.g. tcp://host:8786 (default: a LocalCluster)")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="LocalCluster worker processes (default: every core)")
@click.option("--retries", type=click.IntRange(min=0), default=2, show_default=True,
              help="resubmissions of a run that failed or whose worker died")
@click.option("--max-runs", type=click.IntRange(min=0), default=None, help="compute at most N missing runs")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
def sweep_run_cmd(spec_file, store_path, scheduler, workers, retries, max_runs, as_json) -> None:
    """Run the simulations of SPEC_FILE (TOML: traces x AR sets x configurations x seeds) on Dask,
    storing each result by the hash of its inputs; a re-run computes only what is missing."""
    _runs, _store, s = execute(spec_file, store_path, scheduler, workers, retries, max_runs,
                               show=err_console.is_terminal and not as_json)
    if as_json:
        click.echo(json.dumps(s, indent=1))
    else:
        console = Console()
        console.print(f"{s['present']}/{s['planned']} runs in {s['store']}; {s['computed_now']} computed now in "
                      f"{s['wall_s']} s on {s['workers']} worker(s) ({s['scheduler']}); {s['retried']} retried",
                      highlight=False, soft_wrap=True)   # one line, also in a pipe
        if s["failed"]:
            t = Table(title="failed runs (after retries)")
            for c in ("configuration", "inject", "seed", "attempts", "error"):
                t.add_column(c, overflow="fold")
            for f in s["failed"]:
                t.add_row(f["configuration"], f["inject"], str(f["seed"]), str(f["attempts"]), f["error"])
            console.print(t)
    if s["failed"]:
        raise SystemExit(1)
    if s["missing"]:
        raise SystemExit(3)
