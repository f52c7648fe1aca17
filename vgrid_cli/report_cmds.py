"""``vgrid report NAME``: reproduce a paper's experiment as docs/experiments/NAME.md (issue 16).

``vgrid report --list`` lists the reports. ``sfete`` (seed 004, issue 6) is also what ``vgrid
report`` without NAME runs; its options (``--out``, ``--seeds``, ...) are passed on unchanged to
``gridsim_cmds.report_cmd``. The sweep reports (``hpdc08``) run their bundled specs
(``SWEEP_SPECS``: for hpdc08 the 438-run sweep ``examples/sweeps/hpdc08.toml`` and Table 1's
Haizea-compatible rows ``hpdc08-table1.toml``, one store) through ``vgrid sweep``'s runner -- only
the runs missing from ``--store`` are computed -- and write ``DOCS/NAME.md`` with the tables (ours next to the paper's,
difference in percentage points) and the PNG figures.

Exit codes: 0 ok; 1 runs failed (listed) or, for sfete, an acceptance check failed; 2 usage or
input error.
"""
from __future__ import annotations

import importlib

from pathlib import Path

import click

from vgrid_runtime.traces import TRACES_DIR

from .common import err_console
from .common import fail as _fail

SPECS_DIR = TRACES_DIR.parent / "sweeps"
#: name -> (what it reproduces, kind)
REPORTS = {
    "sfete": ("seed 004 (SFETE grid scheduling): Figures 8a, 8b, 9, 10, 11 and the refresh ablation", "gridsim"),
    "sfete-table1": ("seed 004 Section 6.1: SFETE against FCFS/ECT, EDF/ECT, LLF/ECT (Table I, "
                     "Figures 4-6)", "offline"),
    "seed000": ("seed 000 Sections 4 and 8: AR staging accuracy (Figures 8.2-8.4), image reuse for "
                "best-effort VMs on the DataStar Traces III/IV (Figures 8.5-8.7), VMs as jobs (Tables "
                "4.1, 4.2), best-effort and ARs mixed with and without VMs, prefetching and reuse "
                "(Tables 8.3-8.7)", "seed000"),
    "hpdc08": ("Sotomayor, Keahey, Foster, HPDC 2008: Table 1 and the all-best-effort / AR acceptance "
               "figures (72 AR sets x 6 configurations)", "sweep"),
    "federation": ("issue 15 / seed 002 Section 4.1: the LCG trace split into three Grids, with and without "
                   "peering gateways (wait, rejected, forwarded)", "fedsim"),
}
#: sweep report -> its bundled specs (in SPECS_DIR), one sweep: the union of their runs
SWEEP_SPECS = {"hpdc08": ("hpdc08.toml", "hpdc08-table1.toml")}
#: report kind -> (module of vgrid_cli, click command) run with the remaining arguments
_COMMANDS = {"gridsim": ("gridsim_cmds", "report_cmd"), "offline": ("offline_cmds", "table1_cmd"),
             "seed000": ("seed000_cmds", "seed000_cmd"), "fedsim": ("fedsim_cmds", "federation_cmd")}


