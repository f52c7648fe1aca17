"""``vgrid workload lublin``: generate a Lublin-Feitelson 1999 workload as seed 002 uses it.

A thin click adapter over ``vwn_agents.leasing.lublin`` (the model) and
``vwn_agents.leasing.requestmix`` (local/external split, request types, deadlines, LWF/SWF
text). Defaults are seed 002 Section 7.2's: 3,000 requests over 14 days on 32 single-core
nodes, 4 VMs and 2 hours on average, 1,000 local requests, the four external request types
25 % each. ``--plot PNG`` draws the generated sizes, runtimes and inter-arrival times beside a
reference trace's (default: the bundled ``lublin-256``) with the KS statistics, which it also
writes as CSV next to the PNG (same name, ``.csv``).

Exit codes: 0 ok; 2 usage or input error (bad split, mix, target out of the model's reach,
unreadable reference, unwritable output).
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from vgrid_runtime import traces
from vwn_agents.leasing import lublin, requestmix

from .common import err_console
from .common import fail as _fail


@click.group("workload")
def workload_group() -> None:
    """Generate synthetic workloads (LWF or SWF)."""


def _pair(text: str, n: int, what: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != n:
        raise click.BadParameter(f"{what}: expected {n} comma-separated numbers, got {text!r}")
    return values


@workload_group.command("lublin")
@click.option("--jobs", type=click.IntRange(min=1), default=3000, show_default=True, help="number of requests")
@click.option("--days", type=click.FloatRange(min=0, min_open=True), default=14.0, show_default=True,
              help="expected span of the arrivals (sets the arrival rate)")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True, help="random seed (same seed, same workload)")
@click.option("--nodes", type=click.IntRange(min=1), default=32, show_default=True,
              help="machine size (single-core nodes); largest request")
@click.option("--local", "local", default="1000", show_default=True,
              help="local requests: a count (1000) or a percentage of all requests (30%)")
@click.option("--mix", default="25,25,25,25", show_default=True,
              help="percentages of external requests: cancellable,suspendable,migratable,non-preemptable")
@click.option("--mean-size", type=click.FloatRange(min=1), default=4.0, show_default=True,
              help="target mean VMs per request")
@click.option("--mean-runtime", type=click.FloatRange(min=0, min_open=True), default=7200.0, show_default=True,
              help="target mean duration, seconds")
@click.option("--exact-mean-runtime", is_flag=True,
              help="rescale this sample's durations so that their mean is exactly --mean-runtime")
@click.option("--no-adjust", is_flag=True,
              help="the published model unchanged (ignores --days, --mean-size, --mean-runtime)")
@click.option("--classes", type=click.Choice(sorted(lublin.CLASS_SETS)), default="batch+interactive",
              show_default=True, help="parameter sets: batch and interactive jobs, or the whole-sample fit")
@click.option("--slack", default="0,1", show_default=True,
              help="external deadlines: deadline = ready + duration x (1 + U[LOW,HIGH])")
@click.option("--local-slack", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="local deadlines: deadline = ready + duration x (1 + SLACK)")
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="write the workload here (.swf: SWF, else LWF XML); without it the LWF goes to stdout")
@click.option("--format", "fmt", type=click.Choice(["lwf", "swf"]), default=None,
              help="output format (default: by the --out suffix)")
@click.option("--plot", "plot", type=click.Path(dir_okay=False), default=None,
              help="PNG of size, runtime and inter-arrival histograms beside --reference's")
@click.option("--reference", default="lublin-256", show_default=True,
              help="SWF trace (file or bundled name) that --plot compares with")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
def lublin_cmd(jobs, days, seed, nodes, local, mix, mean_size, mean_runtime, exact_mean_runtime, no_adjust, classes, slack,
               local_slack, out, fmt, plot, reference, as_json) -> None:
    """Generate a Lublin-Feitelson 1999 workload with seed 002's request types (Section 7.2)."""
    mix_values = dict(zip(requestmix.REQUEST_TYPES, _pair(mix, 4, "--mix")))
    slack_lo, slack_hi = _pair(slack, 2, "--slack")
    try:
        if no_adjust:
            model = lublin.LublinModel(nodes=nodes, classes=lublin.CLASS_SETS[classes])
        else:
            model = lublin.LublinModel.adjusted(nodes, jobs, days, mean_size, mean_runtime,
                                                classes=lublin.CLASS_SETS[classes])
        sample = model.sample(jobs, seed)
        if exact_mean_runtime:
            sample = lublin.rescale_runtimes(sample, mean_runtime)
        requests = requestmix.assign_requests(sample, seed, local, mix_values, (slack_lo, slack_hi), local_slack)
    except ValueError as exc:
        _fail(str(exc), 2)
    summary = _summary(model, requests, seed, classes, no_adjust)
    fmt = fmt or ("swf" if out and Path(out).suffix == ".swf" else "lwf")
    note = (f"seed {seed}, {jobs} jobs, {nodes} nodes, classes {classes}, u_med shift {model.u_med_shift:.4f}, "
            f"runtime x {model.runtime_scale:.6g}, inter-arrival x {model.arrival_scale:.6g}")
    text = (requestmix.to_swf(requests, nodes, note) if fmt == "swf"
            else requestmix.to_lwf(requests, nodes, f"lublin-seed{seed}", description=note))
    if plot:
        summary["comparison"] = _plot(sample, model, reference, plot)
    if out:
        try:
            Path(out).write_text(text, encoding="utf-8")
        except OSError as exc:
            _fail(f"{out}: cannot write: {exc.strerror}", 2)
        summary["out"] = out
    else:
        click.echo(text, nl=False)
    if as_json:
        click.echo(json.dumps(summary, indent=1), err=not out)
    elif out or plot:
        _print_summary(summary, Console(stderr=not out))


