"""Live against simulated, the VM part (issue 14): seed 000 leases on real libvirt VMs vs the same
lease engine in simulated time fed with what the live run measured (boots, power-off, rates).

Workload (scaled-down seed 000, 2 nodes of one VM slot each, 2 small ext2 images made with
``mke2fs -d``): 4 best-effort leases (Best-Effort-Suspendable: seed 002) submitted at 0, then 2
advance reservations submitted ``--ar-submit`` s later starting ``--ar-start`` s after 0, which
preempt the best-effort VMs in their way (pause + save to disk, restored after). Every VM boots
from a qcow2 overlay of its lease's image in the node's pool (``images.vwn_disk``), reads the
image's marker and sleeps its job time.

* live: an image repository (in process, HTTP on loopback), two libvirt node agents (in process,
  TCG guests of 128 MB), the lease engine with ``LiveStaging`` and ``suspend_vwns`` ticking every
  0.1 s (the CE agent's role);
* simulated: ``leasing.simulate`` on the same leases. Each lease's real duration is its job time
  plus a boot (``--boot``: ``lease``, the lease's own measured boot, VWN created -> guest
  ``running``; ``node``, the mean boot of the node its VM booted on, ``mean_boot_s``; ``mean``,
  one mean over all boots) plus the power-off (``--shutdown-s``; -1 = measured: done - up - job
  over the leases never suspended). Its ``suspend-rate`` / ``resume-rate`` are those the live
  engine planned with (``--sim-rates planned``, the default, ``--prior-rate``) or the rates the
  nodes measured (``measured``).

Per lease: simulated start/end, live scheduled start/end (the engine), live actual start (VWN
created) / up (guest running) / end (done), its boot, bytes transferred and pool hits (live node
pools vs the simulation's transfer log); one line per lease with its end difference on stderr.
Stated tolerance (exit 1 outside it, or when a lease is not Done): transfers, MB, reuse and
suspensions equal, and every lease's |live end - simulated end| <= ``--tolerance`` (5 s:
power-off and stage-out variation, restore variation, engine ticks) + the resume slack when VMs were suspended
(``resume_slack``: the two engines' suspension windows differ by |live - sim| and a live VM runs
again right after its restore, before its planned resume window ends) + the boots' spread
(max - min) unless ``--boot lease``. The ARs are submitted once every node measured a boot (so
their lead, the CE's ``vm_boot_lead_s = -1``, is known). CSV + PNG with ``--out``; the JSON line
has the boots per lease, the host's CPU steal fraction over the run, CPU and wall time, load.

    .venv/bin/python benchmarks/live_vs_sim.py --vms [--boot lease|node|mean] [--sim-rates planned|measured]
        [--ar-start 75] [--out DIR] [--json]

Exit 0 within tolerance, 1 outside (or a lease not Done), 2 libvirt/qemu/mke2fs missing. Root.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARKER = b"live-vs-sim image marker\n"
IMAGES = {"vm-a.img": 2048, "vm-b.img": 3072}       # KiB (ext2)
MEMORY_MB = 128
TOLERANCE_S = 5.0        # power-off + stage-out variation, restore variation, engine ticks (docs/vwn.md)


def workload(ar_submit: float, ar_start: float) -> list[dict]:
    """The leases: key, kind, submit s, start s (ARs), duration s (requested), job s, image."""
    be = [("be1", "vm-a.img", 50), ("be2", "vm-b.img", 50), ("be3", "vm-a.img", 4), ("be4", "vm-b.img", 4)]
    out = [{"key": k, "kind": "best-effort", "submit": 0.0, "start": None, "duration": 150.0, "job": j, "image": i}
           for k, i, j in be]
    out += [{"key": k, "kind": "advance-reservation", "submit": ar_submit, "start": ar_start, "duration": 40.0,
             "job": 3, "image": i} for k, i in (("ar1", "vm-a.img"), ("ar2", "vm-b.img"))]
    return out


def make_images(d: Path) -> dict[str, float]:
    """The ext2 images (a marker file each); ``{name: MB}``."""
    sizes = {}
    for name, kb in IMAGES.items():
        src = d / (name + ".d")
        src.mkdir()
        (src / "marker.txt").write_bytes(MARKER)
        subprocess.run([shutil.which("mke2fs") or "/usr/sbin/mke2fs", "-q", "-F", "-t", "ext2", "-d", str(src),
                        str(d / name), f"{kb}K"], check=True, capture_output=True)
        shutil.rmtree(src)
        sizes[name] = (d / name).stat().st_size / 1e6
    return sizes


def lease_config(rate_mbs: float, suspend_rate: float, resume_rate: float):
    from vwn_agents.leasing import LeaseConfig
    return LeaseConfig({"lease-preparation": "imagetransfer", "ar-transfer-strategy": "edf",
                        "imagetransfer-bandwidth": rate_mbs * 8, "suspend-rate": suspend_rate,
                        "resume-rate": resume_rate, "migration": "no"})


def run_live(work, sizes, images: Path, vm_dir: Path, cfg, tmp: Path, ahead_s: float = 0.0) -> dict:
    """The live run (module doc); ``ahead_s``: an AR's moved start is at least this long after its
    submission (room for the suspension window before it: on a loaded host the boots, hence the
    AR lead, grow, and an AR whose moved start has passed would be rejected)."""
    from vgrid_runtime.wsgi import BackgroundServer
    from vwn_agents.images.repository import ImageRepositoryConfig, create_app as repo_app
    from vwn_agents.images.staging import LiveStaging
    from vwn_agents.lease_engine import LeaseEngine
    from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app
    from vwn_agents.testing import Receiver
    from live_vs_sim import engine_ticker
    receiver = Receiver()
    servers = [BackgroundServer(repo_app(ImageRepositoryConfig.from_dict({"images_dir": str(images)})))]
    agents = []
    try:
        for i in range(2):
            app = node_app(NodeAgentConfig.from_dict({
                "node": f"lvsvm{os.getpid()}n{i}", "work_dir": str(tmp / f"n{i}"), "driver": "libvirt",
                "vm_dir": str(vm_dir), "vm_memory_mb": MEMORY_MB, "disk_quota_mb": 0, "retry_initial_s": 0.05,
                "heartbeat_s": 0, "image_repository": servers[0].url, "image_pool_dir": str(vm_dir / f"pool{i}")}))
            servers.append(BackgroundServer(app))
            agents.append(app.config["VGRID_AGENT"])
        urls = [s.url for s in servers[1:]]
        engine = LeaseEngine([(u, 1, 2048) for u in urls], cfg, staging=LiveStaging(None), suspend_vwns=True)
        ticker, stop = engine_ticker(engine, receiver)
        t0 = engine.clock.now()

        def body(w):
            return {"job_id": f"{receiver.url}/jobs/{w['key']}", "key": w["key"], "executable": "/bin/sh",
                    "arguments": f"-c 'cat /image/marker.txt; sleep {w['job']}'", "memory_mb": MEMORY_MB,
                    "callback_url": f"{receiver.url}/events"}
        for w in work:
            if w["kind"] == "best-effort":
                engine.submit_job(w["key"], body(w), duration_s=w["duration"], image_id=w["image"],
                                  image_mb=sizes[w["image"]], cpu=100, memory_mb=MEMORY_MB, request_type="suspendable")
        ticker.start()
        ar_at = t0 + max(w["submit"] for w in work)
        last = t0 + min(w["start"] for w in work if w["start"] is not None) - 5.0
        while engine.clock.now() < ar_at or (engine.clock.now() < last and not all(
                a.driver.stats["boots"] for a in agents)):     # submitted once a boot was measured
            time.sleep(0.05)
        for w in work:
            if w["kind"] == "advance-reservation":
                w["submit"] = max(w["submit"], round(engine.clock.now() - t0, 2))
        lead = max((a.driver.stats["max_boot_s"] or 0.0 for a in agents), default=0.0)
        now = engine.clock.now() - t0
        for w in work:
            if w["kind"] == "advance-reservation" and w["start"] - lead < now + ahead_s:
                w["start"] = round(now + ahead_s + lead, 2)     # moved later: reported in the rows
        for w in work:               # the CE's vm_boot_lead_s = -1: VMs booted at the AR's start
            if w["kind"] == "advance-reservation":
                w["lead"] = lead
                engine.submit_job(w["key"], body(w), start_s=t0 + w["start"] - lead, duration_s=w["duration"] + lead,
                                  image_id=w["image"], image_mb=sizes[w["image"]], cpu=100, memory_mb=MEMORY_MB)
        deadline = time.monotonic() + 600
        keys = [w["key"] for w in work]
        while time.monotonic() < deadline and not all(engine.status(k)["state"] in ("Done", "Rejected") for k in keys):
            time.sleep(0.2)
        stop.set()
        ticker.join(10)
        status = {k: engine.status(k) for k in keys}
        events: dict[str, dict] = {}
        for ev in receiver.events:
            base = ev["key"].split("-r")[0]
            events.setdefault(base, {}).setdefault(ev["event"], []).append(ev["time"])
        created, node_of = {}, {}
        for i, a in enumerate(agents):
            for v in a.records():
                base = v["key"].split("-r")[0]
                created.setdefault(base, []).append(v["created"])
                node_of.setdefault(base, i)            # where its VM first booted
        drivers = [a.driver.describe() for a in agents]
        pools = [a.images.view() for a in agents]
        return {"t0": t0, "status": status, "events": events, "created": created, "node_of": node_of, "drivers": drivers,
                "pools": pools, "urls": urls, "staging": engine.staging_report()}
    finally:
        for s in reversed(servers):
            s.close()
        receiver.close()


def boots_of(work, live) -> dict[str, float]:
    """Each lease's measured boot (s): its first VWN created -> the guest agent's ``running``."""
    out = {}
    for w in work:
        created = [c for c in live["created"].get(w["key"], []) if c is not None]
        up = (live["events"].get(w["key"], {}).get("running") or [None])[0]
        if created and up is not None:
            out[w["key"]] = round(up - min(created), 2)
    return out


def sim_boots(work, live, mode: str) -> dict[str, float]:
    """The boot each simulated lease carries (s), by ``mode``: ``lease`` its own measured boot (a
    replay), ``node`` the mean boot of the node its VM booted on (the node's published
    ``mean_boot_s``), ``mean`` one mean over all boots (session 5)."""
    drivers, own = live["drivers"], boots_of(work, live)
    every = [d["mean_boot_s"] for d in drivers for _ in range(d.get("boots") or 0)]
    mean = sum(every) / len(every) if every else 0.0
    out = {}
    for w in work:
        node = live["node_of"].get(w["key"])
        per_node = drivers[node].get("mean_boot_s") if node is not None else None
        out[w["key"]] = {"lease": own.get(w["key"], per_node or mean), "node": per_node or mean,
                         "mean": mean}[mode]
    return out


def measured_shutdown(work, live, default: float) -> float:
    """The mean, over the leases never suspended, of done - guest up - job time (s): the guest's
    power-off, the output's stage-out and the ``done`` event; ``default`` without such a lease."""
    gaps = []
    for w in work:
        ev = live["events"].get(w["key"], {})
        if not ev.get("suspended") and ev.get("running") and ev.get("done"):
            gaps.append(ev["done"][0] - ev["running"][0] - w["job"])
    return sum(gaps) / len(gaps) if gaps else default


