"""One libvirt VM host for a test module: libvirtd started if none runs, the busybox guest built
(cached), qemu:///system with KVM when it works and TCG otherwise (docs/vwn.md, "Drivers")."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from vwn_agents.drivers import guest
from vwn_agents.drivers.libvirtd import LibvirtUnavailable, ensure_libvirtd


def libvirt_vms(prefix: str):
    """Generator for a module fixture: yields a ``LibvirtVMs`` whose VM files live in a fresh
    directory under /var/tmp named ``prefix...``; skips, saying why, only where libvirt or qemu
    cannot run here; closes it, removes the directory and stops the daemons it started."""
    try:
        daemons = ensure_libvirtd()
        g = guest.build_guest("/var/cache/vgrid/guest")
        from vwn_agents.drivers.libvirt_driver import LibvirtVMs
        from vwn_agents.drivers.libvirt_vwn import _probe
        kvm, why = _probe(g, "auto", 10.0)
        d = tempfile.mkdtemp(prefix=prefix, dir="/var/tmp")
        os.chmod(d, 0o755)
        v = LibvirtVMs("qemu:///system", d, g, kvm, why)
    except (LibvirtUnavailable, guest.GuestBuildError, ImportError) as exc:
        pytest.skip(f"libvirt/qemu cannot run here: {exc}")
    yield v
    v.close()
    shutil.rmtree(d, ignore_errors=True)
    daemons.stop()
