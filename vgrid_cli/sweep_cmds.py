"""``vgrid sweep-preemption``: seed 002 Table I / Figures 6-8 on generated Lublin workloads.

A click adapter over ``vwn_agents.leasing.sweep`` (the runs, their keys, the resumable CSV, Table
I's paired differences) and ``sweep.plots`` (``sweepplots.write_figures``). Runs the missing rows
of ``DIR/sweep.csv`` (a re-run computes only what is not there; ``--max-runs N`` stops after N
new rows), in ``--workers`` processes, with a rich progress bar on a TTY; then writes
``DIR/sweep_summary.json`` (means per point, Table I) and the PNGs ``DIR/sweep_*.png``.

Exit codes: 0 ok (all planned rows present); 3 stopped by ``--max-runs`` with rows missing;
2 usage error or unwritable output.
"""
from __future__ import annotations

import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from vwn_agents.leasing import sweep

from .common import err_console
from .common import fail as _fail


def _ints(text: str) -> tuple:
    try:
        out = []
        for part in text.split(","):
            if "-" in part:
                a, b = part.split("-")
                out += range(int(a), int(b) + 1)
            else:
                out.append(int(part))
        return tuple(out)
    except ValueError:
        raise click.BadParameter(f"expected numbers like 1,2,5-8, got {text!r}") from None


@click.command("sweep-preemption")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="directory of sweep.csv (resumed if present), sweep_summary.json and the PNGs")
@click.option("--axes", default="best-effort,deadline,local,arrival", show_default=True,
              help="swept characteristics: best-effort, deadline, local (seed 002 Section 7.2), arrival (rate)")
@click.option("--policies", default="nop,mov,mlip,moml", show_default=True, help="preemption policies")
@click.option("--seeds", default="1-10", show_default=True, help="workload seeds, e.g. 1-5 or 1,4,9")
@click.option("--jobs", type=click.IntRange(min=3), default=3000, show_default=True, help="requests per workload")
@click.option("--days", type=click.FloatRange(min=0, min_open=True), default=14.0, show_default=True,
              help="expected span of the arrivals (with --jobs: the arrival rate)")
@click.option("--nodes", type=click.IntRange(min=1), default=32, show_default=True, help="single-core nodes")
@click.option("--model-mean-runtime", is_flag=True,
              help="keep the sample's mean duration (default: rescale it to exactly 2 h, seed 002 Section 7.2)")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="parallel processes")
@click.option("--max-runs", type=click.IntRange(min=0), default=None, help="compute at most N missing rows, then stop")
@click.option("--no-plots", is_flag=True, help="do not draw the PNGs")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
@click.option("--markdown", is_flag=True, help="print Table I and the means per point as Markdown tables")
def sweep_cmd(out_dir, axes, policies, seeds, jobs, days, nodes, model_mean_runtime, workers, max_runs, no_plots,
              as_json, markdown) -> None:
    """Run seed 002's preemption-policy sweep (Table I, Figures 6-8) on Lublin workloads, resumably."""
    axes_t = tuple(a.strip() for a in axes.split(",") if a.strip())
    pol_t = tuple(p.strip().lower() for p in policies.split(",") if p.strip())
    bad = [a for a in axes_t if a not in sweep.AXES] + [p for p in pol_t if p not in sweep.POLICIES]
    if bad or not axes_t or not pol_t:
        _fail(f"unknown axis or policy {bad}; axes {list(sweep.AXES)}, policies {list(sweep.POLICIES)}", 2)
    runs = sweep.plan(axes_t, pol_t, _ints(seeds), jobs=jobs, days=days, nodes=nodes,
                      exact_mean_runtime=not model_mean_runtime)
    out = Path(out_dir)
    csv_path = out / "sweep.csv"
    try:
        out.mkdir(parents=True, exist_ok=True)
        done = sweep.load_done(csv_path)
    except OSError as exc:
        _fail(f"{out}: {exc.strerror}", 2)
    todo = [r for r in runs if r.key() not in done]
    if max_runs is not None:
        todo = todo[:max_runs]
    wall0 = time.monotonic()
    computed = _execute(todo, csv_path, workers, show=err_console.is_terminal and not as_json)
    wall = time.monotonic() - wall0
    done = sweep.load_done(csv_path)
    keys = {r.key() for r in runs}
    rows = [row for k, row in done.items() if k in keys]
    summary = _summary(rows, axes_t, len(runs), computed, wall)
    (out / "sweep_summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    if not no_plots and rows:
        from vwn_agents.leasing.sweepplots import write_figures
        summary["figures"] = [str(p) for p in write_figures(rows, out)]
    if as_json:
        click.echo(json.dumps(summary, indent=1))
    elif markdown:
        click.echo(_markdown(summary))
    else:
        _print(summary)
    if summary["missing"]:
        raise SystemExit(3)


def _execute(todo, csv_path: Path, workers: int, show: bool) -> int:
    """Run ``todo``, appending each row as it completes; returns the number of rows written."""
    n = 0
    progress = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=err_console, transient=True, disable=not show)
    with progress:
        task = progress.add_task("runs", total=len(todo))
        if workers == 1:
            for run in todo:
                sweep.append_row(csv_path, sweep.run_one(run))
                n += 1
                progress.update(task, completed=n)
            return n
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(sweep.run_one, run) for run in todo]
            for fut in as_completed(futures):
                sweep.append_row(csv_path, fut.result())
                n += 1
                progress.update(task, completed=n)
    return n


