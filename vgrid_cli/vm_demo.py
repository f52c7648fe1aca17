"""``vgrid demo --driver libvirt``: the demo's node agents run every VWN as a qemu VM.

``vm_site(driver, console)`` is a context manager yielding the node agents' extra options: for
``cgroup`` nothing; for ``libvirt`` it makes sure libvirtd and virtlogd run (starting them when
no init system did, ``vwn_agents.drivers.libvirtd``; stopped again at the end), makes a VM
directory the qemu account can cross (``/var/tmp/vgrid-demo-vms-*``, removed at the end) and
yields ``{"driver": "libvirt", "vm_dir": ..., "vm_memory_mb": 128, "disk_quota_mb": 0}``.
The guest (Debian cloud kernel + busybox initramfs) is built once into /var/cache/vgrid/guest.
Errors: ``ServiceError`` saying why libvirt cannot run here.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager

from .services import ServiceError


@contextmanager
def vm_site(driver: str, console):
    if driver != "libvirt":
        yield {}
        return
    from vwn_agents.drivers.guest import GuestBuildError, build_guest
    from vwn_agents.drivers.libvirtd import LibvirtUnavailable, ensure_libvirtd
    try:
        daemons = ensure_libvirtd()
    except LibvirtUnavailable as exc:
        raise ServiceError(f"--driver libvirt: {exc}") from None
    vm_dir = tempfile.mkdtemp(prefix="vgrid-demo-vms-", dir="/var/tmp")
    try:
        os.chmod(vm_dir, 0o755)
        try:
            guest = build_guest("/var/cache/vgrid/guest")
        except GuestBuildError as exc:
            raise ServiceError(f"--driver libvirt: cannot build the guest: {exc}") from None
        console.print(f"libvirt VWNs: guest {guest.kernel_package} + busybox "
                      f"({'built' if guest.built else 'cached'} in {guest.kernel.parent}), VM files in {vm_dir}")
        yield {"driver": "libvirt", "vm_dir": vm_dir, "vm_memory_mb": 128, "disk_quota_mb": 0}
    finally:
        shutil.rmtree(vm_dir, ignore_errors=True)
        daemons.stop()
