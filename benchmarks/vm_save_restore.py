"""Benchmark of libvirt VWNs (issue 14): boot time, and save (suspend) / restore (resume) rates.

    .venv/bin/python benchmarks/vm_save_restore.py [--memory 128,256] [--touch-mb 32] [--uri qemu:///system]

For each guest memory size (MB) one VWN of the test guest (``vwn_agents.drivers.guest``: the
Debian cloud kernel + busybox initramfs, built or taken from /var/cache/vgrid/guest) boots on
libvirt (KVM if the probe says it works, else TCG) with a job that fills ``--touch-mb`` MB of
its tmpfs (so the memory image holds data, as a real job's would) and then waits; measured:
boot (start of the domain to the guest agent's ``VGRID-RUNNING``, s), save (pause + save of the
memory image to disk: MB, s, MB/s) and restore (MB, s, MB/s), as ``LibvirtVMs`` does them for the
node agent. These rates are the ``suspend-rate`` / ``resume-rate`` of seed 000's model (time =
memory / rate). One JSON line per memory size, with this process's CPU seconds beside the wall
time and qemu's CPU seconds (libvirt's ``cpuTime``; there is no reference implementation to
compare with). Starts libvirtd/virtlogd when none runs and stops what it started. Exits 2 when
libvirt, qemu or the guest's packages are missing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vwn_agents.drivers import guest as G  # noqa: E402
from vwn_agents.drivers.libvirt_driver import LibvirtVMs  # noqa: E402
from vwn_agents.drivers.libvirt_vwn import _probe  # noqa: E402
from vwn_agents.drivers.libvirtd import LibvirtUnavailable, ensure_libvirtd  # noqa: E402


def wait(pred, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := pred()):
        if time.monotonic() > deadline:
            raise SystemExit(f"vm_save_restore: timed out waiting for {what}")
        time.sleep(0.05)
    return value


def one(vms: LibvirtVMs, memory_mb: int, touch_mb: int, work: Path) -> dict:
    vwn = f"vwn-bench-{memory_mb}"
    spec = {"executable": "/bin/sh", "std_output": "o.txt",
            "arguments": f"-c 'dd if=/dev/zero of=/tmp/fill bs=1M count={touch_mb} 2>/dev/null; "
                         "echo filled; sleep 600'"}
    vms.destroy(vwn)
    t0, c0 = time.monotonic(), time.process_time()
    vms.start(vwn, G.job_archive(spec, work, ["o.txt"]), memory_mb, 1.0)
    channel = vms.files(vwn) / "channel.out"
    wait(lambda: G.parse_channel(channel.read_bytes()).running, 300, "the guest to boot")
    boot_s = time.monotonic() - t0
    wait(lambda: G.parse_channel(channel.read_bytes()).progress > 0, 300, "the job to fill its memory")
    qemu_cpu = vms._dom(vwn).info()[4] / 1e9
    save = vms.suspend(vwn)
    restore = vms.resume(vwn)
    vms.remove(vwn)
    return {"bench": "vm_save_restore", "memory_mb": memory_mb, "touch_mb": touch_mb,
            "domain_type": "kvm" if vms.kvm else "qemu", "why": vms.why, "boot_s": round(boot_s, 2),
            "save": save.record(), "restore": restore.record(),
            "wall_s": round(time.monotonic() - t0, 2), "cpu_s": round(time.process_time() - c0, 3),
            "qemu_cpu_s_to_filled": round(qemu_cpu, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memory", default="128,256", help="guest memory sizes, MB (comma list)")
    ap.add_argument("--touch-mb", type=int, default=32, help="MB the job writes into guest memory")
    ap.add_argument("--uri", default="qemu:///system")
    args = ap.parse_args()
    try:
        daemons = ensure_libvirtd(args.uri)
        g = G.build_guest("/var/cache/vgrid/guest")
    except (LibvirtUnavailable, G.GuestBuildError) as exc:
        print(f"vm_save_restore: {exc}", file=sys.stderr)
        return 2
    vm_dir = Path(tempfile.mkdtemp(prefix="vgrid-bench-vms-", dir="/var/tmp"))
    os.chmod(vm_dir, 0o755)
    work = vm_dir / "work"
    work.mkdir()
    try:
        kvm, why = _probe(g, "auto", 10.0)
        vms = LibvirtVMs(args.uri, vm_dir / "node", g, kvm, why)
        for mb in (int(x) for x in args.memory.split(",")):
            print(json.dumps(one(vms, mb, args.touch_mb, work)), flush=True)
        vms.close()
    finally:
        import shutil
        shutil.rmtree(vm_dir, ignore_errors=True)
        daemons.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
