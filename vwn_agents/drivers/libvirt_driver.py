"""libvirt VWNs: one qemu domain per VWN, driven through the libvirt API (libvirt-python).

Domain (``domain_xml``, built with lxml): type ``kvm`` when KVM is usable, else ``qemu`` (TCG,
software emulation; ``probe_kvm`` decides with a bounded boot, see below), ``VMMemory`` MB of
memory, one vCPU, direct kernel boot of the test guest (``guest``: Debian cloud kernel + busybox
initramfs with the job appended), serial port 0 = the guest console (``console.log``), serial
port 1 = the job channel (``channel.out``), optionally a disk (the qcow2 overlay of a VM image
in the node's pool, ``images.vwn_disk``; the guest mounts it at ``/image``), ``on_poweroff = destroy`` (transient domains: a powered-off
VWN disappears from libvirt).

CPU cap (seed 004, Section 5.1): ``<cputune><period>100000</period><quota>q</quota>`` with
``q = round(fraction * period)`` (at least 1000 µs, the kernel minimum; at most one period: a
VWN has one vCPU), changed live with ``setSchedulerParameters({"vcpu_quota", "vcpu_period"})``
on every arrival and departure and read back with ``schedulerParameters`` (``read_cap``).

Suspend (seed 000/002: suspension time = memory / rate) = pause, then save the memory image to
``<vm_dir>/<vwn>/memory.save`` on the node's disk (the domain stops); resume = restore from it
(running) and re-apply the current cap; each measures MB, seconds and MB/s (``last_save``,
``last_restore``), published by the node agent. Cold migration = ``export`` (save on node A: the
memory image + the VWN's files) and ``import_`` on node B (restore with the paths of B).

KVM (``probe_kvm``): /dev/kvm may exist and open, yet nested KVM guests hang (this machine); the
probe boots the guest with ``vgrid.probe`` under ``qemu-system-x86_64 -accel kvm`` directly and
waits at most ``timeout_s`` for its ``VGRID-PROBE-OK`` line; otherwise the driver uses TCG and
says why (``describe()["why"]``, e.g. "TCG: /dev/kvm present but unusable (no guest output in
10 s)").
"""
from __future__ import annotations

import logging
import re
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from .guest import Guest

log = logging.getLogger(__name__)

PERIOD_US = 100_000
MIN_QUOTA_US = 1000


class VMError(Exception):
    """A libvirt operation on a VWN's domain failed; the message names the VWN and libvirt's error."""


@dataclass
class Transfer:
    """One measured save or restore: ``mb`` (memory image, MB), ``seconds``, ``mb_s`` (MB/s)."""

    mb: float
    seconds: float

    @property
    def mb_s(self) -> float:
        return round(self.mb / self.seconds, 1) if self.seconds > 0 else 0.0

    def record(self) -> dict:
        return {"mb": round(self.mb, 1), "seconds": round(self.seconds, 3), "mb_s": self.mb_s}


def quota_us(fraction: float) -> int:
    """The vCPU quota (µs per 100 ms period) of a cap ``fraction`` of one core (clamped to
    [1000, 100000] µs: one vCPU)."""
    return max(MIN_QUOTA_US, min(PERIOD_US, round(fraction * PERIOD_US)))


