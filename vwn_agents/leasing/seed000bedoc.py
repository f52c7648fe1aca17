"""Seed 000 Section 8.2 on docs/experiments/seed000.md: Traces III and IV (Tables 8.1, 8.2),
Figure 8.5 (submissions over time), Figures 8.6/8.7 (MB deployed over time, with and without
the image cache) and the average deployment time per image, ours beside the thesis's.

``rows`` are :func:`seed000_be.run_all` results; ``leases`` a trace from
:func:`seed000_be.build`. Figures are written as PNG, the rest returned as Markdown.
"""
from __future__ import annotations

import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .seed000_be import (CONFIGS, IMAGES, MIXED, TABLE_8_2, THESIS, VARIANTS, BeSpec,  # noqa: E402
                         deployed_at, image_shares)
from .seed000ardoc import save_png  # noqa: E402

MARK_S = 3550.0   # where the thesis reads the cache's advantage off Figures 8.6 and 8.7


def _row(rows, variant, trace, config):
    return next((r for r in rows if r["variant"] == variant and r["trace"] == trace and r["config"] == config), None)


def figure_submissions(leases, out: Path) -> Path:
    """``seed000_fig8_5.png``: submissions per 5 minutes (bars) and cumulative VMs requested."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    times = [l.submit_s for l in leases]
    bins = [300.0 * k for k in range(int(max(times) // 300) + 2)]
    ax.hist(times, bins=bins, color="tab:blue", alpha=0.7, edgecolor="white", label="submissions per 5 min")
    ax.set_xlabel("time since the first submission (s)")
    ax.set_ylabel("submissions")
    ax2 = ax.twinx()
    acc, xs, ys = 0, [], []
    for lease in leases:
        acc += lease.n_vms
        xs.append(lease.submit_s)
        ys.append(acc)
    ax2.step(xs, ys, where="post", color="tab:red", label="VMs requested (cumulative)")
    ax2.set_ylabel("VMs (cumulative)")
    fig.legend(loc="upper left", fontsize=8, bbox_to_anchor=(0.3, 0.88))
    ax.set_title("Figure 8.5: VW submissions, Traces III and IV (DataStar express queue)", fontsize=10)
    return save_png(fig, out, "seed000_fig8_5.png")


def figure_deployed(rows, out: Path, variant: str = "chosen") -> Path:
    """``seed000_fig8_6_8_7.png``: cumulative MB deployed with and without the cache, Trace III
    left (Figure 8.6) and Trace IV right (Figure 8.7)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, trace, fig_no in zip(axes, TABLE_8_2, ("8.6", "8.7")):
        for cfg, color in zip(CONFIGS, ("tab:gray", "tab:green")):
            r = _row(rows, variant, trace, cfg)
            if r is None:
                continue
            xs = [0.0] + [t for t, _ in r["deployed"]]
            ys = [0.0] + [mb / 1000.0 for _, mb in r["deployed"]]
            ax.step(xs, ys, where="post", color=color, label=CONFIGS[cfg])
        ax.axvline(MARK_S, color="0.7", lw=0.8, ls="--")
        ax.set_title(f"Figure {fig_no}: MB deployed (Trace {trace})", fontsize=10)
        ax.set_xlabel("time (s)")
        ax.legend(fontsize=8, loc="lower right")
    axes[0].set_ylabel("GB deployed (cumulative)")
    return save_png(fig, out, "seed000_fig8_6_8_7.png")


def _f(v, fmt="{:.0f}"):
    return "" if v is None else fmt.format(v)


def characteristics(leases, spec: BeSpec = BeSpec()) -> str:
    """Table 8.1's Traces III/IV column, ours beside the thesis's."""
    vms = sum(l.n_vms for l in leases)
    runs = [l.duration_s for l in leases]
    span = max(l.submit_s for l in leases) - min(l.submit_s for l in leases)
    return "\n".join([
        "| Table 8.1 (Traces III, IV) | ours | thesis |", "|---|---:|---:|",
        f"| VW submissions | {len(leases)} | {THESIS['submissions']} |",
        f"| nodes (VMs) per VW | {min(l.n_vms for l in leases)}-{max(l.n_vms for l in leases)} | 2-16 |",
        f"| images to deploy | {vms} ({vms * 0.6:.1f} GB) | {THESIS['images']} "
        f"({THESIS['images'] * 0.6:.1f} GB) |",
        f"| trace duration (s) | {span:.0f} | {THESIS['duration_s']} |",
        f"| VW duration (s), mean / st. dev. | {statistics.fmean(runs):.1f} / {statistics.pstdev(runs):.1f} | "
        f"{THESIS['mean_vw_s']:.1f} / garbled in our copy |"])


