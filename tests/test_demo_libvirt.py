"""``vgrid demo --driver libvirt`` as a user runs it (issue 14): every VWN of the demo's site is a
qemu VM; a shell job and a JDL Environment reach the guest and come back Done with their output.
Real libvirtd + qemu (TCG), started by the demo itself where no init system did; skips only where
libvirt/qemu cannot run here, saying why.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from vwn_agents.drivers import guest
from vwn_agents.drivers.libvirtd import LibvirtUnavailable, ensure_libvirtd

from .paths import EXAMPLES

pytestmark = pytest.mark.slow


def test_demo_with_the_libvirt_driver(tmp_path):
    try:
        daemons = ensure_libvirtd()                    # the demo uses these (or starts its own)
        guest.build_guest("/var/cache/vgrid/guest")
    except (LibvirtUnavailable, guest.GuestBuildError) as exc:
        pytest.skip(f"libvirt/qemu cannot run here: {exc}")
    try:
        _run_demo(tmp_path)
    finally:
        daemons.stop()


def _run_demo(tmp_path):
    vm_jdl = EXAMPLES.parent / "jdl_vm"
    for name in ("01_hostname.jdl", "02_environment_dteam.jdl"):
        shutil.copy(vm_jdl / name, tmp_path)
    p = subprocess.run([sys.executable, "-m", "vgrid_cli", "demo", "--driver", "libvirt", "--json", "--jobs",
                        str(tmp_path), "--ism-refresh", "2", "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=420)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["ok"] is True and len(doc["jobs"]) == 2, doc
    heads = {j["stdout_head"] for j in doc["jobs"]}
    assert all(j["state"] == "Done" and j["exit_code"] == 0 and j["vwn"] for j in doc["jobs"]), doc
    # the guest's kernel (Debian's cloud kernel, not the host's), and the JDL Environment in the guest
    guest_kernel = next(h for h in heads if h.startswith("Linux "))
    assert "cloud-amd64" in guest_kernel and os.uname().release not in guest_kernel, heads
    assert "hello from a VM" in heads, heads
