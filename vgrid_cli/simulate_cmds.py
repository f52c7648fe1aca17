"""``vgrid simulate TRACE``: run the lease engine on a trace in simulated time (issue 5).

A thin click adapter over ``vwn_agents.leasing``: read the trace (Haizea LWF XML or text, or
SWF; a file or a bundled trace's name, see ``vgrid_runtime.traces``), build the site (``--site`` file, ``--nodes``/``--cpus-per-node``/``--mem-per-node``, or
the site embedded in an LWF), read the TOML configuration, optionally inject advance
reservations (or any lease type) from an LWF, apply a Haizea annotation file (``--annotations``),
simulate with a progress bar on a TTY, and report a table, or ``--json``, and with ``--out DIR``
the per-lease CSV and PNG plots. ``--decision-log FILE`` writes why each lease went where it did
(JSON lines, ``vwn_agents.leasing.decisionlog``); ``status-message-interval`` prints status lines
on standard error.

Exit codes: 0 ok; 1 the engine failed an internal check (over-commit); 2 usage or input error.
"""
from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from vgrid_runtime import traces
from vwn_agents.leasing import (ConfigError, LeaseConfig, OverCommitError, TraceError, load_config, read_site,
                                read_trace, simulate, uniform_site)

from .common import err_console  # noqa: E402
from .common import fail as _fail  # noqa: E402


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v.is_integer():
            return f"{v:,.0f}"
        return f"{v:,.4f}" if abs(v) < 10 else f"{v:,.2f}"
    return str(v)


def _list_traces(ctx: click.Context, _param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    for name, rel in traces.CATALOGUE.items():
        click.echo(f"{name:52} examples/traces/{rel}")
    ctx.exit(0)


def _haizea_path(name: str, config_file: str) -> str:
    """A path a Haizea file names: as written, relative to the file, or a bundled trace with
    the same file name (Haizea's files name their install's paths)."""
    from pathlib import Path
    for cand in (Path(name), Path(config_file).parent / name):
        if cand.is_file():
            return str(cand)
    base = Path(name).name
    for cat_name, rel in traces.CATALOGUE.items():
        if Path(rel).name == base or cat_name == Path(base).stem:
            return traces.resolve(cat_name)
    raise traces.TraceNameError(f"{config_file}: [tracefile] {name}: no such file, and no bundled "
                                f"trace is named {base} (vgrid simulate --list-traces)")


@click.command("simulate")
@click.argument("trace", type=click.Path(dir_okay=False), required=False)
@click.option("--list-traces", is_flag=True, is_eager=True, expose_value=False, callback=_list_traces,
              help="list the bundled traces' names (usable as TRACE and --inject-ar) and exit")
@click.option("--site", "site_file", type=click.Path(dir_okay=False), default=None,
              help="site description (LWF-style XML <site>)")
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="number of identical nodes")
@click.option("--cpus-per-node", type=click.IntRange(min=1), default=1, show_default=True,
              help="CPUs per node (100 CPU units each)")
@click.option("--mem-per-node", type=click.IntRange(min=1), default=1024, show_default=True,
              help="memory per node, MB")
@click.option("--swf-cpus-per-node", type=click.IntRange(min=1), default=1, show_default=True,
              help="SWF conversion: processors per VM (the bundled blue-* files are already divided)")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="TOML configuration (Haizea option names), or a Haizea 1.1 configuration file "
                   "read unchanged (its [tracefile] and resources then give TRACE and the site); "
                   "see docs/leasing.md")
@click.option("--inject-ar", "inject", type=click.Path(dir_okay=False), default=None,
              help="LWF (file or bundled name) with leases (advance reservations, best-effort or "
                   "immediate) to add to the trace")
@click.option("--annotations", "annotation_file", type=click.Path(dir_okay=False), default=None,
              help="Haizea lease annotation file (.lwfa): per-lease start, image overrides")
@click.option("--decision-log", "decision_log", type=click.Path(dir_okay=False), default=None,
              help="write one JSON line per scheduling decision (why a lease went where it did)")
@click.option("--preemption-policy", "preemption_policy", default=None,
              help="override [scheduling] policy-preemption (e.g. nop, mov, mlip, moml: seed 002)")
@click.option("--compat", type=click.Choice(["none", "haizea-1.1"]), default=None,
              help="override [general] compat (on for Haizea files): Haizea 1.1's behaviour "
                   "where vgrid differs (docs/leasing.md, 'Haizea-compatible mode')")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="write leases.csv and PNG plots (utilization, Gantt, disk) into DIR")