@click.command("report", context_settings={"ignore_unknown_options": True}, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def report_cmd(args) -> None:
    """Reproduce a paper's experiment: vgrid report [NAME] [OPTIONS]; NAME defaults to sfete
    (seed 004); `vgrid report --list` shows the names, `vgrid report NAME --help` their options."""
    args = list(args)
    if args[:1] in (["-h"], ["--help"]):
        click.echo(click.get_current_context().get_help())
        args = ["--list"]
    if args[:1] == ["--list"]:
        for n, (what, _kind) in REPORTS.items():
            click.echo(f"{n:13} {what}")
        return
    name = args.pop(0) if args and not args[0].startswith("-") else "sfete"
    if name not in REPORTS:
        _fail(f"unknown report {name!r}; known: {', '.join(REPORTS)} (vgrid report --list)", 2)
    if REPORTS[name][1] in _COMMANDS:
        module, command = _COMMANDS[REPORTS[name][1]]
        cmd = getattr(importlib.import_module(f"vgrid_cli.{module}"), command)
        cmd.main(args=args, prog_name=f"vgrid report {name}", standalone_mode=True)
        return
    sweep_report_cmd.main(args=args, prog_name=f"vgrid report {name}", obj=name, standalone_mode=True)


@click.command("sweep-report")
@click.option("--store", "store_path", type=click.Path(dir_okay=False), default=None,
              help="the SQLite result store (default NAME.sqlite); resumed: only missing runs are computed")
@click.option("--docs", "docs_dir", type=click.Path(file_okay=False), default="docs/experiments", show_default=True,
              help="where NAME.md and the PNGs are written")
@click.option("--spec", "spec_files", type=click.Path(dir_okay=False), multiple=True,
              help="other specs than the bundled ones (e.g. a reduced one); repeatable: the union of their runs")
@click.option("--scheduler", default=None, metavar="ADDRESS", help="an existing Dask scheduler (tcp://host:8786)")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="LocalCluster workers (default: every core)")
@click.option("--no-run", is_flag=True, help="compute nothing: write the page from the runs the store has")
@click.option("--prune", is_flag=True,
              help="then delete the store's runs that the specs no longer plan (e.g. of older compat rules)")
@click.pass_context
def sweep_report_cmd(ctx, store_path, docs_dir, spec_files, scheduler, workers, no_run, prune) -> None:
    """Run the report's sweep (missing runs only) and write DOCS/NAME.md with tables and PNG figures."""
    name = ctx.obj
    specs = list(spec_files) or [str(SPECS_DIR / f) for f in SWEEP_SPECS.get(name, (f"{name}.toml",))]
    _sweep_report(name, specs, store_path, docs_dir, scheduler, workers, no_run, prune)


def _sweep_report(name, spec_files: list[str], store_path, docs_dir, scheduler, workers, no_run=False,
                  prune=False) -> None:
    from vwn_agents.leasing import hpdc08, hpdc08doc
    from vwn_agents.leasing.hpdc08plots import write_figures

    from .sweep_run_cmds import execute
    runs, store, summary = execute(spec_files, store_path or f"{name}.sqlite", scheduler, workers, 2,
                                   0 if no_run else None, show=err_console.is_terminal)
    names = {r.key(): r.configuration for r in runs}
    rows = store.rows(keys=set(names), status="done")
    for r in rows:      # the spec names the configuration (a key is its inputs, not its name)
        r["configuration"] = names[r["key"]]
    baselines, pts = hpdc08.points(rows)
    docs = Path(docs_dir)
    reference = SPECS_DIR.parent / "haizea" / hpdc08.HAIZEA_REFERENCE
    try:
        haizea = hpdc08.read_haizea_reference(reference)
    except (OSError, ValueError) as exc:
        _fail(f"{reference}: {exc}", 2)
    try:
        figures = write_figures(pts, docs)
        text = hpdc08doc.page(rows, baselines, pts, figures, summary, [_shown(f) for f in spec_files], haizea)
        (docs / f"{name}.md").write_text(text, encoding="utf-8")
    except OSError as exc:
        _fail(f"{docs}: cannot write: {exc.strerror}", 2)
    counts = []
    for label, sfx in hpdc08.MODES:
        ok, total = hpdc08.within(hpdc08.table1(pts, sfx, haizea))
        if total:
            counts.append(f"{label} {ok}/{total}")
    click.echo(f"wrote {docs / (name + '.md')} and {len(figures)} figures; {summary['present']}/{summary['planned']} "
               f"runs; Table 1 cells within 1 pp of the paper or Haizea 1.1: {', '.join(counts) or 'none computed'}")
    if prune:
        click.echo(f"pruned {store.prune(set(names))} runs no spec plans from the store")
    if summary["failed"]:
        raise SystemExit(1)


def _shown(spec_file: str) -> str:
    """A bundled spec as examples/sweeps/NAME (no machine path in the page), others as given."""
    path = Path(spec_file)
    return f"examples/sweeps/{path.name}" if path.resolve().parent == SPECS_DIR.resolve() else spec_file
