"""Live against simulated, the image staging part (issue 14): seed 000's staging on real
processes vs the same lease engine in simulated time.

A scaled-down seed 000 workload (advance reservations of one VM, each with one of a few
images, submitted together, starts seconds apart, on 2 nodes) runs twice with the same
configuration (EDF/JIT by default, image pools with a size limit):

* live: ``vgrid serve images`` and two ``vgrid serve node`` processes on loopback; the lease
  engine in this process with ``LiveStaging`` (the CE agent's role) ticks every 0.1 s; node
  agents pull at the scheduled rate (token bucket) and start each VM on a qcow2 overlay;
* simulated: ``leasing.simulate`` on the same leases (times relative to the submission).

Per transfer it reports the simulated schedule, the live schedule (relative to submission),
the live node's actual start/end and bytes, and pool hits; the summary line compares them:
``start_offset_s`` (actual - scheduled start), ``rate_error`` (measured/scheduled rate - 1),
``schedule_diff_s`` (live vs simulated scheduled start), transfers and MB in both, and the
VMs' start offset from the AR start. Here the VMs are cgroup VWNs (the overlay pins the image);
``--vms`` runs the VM part instead (``live_vs_sim_vms.py``: libvirt VMs booted from the pool's
overlays, suspended and restored, against the simulation fed with the measured rates).

    .venv/bin/python benchmarks/live_vs_sim.py [--leases 8] [--strategy edf-jit] [--rate 2.0]
                                               [--pool-mb 6] [--out DIR] [--json]

Exit 0 ok, 1 a lease did not end Done, 2 qemu-img or a service missing. Run as root (the
node agents run jobs under pool accounts).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vgrid_cli.services import ServiceError, ServiceGroup  # noqa: E402
from vwn_agents.images.staging import LiveStaging  # noqa: E402
from vwn_agents.lease_engine import LeaseEngine  # noqa: E402
from vwn_agents.leasing import LeaseConfig, simulate  # noqa: E402
from vwn_agents.leasing.model import Lease, LeaseType, Node, resource_vector  # noqa: E402
from vwn_agents.node_client import NodeAgentClient  # noqa: E402
from vwn_agents.testing import Receiver  # noqa: E402

IMAGES = {"img0.img": 2.0, "img1.img": 3.0, "img2.img": 2.5}


def workload(n: int) -> list[tuple[str, float, float, str]]:
    """``[(key, start offset s, duration s, image)]``: ARs 1.5 s apart from +6 s, 3 s long."""
    names = list(IMAGES)
    return [(f"ar{i}", 6.0 + 1.5 * i, 3.0, names[(i * 7 // 3) % len(names)]) for i in range(n)]


def config(strategy: str, rate: float, pool_mb: float) -> LeaseConfig:
    return LeaseConfig({"lease-preparation": "imagetransfer", "ar-transfer-strategy": strategy,
                        "imagetransfer-bandwidth": rate * 8, "diskimage-cache-size": pool_mb})


def run_sim(work, cfg) -> dict:
    leases = [Lease(i + 1, LeaseType.ADVANCE_RESERVATION, 0.0, dur, 1, resource_vector(cpu=100, memory=256),
                    img, IMAGES[img], preemptible=False, requested_start_s=start)
              for i, (_, start, dur, img) in enumerate(work)]
    nodes = [Node(i, f"n{i}", (100, 2048, 10**12, 10**12)) for i in range(2)]
    res = simulate(leases, nodes, cfg)
    by_lease = {}
    for lid, img, dest, s, e in res.scheduler.transfer_log:
        by_lease.setdefault(work[lid - 1][0], []).append({"image": img, "node": dest[0], "start": s, "end": e})
    return {"transfers": by_lease, "report": res.report()}


def run_live(work, cfg, tmp: Path, pool_mb: float) -> dict:
    images = tmp / "images"
    images.mkdir()
    for name, mb in IMAGES.items():
        n = int(mb * 1e6)
        seed = hashlib.sha256(name.encode()).digest()
        (images / name).write_bytes((seed * (n // 32 + 1))[:n])
    jobs = Path(tempfile.mkdtemp(prefix="vgrid-lvs-jobs-"))
    jobs.chmod(0o755)
    receiver = Receiver()
    try:
        with ServiceGroup(tmp) as group:
            repo = group.start("images", "repo", f'images_dir = "{images}"\n')
            nodes = group.start_many([("node", f"lvs{i}", "\n".join([
                f'node = "lvs{i}"', f'work_dir = "{tmp / f"n{i}"}"', f'jobs_dir = "{jobs / f"n{i}"}"',
                f'gridmapdir = "{tmp / f"gm{i}"}"', 'cgroup = "none"', "disk_quota_mb = 0", "heartbeat_s = 0",
                f'image_repository = "{repo.url}"', f"image_pool_mb = {pool_mb}", ""])) for i in range(2)])
            urls = [n.url for n in nodes]
            engine = LeaseEngine([(u, 1, 2048) for u in urls], cfg, staging=LiveStaging(None))
            ticker, stop = engine_ticker(engine, receiver)
            t0 = engine.clock.now()
            for key, start, dur, img in work:
                engine.submit_job(key, {"job_id": f"{receiver.url}/jobs/{key}", "key": key,
                                        "executable": "/bin/sleep", "arguments": "1",
                                        "callback_url": f"{receiver.url}/events"},
                                  start_s=t0 + start, duration_s=dur, image_id=img, image_mb=IMAGES[img], cpu=100,
                                  memory_mb=256)
            ticker.start()
            deadline = time.monotonic() + 60 + 3 * len(work)
            while time.monotonic() < deadline and not all(
                    engine.status(k)["state"] in ("Done", "Rejected") for k, *_ in work):
                time.sleep(0.2)
            stop.set()
            ticker.join(10)
            report = engine.staging_report()
            vwn_created = {}
            for url in urls:
                for v in NodeAgentClient(url).vwns():
                    base = v["key"].split("-r")[0]
                    vwn_created[base] = min(vwn_created.get(base, float("inf")), v["created"])
            pools = [NodeAgentClient(u).images() for u in urls]
            return {"t0": t0, "report": report, "status": {k: engine.status(k) for k, *_ in work},
                    "vwn_created": vwn_created, "urls": urls, "pools": pools}
    finally:
        receiver.close()
        shutil.rmtree(jobs, ignore_errors=True)



def engine_ticker(engine, receiver) -> tuple[threading.Thread, threading.Event]:
    """A thread (not started) that, every 0.1 s, feeds the receiver's new node events to the
    live ``engine`` and ticks it, as the CE agent does (a start that fails is retried next tick);
    set the returned event to stop it."""
    stop = threading.Event()

    def tick():
        seen = 0
        while not stop.wait(0.1):
            events = list(receiver.events)
            try:
                for ev in events[seen:]:
                    engine.job_event(ev)
                engine.tick()
            except Exception:  # noqa: BLE001
                pass
            seen = len(events)
    return threading.Thread(target=tick, daemon=True), stop

def main() -> int:
    if "--vms" in sys.argv[1:]:                    # the VM part: benchmarks/live_vs_sim_vms.py
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import live_vs_sim_vms
        return live_vs_sim_vms.main(sys.argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--leases", type=int, default=8)
    p.add_argument("--strategy", default="edf-jit", choices=["edf", "edf-jit"])
    p.add_argument("--rate", type=float, default=2.0, help="image link bandwidth, MB/s")
    p.add_argument("--pool-mb", type=float, default=6.0, help="node image pool size (and engine cache), MB")
    p.add_argument("--out", default=None, help="write transfers.csv and staging.png here")
    p.add_argument("--json", action="store_true", help="only the JSON summary line")
    a = p.parse_args()
    if shutil.which("qemu-img") is None:
        print("qemu-img not found (Debian package qemu-utils)", file=sys.stderr)
        return 2
    work = workload(a.leases)
    cfg = config(a.strategy, a.rate, a.pool_mb)
    wall0, cpu0 = time.monotonic(), time.process_time()
    sim = run_sim(work, cfg)
    with tempfile.TemporaryDirectory(prefix="vgrid-lvs-") as tmp:
        try:
            live = run_live(work, cfg, Path(tmp), a.pool_mb)
        except ServiceError as exc:
            print(f"a service did not start: {exc}", file=sys.stderr)
            return 2
    t0 = live["t0"]
    rows = []
    for r in live["report"]:
        node = live["urls"].index(r["node"])
        sims = [s for s in sim["transfers"].get(r["lease"], []) if s["node"] == node] or \
            sim["transfers"].get(r["lease"], [])
        s = sims[0] if sims else None
        row = {"lease": r["lease"], "image": r["image"], "node": node, "mb": r["mb"],
               "sim_start": s and round(s["start"], 3), "sim_end": s and round(s["end"], 3),
               "sched_start": round(r["scheduled_start"] - t0, 3), "sched_end": round(r["scheduled_end"] - t0, 3),
               "actual_start": r["actual_start"] and round(r["actual_start"] - t0, 3),
               "actual_end": r["actual_end"] and round(r["actual_end"] - t0, 3),
               "bytes": r["bytes"], "outcome": r["outcome"], "hit": r["hit"]}
        if row["actual_start"] is not None and row["actual_end"] and r["bytes"]:
            row["start_offset_s"] = round(row["actual_start"] - row["sched_start"], 3)
            rate = r["bytes"] / 1e6 / (row["actual_end"] - row["actual_start"])
            row["rate_error"] = round(rate / r["rate_mbs"] - 1, 3)
        rows.append(row)
    vm_offsets = [round(live["vwn_created"][k] - (t0 + start), 3) for k, start, *_ in work if k in live["vwn_created"]]
    done = sum(1 for st in live["status"].values() if st["state"] == "Done")
    offsets = [r["start_offset_s"] for r in rows if "start_offset_s" in r]
    rates = [r["rate_error"] for r in rows if "rate_error" in r]
    diffs = [abs(r["sched_start"] - r["sim_start"]) for r in rows if r["sim_start"] is not None]
    sim_metrics = sim["report"]["metrics"]
    summary = {"benchmark": "live_vs_sim_staging", "strategy": a.strategy, "leases": len(work), "done": done,
               "rate_mbs": a.rate, "pool_mb": a.pool_mb,
               "transfers_live": len(rows), "transfers_sim": sum(len(v) for v in sim["transfers"].values()),
               "mb_live": round(sum((r["bytes"] or 0) for r in rows) / 1e6, 3), "mb_sim": sim_metrics["mb_transferred"],
               "node_hits": sum(1 for r in rows if r["hit"]),
               "leases_reusing_live": len(work) - len({r["lease"] for r in rows}),
               "leases_reusing_sim": len(work) - len(sim["transfers"]),
               "start_offset_s": {"max": max(offsets, default=None), "mean": round(sum(offsets) / len(offsets), 3) if offsets else None},
               "rate_error": {"min": min(rates, default=None), "max": max(rates, default=None)},
               "schedule_diff_s_max": round(max(diffs), 3) if diffs else None,
               "vm_start_offset_s": {"max": max(vm_offsets, default=None), "mean": round(sum(vm_offsets) / len(vm_offsets), 3) if vm_offsets else None},
               "wall_s": round(time.monotonic() - wall0, 2), "cpu_s": round(time.process_time() - cpu0, 2)}
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "transfers.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
            w.writeheader()
            w.writerows(rows)
        plot(rows, out / "staging.png")
    if not a.json:
        for r in rows:
            print(json.dumps(r), file=sys.stderr)
    for k, st in live["status"].items():
        if st["state"] != "Done":
            print(f"{k}: {st['state']} {st.get('reason') or ''} {st.get('start_error') or ''}", file=sys.stderr)
    print(json.dumps(summary))
    return 0 if done == len(work) else 1


def plot(rows, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.5))
    for i, r in enumerate(rows):
        if r["sim_start"] is not None:
            ax.barh(i + 0.25, r["sim_end"] - r["sim_start"], left=r["sim_start"], height=0.25, color="tab:gray",
                    label="simulated" if i == 0 else None)
        ax.barh(i, r["sched_end"] - r["sched_start"], left=r["sched_start"], height=0.25, color="tab:blue",
                label="scheduled (live)" if i == 0 else None)
        if r["actual_start"] is not None and r["actual_end"]:
            ax.barh(i - 0.25, r["actual_end"] - r["actual_start"], left=r["actual_start"], height=0.25,
                    color="tab:orange", label="measured" if i == 0 else None)
    ax.set_yticks(range(len(rows)), [f"{r['lease']} {r['image']} n{r['node']}" for r in rows])
    ax.set_xlabel("seconds after submission")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
