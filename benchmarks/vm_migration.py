"""Benchmark of cold migration between node agents over mutual TLS (issue 14): measured copy and
restore against the model's estimate (seed 002 eq. (8): t_copy = memory / migration bandwidth).

    .venv/bin/python benchmarks/vm_migration.py [--rates 0,12.5] [--memory 128] [--touch-mb 32]

Two node agents (``driver = "libvirt"``) in this process on their own loopback addresses, each
with a host certificate of a CA made here; a CE identity drives them exactly as the CE agent's
lease engine does (``ce_migration.LeaseMigration.move``: handover on A, pull + checksum +
restore on B, A ends its VWN). One VM of the busybox test guest writes ``--touch-mb`` MB into
its tmpfs (a real job's memory) and keeps counting; it is then moved A -> B, and back B -> A
for the next rate. ``--rates``: the source's ``migration_serve_mb_s`` for each move (0 =
unlimited; 12.5 = seed 002's 100 Mb/s). One JSON line per move: image MB, handover (save
included), copy and restore seconds and MB/s, the model's copy time for the VM's memory and for
the image, this process's CPU seconds (the node agents: TLS, SHA-256, HTTP) beside the wall
time, and the load average. Exits 2 when libvirt, qemu or the guest's packages are missing.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vgrid_runtime.clock import WallClock  # noqa: E402
from vgrid_runtime.httpclient import new_session  # noqa: E402
from vgrid_runtime.pki import create_ca, issue_host  # noqa: E402
from vgrid_runtime.tls import TLSFiles  # noqa: E402
from vgrid_runtime.wsgi import BackgroundServer  # noqa: E402
from vwn_agents.ce_migration import LeaseMigration  # noqa: E402
from vwn_agents.drivers import guest as G  # noqa: E402
from vwn_agents.drivers.libvirtd import LibvirtUnavailable, ensure_libvirtd  # noqa: E402
from vwn_agents.leasing.config import LeaseConfig  # noqa: E402
from vwn_agents.node_agent import NodeAgentConfig, create_app  # noqa: E402
from vwn_agents.node_enactment import NodeAgentEnactment  # noqa: E402
from vwn_agents.testing import Receiver  # noqa: E402

ADDR = {"ce": "127.0.35.1", "a": "127.0.35.2", "b": "127.0.35.3"}


def wait(pred, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := pred()):
        if time.monotonic() > deadline:
            raise SystemExit(f"vm_migration: timed out waiting for {what}")
        time.sleep(0.05)
    return value


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="0,12.5", help="source serve rates, MB/s (0 = unlimited), one move each")
    ap.add_argument("--memory", type=int, default=128, help="the VM's memory, MB")
    ap.add_argument("--touch-mb", type=int, default=32, help="MB the job writes into guest memory")
    args = ap.parse_args()
    try:
        daemons = ensure_libvirtd()
        G.build_guest("/var/cache/vgrid/guest")
    except (LibvirtUnavailable, G.GuestBuildError) as exc:
        print(f"vm_migration: {exc}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="vgrid-bench-mig-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    now = WallClock().now()
    ca = create_ca(now=now)
    (root / "certs").mkdir()
    (root / "certs" / "ca.pem").write_bytes(ca.cert_pem())
    (root / "vomsdir").mkdir()
    dns = {}
    for name, ip in ADDR.items():
        cred = issue_host(ca, f"{name}.vgrid.local", [ip], now=now)
        cred.save(root / f"{name}.pem", root / f"{name}.key")
        dns[name] = cred.dn

    def tls(name):
        return {"tls_cert": str(root / f"{name}.pem"), "tls_key": str(root / f"{name}.key"),
                "cert_dir": str(root / "certs"), "voms_dir": str(root / "vomsdir")}
    receiver = Receiver()
    servers = {}
    try:
        for name in ("a", "b"):
            cfg = NodeAgentConfig(node=f"bm{os.getpid()}{name}", work_dir=str(root / name), driver="libvirt",
                                  vm_dir=str(root / "vms"), disk_quota_mb=0, vm_memory_mb=args.memory,
                                  heartbeat_s=0, gridmapdir=str(root / f"{name}-gm"), ce_dns=[dns["ce"]],
                                  **tls(name))
            servers[name] = BackgroundServer(create_app(cfg), host=ADDR[name], tls=cfg.tls_files())
        ce = new_session(TLSFiles(**{"cert": tls("ce")["tls_cert"], "key": tls("ce")["tls_key"],
                                     "cert_dir": str(root / "certs"), "voms_dir": str(root / "vomsdir")}))
        a, b = servers["a"].url, servers["b"].url
        body = {"job_id": f"{receiver.url}/jobs/k", "key": "k", "executable": "/bin/sh",
                "arguments": f"-c 'dd if=/dev/zero of=/tmp/fill bs=1M count={args.touch_mb} 2>/dev/null; "
                             "i=0; while true; do i=$((i+1)); echo $i; sleep 1; done'",
                "callback_url": f"{receiver.url}/events", "std_output": "c.txt", "memory_mb": args.memory}
        r = ce.post(f"{a}/vwns", json=body, timeout=60)
        if r.status_code != 201:
            raise SystemExit(f"vm_migration: POST /vwns: {r.status_code} {r.text}")
        vwn = r.json()["vwn"]
        agent_a = servers["a"].app.config["VGRID_AGENT"]
        channel = agent_a.driver.vms.files(vwn) / "channel.out"
        wait(lambda: channel.exists() and G.parse_channel(channel.read_bytes()).progress > 0, 300,
             "the job to fill its memory")
        enact = NodeAgentEnactment([a, b], payload=None, session=ce, timeout=60)
        cfg = LeaseConfig()
        mig = LeaseMigration(cfg, attempts=1, timeout_s=900)
        lease = SimpleNamespace(id=1, per_vm=(100, args.memory, 0, 0))
        src, dst = 0, 1
        for rate in (float(x) for x in args.rates.split(",")):
            servers["ab"[src]].app.config["VGRID_AGENT"].config.migration_serve_mb_s = rate
            t0, c0 = time.monotonic(), cpu_s()
            vwn = mig.move(enact, lease, src, vwn, dst)
            rec = mig.records[-1]
            print(json.dumps({"bench": "vm_migration", "serve_mb_s": rate or None, "memory_mb": args.memory,
                              "touch_mb": args.touch_mb, "image_mb": rec["image_mb"], "bytes": rec["bytes"],
                              "handover_s": rec["handover_s"], "copy_s": rec["copy_s"],
                              "copy_mb_s": rec["copy_mb_s"], "restore_s": rec["restore_s"],
                              "restore_mb_s": rec["restore_mb_s"],
                              "model_copy_s": rec["model_copy_s"], "model_image_copy_s": rec["model_image_copy_s"],
                              "model_bandwidth_mb_s": cfg.migration_bandwidth,
                              "wall_s": round(time.monotonic() - t0, 2), "cpu_s": round(cpu_s() - c0, 2),
                              "loadavg": os.getloadavg()[0]}), flush=True)
            src, dst = dst, src
    finally:
        for srv in servers.values():
            srv.close()
        receiver.close()
        shutil.rmtree(root, ignore_errors=True)
        daemons.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
