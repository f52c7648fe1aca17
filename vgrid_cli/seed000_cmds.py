"""``vgrid report seed000``: seed 000 Sections 8.1, 8.2 and 8.3 regenerated (issue 16).

Runs Traces I/II under the four staging strategies and Figure 8.4's trace under EDF and EDF/JIT
(:mod:`vwn_agents.leasing.seed000_ar`), Traces III/IV from the bundled DataStar excerpt with
and without image pools (:mod:`vwn_agents.leasing.seed000_be`, ``--only 8.2`` runs just
these), and the 36 traces x 4 configurations of :mod:`vwn_agents.leasing.seed000`, for
``--seeds`` seeds on ``--workers`` processes; writes ``seed000.md``, ``seed000_ratios.png``,
``seed000_fig8_2_8_3.png``, ``seed000_fig8_4.png``, ``seed000_fig8_5.png``,
``seed000_fig8_6_8_7.png`` and ``seed000_runs.json`` into ``--out`` (``--only 8.2``
replaces only Section 8.2 in ``seed000.md`` and ``seed000_runs.json`` and writes its PNGs). Exit codes: 0 ok;
2 a bad option or a missing input.
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import click

from vgrid_runtime.traces import TRACES_DIR

from .gridsim_cmds import _progress

PAPER_CSV = TRACES_DIR.parent / "papers" / "seed000_section8_3.csv"


def _one(args):
    from vwn_agents.leasing.seed000 import run
    return run(*args)


def _section82(out_dir: Path) -> tuple[str, list]:
    """Traces III/IV (seed 000 Section 8.2): run every variant, write the two PNGs, return the
    Markdown and the rows (without their per-VM series). ClickException if the input is missing."""
    from vgrid_runtime.traces import TraceNameError, bundled
    from vwn_agents.leasing import seed000_be, seed000bedoc, seed000_sge

    try:
        jobs = seed000_be.read_jobs(bundled("datastar-express"))
    except TraceNameError as exc:
        raise click.ClickException(str(exc)) from None
    cpu0 = time.process_time()
    rows = seed000_be.run_all(jobs)
    traces = {t: seed000_be.build(t, jobs)[0] for t in seed000_be.TABLE_8_2}
    sge_rows = seed000_sge.run_all(traces)          # the inferred SGE prototype, beside ours
    cpu = time.process_time() - cpu0
    seed000bedoc.figure_submissions(traces["III"], out_dir)
    seed000bedoc.figure_deployed(rows, out_dir)
    text = seed000bedoc.section(rows, traces, cpu, sge_rows)
    return text, [{k: v for k, v in r.items() if k != "deployed"} for r in rows]


def splice_82(page: str, section: str) -> str:
    """``page`` (seed000.md) with its Section 8.2 replaced by ``section``, or inserted before
    Section 8.3 (at the end when there is none)."""
    start = page.find("## Section 8.2:")
    nxt = page.find("## Section 8.3:")
    if start >= 0:
        end = nxt if nxt > start else len(page)
        return page[:start] + section.rstrip("\n") + "\n\n" + page[end:]
    if nxt >= 0:
        return page[:nxt] + section.rstrip("\n") + "\n\n" + page[nxt:]
    return page.rstrip("\n") + "\n\n" + section


def _only_82(out_dir: Path) -> None:
    """``--only 8.2``: rerun Section 8.2 and splice it into ``out_dir``/seed000.md and
    seed000_runs.json (created when missing), leaving the other sections as they are."""
    out_dir.mkdir(parents=True, exist_ok=True)
    text, rows82 = _section82(out_dir)
    md, runs = out_dir / "seed000.md", out_dir / "seed000_runs.json"
    md.write_text(splice_82(md.read_text(encoding="utf-8") if md.is_file() else "", text), encoding="utf-8")
    data = json.loads(runs.read_text(encoding="utf-8")) if runs.is_file() else {}
    data["section_8_2"] = rows82
    runs.write_text(json.dumps(data, indent=0) + "\n", encoding="utf-8")
    click.echo(f"wrote Section 8.2 into {md} ({len(rows82)} runs)")


def _one81(args):
    from vwn_agents.leasing import seed000_ar
    if args[0] == "disk":
        return seed000_ar.disk_usage(*args[1:])
    return seed000_ar.satisfaction(*args)


SECTION81 = """## Section 8.1: accuracy of AR deployments (Table 8.1, Figures 8.2-8.4)

Traces I and II (Table 8.1, partly garbled in our copy of the thesis) are rebuilt from what it
states: 2 h, virtual clusters of 2-4 VMs, 30-minute reservations, six 600 MB images, 100 Mb/s.
Trace I has uniform start times; Trace II starts in 100 s windows every 900 s. Images are not
reused. Our choices (`ArSpec`):

- 8 nodes of 4 VM slots.
- Each AR is submitted 5-15 min before its start.
- ARs are admitted by the lease engine itself. 32 fit, where the thesis has 36 and 35.

The strategies: EDF (scheduled, with admission), and the naive JIT, aggressive and job-style,
whose concurrent transfers share the link.

{sat_table}

![Figures 8.2 and 8.3](seed000_fig8_2_8_3.png)

**Against the thesis.**