def domain_xml(name: str, *, memory_mb: int, fraction: float, kernel: Path, initrd: Path,
               files: Path, kvm: bool, disk: Path | None = None, cmdline: str = "") -> str:
    """The libvirt domain XML of one VWN (module doc); ``files``: the VWN's directory (console.log,
    channel.out); ``disk``: a qcow2 overlay attached as virtio disk vda (``vgrid.disk`` on the
    kernel command line tells the guest agent to load virtio_blk and mount it), or None."""
    d = etree.Element("domain", type="kvm" if kvm else "qemu")
    etree.SubElement(d, "name").text = name
    etree.SubElement(d, "memory", unit="MiB").text = str(int(memory_mb))
    etree.SubElement(d, "vcpu").text = "1"
    os_ = etree.SubElement(d, "os")
    etree.SubElement(os_, "type", arch="x86_64", machine="pc").text = "hvm"
    etree.SubElement(os_, "kernel").text = str(kernel)
    etree.SubElement(os_, "initrd").text = str(initrd)
    if disk is not None:                       # the guest agent loads virtio_blk, mounts /image
        cmdline = f"{cmdline} vgrid.disk".strip()
    etree.SubElement(os_, "cmdline").text = f"console=ttyS0 quiet panic=-1 no_timer_check {cmdline}".strip()
    etree.SubElement(etree.SubElement(d, "features"), "acpi")
    tune = etree.SubElement(d, "cputune")
    etree.SubElement(tune, "period").text = str(PERIOD_US)
    etree.SubElement(tune, "quota").text = str(quota_us(fraction))
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        etree.SubElement(d, event).text = "destroy"
    dev = etree.SubElement(d, "devices")
    for port, fname in ((0, "console.log"), (1, "channel.out")):
        ser = etree.SubElement(dev, "serial", type="file")
        etree.SubElement(ser, "source", path=str(files / fname), append="on")
        etree.SubElement(ser, "target", port=str(port))
    if disk is not None:
        dk = etree.SubElement(dev, "disk", type="file", device="disk")
        etree.SubElement(dk, "driver", name="qemu", type="qcow2")
        etree.SubElement(dk, "source", file=str(disk))
        etree.SubElement(dk, "target", dev="vda", bus="virtio")
    etree.SubElement(dev, "memballoon", model="none")
    return etree.tostring(d, pretty_print=True).decode()


def probe_kvm(guest: Guest, timeout_s: float = 10.0) -> tuple[bool, str]:
    """(usable, why): boot ``guest`` under KVM with ``vgrid.probe`` (the agent powers off at
    once) and wait at most ``timeout_s`` for its line (module doc). Never raises."""
    if not os.path.exists("/dev/kvm"):
        return False, "TCG: no /dev/kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "TCG: /dev/kvm not accessible"
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        return False, "TCG: qemu-system-x86_64 missing"
    with tempfile.TemporaryDirectory(prefix="kvm-probe-") as tmp:
        out = Path(tmp) / "ch"
        argv = [qemu, "-accel", "kvm", "-M", "pc", "-m", "64", "-display", "none", "-no-reboot",
                "-kernel", str(guest.kernel), "-initrd", str(guest.initrd),
                "-append", "console=ttyS0 quiet no_timer_check vgrid.probe", "-serial", "null",
                "-serial", f"file:{out}", "-monitor", "none"]
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as exc:
            return False, f"TCG: /dev/kvm present but qemu cannot start: {exc}"
        deadline = time.monotonic() + timeout_s
        ok = False
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and b"VGRID-PROBE-OK" in out.read_bytes():
                ok = True
                break
            time.sleep(0.1)
        ok = ok or (out.exists() and b"VGRID-PROBE-OK" in out.read_bytes())
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        err = proc.stderr.read().decode(errors="replace").strip()[-200:] if proc.stderr else ""
    if ok:
        return True, "KVM"
    why = f"TCG: /dev/kvm present but unusable (no guest output in {timeout_s:g} s"
    return False, f"{why}; qemu: {err})" if err else f"{why})"


