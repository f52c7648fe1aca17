"""``vgrid simulate-grid`` and ``vgrid report``: the grid simulator's command line (issue 6).

Thin adapters over :mod:`broker.gridsim`. Exit codes: 0 ok; 1 an acceptance check of the
report failed; 2 usage or input error (bad spec, bad JDL, bad VWN parameters), printed as one
message naming the file or option, never a traceback.
"""
from __future__ import annotations

import contextlib
import csv
import json
from pathlib import Path
from typing import Iterator

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import jdl as jdlmod

from .common import exit_on
from broker.gridsim.engine import SimConfig, SimulationError, simulate
from broker.gridsim.metrics import capacity_share, jobs_per_ce, result_json
from broker.gridsim.model import SpecError
from broker.gridsim.workloads import load_ces, load_jobs

console = Console()
from .common import err_console  # noqa: E402

#: runs with more jobs than this show a progress bar (on a terminal only)
PROGRESS_MIN_JOBS = 5000


_input_errors = exit_on((jdlmod.JDLError, 2), ((SpecError, SimulationError, ValueError, OSError), 2))
"""Input errors (bad spec, trace, JDL) become one line and exit 2 (never a traceback)."""


@contextlib.contextmanager
def _progress(label: str, show: bool) -> Iterator:
    """A rich progress bar on stderr when ``show`` and stderr is a terminal; yields a callback
    ``(done, total)`` or None."""
    if not (show and err_console.is_terminal):
        yield None
        return
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)
        yield update


def _vwns(value: str) -> int | None:
    if value.lower() == "off":
        return None
    try:
        k = int(value)
    except ValueError:
        raise click.BadParameter(f"expected 'off' or a number of VWNs >= 1, got {value!r}") from None
    if k < 1:
        raise click.BadParameter(f"the maximum number of VWNs must be >= 1, got {k}")
    return k


def _summary_tables(doc: dict, config: SimConfig, n_jobs: int) -> tuple[Table, Table]:
    m = doc["metrics"]
    head = Table(title=f"{config.policy} (feedback {'on' if config.feedback else 'off'}, ISM refresh "
                       f"{config.ism_refresh_s:g} s, {'LRMS' if config.vwns is None else f'K={config.vwns} VWNs'}"
                       f", seed {config.seed}): {n_jobs} jobs")
    head.add_column("metric")
    head.add_column("value", justify="right")
    head.add_row("mean job total delay", f"{m['mean_delay_s']:.1f} s")
    head.add_row("makespan", f"{m['makespan_s']:.1f} s")
    head.add_row("mean queue time at the CE", f"{m['mean_queue_s']:.1f} s")
    head.add_row("deadline misses", "-" if m["deadline_misses"] is None else str(m["deadline_misses"]))
    total = max(1, sum(doc["jobs_per_ce"].values()))
    per_ce = Table(title="jobs per CE")
    for col in ("CE", "jobs", "job share", "capacity share"):
        per_ce.add_column(col, justify="left" if col == "CE" else "right", overflow="fold")
    for ce, n in doc["jobs_per_ce"].items():
        per_ce.add_row(ce, str(n), f"{n / total:.1%}", f"{doc['capacity_share'][ce]:.1%}")
    return head, per_ce


def _write_out(out: Path, doc: dict, result) -> None:
    """``--out DIR``: result.json, jobs.csv and the run's job distribution (distribution.png)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    with (out / "jobs.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "user", "submit_s", "work_si00_s", "deadline_s", "ce", "start_s", "end_s"])
        for j in result.jobs:
            w.writerow([j.job_id, j.user, f"{j.submit_s:.3f}", f"{j.work:.1f}",
                        "" if j.deadline_s is None else f"{j.deadline_s:.3f}", j.ce,
                        f"{j.start_s:.3f}", f"{j.end_s:.3f}"])
    from broker.gridsim.figures import distribution
    distribution(jobs_per_ce(result), capacity_share(result), out / "distribution.png",
                 f"{result.config.policy}: jobs per CE")


@click.command("simulate-grid")
@click.option("--ces", "ces_spec", default="seed004", show_default=True, metavar="SPEC",
              help="CEs: 'seed004' (seed 004 Table II), 'swf:TRACE' (one CE per trace site; TRACE is a file "
                   "or a bundled name such as lcg-2005-1, see 'vgrid simulate --list-traces') "
                   "or a TOML file of [[ce]] id/cpus/si00")
@click.option("--workload", default="poisson:rate=15,jobs=250", show_default=True, metavar="SPEC",
              help="'poisson:rate=R,jobs=N,users=5,means=5/6.5/8.5/10.5/12.5[,deadline_factor=F]' "
                   "(R jobs/min, means in min on the fastest CPU) or "
                   "'swf:TRACE[,limit=N][,deadline=requested]'")
@click.option("--policy", type=click.Choice(["max", "fuzzy", "sfete"]), default="sfete",
              show_default=True, help="selection policy (broker.selection)")
@click.option("--feedback", type=click.Choice(["on", "off"]), default="on", show_default=True,
              help="SFETE's feedback counters (seed 004 Section 4.2)")
@click.option("--ism-refresh", "ism_refresh_s", type=float, default=240.0, show_default=True,
              metavar="S", help="ISM refresh interval in seconds (gLite default 240)")
@click.option("--vwns", default="off", show_default=True, metavar="off|K",
              help="FCFS LRMS CEs, or fair-share virtual worker nodes, at most K per CE")
@click.option("--vwn-overhead", type=float, default=0.0, show_default=True, metavar="F",
              help="capacity fraction each VWN costs")
@click.option("--vwn-startup", "vwn_startup_s", type=float, default=0.0, show_default=True,
              metavar="S", help="seconds a VWN boots before its job runs")
@click.option("--fuzzy-factor", type=float, default=1.0, show_default=True,
              help="FuzzyFactor of Fuzzy Rank")
@click.option("--jdl", "jdl_file", type=click.Path(dir_okay=False), default=None,
              help="JDL every job carries (default: Requirements on GlueCEStateStatus, "
                   "Rank = -other.GlueCEStateWaitingJobs)")
@click.option("--seed", type=int, default=0, show_default=True, help="random seed")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="also write result.json, jobs.csv and distribution.png into this directory")
@_input_errors
def simulate_grid_cmd(ces_spec, workload, policy, feedback, ism_refresh_s, vwns, vwn_overhead,
                      vwn_startup_s, fuzzy_factor, jdl_file, seed, as_json, out) -> None:
    """Simulate a grid: the broker's matchmaking, ISM and feedback counters on simulated CEs."""
    k = _vwns(vwns)
    ces = load_ces(ces_spec)
    jobs = load_jobs(workload, ces, seed)
    extra = ({"jdl": Path(jdl_file).read_text(encoding="utf-8"), "jdl_filename": jdl_file}
             if jdl_file else {})
    config = SimConfig(policy=policy, feedback=feedback == "on", ism_refresh_s=ism_refresh_s,
                       vwns=k, vwn_overhead=vwn_overhead, vwn_startup_s=vwn_startup_s, seed=seed,
                       fuzzy_factor=fuzzy_factor, **extra)
    with _progress("simulating", len(jobs) > PROGRESS_MIN_JOBS and not as_json) as update:
        result = simulate(ces, jobs, config, progress=update)
    doc = result_json(result)
    if out:
        _write_out(Path(out), doc, result)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    for table in _summary_tables(doc, config, len(jobs)):
        console.print(table)