- *Agrees*: EDF gives every client 100 %. Job-style is worst, because every client loses its
  own transfer time. Trace II's bursts hurt JIT more than Trace I does.
- *Differs*: Aggressive also reaches 100 % here, where the thesis has 96-100 %. JIT reaches 100 %
  only for a few ARs of Trace I, where the thesis has most. Our Trace I keeps the link about
  75 % busy, so JIT's transfers, each timed as if the link were free, collide.

Figure 8.4's trace: 94 ARs of 1-16 VMs over 10 h, all known at the start, six 600 MB images,
8 dual-CPU nodes. The thesis gives no durations; 5-15 min is what lets 94 such ARs fit. We
compare EDF with EDF/JIT on the peak of images held on one node:

{disk_table}

![Figure 8.4](seed000_fig8_4.png)

EDF stages every image as early as it can, so a node piles up images for the whole
experiment. EDF/JIT pushes each transfer to just before its reservation. The gap has the
thesis's shape; the absolute peak depends on how many ARs a node holds.
"""


@click.command("seed000")
@click.option("--out", type=click.Path(file_okay=False), default="docs/experiments", show_default=True)
@click.option("--seeds", type=click.IntRange(min=1), default=1, show_default=True, help="traces per cell")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="processes (default: every core)")
@click.option("--durations", default="long,medium,short", show_default=True,
              help="best-effort duration classes to run (a reduced input for tests)")
@click.option("--only", type=click.Choice(["8.2"]), default=None,
              help="rerun only Section 8.2 (Traces III/IV) and replace it in seed000.md")
def seed000_cmd(out, seeds, workers, durations, only) -> None:
    """Seed 000 Sections 8.1-8.3: AR staging, image reuse (Traces III/IV), mixed workloads."""
    if only == "8.2":
        _only_82(Path(out))
        return
    from vwn_agents.leasing.seed000 import CONFIGS, DURATIONS, cells, paper_tables
    from vwn_agents.leasing.seed000_ar import STRATEGIES
    from vwn_agents.leasing.seed000ardoc import (disk_figure, disk_table, satisfaction_figure,
                                                 satisfaction_table)
    from vwn_agents.leasing.seed000doc import figure, page, table4_markdown

    if not PAPER_CSV.is_file():
        raise click.ClickException(f"missing input {PAPER_CSV} (the thesis's Tables 8.3-8.6)")
    wanted = [d.strip() for d in durations.split(",") if d.strip()]
    bad = [d for d in wanted if d not in DURATIONS]
    if bad or not wanted:
        raise click.BadParameter(f"unknown {', '.join(bad) or 'empty list'}; choose from "
                                 f"{', '.join(DURATIONS)}", param_hint="--durations")
    paper = paper_tables(PAPER_CSV)
    jobs = [(*cell, c, s) for cell in cells() if cell[0] in wanted for c in CONFIGS for s in range(seeds)]
    from vwn_agents.leasing.seed000 import JOB_CONFIGS, TABLE4
    jobs += [(*cell, c, s) for cell, _, _ in TABLE4.values() if cell[0] in wanted
             for c in JOB_CONFIGS for s in range(seeds)]
    jobs81 = [(k, st, s) for k in ("I", "II") for st in STRATEGIES for s in range(seeds)] + \
        [("disk", st, s) for st in ("edf", "edf-jit") for s in range(seeds)]
    rows, rows81 = [], []
    with _progress("simulations", True) as update, \
            ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        futures = {pool.submit(_one81, j): True for j in jobs81}
        futures.update({pool.submit(_one, j): False for j in jobs})
        for fut in as_completed(futures):
            (rows81 if futures[fut] else rows).append(fut.result())
            if update is not None:
                update(len(rows) + len(rows81), len(futures))
    rows.sort(key=lambda r: (r["duration"], r["ar_size"], r["mix"], r["config"], r["seed"]))
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows4 = [r for r in rows if r["config"] in JOB_CONFIGS]
    rows = [r for r in rows if r["config"] not in JOB_CONFIGS]
    sat_rows = [r for r in rows81 if "trace" in r]
    disk_rows = sorted((r for r in rows81 if "peak_mb" in r), key=lambda r: (r["strategy"], r["seed"]))
    section82, rows82 = _section82(out_dir)
    (out_dir / "seed000_runs.json").write_text(json.dumps(
        {"section_8_3": rows, "section_4": rows4, "section_8_1": sat_rows, "section_8_2": rows82,
         "figure_8_4": [{k: v for k, v in r.items() if k != "series"} for r in disk_rows]},
        indent=0) + "\n", encoding="utf-8")
    figure(rows, paper, out_dir)
    satisfaction_figure(sat_rows, out_dir)
    disk_figure(disk_rows, out_dir)
    section81 = SECTION81.format(sat_table=satisfaction_table(sat_rows), disk_table=disk_table(disk_rows))
    command = f"vgrid report seed000 --seeds {seeds}" + (f" --durations {durations}" if len(wanted) < 3 else "")
    section81 += "\n" + table4_markdown(rows + rows4) + "\n\n" + section82
    (out_dir / "seed000.md").write_text(page(rows, paper, command, section81, len(rows81)), encoding="utf-8")
    click.echo(f"wrote {out_dir / 'seed000.md'} ({len(rows)} runs)")
