"""Three Grids with uneven load, with and without peering (issue 15; docs/experiments/federation.md).

    .venv/bin/python benchmarks/federation.py [--jobs-a 16] [--jobs-b 4] [--atlas-every 4]
        [--duration 4] [--lease 12] [--gap 0.5] [--out DIR] [--timeout 240]

Three real Grids on loopback over mutual TLS (``broker.federation.testbed``: each a broker, one
CE agent and one node agent with 2 VWN slots): A's CE admits dteam only, B's and C's dteam and
atlas. Load: ``--jobs-a`` jobs arrive at A, one every ``--gap`` s (every ``--atlas-every``-th
of user carol, VO atlas, which no CE of A admits), ``--jobs-b`` at B, none at C; each job sleeps
``--duration`` s with ``LeaseDuration = --lease`` (its wall-clock limit, and the bound the CE
agents' EstimatedResponseTime is computed with). Run twice, same load: ``isolated`` (no peers)
and ``peering`` (every broker peers with the other two, ``forward_wait_threshold_s`` = lease).
Per run: for each job, its wait (Submitted -> Running at the broker it was submitted to, broker
clock), its end state and outcome, where it ran; rejected = Aborted with outcome no-resources
or dispatch-failed (no Grid took it), failed = any other Aborted. Prints one JSON line ``{"benchmark": "federation", "runs": [{"mode", "jobs",
"done", "rejected", "failed", "wait_s": {"mean","p50","max"}, "wait_dteam_s": {"mean","max"} (the dteam
jobs, which run in both modes), "ran_at": {grid: n}, "wall_s", "cpu_s"}]}``;
writes ``jobs.csv`` and ``federation.png`` to ``--out``. Exit 1 when jobs do not end within
``--timeout`` s.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.federation.testbed import GridSpec, Testbed  # noqa: E402

ENDED = {"Done", "Aborted", "Cancelled"}
REJECTED = {"no-resources", "dispatch-failed"}     # no Grid took the job


def run(mode: str, args, work: Path) -> tuple[dict, list[dict]]:
    grids = [GridSpec("a", ["dteam"]), GridSpec("b", ["dteam", "atlas"]), GridSpec("c", ["dteam", "atlas"])]
    opts = {"ism_refresh_s": 0.5, "match_interval_s": 0.2, "match_expiry_s": 8.0,
            "federation_relay_s": 0.5, "forward_wait_threshold_s": float(args.lease)}
    bed = Testbed(work / mode, grids, peering=(mode == "peering"), broker_options=opts).start()
    try:
        if mode == "peering":
            bed.delegate_all()
        time.sleep(2.0)     # the ISMs have read their CEs (and peers)
        jdl = (f'[ Executable = "/bin/sleep"; Arguments = "{args.duration}"; '
               f'LeaseDuration = {int(args.lease)}; ]')
        plan = [("a", "carol" if args.atlas_every and (i + 1) % args.atlas_every == 0 else "alice")
                for i in range(args.jobs_a)] + [("b", "alice")] * args.jobs_b
        a_jobs, b_jobs = [p for p in plan if p[0] == "a"], [p for p in plan if p[0] == "b"]
        order = []
        for i in range(max(len(a_jobs), len(b_jobs))):
            order += ([a_jobs[i]] if i < len(a_jobs) else []) + ([b_jobs[i]] if i < len(b_jobs) else [])
        cpu0, t0 = os.times(), time.monotonic()
        submitted = []
        for grid, user in order:
            client = bed.client(user, grid)
            submitted.append((grid, user, client, client.submit_text(jdl, "bench.jdl")["key"]))
            time.sleep(args.gap / 2)
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            if all(c.job(k)["state"] in ENDED for _, _, c, k in submitted):
                break
            time.sleep(0.5)
        else:
            raise SystemExit(f"{mode}: jobs did not end within {args.timeout} s")
        wall, cpu1 = time.monotonic() - t0, os.times()
        rows = []
        for grid, user, client, key in submitted:
            j = client.job(key)
            sub = next(h["time"] for h in j["history"] if h["state"] in ("Submitted", "Waiting"))
            run_t = next((h["time"] for h in j["history"] if h["state"] == "Running"), None)
            ce = j["ce"] or ""
            at = next((n for n, u in bed.urls.items() if u.split("//", 1)[1] in ce), None) \
                or next((g.name for g in grids if ce.startswith(f"ce-{g.name}.")), "-")
            rows.append({"mode": mode, "grid": grid, "user": user, "key": key, "state": j["state"],
                         "outcome": j["outcome"],
                         "wait_s": round(run_t - sub, 3) if run_t is not None else None, "ran_at": at})
        waits = [r["wait_s"] for r in rows if r["wait_s"] is not None]
        common = [r["wait_s"] for r in rows if r["wait_s"] is not None and r["user"] == "alice"]
        ran = {}
        for r in rows:
            if r["state"] == "Done":
                ran[r["ran_at"]] = ran.get(r["ran_at"], 0) + 1
        summary = {"mode": mode, "jobs": len(rows), "done": sum(r["state"] == "Done" for r in rows),
                   "rejected": sum(r["outcome"] in REJECTED for r in rows),
                   "failed": sum(r["state"] == "Aborted" and r["outcome"] not in REJECTED for r in rows),
                   "wait_s": {"mean": round(statistics.mean(waits), 2) if waits else None,
                              "p50": round(statistics.median(waits), 2) if waits else None,
                              "max": round(max(waits), 2) if waits else None},
                   "wait_dteam_s": {"mean": round(statistics.mean(common), 2) if common else None,
                                    "max": round(max(common), 2) if common else None},
                   "ran_at": ran, "wall_s": round(wall, 1),
                   "cpu_s": round((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system), 1)}
        return summary, rows
    finally:
        bed.stop()


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    modes = ["isolated", "peering"]
    for m, color in zip(modes, ("tab:red", "tab:blue")):
        waits = sorted(r["wait_s"] for r in rows if r["mode"] == m and r["wait_s"] is not None)
        axes[0].step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post", color=color,
                     label=f"{m} ({len(waits)} ran)")
    axes[0].set_xlabel("wait: submitted -> Running (s)")
    axes[0].set_ylabel("fraction of jobs that ran")
    axes[0].legend()
    axes[0].set_title("job wait")
    grids = ["a", "b"]
    width = 0.35
    for k, (m, color) in enumerate(zip(modes, ("tab:red", "tab:blue"))):
        rej = [sum(1 for r in rows if r["mode"] == m and r["grid"] == g and r["outcome"] in REJECTED) /
               max(1, sum(1 for r in rows if r["mode"] == m and r["grid"] == g)) for g in grids]
        axes[1].bar([i + k * width for i in range(len(grids))], rej, width, color=color, label=m)
    axes[1].set_xticks([i + width / 2 for i in range(len(grids))], [f"submitted at {g.upper()}" for g in grids])
    axes[1].set_ylabel("fraction rejected (no Grid took it)")
    axes[1].set_title("rejection")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs-a", type=int, default=16)
    p.add_argument("--jobs-b", type=int, default=4)
    p.add_argument("--atlas-every", type=int, default=4)
    p.add_argument("--duration", type=float, default=4.0)
    p.add_argument("--gap", type=float, default=0.5)
    p.add_argument("--lease", type=float, default=12.0)
    p.add_argument("--timeout", type=float, default=240.0)
    p.add_argument("--out", type=Path, default=Path("federation-out"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summaries, rows = [], []
    with tempfile.TemporaryDirectory(prefix="vgrid-fed-bench-") as tmp:
        for mode in ("isolated", "peering"):
            s, r = run(mode, args, Path(tmp))
            summaries.append(s)
            rows += r
    with (args.out / "jobs.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot(rows, args.out / "federation.png")
    print(json.dumps({"benchmark": "federation", "runs": summaries,
                      "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}))


if __name__ == "__main__":
    main()