def resume_slack(prior_rate: float, sim_rates: tuple[float, float], restores: list[float]) -> float:
    """How far (s) a suspended lease's live end may lead or trail the simulated one because of the
    suspension windows: the live engine plans both windows at ``prior_rate`` (MB of VM memory/s)
    and the simulation at ``sim_rates`` (|difference of the two windows' sums|), and a live VM
    runs again as soon as its restore ended (``restores``: measured seconds), before its planned
    resume window ends, where the simulation waits the whole window."""
    live = 2 * MEMORY_MB / prior_rate
    sim = MEMORY_MB / sim_rates[0] + MEMORY_MB / sim_rates[1]
    early = max(0.0, MEMORY_MB / sim_rates[1] - min(restores)) if restores else 0.0
    return abs(live - sim) + early


def cpu_times() -> tuple[int, int]:
    """(all jiffies, steal jiffies) of the host from /proc/stat (steal: time a hypervisor gave
    this VM's vCPUs to others)."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    return sum(vals), vals[7] if len(vals) > 7 else 0


def run_sim(work, sizes, cfg, boots: dict[str, float], shutdown_s: float) -> dict:
    from vwn_agents.leasing import simulate
    from vwn_agents.leasing.model import Lease, LeaseType, Node, resource_vector
    from vwn_agents.leasing.requesttypes import request_type
    leases = []
    for i, w in enumerate(work):
        ar = w["kind"] == "advance-reservation"
        leases.append(Lease(i + 1, LeaseType.ADVANCE_RESERVATION if ar else LeaseType.BEST_EFFORT, w["submit"],
                            w["duration"] + w.get("lead", 0.0), 1, resource_vector(cpu=100, memory=MEMORY_MB),
                            w["image"], sizes[w["image"]], preemptible=not ar,
                            requested_start_s=w["start"] - w.get("lead", 0.0) if ar else None,
                            request_type=None if ar else request_type("suspendable"),
                            real_duration_s=boots[w["key"]] + w["job"] + shutdown_s))
    nodes = [Node(i, f"n{i}", (100, 2048, 10**12, 10**12)) for i in range(2)]
    res = simulate(leases, nodes, cfg)
    transfers = [{"lease": work[lid - 1]["key"], "image": img, "node": dest[0], "start": s, "end": e}
                 for lid, img, dest, s, e in res.scheduler.transfer_log]
    out = {work[l.id - 1]["key"]: {"start": l.start_s, "end": l.end_s, "suspensions": l.suspensions,
                                   "state": l.state.value} for l in leases}
    return {"leases": out, "transfers": transfers, "report": res.report()}


def _rel(x, t0):
    return None if x is None else round(x - t0, 2)


def compare(work, live, sim, tolerance_s: float) -> tuple[list[dict], dict]:
    """Per-lease rows and the summary (see module doc)."""
    t0, rows = live["t0"], []
    for w in work:
        k, st, ev, s = w["key"], live["status"][w["key"]], live["events"].get(w["key"], {}), sim["leases"][w["key"]]
        row = {"lease": k, "kind": w["kind"], "image": w["image"], "job_s": w["job"], "requested_start": w["start"],
               "sim_start": round(s["start"], 2) if s["start"] is not None else None,
               "sim_end": round(s["end"], 2) if s["end"] is not None else None,
               "sched_start": _rel(st["start_s"], t0), "sched_end": _rel(st["end_s"], t0),
               "actual_start": _rel(min(live["created"].get(k, [None]) or [None], key=lambda x: x or 0), t0),
               "up": _rel((ev.get("running") or [None])[0], t0), "actual_end": _rel((ev.get("done") or [None])[0], t0),
               "node": live["node_of"].get(k), "boot_s": boots_of([w], live).get(k), "sim_boot_s": w.get("sim_boot_s"),
               "suspended_at": _rel((ev.get("suspended") or [None])[0], t0),
               "resumed_at": _rel((ev.get("resumed") or [None])[0], t0),
               "suspensions_live": len(ev.get("suspended", [])), "suspensions_sim": s["suspensions"],
               "state": st["state"]}
        if row["actual_end"] is not None and row["sim_end"] is not None:
            row["end_diff_s"] = round(row["actual_end"] - row["sim_end"], 2)
        if row["actual_start"] is not None and row["sim_start"] is not None:
            row["start_diff_s"] = round(row["actual_start"] - row["sim_start"], 2)
        rows.append(row)
    pulls = [t for p in live["pools"] for t in p["transfers"] if t.get("transfer")]
    moved = [t for t in pulls if not t.get("hit") and (t.get("bytes") or 0) > 0]
    summary = {
        "transfers_live": len(moved), "transfers_sim": len(sim["transfers"]),
        "mb_live": round(sum(t["bytes"] for t in moved) / 1e6, 3),
        "mb_sim": round(sim["report"]["metrics"]["mb_transferred"], 3),
        "leases_reusing_live": len(work) - len({t["transfer"].split(":")[0] for t in moved}),
        "leases_reusing_sim": len(work) - len({t["lease"] for t in sim["transfers"]}),
        "pool_hits_live": sum(1 for t in pulls if t.get("hit")),
        "end_diff_s": {"max_abs": max((abs(r["end_diff_s"]) for r in rows if "end_diff_s" in r), default=None)},
        "start_diff_s": {"max_abs": max((abs(r["start_diff_s"]) for r in rows if "start_diff_s" in r), default=None)},
        "ar_up_offset_s": [r["up"] - w["start"] for r, w in zip(rows, work)
                           if w["kind"] == "advance-reservation" and r["up"] is not None],
        "suspensions_live": sum(r["suspensions_live"] for r in rows),
        "suspensions_sim": sum(r["suspensions_sim"] for r in rows)}
    summary["ar_up_offset_s"] = [round(x, 2) for x in summary["ar_up_offset_s"]]
    ok = (all(r["state"] == "Done" for r in rows) and all("end_diff_s" in r for r in rows)
          and summary["end_diff_s"]["max_abs"] <= tolerance_s
          and summary["transfers_live"] == summary["transfers_sim"]
          and abs(summary["mb_live"] - summary["mb_sim"]) < 0.01
          and summary["leases_reusing_live"] == summary["leases_reusing_sim"]
          and summary["suspensions_live"] == summary["suspensions_sim"])
    summary["within_tolerance"] = ok
    return rows, summary


def plot(rows, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.5))
    for i, r in enumerate(rows):
        if r["sim_start"] is not None and r["sim_end"] is not None:
            ax.barh(i + 0.2, r["sim_end"] - r["sim_start"], left=r["sim_start"], height=0.35, color="tab:gray",
                    label="simulated (measured rates)" if i == 0 else None)
        if r["actual_start"] is not None and r["actual_end"] is not None:
            ax.barh(i - 0.2, r["actual_end"] - r["actual_start"], left=r["actual_start"], height=0.35,
                    color="tab:orange", label="live VM (created .. done)" if i == 0 else None)
        if r["up"] is not None:
            ax.plot([r["up"]], [i - 0.2], "k|", markersize=12, label="guest up" if i == 0 else None)
    ax.set_yticks(range(len(rows)), [f"{r['lease']} {r['image']}" for r in rows])
    ax.set_xlabel("seconds after submission")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vms", action="store_true", help="(accepted: live_vs_sim.py passes it)")
    p.add_argument("--ar-submit", type=float, default=25.0, help="ARs submitted this long after the BEs (s)")
    p.add_argument("--ar-start", type=float, default=75.0, help="ARs start this long after the BEs' submission (s)")
    p.add_argument("--rate", type=float, default=1.0, help="image link bandwidth, MB/s")
    p.add_argument("--prior-rate", type=float, default=16.0,
                   help="suspend/resume rate the live engine plans with (MB of VM memory/s)")
    p.add_argument("--shutdown-s", type=float, default=-1.0,
                   help="guest power-off + stage-out + detection, added in simulation (s); -1: measured, the "
                        "mean over the leases never suspended of done - guest up - job time")
    p.add_argument("--sim-rates", choices=("planned", "measured"), default="planned",
                   help="the simulation's suspend-rate / resume-rate: those the live engine planned with "
                        "(--prior-rate: the same windows) or those the nodes measured (session 5)")
    p.add_argument("--tolerance", type=float, default=TOLERANCE_S,
                   help="base of |live end - simulated end| allowed per lease (s); the resume slack is "
                        "added when VMs were suspended, and the boots' spread unless --boot lease (docs/vwn.md)")
    p.add_argument("--boot", choices=("lease", "node", "mean"), default="lease",
                   help="the boot each simulated lease carries: its own measured boot (lease), its node's "
                        "mean boot (node) or the mean of all boots (mean); with node or mean the tolerance "
                        "is widened by the spread of the measured boots (max - min)")
    p.add_argument("--out", default=None, help="write leases.csv and vms.png here")
    p.add_argument("--json", action="store_true", help="only the JSON summary line")
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if os.geteuid() != 0 or not shutil.which("mke2fs") and not os.path.exists("/usr/sbin/mke2fs"):
        print("needs root and mke2fs (e2fsprogs)", file=sys.stderr)
        return 2
    from vwn_agents.drivers import guest
    from vwn_agents.drivers.libvirtd import LibvirtUnavailable, ensure_libvirtd
    try:
        daemons = ensure_libvirtd()
        guest.build_guest("/var/cache/vgrid/guest")
    except (LibvirtUnavailable, guest.GuestBuildError) as exc:
        print(f"libvirt/qemu cannot run here: {exc}", file=sys.stderr)
        return 2
    work = workload(a.ar_submit, a.ar_start)
    wall0, cpu0, load0, jiffies0 = time.monotonic(), time.process_time(), os.getloadavg(), cpu_times()
    try:
        with tempfile.TemporaryDirectory(prefix="vgrid-lvsvm-") as tmp:
            vm_dir = Path(tempfile.mkdtemp(prefix="vgrid-lvsvm-vms-", dir="/var/tmp"))
            os.chmod(vm_dir, 0o755)                   # the qemu account crosses it
            try:
                images = Path(tmp) / "images"
                images.mkdir()
                sizes = make_images(images)
                live = run_live(work, sizes, images, vm_dir, lease_config(a.rate, a.prior_rate, a.prior_rate),
                                Path(tmp), ahead_s=MEMORY_MB / a.prior_rate + 10.0)
            finally:
                shutil.rmtree(vm_dir, ignore_errors=True)
    finally:
        daemons.stop()
    wall_live, cpu_live = time.monotonic() - wall0, time.process_time() - cpu0
    jiffies1 = cpu_times()
    steal = (jiffies1[1] - jiffies0[1]) / max(1, jiffies1[0] - jiffies0[0])
    boots = [d["mean_boot_s"] for d in live["drivers"] for _ in range(d.get("boots") or 0)]
    per_lease = boots_of(work, live)
    carried = sim_boots(work, live, a.boot)
    for w in work:
        w["sim_boot_s"] = round(carried[w["key"]], 2)
    saves = [d["last_save"]["seconds"] for d in live["drivers"] if d.get("last_save")]
    restores = [d["last_restore"]["seconds"] for d in live["drivers"] if d.get("last_restore")]
    boot_s = sum(boots) / len(boots) if boots else 0.0
    suspend_rate = MEMORY_MB / (sum(saves) / len(saves)) if saves else a.prior_rate
    resume_rate = MEMORY_MB / (sum(restores) / len(restores)) if restores else a.prior_rate
    shutdown_s = a.shutdown_s if a.shutdown_s >= 0 else measured_shutdown(work, live, 1.0)
    sim_rates = (a.prior_rate, a.prior_rate) if a.sim_rates == "planned" else (suspend_rate, resume_rate)
    sim = run_sim(work, sizes, lease_config(a.rate, *sim_rates),
                  {w["key"]: w["sim_boot_s"] for w in work}, shutdown_s)
    max_boot = max((d.get("max_boot_s") or 0.0 for d in live["drivers"]), default=0.0)
    spread = max(per_lease.values()) - min(per_lease.values()) if per_lease else 0.0
    slack = resume_slack(a.prior_rate, sim_rates, restores) if any(
        live["events"].get(w["key"], {}).get("suspended") for w in work) else 0.0
    tolerance = a.tolerance + slack + (spread if a.boot != "lease" else 0.0)
    rows, summary = compare(work, live, sim, tolerance)
    summary = {"benchmark": "live_vs_sim_vms", "leases": len(work), "nodes": 2, "tolerance_s": round(tolerance, 2),
               "sim_boot": a.boot, "sim_rates": a.sim_rates, "sim_suspend_resume_mb_s": [round(x, 1) for x in sim_rates],
               "shutdown_s": round(shutdown_s, 2), "resume_slack_s": round(slack, 2), "boot_spread_s": round(spread, 2),
               "measured": {"boot_s": round(boot_s, 2), "max_boot_s": max_boot, "boot_per_lease_s": per_lease,
                            "cpu_steal_fraction": round(steal, 4),
                            "boot_cpu_s": [d.get("mean_boot_cpu_s") for d in live["drivers"]],
                            "boots": [d.get("boots") for d in live["drivers"]], "ar_boot_lead_s": round(work[-1].get("lead", 0.0), 2), "suspend_rate_mb_s": round(suspend_rate, 1),
                            "resume_rate_mb_s": round(resume_rate, 1),
                            "save": [d.get("last_save") for d in live["drivers"]],
                            "restore": [d.get("last_restore") for d in live["drivers"]]},
               **summary, "wall_s": round(wall_live, 1), "cpu_s": round(cpu_live, 2),
               "loadavg_before": [round(x, 2) for x in load0], "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "leases.csv", "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
            wr.writeheader()
            wr.writerows(rows)
        plot(rows, out / "vms.png")
    for r in rows:                       # per-lease differences, always (stderr)
        print(f"{r['lease']:4} node {r['node']} boot {r['boot_s']} (sim {r['sim_boot_s']}) "
              f"end live {r['actual_end']} sim {r['sim_end']} diff {r.get('end_diff_s')} "
              f"{'ok' if r.get('end_diff_s') is not None and abs(r['end_diff_s']) <= tolerance else 'OUTSIDE'}",
              file=sys.stderr)
        if not a.json:
            print(json.dumps(r), file=sys.stderr)
    print(json.dumps(summary))
    return 0 if summary["within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main())
