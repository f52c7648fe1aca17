"""Start and stop ``libvirtd`` and ``virtlogd`` where no init system runs (tests, the demo).

``ensure_libvirtd()`` connects to ``qemu:///system`` if a daemon answers; otherwise it starts
``virtlogd`` and ``libvirtd`` (``--daemon``, their pid files in /run) and waits (bounded) until
the system socket answers. It returns a ``Daemons`` whose ``stop()`` SIGTERMs exactly the
processes it started (by the pid they wrote), nothing else. ``LibvirtUnavailable`` says why the
daemon cannot run here (not installed, it exits at once, no answer within the deadline).

``kvm_device_access()`` (called by ``ensure_libvirtd``) gives ``/dev/kvm`` Debian's permissions
(group ``kvm``, mode 0660: udev's rule, which a machine without udev never applied). Without them
libvirt 9 re-probes qemu on every capabilities lookup: its probe (run with root's privileges)
finds KVM enabled, then ``virQEMUCapsIsValid`` finds ``/dev/kvm`` closed to the qemu account
("KVM was enabled when probing ..., but it is not available now"), drops the cache and probes
again, about a dozen times per ``createXML``: a 0.4 s VM start took 48 s (session 11). vgrid's
domains still run under TCG when KVM does not work (``libvirt_driver.probe_kvm``).
"""
from __future__ import annotations

import grp
import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

URI = "qemu:///system"
KVM_DEVICE = "/dev/kvm"
PIDS = {"virtlogd": "/run/virtlogd.pid", "libvirtd": "/run/libvirtd.pid"}


class LibvirtUnavailable(Exception):
    """libvirt (or its Python binding, or qemu) cannot run on this machine; the message says why."""


@dataclass
class Daemons:
    """The daemons ``ensure_libvirtd`` started (name -> pid); empty when one already ran."""

    started: dict = field(default_factory=dict)
    uri: str = URI

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM the daemons started here (libvirtd first) and wait for them (bounded); left
        running while libvirtd still has active domains (someone else's, started meanwhile)."""
        if "libvirtd" in self.started and _active_domains(self.uri):
            return
        for name in ("libvirtd", "virtlogd"):
            pid = self.started.pop(name, None)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _active_domains(uri: str) -> int:
    """How many domains run on ``uri`` (0 when it cannot be asked)."""
    try:
        import libvirt
        conn = libvirt.open(uri)
    except Exception:  # noqa: BLE001 - ImportError, libvirtError: nothing to protect
        return 0
    try:
        return len(conn.listDomainsID())
    finally:
        conn.close()


def _answers(uri: str) -> str | None:
    """None when ``uri`` answers, else why not."""
    try:
        import libvirt
    except ImportError:
        return "the Python binding libvirt-python is not installed (pip install vgrid[libvirt])"
    libvirt.registerErrorHandler(lambda *_: None, None)      # raised below, not printed
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as exc:
        return str(exc)
    conn.close()
    return None


def kvm_device_access(path: str = KVM_DEVICE, group: str = "kvm") -> str | None:
    """Give the KVM device ``path`` group ``group`` and mode 0660 when it is closed to that
    group (module doc); returns what was changed (None: nothing, the device is missing, the
    group does not exist, or we may not change it). Never raises."""
    try:
        st = os.stat(path)
        gid = grp.getgrnam(group).gr_gid
    except (OSError, KeyError):
        return None
    if st.st_gid == gid and st.st_mode & 0o060 == 0o060:
        return None
    old = st.st_mode & 0o7777
    try:
        os.chown(path, -1, gid)
        os.chmod(path, old | 0o660)
    except OSError:
        return None
    return f"{path}: group {group}, mode {old | 0o660:o} (was gid {st.st_gid}, mode {old:o})"


def ensure_libvirtd(uri: str = URI, timeout_s: float = 30.0) -> Daemons:
    """A libvirt daemon answering on ``uri`` (module doc); LibvirtUnavailable."""
    changed = kvm_device_access()
    if changed:
        log.info("libvirt: %s (Debian's udev rule; libvirt re-probes qemu without it)", changed)
    why = _answers(uri)
    if why is None:
        return Daemons()
    if "libvirt-python" in why:
        raise LibvirtUnavailable(why)
    if shutil.which("qemu-system-x86_64") is None:
        raise LibvirtUnavailable("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
    daemons = Daemons(uri=uri)
    for name in ("virtlogd", "libvirtd"):
        exe = shutil.which(name) or f"/usr/sbin/{name}"
        if not os.path.exists(exe):
            raise LibvirtUnavailable(f"{name} is not installed (apt-get install libvirt-daemon-system)")
        done = subprocess.run([exe, "--daemon"], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            daemons.stop()
            raise LibvirtUnavailable(f"{name} --daemon failed: {done.stderr.strip()[-300:]}")
        deadline = time.monotonic() + timeout_s
        pid = None
        while time.monotonic() < deadline and pid is None:
            try:
                pid = int(open(PIDS[name]).read().strip())
            except (OSError, ValueError):
                time.sleep(0.05)
        if pid is not None:
            daemons.started[name] = pid
    deadline = time.monotonic() + timeout_s
    while (why := _answers(uri)) is not None:
        if time.monotonic() > deadline:
            daemons.stop()
            raise LibvirtUnavailable(f"libvirtd started but {uri} does not answer: {why}")
        time.sleep(0.1)
    return daemons
