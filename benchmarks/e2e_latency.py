"""submit -> Running and submit -> Done for ``/bin/true`` through real broker, CE agent and
node agent processes on loopback (issue 12, "A lean job wrapper"; docs/benchmarks.md).

Starts the embedded site of ``vgrid demo`` (``vgrid_cli.demo.start_site``: ``--ces`` CE agents,
two node agents each, one broker; plain HTTP on 127.0.0.1, default configuration unless
``--option kind.key=value``), runs two warm-up jobs (not counted), then for each in-flight level N
of ``--inflight`` (default 1, 10, 100) runs max(1, ``--jobs`` // N) rounds: N jobs submitted at
once (up to 32 client threads), waited for until all are Done. Latencies come from the broker's own job history (both ends stamped by the
broker's clock, so client polling does not blur them): Running time - Submitted time and Done
time - Submitted time. CPU: user+system seconds of the service processes (broker, CE agents,
node agents, and the reaped job wrappers, children of the node agents) over the level, read
from /proc, beside the wall time.

Prints one JSON line: ``{"benchmark": "e2e_latency", "ces", "nodes", "levels": [{"inflight",
"jobs", "running_ms": {"p50","p99","max"}, "done_ms": {...}, "stages_p50_ms": {"A>B": ms
between consecutive history entries}, "wall_s", "cpu_s": {"broker",
"ce", "node", "total"}, "cpu_ms_per_job"}], "wrapper_start_ms"}``. Exit status 1 when a job does
not reach Done within ``--timeout`` s or a service does not start (the reason on stderr).

Per-stage breakdown (``stages_p50_ms``/``stages_p99_ms``, in path order), from the broker's
history and the node agents' VWN records (``marks``: clock times of one VWN's start, all clocks
are this host's): ``Submitted>Waiting``, ``Waiting>Ready`` (matcher), ``Ready>Scheduled``
(dispatch to the CE agent), ``Scheduled>node`` (CE agent: lease engine, POST /vwns),
``node>prepared`` (account, cgroups, record, quota mount, sandbox), ``prepared>spawned``
(wrapper started), ``spawned>running`` (the wrapper's ``running`` line read),
``running>Running`` (events node -> CE -> broker), ``running>exited`` (the job, node side),
``exited>Done`` (cleanup, stage-out, events). ``load`` is the 1-minute load average at the
start and end of a level. ``--quick``: 1, 10 and 100 in flight with 10 jobs per level (one
round of 100 at 100) -- under 3 minutes on an idle 2-core host. ``--out DIR``: ``jobs.csv``
(one row per job and stage) and ``stages.png`` (each level's p50 stages as shares of their sum).

    .venv/bin/python benchmarks/e2e_latency.py [--inflight 1,10,100] [--jobs 30] [--ces 2] [--quick]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import requests  # noqa: E402

from broker.client import BrokerClient  # noqa: E402
from vgrid_cli.demo import start_site  # noqa: E402
from vgrid_cli.services import ServiceError, ServiceGroup  # noqa: E402
from vwn_agents.vwn_process import WRAPPER_ARGS  # noqa: E402

JDL = '[ Executable = "/bin/true"; ]'
#: (stage name, from, to): broker history states (capitalized) and node VWN marks (lower case).
STAGES = [("Submitted>Waiting", "Submitted", "Waiting"), ("Waiting>Ready", "Waiting", "Ready"),
          ("Ready>Scheduled", "Ready", "Scheduled"), ("Scheduled>node", "Scheduled", "created"),
          ("node>prepared", "created", "prepared"), ("prepared>spawned", "prepared", "spawned"),
          ("spawned>running", "spawned", "running"), ("running>Running", "running", "Running"),
          ("running>exited", "running", "exited"), ("exited>Done", "exited", "Done")]
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """utime+stime+cutime+cstime of ``pid`` in seconds (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / TICK


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def summary(ms: list[float]) -> dict:
    return {"p50": round(statistics.median(ms), 1), "p99": round(pct(ms, 0.99), 1),
            "max": round(max(ms), 1)}


def wrapper_start_ms(n: int = 20) -> float:
    """Median wall time of the job wrapper running ``/bin/true`` the way the node agent starts
    it (``python`` + ``vwn_agents.vwn_process.WRAPPER_ARGS``, spec on stdin), in ms."""
    root = Path(__file__).resolve().parent.parent
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryDirectory() as d:
        spec = json.dumps({"workdir": d, "executable": "/bin/true"}).encode()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            subprocess.run([sys.executable, *WRAPPER_ARGS], input=spec,
                           env=env, stdout=subprocess.DEVNULL, check=True, cwd=d)
            times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 1)


def children(pids: list[int]) -> list[int]:
    """The live children of ``pids`` (e.g. a node agent's zygote, whose reaped wrappers are in
    its cutime, not the agent's, until the agent reaps it)."""
    out = []
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                out += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return out


def vwn_marks(node_urls: list[str]) -> dict[str, dict]:
    """``{vwn: {mark: clock time}}`` of every VWN of the node agents (``created`` included)."""
    marks = {}
    for url in node_urls:
        for rec in requests.get(f"{url}/vwns", timeout=30).json():
            marks[rec["vwn"]] = {"created": rec["created"], **(rec.get("marks") or {})}
    return marks