def _summary(rows, axes, planned: int, computed: int, wall: float) -> dict:
    means = sweep.means(rows)
    table1 = {}
    for axis in axes:
        table1[axis] = {"local_rejection_decrease": sweep.paired_difference(rows, axis, "local_rejection_rate"),
                        "external_rejection_decrease": sweep.paired_difference(rows, axis, "external_rejection_rate")}
    makespan = {axis: {f"{a}_minus_{b}": sweep.paired_difference(rows, axis, "makespan_external_s", a, b)
                       for a, b in (("moml", "mlip"), ("mov", "mlip"), ("mov", "moml"))} for axis in axes}
    return {"planned": planned, "present": len(rows), "missing": planned - len(rows), "computed_now": computed,
            "wall_s": round(wall, 2), "cpu_s": round(sum(float(r["cpu_s"]) for r in rows), 2),
            "table1_nop_minus_moml": table1, "makespan_paired_s": makespan,
            "means": [{"axis": a, "value": v, "policy": p, **m} for (a, v, p), m in
                      sorted(means.items(), key=lambda kv: (kv[0][0], kv[0][1], sweep.POLICIES.index(kv[0][2])))]}


def _print(s: dict) -> None:
    console = Console()
    t = Table(title="Table I: NOP - MOML (mean, 95 % CI), percentage points")
    for c in ("axis", "local rejection decrease", "external rejection decrease", "pairs"):
        t.add_column(c)
    for axis, d in s["table1_nop_minus_moml"].items():
        cells = []
        for k in ("local_rejection_decrease", "external_rejection_decrease"):
            v = d[k]
            cells.append("-" if v is None else f"{100 * v['mean']:.1f} ({100 * v['ci_low']:.1f}, {100 * v['ci_high']:.1f})")
        n = d["local_rejection_decrease"]["n"] if d["local_rejection_decrease"] else 0
        t.add_row(axis, *cells, str(n))
    console.print(t)
    console.print(f"{s['present']}/{s['planned']} runs present, {s['computed_now']} computed now "
                  f"in {s['wall_s']} s wall; CPU of all present runs {s['cpu_s']} s")


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _pci(m: dict, metric: str) -> str:
    """A rate in percent with its 95 % CI half-width: ``45.1 (3.2)``."""
    return "-" if m[metric] is None else f"{_pct(m[metric])} ({_pct(m[metric + '_ci'])})"


def _markdown(s: dict) -> str:
    """Table I (NOP - MOML, percentage points) and, per axis, the means over seeds per point."""
    out = ["| swept | decrease in local rejection rate, NOP - MOML, mean (95 % CI) | decrease in external rejection "
           "rate, NOP - MOML, mean (95 % CI) | pairs |", "|---|---|---|---|"]
    for axis, d in s["table1_nop_minus_moml"].items():
        cells = ["-" if d[k] is None else f"{_pct(d[k]['mean'])} ({_pct(d[k]['ci_low'])}, {_pct(d[k]['ci_high'])})"
                 for k in ("local_rejection_decrease", "external_rejection_decrease")]
        n = d["local_rejection_decrease"]["n"] if d["local_rejection_decrease"] else 0
        out.append(f"| {axis} | {cells[0]} | {cells[1]} | {n} |")
    out += ["", "| swept | BE makespan MOML - MLIP, h, mean (95 % CI) | MOV - MLIP | MOV - MOML | pairs |",
            "|---|---|---|---|---|"]
    for axis, d in s.get("makespan_paired_s", {}).items():
        cells = ["-" if v is None else f"{v['mean'] / 3600:+.2f} ({v['ci_low'] / 3600:+.2f}, {v['ci_high'] / 3600:+.2f})"
                 for v in d.values()]
        n = next((v["n"] for v in d.values() if v), 0)
        out.append(f"| {axis} | {' | '.join(cells)} | {n} |")
    for axis in s["table1_nop_minus_moml"]:
        out += ["", f"**{axis}** (means over seeds, 95 % CI half-width in brackets)", "",
                "| % | policy | local rej. % | external rej. % | utilization eq. (11) % | preemptions "
                "| BE makespan eq. (13) h | runs |", "|---|---|---|---|---|---|---|---|"]
        for m in s["means"]:
            if m["axis"] != axis:
                continue
            mk = "-" if m["makespan_external_s"] is None else \
                f"{m['makespan_external_s'] / 3600:.1f} ({m['makespan_external_s_ci'] / 3600:.1f})"
            out.append(f"| {m['value']} | {m['policy'].upper()} | {_pci(m, 'local_rejection_rate')} "
                       f"| {_pci(m, 'external_rejection_rate')} | {_pci(m, 'utilization_eq11')} "
                       f"| {m['preemptions']:.1f} ({m['preemptions_ci']:.1f}) | {mk} | {m['runs']} |")
    return "\n".join(out)