def simulate_cmd(trace, site_file, nodes, cpus_per_node, mem_per_node, swf_cpus_per_node, config_file, inject,
                 annotation_file, decision_log, preemption_policy, compat, as_json, out_dir) -> None:
    """Simulate the lease engine on TRACE (Haizea LWF or SWF file, or a bundled trace's name, see
    --list-traces) and report leases and metrics."""
    from vwn_agents.leasing.haizeaconf import is_haizea_file, load_haizea
    if site_file and nodes:
        _fail("give either --site or --nodes, not both", 2)
    haizea = None
    try:
        if config_file and is_haizea_file(config_file):
            haizea = load_haizea(config_file)
            config = haizea.config
            if trace is None and haizea.tracefile:
                trace = _haizea_path(haizea.tracefile, config_file)
            if inject is None and haizea.injectionfile:
                inject = _haizea_path(haizea.injectionfile, config_file)
            if annotation_file is None and haizea.annotationfile:
                annotation_file = _haizea_path(haizea.annotationfile, config_file)
            if not site_file and not nodes and haizea.nodes:
                nodes, cpus_per_node, mem_per_node = haizea.nodes, haizea.cpus_per_node, haizea.mem_per_node
        else:
            config = load_config(config_file) if config_file else LeaseConfig()
        if trace is None:
            _fail("give TRACE, or a Haizea configuration file whose [tracefile] names one", 2)
        trace = traces.resolve(trace)
        inject = traces.resolve(inject) if inject else None
        if preemption_policy:
            config = config.with_options(policy_preemption=preemption_policy)
        if compat:
            config = config.with_options(compat=compat)
        workload = read_trace(trace, cpus_per_node=swf_cpus_per_node, memory_mb=mem_per_node)
        leases = list(workload.leases)
        if inject:
            offset = max((l.id for l in leases), default=0)
            if haizea is not None and offset < 1_000_000:
                offset = 1_000_000      # Haizea's tracefile frontend: injected ids + 1,000,000
            leases += read_trace(inject, id_offset=offset).leases
        if annotation_file:
            leases = _annotate(leases, annotation_file)
        if site_file:
            site = read_site(site_file)
        elif nodes:
            site = uniform_site(nodes, cpus_per_node, mem_per_node)
        elif workload.nodes:
            site = workload.nodes
        else:
            _fail(f"{trace} has no <site>; give --nodes N (and --cpus-per-node, --mem-per-node) or --site FILE", 2)
    except (TraceError, ConfigError, traces.TraceNameError) as exc:
        _fail(str(exc), 2)
    except OSError as exc:
        _fail(f"{exc.filename}: {exc.strerror}", 2)
    log_file = None
    if decision_log:
        try:
            log_file = open(decision_log, "w", encoding="utf-8")
        except OSError as exc:
            _fail(f"{decision_log}: cannot write: {exc.strerror}", 2)
    try:
        result = _run(leases, site, config, show_progress=sys.stderr.isatty() and not as_json,
                      log_file=log_file)
    finally:
        if log_file is not None:
            log_file.close()
    report = result.report()
    if out_dir:
        from vwn_agents.leasing.plots import write_outputs
        try:
            written = write_outputs(result.scheduler, report, out_dir)
        except OSError as exc:
            _fail(f"{out_dir}: cannot write: {exc.strerror}", 2)
        if not as_json:
            err_console.print(f"wrote {len(written)} files into {out_dir}")
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    _print_tables(report, len(site))


def _annotate(leases, annotation_file):
    from vwn_agents.leasing.annotations import apply_annotations, read_annotations
    ann = read_annotations(annotation_file)
    leases = apply_annotations(leases, ann)
    if ann.unused or ann.ignored_extras:
        err_console.print(f"{annotation_file}: {ann.unused} annotations match no lease; "
                          f"{ann.ignored_extras} <extra> attributes ignored")
    return leases


def _status(now: float, counts: dict) -> None:
    """Haizea's status message (``status-message-interval``), on standard error."""
    err_console.print(f"t = {now:,.0f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def _run(leases, site, config, show_progress: bool, log_file=None):
    from vwn_agents.leasing.decisionlog import DecisionLog
    extra = {"status": _status, "decisions": DecisionLog(log_file, site) if log_file else None}
    try:
        if not show_progress:
            return simulate(leases, site, config, **extra)
        with Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err_console, transient=True) as progress:
            task = progress.add_task("leases", total=len(leases))
            return simulate(leases, site, config, progress=lambda done, total: progress.update(task, completed=done),
                            **extra)
    except OverCommitError as exc:
        _fail(f"internal check failed: {exc}", 1)
    except ConfigError as exc:
        _fail(str(exc), 2)


def _print_tables(report: dict, n_nodes: int) -> None:
    console = Console()
    leases = report["leases"]
    if len(leases) <= 50:
        t = Table(title="Leases")
        for col in ("id", "type", "state", "submit_s", "start_s", "end_s", "nodes", "wait_s", "suspensions",
                    "transfers"):
            t.add_column(col, justify="right" if col not in ("type", "state", "nodes") else "left")
        for rec in leases:
            t.add_row(*[_fmt(rec[c]) if c != "nodes" else " ".join(rec[c]) for c in
                        ("id", "type", "state", "submit_s", "start_s", "end_s", "nodes", "wait_s", "suspensions",
                         "transfers")])
        console.print(t)
    m = Table(title=f"Metrics ({len(leases)} leases, {n_nodes} nodes)")
    m.add_column("metric")
    m.add_column("value", justify="right")
    for k, v in report["metrics"].items():
        if k == "peak_disk_mb_per_node":
            v = max(v.values(), default=0.0)
            k = "peak_disk_mb (max over nodes)"
        m.add_row(k, _fmt(v))
    console.print(m)