def run_level(client: BrokerClient, n: int, rounds: int, timeout_s: float, pids: dict,
              node_urls: list[str], rows: list | None = None) -> dict:
    running, done, stages = [], [], {}
    pids = {k: v + children(v) if k == "node" else v for k, v in pids.items()}
    cpu0 = {k: sum(proc_cpu(p) for p in v) for k, v in pids.items()}
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    ended = []
    for _ in range(rounds):
        with ThreadPoolExecutor(max_workers=min(n, 32)) as pool:
            keys = list(pool.map(lambda _: client.submit_text(JDL, "true.jdl")["key"], range(n)))
        deadline = time.monotonic() + timeout_s
        while True:
            jobs = client.jobs(keys, limit=1000)
            states = {j["state"] for j in jobs}
            if states == {"Done"} and len(jobs) == n:
                break
            if states & {"Aborted", "Cancelled"} or time.monotonic() > deadline:
                bad = [(j["key"], j["state"], j["reason"]) for j in jobs if j["state"] != "Done"][:5]
                raise SystemExit(f"e2e_latency: jobs did not reach Done: {bad}")
            time.sleep(0.05)
        ended += jobs
    wall = time.monotonic() - t0
    cpu = {k: round(sum(proc_cpu(p) for p in v) - cpu0[k], 3) for k, v in pids.items()}
    cpu["total"] = round(sum(cpu.values()), 3)
    load1 = os.getloadavg()[0]
    marks = vwn_marks(node_urls)
    for j in ended:
        t = {h["state"]: h["time"] for h in j["history"]}
        running.append((t["Running"] - t["Submitted"]) * 1000)
        done.append((t["Done"] - t["Submitted"]) * 1000)
        t.update(marks.get(j.get("vwn"), {}))
        for name, a, b in STAGES:
            if a in t and b in t:
                ms = (t[b] - t[a]) * 1000
                stages.setdefault(name, []).append(ms)
                if rows is not None:
                    rows.append({"inflight": n, "key": j["key"], "stage": name, "ms": round(ms, 2)})
    return {"inflight": n, "jobs": n * rounds, "running_ms": summary(running),
            "done_ms": summary(done),
            "stages_p50_ms": {k: round(statistics.median(v), 1) for k, v in stages.items()},
            "stages_p99_ms": {k: round(pct(v, 0.99), 1) for k, v in stages.items()},
            "wall_s": round(wall, 3), "cpu_s": cpu,
            "cpu_ms_per_job": round(cpu["total"] * 1000 / (n * rounds), 1),
            "load": [round(load0, 2), round(load1, 2)]}


def write_out(out: Path, result: dict, rows: list[dict]) -> None:
    """``jobs.csv`` and ``stages.png`` (each level's p50 stages as shares of their sum, one bar
    per level)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "jobs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["inflight", "key", "stage", "ms"])
        w.writeheader()
        w.writerows(rows)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 4.5))
    levels = result["levels"]
    for i, lv in enumerate(levels):
        ms = [max(0.0, lv["stages_p50_ms"].get(name, 0.0)) for name, _, _ in STAGES]
        total, left = sum(ms) or 1.0, 0.0
        for k, (name, _, _) in enumerate(STAGES):
            ax.barh(i, 100 * ms[k] / total, left=left, color=plt.cm.tab10(k % 10),
                    label=name if i == 0 else None)
            left += 100 * ms[k] / total
    ax.set_yticks(range(len(levels)), [f'{lv["inflight"]} in flight\n(sum {sum(max(0.0, v) for v in lv["stages_p50_ms"].values()):.0f} ms)'
                                       for lv in levels])
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of the summed p50 stages (submission to Done)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("submit -> Done for /bin/true: where the time goes")
    fig.tight_layout()
    fig.savefig(out / "stages.png", dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inflight", default="1,10,100", help="comma-separated jobs in flight")
    ap.add_argument("--jobs", type=int, default=30,
                    help="jobs per level: max(1, jobs // N) rounds of N jobs in flight")
    ap.add_argument("--ces", type=int, default=2, help="CE agents (2 node agents each)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a round may take")
    ap.add_argument("--quick", action="store_true",
                    help="1, 10 and 100 in flight, 10 jobs per level (one round of 100)")
    ap.add_argument("--out", default=None, help="directory for jobs.csv and stages.png")
    ap.add_argument("--option", action="append", default=[],
                    help="kind.key=value (kind: broker, ce, node) set in every such config")
    args = ap.parse_args(argv)
    options: dict[str, dict] = {}
    for opt in args.option:
        name, _, value = opt.partition("=")
        kind, _, key = name.partition(".")
        options.setdefault(kind, {})[key] = json.loads(value)
    if args.quick:
        args.inflight, args.jobs = "1,10,100", 10
    levels = [int(x) for x in args.inflight.split(",") if x]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="vgrid-e2e-") as d:
        try:
            with ServiceGroup(Path(d)) as group:
                url = start_site(group, n_ces=args.ces, ism_refresh_s=1.0, state_dir=Path(d),
                                 options=options)
                pids = {"broker": [], "ce": [], "node": []}
                for svc in group.services:
                    pids[svc.kind].extend(svc.pids())
                node_urls = [svc.url for svc in group.services if svc.kind == "node"]
                client = BrokerClient(url)
                client.jobs()                    # the broker answers
                run_level(client, 1, 2, args.timeout, pids, node_urls)   # warm-up (first ISM, first VWNs), not counted
                out = {"benchmark": "e2e_latency", "ces": args.ces, "nodes": 2 * args.ces,
                       "options": options, "levels": []}
                for n in levels:
                    out["levels"].append(run_level(client, n, max(1, args.jobs // n), args.timeout, pids,
                                                   node_urls, rows))
        except (ServiceError, requests.RequestException) as exc:
            print(f"e2e_latency: a service did not start: {exc}", file=sys.stderr)
            return 1
    out["wrapper_start_ms"] = wrapper_start_ms()
    if args.out:
        write_out(Path(args.out), out, rows)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