@click.command("report")
@click.option("--out", type=click.Path(file_okay=False), default="docs/experiments",
              show_default=True, help="directory for the PNG figures and report.json")
@click.option("--ces", "ces_spec", default="seed004", show_default=True, metavar="SPEC",
              help="CEs, as for simulate-grid")
@click.option("--seeds", type=click.IntRange(1), default=10, show_default=True,
              help="replications per point")
@click.option("--jobs", type=click.IntRange(1), default=250, show_default=True,
              help="jobs per run")
@click.option("--rates", default="5,10,15,20,25,30", show_default=True,
              help="submission rates, jobs/min")
@click.option("--ism-refresh", "ism_refresh_s", type=float, default=240.0, show_default=True,
              help="ISM refresh interval (s) of Figures 8-11")
@click.option("--ablation-refresh", default="30,240,480", show_default=True,
              help="refresh intervals (s) of the feedback ablation")
@click.option("--vwns", "vwn_list", default="2,3,4,6,8,12,16", show_default=True,
              help="maximum numbers of VWNs of Figure 11")
@click.option("--vwn-overhead", type=float, default=0.01, show_default=True)
@click.option("--vwn-startup", "vwn_startup_s", type=float, default=30.0, show_default=True)
@click.option("--vwn-rate", type=float, default=15.0, show_default=True,
              help="submission rate of Figure 11, jobs/min")
@click.option("--json", "as_json", is_flag=True, help="print the sweep results as JSON")
@_input_errors
def report_cmd(out, ces_spec, seeds, jobs, rates, ism_refresh_s, ablation_refresh, vwn_list,
               vwn_overhead, vwn_startup_s, vwn_rate, as_json) -> None:
    """Run seed 004's sweeps; write Figures 8a, 8b, 9, 10, 11 (+ refresh ablation) as PNG.

    Exits 1 when an acceptance check of issue 6 fails.
    """
    from broker.gridsim.figures import write_figures
    from broker.gridsim.report import ReportParams, run_report

    def floats(text: str, opt: str) -> tuple[float, ...]:
        try:
            return tuple(float(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise click.BadParameter(f"expected numbers separated by commas, got {text!r}",
                                     param_hint=opt) from None

    params = ReportParams(rates=floats(rates, "--rates"), jobs=jobs, seeds=seeds,
                          ism_refresh_s=ism_refresh_s,
                          ablation_refresh_s=floats(ablation_refresh, "--ablation-refresh"),
                          vwns=tuple(int(k) for k in floats(vwn_list, "--vwns")),
                          vwn_rate=vwn_rate, vwn_overhead=vwn_overhead, vwn_startup_s=vwn_startup_s)
    ces = load_ces(ces_spec)
    with _progress("sweeps", not as_json) as update:
        report = run_report(ces, params, progress=update)
    paths = write_figures(report, out)
    doc = report.to_json()
    doc["figures"] = [str(p) for p in paths]
    Path(out, "report.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    ok = all(c["passed"] for c in report.checks)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        table = Table(title=f"acceptance (issue 6), {seeds} seeds x {jobs} jobs per point")
        for col in ("check", "result", "detail"):
            table.add_column(col, overflow="fold")
        for c in report.checks:
            table.add_row(c["check"], "[green]pass[/]" if c["passed"] else "[red]FAIL[/]",
                          c["detail"])
        console.print(table)
        console.print("figures: " + ", ".join(str(p) for p in paths), highlight=False)
    raise SystemExit(0 if ok else 1)