def _plot(sample, model, reference: str, png: str) -> dict:
    from vwn_agents.leasing.plots import workload_histograms
    try:
        path = traces.resolve(reference)
        ref_text = _trace_text(path)
        ref = lublin.swf_jobs(ref_text)
    except (traces.TraceNameError, ValueError, OSError) as exc:
        _fail(f"--reference {reference}: {exc}", 2)
    if len(ref) < 2:
        _fail(f"--reference {reference}: fewer than 2 jobs", 2)
    stats = lublin.compare(sample, ref, model.params()[0])
    csv_path = Path(png).with_suffix(".csv")
    try:
        workload_histograms(sample, ref, stats, png, ("generated", Path(path).name))
        with csv_path.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["quantity", "ks", "bound", "n_generated", "n_reference"])
            for name, st in stats.items():
                gaps = int(name.startswith("interarrival"))   # n jobs, n - 1 inter-arrivals
                w.writerow([name, f"{st['ks']:.6f}", f"{st['bound']:.6f}", len(sample) - gaps, len(ref) - gaps])
    except OSError as exc:
        _fail(f"{png}: cannot write: {exc.strerror}", 2)
    err_console.print(f"wrote {png} and {csv_path}")
    return stats


def _trace_text(path: Path) -> str:
    """The text of a trace file, gunzipped when it ends in .gz."""
    if path.suffix == ".gz":
        import gzip
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            return f.read()
    return path.read_text(encoding="utf-8", errors="replace")


def _summary(model, requests, seed, classes, no_adjust) -> dict:
    n = len(requests)
    span = (requests[-1].ready_s - requests[0].ready_s) if n else 0
    by_type = {t: sum(1 for r in requests if not r.local and r.request_type == t) for t in requestmix.REQUEST_TYPES}
    return {
        "seed": seed, "requests": n, "nodes": model.nodes, "classes": classes, "adjusted": not no_adjust,
        "span_days": span / 86400, "mean_vms": sum(r.n_vms for r in requests) / n if n else math.nan,
        "mean_duration_s": sum(r.duration_s for r in requests) / n if n else math.nan,
        "local": sum(1 for r in requests if r.local), "external_by_type": by_type,
        "model": {"u_med_shift": model.u_med_shift, "runtime_scale": model.runtime_scale,
                  "arrival_scale": model.arrival_scale, "expected_mean_vms": model.mean_size(),
                  "expected_mean_duration_s": model.mean_runtime(),
                  "expected_jobs_per_day": model.arrival_rate() * 86400},
    }


def _print_summary(s: dict, console: Console) -> None:
    t = Table(title=f"Lublin-Feitelson workload (seed {s['seed']})")
    t.add_column("quantity")
    t.add_column("this sample", justify="right")
    t.add_column("model's expectation", justify="right")
    m = s["model"]
    t.add_row("requests", f"{s['requests']:,}", "")
    t.add_row("span (days)", f"{s['span_days']:.2f}", f"{s['requests'] / m['expected_jobs_per_day']:.2f}")
    t.add_row("mean VMs per request", f"{s['mean_vms']:.2f}", f"{m['expected_mean_vms']:.2f}")
    t.add_row("mean duration (s)", f"{s['mean_duration_s']:,.0f}", f"{m['expected_mean_duration_s']:,.0f}")
    t.add_row("local requests", f"{s['local']:,}", "")
    for k, v in s["external_by_type"].items():
        t.add_row(f"external {k}", f"{v:,}", "")
    for k, v in s.get("comparison", {}).items():
        t.add_row(f"KS {k} vs reference", f"{v['ks']:.4f}", f"bound {v['bound']:.4f}")
    console.print(t)