class LibvirtVMs:
    """The libvirt domains of one node agent's VWNs (module doc).

    ``uri``: libvirt URI; ``vm_dir``: where each VWN's files go (``<vm_dir>/<vwn>/``; every
    ancestor must be traversable by the qemu account); ``kvm``: use KVM (else TCG), ``why`` the
    probe's verdict. Raises VMError (with libvirt's message) on a failing libvirt call.
    """

    def __init__(self, uri: str, vm_dir: Path, guest: Guest, kvm: bool, why: str) -> None:
        import libvirt
        libvirt.registerErrorHandler(lambda *_: None, None)   # errors are raised, not printed
        self._lv = libvirt
        self.uri, self.vm_dir, self.guest, self.kvm, self.why = uri, Path(vm_dir), guest, kvm, why
        self.vm_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.vm_dir, 0o755)
        try:
            self.conn = libvirt.open(uri)
        except libvirt.libvirtError as exc:
            raise VMError(f"cannot connect to {uri}: {exc}") from None
        self.caps: dict[str, float] = {}      # vwn -> the cap it has (re-applied after restore)
        self.saved: set[str] = set()          # VWNs whose memory image is on disk (suspended)
        self.left: set[str] = set()           # VWNs migrated to another node (domain not ours)
        self.last_save: Transfer | None = None
        self.last_restore: Transfer | None = None
        self._lock = threading.RLock()

    # -- names and files ----------------------------------------------------------------------

    @staticmethod
    def name(vwn: str) -> str:
        """The libvirt domain name of ``vwn``."""
        return f"vgrid-{vwn}"

    def files(self, vwn: str) -> Path:
        return self.vm_dir / vwn

    def domain_name(self, vwn: str) -> str:
        """The name of ``vwn``'s domain: ``name(vwn)``, or for a VWN migrated here the name it had
        on its first node (a restore keeps it; recorded in ``<files>/domain-name``)."""
        try:
            return (self.files(vwn) / "domain-name").read_text().strip() or self.name(vwn)
        except OSError:
            return self.name(vwn)

    def _dom(self, vwn: str):
        """``vwn``'s domain, None when libvirt has none; VMError when libvirt cannot say (the
        daemon is down or restarting: one reconnection is tried)."""
        if vwn in self.left:                       # migrated away: its domain is not ours
            return None
        for attempt in (0, 1):
            try:
                return self.conn.lookupByName(self.domain_name(vwn))
            except self._lv.libvirtError as exc:
                if exc.get_error_code() == self._lv.VIR_ERR_NO_DOMAIN:
                    return None
                if attempt:
                    raise VMError(f"{vwn}: libvirt does not answer: {exc}") from None
                try:
                    self.conn = self._lv.open(self.uri)
                except self._lv.libvirtError:
                    pass
        return None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, vwn: str, job_cpio: bytes, memory_mb: int, fraction: float,
              disk: Path | None = None) -> int | None:
        """Create and boot ``vwn``'s transient domain with the job appended to the guest's
        initramfs; returns the qemu pid (None if unknown). VMError."""
        d, initrd = self.prepare(vwn, job_cpio)
        disk = self._root_disk(vwn, d, disk)
        xml = domain_xml(self.name(vwn), memory_mb=memory_mb, fraction=fraction,
                         kernel=self.guest.kernel, initrd=initrd, files=d, kvm=self.kvm, disk=disk)
        return self.create(vwn, d, xml, fraction)

    def prepare(self, vwn: str, cpio: bytes) -> tuple[Path, Path]:
        """Make ``vwn``'s file directory and its initramfs (the guest's with ``cpio``, a newc
        archive, appended); returns ``(directory, initrd path)``."""
        d = self.files(vwn)
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)
        initrd = d / "initrd"
        initrd.write_bytes(self.guest.initrd.read_bytes() + cpio)
        os.chmod(initrd, 0o644)                    # read by the qemu account
        for f in ("console.log", "channel.out"):
            (d / f).touch()
        return d, initrd

    def create(self, vwn: str, d: Path, xml: str, fraction: float) -> int | None:
        """Create and boot the transient domain ``xml`` of ``vwn`` (its copy kept in ``d``),
        capped at ``fraction`` (CPU fraction); returns the qemu pid (None if unknown). VMError."""
        (d / "domain.xml").write_text(xml)
        with self._lock:
            self.caps[vwn] = fraction
        try:                                       # not under the lock: a boot may take seconds
            self.conn.createXML(xml, 0)
        except self._lv.libvirtError as exc:
            raise VMError(f"{vwn}: cannot start its domain: {exc}") from None
        with self._lock:
            latest = self.caps.get(vwn, fraction)
        if latest != fraction:                     # readjusted while it booted
            self.set_cap(vwn, latest)
        return self.qemu_pid(vwn)

    def _root_disk(self, vwn: str, d: Path, disk: Path | None) -> Path | None:
        """The disk to boot ``vwn`` with: ``disk`` (a pool overlay, or None) for the busybox guest;
        for a guest with a root disk (the Debian guest) ``disk`` when the caller made its root
        overlay itself, else a new qcow2 overlay ``<files>/root.qcow2`` on the root disk (a cold
        migration moves it with the VWN's files). VMError: qemu-img failed."""
        root = getattr(self.guest, "disk", None)
        if root is None or disk is not None:
            return disk
        overlay = d / "root.qcow2"
        done = subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(root), "-F", "qcow2",
                               str(overlay)], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise VMError(f"{vwn}: cannot make its root overlay: {done.stderr.strip()[:300]}")
        os.chmod(overlay, 0o644)
        return overlay

    def qemu_pid(self, vwn: str) -> int | None:
        """The pid of ``vwn``'s qemu process (libvirt's pid file), None when not running."""
        try:
            return int(Path(f"/run/libvirt/qemu/{self.domain_name(vwn)}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def state(self, vwn: str) -> str:
        """"running", "paused", "saved" (memory image on disk: suspended), "gone" or "unknown"
        (libvirt does not answer: nothing is concluded)."""
        with self._lock:
            if vwn in self.saved:
                return "saved"
            try:
                dom = self._dom(vwn)
            except VMError:
                return "unknown"
            if dom is None:
                return "gone"
            try:
                st = dom.state()[0]
            except self._lv.libvirtError as exc:
                return "gone" if exc.get_error_code() == self._lv.VIR_ERR_NO_DOMAIN else "unknown"
            if st == self._lv.VIR_DOMAIN_PAUSED:
                return "paused"
            if st in (self._lv.VIR_DOMAIN_SHUTOFF, self._lv.VIR_DOMAIN_SHUTDOWN,
                      self._lv.VIR_DOMAIN_CRASHED):
                return "gone"
            return "running"

    def adopt(self, vwn: str) -> str:
        """After an agent restart: the state of ``vwn`` (its domain kept running under libvirtd;
        a memory image on disk means it was suspended)."""
        with self._lock:
            try:
                if (self.files(vwn) / "memory.save").exists() and self._dom(vwn) is None:
                    self.saved.add(vwn)
            except VMError:
                return "unknown"
            return self.state(vwn)

    def set_cap(self, vwn: str, fraction: float) -> None:
        """Cap ``vwn``'s vCPU at ``fraction`` of one core (live; remembered while it is saved). VMError."""
        with self._lock:
            self.caps[vwn] = fraction
            dom = self._dom(vwn)
            if dom is None:
                return
            try:
                dom.setSchedulerParametersFlags(
                    {"vcpu_period": PERIOD_US, "vcpu_quota": quota_us(fraction)},
                    self._lv.VIR_DOMAIN_AFFECT_LIVE)
            except self._lv.libvirtError as exc:
                if self._dom(vwn) is None:             # it powered off meanwhile
                    return
                raise VMError(f"{vwn}: cannot set its vCPU quota: {exc}") from None

    def read_cap(self, vwn: str) -> float | None:
        """The cap libvirt reports for ``vwn`` (vcpu_quota / vcpu_period), None when not running."""
        try:
            dom = self._dom(vwn)
        except VMError:
            return None
        if dom is None:
            return None
        try:
            p = dom.schedulerParameters()
        except self._lv.libvirtError:
            return None
        return p["vcpu_quota"] / p["vcpu_period"] if p.get("vcpu_period") else None

    def suspend(self, vwn: str) -> Transfer:
        """Pause ``vwn`` and save its memory image to the node's disk (the domain stops). VMError."""
        path = self.files(vwn) / "memory.save"
        with self._lock:
            dom = self._dom(vwn)
            if dom is None:
                raise VMError(f"{vwn}: no running domain to suspend")
            t0 = time.monotonic()
            try:
                if dom.state()[0] != self._lv.VIR_DOMAIN_PAUSED:
                    dom.suspend()
                self.saved.add(vwn)
                dom.save(str(path))
            except self._lv.libvirtError as exc:
                self.saved.discard(vwn)
                if dom.isActive():
                    try:
                        dom.resume()
                    except self._lv.libvirtError:
                        pass
                raise VMError(f"{vwn}: cannot save its memory image: {exc}") from None
            self.last_save = Transfer(path.stat().st_size / 1e6, time.monotonic() - t0)
            return self.last_save

    def resume(self, vwn: str, xml: str | None = None) -> Transfer:
        """Restore ``vwn`` from its memory image, running, with its current cap. VMError."""
        path = self.files(vwn) / "memory.save"
        with self._lock:
            if vwn not in self.saved and not path.exists():
                raise VMError(f"{vwn}: no memory image to restore")
            size = path.stat().st_size / 1e6
            t0 = time.monotonic()
            try:
                self.conn.restoreFlags(str(path), xml, self._lv.VIR_DOMAIN_SAVE_RUNNING)
            except self._lv.libvirtError as exc:
                raise VMError(f"{vwn}: cannot restore its memory image: {exc}") from None
            self.last_restore = Transfer(size, time.monotonic() - t0)
            self.saved.discard(vwn)
            path.unlink(missing_ok=True)
            if vwn in self.caps:
                self.set_cap(vwn, self.caps[vwn])
            return self.last_restore

    def destroy(self, vwn: str) -> None:
        """Stop ``vwn``'s domain at once (if any) and forget its memory image. Never raises."""
        with self._lock:
            self.saved.discard(vwn)
            try:
                dom = self._dom(vwn)
            except VMError as exc:
                log.warning("%s: destroy: %s", vwn, exc)
                dom = None
            if dom is not None:
                try:
                    dom.destroy()
                except self._lv.libvirtError as exc:
                    log.warning("%s: destroy: %s", vwn, exc)
            (self.files(vwn) / "memory.save").unlink(missing_ok=True)

    def remove(self, vwn: str) -> None:
        """Destroy ``vwn`` and delete its files (after it ended). Never raises."""
        self.destroy(vwn)
        self.caps.pop(vwn, None)
        shutil.rmtree(self.files(vwn), ignore_errors=True)

    # -- cold migration -----------------------------------------------------------------------

    def export(self, vwn: str) -> Path:
        """Cold migration, source side: ``vwn`` must be suspended (saved); its directory (memory
        image, initrd, channel, console) is what moves. VMError."""
        if self.state(vwn) != "saved":
            raise VMError(f"{vwn}: migrate needs a suspended VWN (memory image on disk)")
        return self.files(vwn)

    def import_(self, vwn: str, src: Path, src_vwn: str, fraction: float) -> tuple[float, Transfer]:
        """Cold migration, target side: copy ``src`` (another node's ``export`` of ``src_vwn``) to
        this node's ``vm_dir`` as ``vwn`` and restore it here, paths rewritten (libvirt keeps the
        domain's name: ``domain_name``), capped
        at ``fraction``; (copy seconds, the restore). VMError."""
        d = self.files(vwn)
        t0 = time.monotonic()
        shutil.copytree(src, d, dirs_exist_ok=True)
        copy_s = time.monotonic() - t0
        return copy_s, self.restore_moved(vwn, str(src), src_vwn, fraction)

    def restore_moved(self, vwn: str, src_dir: str, src_vwn: str, fraction: float,
                      rewrites: dict[str, str] | None = None) -> Transfer:
        """Cold migration, target side, once the files of ``src_vwn`` (another node's directory
        ``src_dir``) are in ``files(vwn)``: restore the VM here with every path of ``src_dir``
        rewritten to this node's directory and each key of ``rewrites`` (the pool overlay and its
        image: ``disk_handover.adopt``) to its value (libvirt keeps the domain's name:
        ``domain_name``), capped at ``fraction``. VMError."""
        d = self.files(vwn)
        os.chmod(d, 0o755)
        image = d / "memory.save"
        try:
            xml = self.conn.saveImageGetXMLDesc(str(image), 0)
        except self._lv.libvirtError as exc:
            raise VMError(f"{vwn}: unreadable memory image: {exc}") from None
        xml = xml.replace(src_dir, str(d))
        for old, new in (rewrites or {}).items():
            xml = xml.replace(f"'{old}'", f"'{new}'").replace(f'"{old}"', f'"{new}"')
        m = re.search(r"<name>([^<]+)</name>", xml)
        (d / "domain-name").write_text(m.group(1) if m else self.name(src_vwn))
        with self._lock:
            self.saved.add(vwn)
            self.caps[vwn] = fraction
        try:
            return self.resume(vwn, xml)
        except VMError:
            self.saved.discard(vwn)
            raise

    def close(self) -> None:
        try:
            self.conn.close()
        except self._lv.libvirtError:
            pass