def distribution(traces: dict) -> str:
    """Table 8.2: per image, % of submissions and % of images deployed, ours / thesis.
    ``traces``: trace name -> its leases."""
    lines = ["| image | III submissions, ours / thesis | III images | IV submissions | IV images |",
             "|---|---:|---:|---:|---:|"]
    got = {}
    for trace, leases in traces.items():
        got[trace] = image_shares([l.image_id for l in leases], [l.n_vms for l in leases])
    for k, img in enumerate(IMAGES):
        cells = []
        for trace in TABLE_8_2:
            for col in (0, 1):
                cells.append(f"{got[trace][col][k]:.0f} % / {TABLE_8_2[trace][col][k]} %")
        lines.append(f"| {img} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results(rows, variant: str = "chosen") -> str:
    """Per trace: the average deployment time per image and the MB deployed by 3,550 s, with
    and without the cache, ours beside the thesis's; transfers and when the last VM ended."""
    lines = ["| trace | configuration | deployment time per image (s), ours / thesis | per lease, mean (s) | "
             f"GB deployed by {MARK_S:.0f} s | cache advantage at {MARK_S:.0f} s (GB), ours / thesis | "
             "VMs whose image was already on the node | transfers (GB) | last VM ends (s) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for trace in TABLE_8_2:
        base = _row(rows, variant, trace, "nocache")
        for k, cfg in enumerate(CONFIGS):
            r = _row(rows, variant, trace, cfg)
            if r is None:
                continue
            adv = ""
            if cfg == "cache" and base is not None:
                adv = (f"{(deployed_at(r, MARK_S) - deployed_at(base, MARK_S)) / 1000:.1f} / "
                       f"{THESIS['advantage_gb_3550'][trace]}")
            lines.append(f"| {trace} | {CONFIGS[cfg]} | {_f(r['mean_deploy_s'])} / {THESIS['deploy_s'][trace][k]:.0f} | "
                         f"{_f(r['mean_deploy_lease_s'])} | {deployed_at(r, MARK_S) / 1000:.1f} | {adv} | "
                         f"{r['cache_hits']} of {r['vms_started']} | {r['transfers']} ({r['mb_transferred'] / 1000:.1f}) | "
                         f"{_f(r['all_best_effort_s'])} |")
    return "\n".join(lines)


def sensitivity(rows) -> str:
    """Per variant: deployment time per image (s) without / with the cache, per trace, and the
    VMs that started; then the spread over the random image draws."""
    lines = ["| variant | III: no reuse / cache (s) | IV: no reuse / cache (s) | VMs started (of the trace's) |",
             "|---|---:|---:|---:|"]
    for name, (label, _) in VARIANTS.items():
        cells, started = [], []
        for trace in TABLE_8_2:
            a, b = _row(rows, name, trace, "nocache"), _row(rows, name, trace, "cache")
            if a is None or b is None:
                break
            cells.append(f"{_f(a['mean_deploy_s'])} / {_f(b['mean_deploy_s'])}")
            started += [f"{a['vms_started']}/{a['vms']}", f"{b['vms_started']}/{b['vms']}"]
        if len(cells) == 2:
            lines.append(f"| {label} | {cells[0]} | {cells[1]} | {', '.join(sorted(set(started)))} |")
    draws = sorted({r["variant"] for r in rows if r["variant"].startswith("draw-")})
    if draws:
        cells = []
        for trace in TABLE_8_2:
            vals = [_row(rows, d, trace, "cache")["mean_deploy_s"] for d in draws]
            cells.append(f"{statistics.fmean(vals):.0f} (range {min(vals):.0f}-{max(vals):.0f})")
        lines.append(f"| {len(draws)} random image draws (Table 8.2's counts, seeds 0-{len(draws) - 1}), "
                     f"mean with cache | {cells[0]} | {cells[1]} | |")
    return "\n".join(lines)


def mixed_table(rows) -> str:
    """Traces III/IV under Section 8.3's configurations: time to complete all best-effort
    requests (s, and % against no virtualization) and utilization (%)."""
    lines = ["| configuration | III: all best-effort done (s) | III: utilization | IV: all best-effort done (s) "
             "| IV: utilization |", "|---|---:|---:|---:|---:|"]
    for cfg, (label, _pct, _images) in MIXED.items():
        cells = []
        for trace in TABLE_8_2:
            r, base = _row(rows, "section-8.3", trace, cfg), _row(rows, "section-8.3", trace, "novm")
            if r is None or base is None:
                return ""
            rel = "" if cfg == "novm" else f" ({100 * (r['all_best_effort_s'] / base['all_best_effort_s'] - 1):+.1f} %)"
            cells += [f"{r['all_best_effort_s']:.0f}{rel}", f"{100 * r['utilization']:.1f} %"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


SECTION82 = """## Section 8.2: image reuse for best-effort deployments (Traces III and IV, Figures 8.5-8.7)

Input: the SDSC DataStar log of the Parallel Workloads Archive, express queue (queue 1: 8 p655
nodes of 8 CPUs, jobs of at most 2 h), submissions #21543 to #21665 -- the thesis's 80-minute
stretch, bundled as `datastar-express` (`examples/traces/`, header verbatim). Each submission
is a virtual cluster of (requested processors / 4) VMs with its submission time and run time
unaltered and one of six 600 MB images; Trace III spreads the images evenly, Trace IV gives
two of them more than 80 % of the submissions. Both run through the production lease engine
(`vwn_agents/leasing/seed000_be.py`; this part is {runs} simulations, {cpu:.0f} s of CPU) with
best-effort image transfers over one 100 Mb/s link (48 s per image, FIFO), without image
reuse and with per-node image pools.

Our choices where the thesis is silent (`BeSpec`; their effect is in the last table):

- **Which jobs.** Jobs #21543-#21662 that completed (status 1). This gives exactly Table 8.1's
  62 submissions and 144 images (86.4 GB), over 4,694 s (the thesis: 4,700 s). Adding #21665, the last job of the range,
  would give 63 submissions and 148 images, so the thesis's range evidently stops before it.
  Five jobs of the range are dropped: four that were cancelled (SWF status 5) and #21665.
- **The site.** 16 nodes of one VM slot each: the 16 processors to which the thesis scales the
  queue's 64. Each VM then gets its own image, as Table 8.1 counts them. The thesis's testbed was 8 dual-CPU nodes, where a
  lease's two VMs on one node would share one transfer in our engine (variant `8x2`).
- **The cache.** A 1.8 GB pool per node (the thesis: a 1.8 GB LFU cache, three images). Our
  pools evict the least recently used image, and reuse includes piggybacking on a transfer
  already scheduled (seed 000 Section 6.3.1), which the SGE prototype did not have.
- **Images.** Table 8.2's submission shares are taken as exact counts (largest remainder) and
  shuffled with a seed. Of 500 seeded shuffles we keep the one whose share of images (VMs)
  comes closest to Table 8.2's second column. Trace III's second column sums to 89 % in our
  copy of the thesis, so it cannot be matched exactly.
- **Deployment time.** A VM's deployment runs from when the scheduler places its lease (its
  transfers join the FIFO queue) to when its image is on its node: at once for an image
  already in the pool, else at the end of the transfer that carries it. "MB deployed" adds
  600 MB per VM at that moment, whether the image was transferred or reused.
- **Engine option.** `besteffort-staging-attempts = 0` (one try per node, plus one). A lease
  of n VMs missing its image needs n transfers back to back, but each placement try assumes
  one. With the engine's default of 4 tries, a lease of 2 or 4 VMs on an idle site of 16
  nodes never fits. It then stays Queued until the next event, and for ever when none comes
  (variant `attempts-4`).

{characteristics}

{distribution}

![Figure 8.5](seed000_fig8_5.png)

### Deployment time and MB deployed (Figures 8.6 and 8.7)

{results}

![Figures 8.6 and 8.7](seed000_fig8_6_8_7.png)

**Against the thesis.**

- *Agrees*:
  - Without reuse both traces behave the same, since the images do not matter. The thesis
    also gives 440 s for both.
  - The cache cuts deployment time and transfers, and more for the skewed Trace IV, where two
    images cover most VMs: {iv_cut:.0f} % against Trace III's {iii_cut:.0f} %. The thesis
    has 44 % and 31 %.
  - With the cache far more MB are deployed by 3,550 s than without ({adv_iii:.1f} and
    {adv_iv:.1f} GB ahead; the thesis: 25.2 and 27.6 GB).
- *Differs*: the absolute times without reuse.
  - **Without reuse ours is {nc_ratio:.1f} times the thesis's** ({nc:.0f} s against 440 s). Every
    VM needs its own 48 s transfer, 6,912 s of transfers for a trace of 4,694 s, so the link is
    the bottleneck. Our engine places a lease as soon as it is submitted and queues its
    transfers, so a VM's deployment includes its wait in that queue (up to {nc_max:.0f} s).
  - In the thesis's SGE prototype, we infer, a VM's deployment starts when SGE dispatches it
    to one of the 16 slots, so its wait in SGE's queue is not counted; it then shares the
    link with the other slots' deployments. About nine 48 s transfers at once give its 440 s.
    The next section models this.
- *Close*: **with the cache ours is in the thesis's range** ({c3:.0f} / {c4:.0f} s against
  305 / 247 s).
  - Most VMs reuse a pooled or arriving image, so the queue stays short and the two measures
    nearly coincide.
  - Which VMs hit the pool depends on the image draw: over {draws} random draws the cached
    runs average {d3:.0f} s (Trace III) and {d4:.0f} s (Trace IV).
  - By 3,550 s our cached runs have deployed {sub_pct:.0f} % of the VMs submitted by then. The
    advantage is therefore bounded by the submissions, and nearly equal for both traces.

{sge}### Effect of our choices (deployment time per image, s)

{sensitivity}

- The image draw moves the cached times about as much as the pool size does. The pool
  shortens deployment in {pool_wins} of the {n_var} variants. Trace IV deploys faster than Trace III in
  {iv_wins} of the {n_var} variants and {draw_wins} of the {draws} draws, not in all.
- Without piggybacking the pool helps little, least for Trace III: a lease is placed when it
  is submitted, while the copies it could reuse are still queued behind other transfers. Only
  a transfer that is already scheduled can be shared at that point.
- On the testbed's 8 dual-slot nodes a lease's two VMs on one node share a transfer. That
  halves the load on the link.
- At 1 Gb/s the link stops being the bottleneck: {bw_nc:.0f} s per image without reuse and
  {bw_c3:.0f} / {bw_c4:.0f} s with the pools. So the 100 Mb/s link sets the size of every
  number above.
- `besteffort-staging-attempts = 4` (the engine's default before session 6) leaves most multi-node leases
  queued for ever (see the choices above).

### Traces III and IV in Section 8.3's configurations

The issue also asks for Traces III and IV in the configurations of Tables 8.3-8.7: time to
complete all best-effort requests, and utilization. The thesis gives no such numbers for these
traces; its Tables 8.3-8.7 use Section 8.3's synthetic traces. The VM configurations add
Section 8.3's 10 % runtime overhead; the image settings are the chosen ones above.

{mixed}

- The site is lightly loaded, so the time to complete all requests barely moves without
  image transfers. The last submission is at 4,694 s.
- Transferring every image without reuse makes the 100 Mb/s link the bottleneck. Image pools
  win back most of that delay, more for the skewed Trace IV.
"""


SGE_SECTION = """### The thesis's SGE prototype, inferred (deployment from dispatch, transfers sharing the link)

**This model is our inference, not the thesis's code** (`vwn_agents/leasing/seed000_sge.py`).
The thesis ran Traces III/IV on SGE with scripts that "use SGE to schedule not only the virtual
resources, but also the preparation overhead" (Section 7), and does not say when a deployment
starts. We assume each VW is an SGE job of one slot per VM, dispatched when enough of the 16
slots are free. Its image transfers start at dispatch and share the 100 Mb/s link equally
with every other transfer in flight. A VM's deployment time runs from its dispatch to its
image's arrival, so the wait in SGE's queue is not counted. With the cache, a node keeps its
three most frequently used images (LFU, as the thesis), and SGE fills the free slots lowest
node first, not knowing where the images are.

{table}

- On our site of 16 one-slot nodes the model gives {m16:.0f} s without reuse. That is
  {r16:.1f} times the thesis's 440 s, against 4.9 times for our engine's measure. The SGE queue
  wait that it leaves out averages {w16:.0f} s per VM. About {k16:.0f} transfers share the link
  at a time, so each takes about {k16:.0f} x 48 s.
- On the testbed's 8 dual-slot nodes a VW's two VMs on one node share a transfer. At most 8
  transfers are then in flight, which gives {m8:.0f} s.
- The thesis's 440 s lies between the two ({m8:.0f}-{m16:.0f} s). The inferred prototype
  explains most of the factor: our engine counts a different interval, not a slower one.
- With the LFU cache the 16-slot model gives {c3:.0f} / {c4:.0f} s (Trace III / IV), against the
  thesis's 305 / 247 s.
- Whether SGE ran one job per VW or per VM, or strict FIFO, changes these times by less than
  {spread:.0f} s.

"""


def sge_section(sge_rows, rows) -> str:
    """The inferred SGE prototype's table (:mod:`seed000_sge`) beside our engine's chosen runs
    and the thesis's; "" without ``sge_rows``."""
    if not sge_rows:
        return ""
    from .seed000_sge import table

    def sge(v, t, c, key="mean_deploy_s"):
        return _row(sge_rows, v, t, c)[key]
    ours = {t: (_row(rows, "chosen", t, "nocache")["mean_deploy_s"], _row(rows, "chosen", t, "cache")["mean_deploy_s"])
            for t in TABLE_8_2}
    thesis = THESIS["deploy_s"]["III"][0]
    nocache = [r["mean_deploy_s"] for r in sge_rows if r["config"] == "nocache" and r["variant"].startswith("16x1")]
    return SGE_SECTION.format(table=table(sge_rows, ours, THESIS["deploy_s"]), m16=sge("16x1", "III", "nocache"),
                              r16=sge("16x1", "III", "nocache") / thesis,
                              w16=sge("16x1", "III", "nocache", "mean_queue_wait_s"),
                              k16=sge("16x1", "III", "nocache", "mean_parallel_transfers"),
                              m8=sge("8x2", "III", "nocache"), c3=sge("16x1", "III", "cache"),
                              c4=sge("16x1", "IV", "cache"), spread=max(nocache) - min(nocache) + 1)


def section(rows, leases_by_trace: dict, cpu_s: float, sge_rows=None) -> str:
    """Section 8.2's Markdown from :func:`seed000_be.run_all` ``rows`` and the chosen traces;
    with ``sge_rows`` (:func:`seed000_sge.run_all`) also the inferred SGE prototype's table."""
    def mean(trace, cfg, key="mean_deploy_s"):
        return _row(rows, "chosen", trace, cfg)[key]

    def adv(trace):
        return (deployed_at(_row(rows, "chosen", trace, "cache"), MARK_S)
                - deployed_at(_row(rows, "chosen", trace, "nocache"), MARK_S)) / 1000.0

    leases = next(iter(leases_by_trace.values()))
    draws = sorted({r["variant"] for r in rows if r["variant"].startswith("draw-")})
    d3 = statistics.fmean(_row(rows, d, "III", "cache")["mean_deploy_s"] for d in draws) if draws else 0.0
    d4 = statistics.fmean(_row(rows, d, "IV", "cache")["mean_deploy_s"] for d in draws) if draws else 0.0
    submitted = sum(l.n_vms for l in leases if l.submit_s <= MARK_S) * 600.0
    sub_pct = 100.0 * min(deployed_at(_row(rows, "chosen", t, "cache"), MARK_S) for t in TABLE_8_2) / submitted
    shown = [v for v in VARIANTS if _row(rows, v, "III", "cache") and _row(rows, v, "IV", "cache")]

    def iv_faster(v):
        return _row(rows, v, "IV", "cache")["mean_deploy_s"] < _row(rows, v, "III", "cache")["mean_deploy_s"]

    def pool_faster(v):
        return all(_row(rows, v, t, "cache")["mean_deploy_s"] < _row(rows, v, t, "nocache")["mean_deploy_s"]
                   for t in TABLE_8_2)

    return SECTION82.format(draws=len(draws), d3=d3, d4=d4, sub_pct=sub_pct,
                            pool_wins=sum(map(pool_faster, shown)),
                            bw_nc=_row(rows, "bw-1000", "III", "nocache")["mean_deploy_s"],
                            bw_c3=_row(rows, "bw-1000", "III", "cache")["mean_deploy_s"],
                            bw_c4=_row(rows, "bw-1000", "IV", "cache")["mean_deploy_s"],
                            nc_ratio=mean("III", "nocache") / THESIS["deploy_s"]["III"][0],
                            iv_wins=sum(map(iv_faster, shown)), n_var=len(shown),
                            draw_wins=sum(map(iv_faster, draws)),
        runs=len(rows), cpu=cpu_s, sge=sge_section(sge_rows, rows), characteristics=characteristics(leases),
        distribution=distribution(leases_by_trace), results=results(rows), sensitivity=sensitivity(rows),
        mixed=mixed_table(rows),
        iii_cut=100 * (1 - mean("III", "cache") / mean("III", "nocache")),
        iv_cut=100 * (1 - mean("IV", "cache") / mean("IV", "nocache")),
        adv_iii=adv("III"), adv_iv=adv("IV"), nc=mean("III", "nocache"),
        nc_max=mean("III", "nocache", "max_deploy_s"), c3=mean("III", "cache"), c4=mean("IV", "cache"))
