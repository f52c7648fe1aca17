"""The Debian guest of libvirt VWNs (``drivers.debian_guest``): debootstrap from this machine's
configured mirror, python3, systemd as the real init, a qcow2 root disk booted from an overlay.

The mirror parser runs everywhere. The build + boot test builds the guest once into
/var/cache/vgrid/guest (about 2.5 min of debootstrap here; a cache hit afterwards) and boots it
under libvirt with a python3 job; it skips only where libvirt/qemu cannot run or the configured
mirror cannot be reached, saying which.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

from vwn_agents.drivers import guest
from vwn_agents.drivers.debian_guest import build_debian_guest, configured_mirror
from vwn_agents.drivers.guest import GuestBuildError
from vwn_agents.drivers.libvirtd import LibvirtUnavailable, ensure_libvirtd

from .waiting import wait_until


def test_the_mirror_is_the_first_configured_deb_source(tmp_path):
    one = tmp_path / "sources.list"
    one.write_text("# comment\ndeb-src http://src.example/debian bookworm main\n"
                   "deb http://security.debian.org/debian-security bookworm-security main\n"
                   "deb [arch=amd64] http://mirror.example/debian bookworm main\n")
    assert configured_mirror([str(one)]) == "http://mirror.example/debian"
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text("Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
                                      "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm\n")
    assert configured_mirror([str(tmp_path / "none.list"), str(d)]) == "http://deb.example/debian"
    (d / "debian.sources").write_text("")
    with pytest.raises(GuestBuildError, match="no Debian mirror configured"):
        configured_mirror([str(d)])


def _mirror_reachable(url: str) -> str | None:
    """None when ``<url>/dists/bookworm/Release`` answers, else why not."""
    try:
        r = requests.head(f"{url.rstrip('/')}/dists/bookworm/Release", timeout=10, allow_redirects=True)
    except requests.RequestException as exc:
        return f"{url}: {type(exc).__name__}"
    return None if r.status_code == 200 else f"{url}: HTTP {r.status_code}"


def test_a_python3_job_runs_in_the_debian_guest_under_systemd(tmp_path):
    from vwn_agents.drivers.libvirt_driver import LibvirtVMs
    from vwn_agents.drivers.libvirt_vwn import _probe
    try:
        daemons = ensure_libvirtd()
        base = guest.build_guest("/var/cache/vgrid/guest")
    except (LibvirtUnavailable, GuestBuildError) as exc:
        pytest.skip(f"libvirt/qemu cannot run here: {exc}")
    try:
        mirror = configured_mirror()
        why = _mirror_reachable(mirror)
        if why is not None:
            pytest.skip(f"the configured Debian mirror cannot be reached: {why}")
        t0 = time.monotonic()
        g = build_debian_guest("/var/cache/vgrid/guest")
        print(f"\nDEBIAN GUEST built={g.built} in {time.monotonic() - t0:.1f} s: {g.disk} "
              f"({g.disk.stat().st_size / 1e6:.0f} MB qcow2)")
        vm_dir = Path(tempfile.mkdtemp(prefix="vgrid-test-deb-", dir="/var/tmp"))
        os.chmod(vm_dir, 0o755)
        try:
            kvm, why_kvm = _probe(base, "auto", 10.0)
            vms = LibvirtVMs("qemu:///system", vm_dir, g, kvm, why_kvm)
            vwn = f"deb{os.getpid()}"
            overlay = vm_dir / "root-overlay.qcow2"
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(g.disk), "-F", "qcow2",
                            str(overlay)], check=True)
            os.chmod(overlay, 0o644)
            work = tmp_path / "work"
            work.mkdir()
            (work / "in.txt").write_text("hello\n")
            spec = {"executable": "/usr/bin/python3", "job_id": "deb-job", "std_output": "out.txt",
                    "arguments": "-c 'import os, sys; print(sys.version_info[0], os.getuid(), "
                                 "open(\"/proc/1/comm\").read().strip(), open(\"in.txt\").read().strip())'"}
            t1 = time.monotonic()
            vms.start(vwn, guest.job_archive(spec, work, ["out.txt"]), 128, 1.0, disk=overlay)
            channel = vms.files(vwn) / "channel.out"
            running = wait_until(lambda: guest.parse_channel(channel.read_bytes()).running and time.monotonic(),
                                 "the guest agent under systemd", 300)
            st = wait_until(lambda: (s := guest.parse_channel(channel.read_bytes())).complete and s,
                            "the job's result", 120)
            print(f"DEBIAN GUEST boot to agent {running - t1:.1f} s, job done {time.monotonic() - t1:.1f} s")
            assert st.exit_code == 0, (vms.files(vwn) / "console.log").read_text(errors="replace")[-2000:]
            assert st.files["out.txt"] == b"3 1000 systemd hello\n"     # python3, not root, a real init
            wait_until(lambda: vms.state(vwn) == "gone", "the guest to power off", 60)
        finally:
            try:
                vms.remove(vwn)
                vms.close()
            except NameError:
                pass
            shutil.rmtree(vm_dir, ignore_errors=True)
    finally:
        daemons.stop()


def test_a_node_agent_boots_the_debian_guest(tmp_path, receiver):
    """``guest = "debian"``: GET /status names the guest, and a python3 job posted to the node
    agent runs to Done under systemd, as uid 1000, its output staged out as for any VWN."""
    from .node_site import node_starter
    from .test_vwn_libvirt import post
    try:
        daemons = ensure_libvirtd()
        guest.build_guest("/var/cache/vgrid/guest")
    except (LibvirtUnavailable, GuestBuildError) as exc:
        pytest.skip(f"libvirt/qemu cannot run here: {exc}")
    vm_dir = Path(tempfile.mkdtemp(prefix="vgrid-test-debnode-", dir="/var/tmp"))
    os.chmod(vm_dir, 0o755)
    try:
        if not list(Path("/var/cache/vgrid/guest").glob("debian-*/rootfs.qcow2")):
            why = _mirror_reachable(configured_mirror())     # the agent would build it at its start
            if why is not None:
                pytest.skip(f"no Debian guest cached and the configured Debian mirror cannot be reached: {why}")

        def defaults(n):
            return {"work_dir": str(tmp_path / f"w{n}"), "driver": "libvirt", "vm_dir": str(vm_dir),
                    "disk_quota_mb": 0, "vm_memory_mb": 128, "retry_initial_s": 0.05, "guest": "debian"}
        with node_starter(f"deb{os.getpid()}n", defaults) as start:
            url, agent = start(capacity=1.0)
            drv = requests.get(f"{url}/status", timeout=30).json()["driver"]
            assert drv["guest"]["kind"] == "debian" and drv["guest"]["root_disk"].endswith("rootfs.qcow2"), drv
            assert drv["why"].endswith("debian guest"), drv
            t0 = time.monotonic()
            post(url, receiver, "debnode", executable="/usr/bin/python3", std_output="out.txt",
                 output_sandbox=["out.txt"],
                 arguments="-c 'import os, sys; print(sys.version_info[0], os.getuid(), "
                           "open(\"/proc/1/comm\").read().strip())'")
            done = receiver.wait_event("debnode", "done", timeout_s=400)
            print(f"\nDEBIAN NODE job done {time.monotonic() - t0:.1f} s after POST; boot "
                  f"{agent.driver.stats['last_boot_s']} s")
            assert done["exit_code"] == 0, done
            assert receiver.outputs[("debnode", "out.txt")] == b"3 1000 systemd\n"
    finally:
        shutil.rmtree(vm_dir, ignore_errors=True)
        daemons.stop()
