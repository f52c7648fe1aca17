"""A richer libvirt guest: a Debian root file system (debootstrap) with python3 and systemd as its
init, on a virtio disk (issue 14; the busybox guest of ``guest`` stays the light default).

``build_debian_guest(cache_dir)`` (``vgrid guest build-debian``) builds, once, under
``cache_dir/<key>/`` (key: suite, mirror, kernel package, package list, agent and init):

* ``rootfs.qcow2``: ``debootstrap --variant=minbase --include=python3,systemd-sysv``
  from the Debian mirror configured on this machine (``configured_mirror``: the first ``deb``
  source of /etc/apt/sources.list and sources.list.d, one-line or deb822; never another
  source), plus the guest account ``vgrid`` (uid 1000), a python3 guest agent
  (``/usr/local/sbin/vgrid-agent``) started by systemd (``vgrid-agent.service``, wanted by
  ``multi-user.target``), the serial gettys masked; packed into an ext4 image with
  ``mkfs.ext4 -d`` (no loop mount, no root-only mount) and converted to qcow2. A VM boots from
  a qcow2 overlay on it (its writes never touch the cached image).
* ``vmlinuz``: the same Debian cloud kernel as the busybox guest;
* ``initrd.gz``: busybox + the kernel's ``virtio``/``virtio_pci``/``virtio_blk`` modules (their
  ``depends=`` read from the .ko files) + an ``/init`` that loads them, mounts ``/dev/vda``,
  copies the job archive the node agent appended (``/job``, as for the busybox guest) onto
  the root file system and ``switch_root``s to ``/sbin/init`` (systemd).

The job channel is the busybox guest's (``guest`` module doc): the agent, in python3, writes
``VGRID-RUNNING``, ``VGRID-PROGRESS``, ``VGRID-RESULT``, the output files as a base64 tar between
``VGRID-FILES`` and ``VGRID-END`` on ``/dev/ttyS1``, then powers off; ``guest.parse_channel``
reads it. The job runs as ``vgrid`` (uid 1000), never as root.

Cost here (2 shared cores, load about 25): the build 398 s wall (debootstrap 300 s) and 47 s of
CPU, ``rootfs.qcow2`` 254 MB; a boot under TCG with 128 MB to the agent 51 s (docs/vwn.md).
Errors: ``GuestBuildError``
naming the failing step (no mirror configured, debootstrap or mkfs.ext4 missing or failing).
"""
from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .guest import BUSYBOX, GuestBuildError, _run, build_guest, cpio_newc, kernel_package, publish

SUITE = "bookworm"
PACKAGES = ("python3", "systemd-sysv")
MODULES = ("virtio_pci", "virtio_blk")

INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod /modules/$m.ko || echo "vgrid-init: insmod $m failed"; done
i=0; while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
mkdir -p /newroot
mount -t ext4 /dev/vda /newroot || { echo "vgrid-init: no root disk"; poweroff -f; }
rm -rf /newroot/job; cp -a /job /newroot/job
umount /proc /sys
mount --move /dev /newroot/dev 2>/dev/null || umount /dev
exec switch_root /newroot /sbin/init
"""

AGENT = r'''#!/usr/bin/python3
"""vgrid guest agent (python3, started by systemd): runs /job/run.sh as vgrid, reports on ttyS1."""
import base64, io, os, pwd, subprocess, tarfile, termios, time, tty

out = open("/dev/ttyS1", "wb", buffering=0)
try:
    tty.setraw(out.fileno())
except termios.error:
    pass
def say(line):
    out.write(line.encode() + b"\n")
os.system("chown -R 1000:1000 /job/work")
os.chdir("/job/work")
say("VGRID-RUNNING")
vgrid = pwd.getpwnam("vgrid")
def drop():
    os.setgroups([]); os.setgid(vgrid.pw_gid); os.setuid(vgrid.pw_uid)
env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/job/work", "USER": "vgrid", "LANG": "C.UTF-8"}
job = subprocess.Popen(["/bin/sh", "/job/run.sh"], preexec_fn=drop, env=env)
try:
    stdout = open("/job/stdout").read().strip()
except OSError:
    stdout = ""
while job.poll() is None:
    if stdout and os.path.isfile(stdout):
        say(f"VGRID-PROGRESS {os.path.getsize(stdout)}")
    time.sleep(1)
say(f"VGRID-RESULT {job.returncode}")
say("VGRID-FILES")
names = [n for n in open("/job/outputs").read().split("\n") if n and os.path.lexists(n)]
if names:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for n in names:
            tar.add(n)
    out.write(base64.encodebytes(buf.getvalue()))
say("VGRID-END")
os.sync()
os.system("systemctl poweroff --force --force")
'''

UNIT = """[Unit]
Description=vgrid guest agent (runs the job, reports on ttyS1)
After=local-fs.target

[Service]
Type=simple
ExecStart=/usr/local/sbin/vgrid-agent
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
"""


@dataclass(frozen=True)
class DebianGuest:
    """A built Debian guest: ``kernel``, ``initrd`` (the root switcher), ``disk`` (the root file
    system, qcow2; boot a VM from an overlay on it), ``key``, ``built`` (False: from the cache)."""

    kernel: Path
    initrd: Path
    disk: Path
    key: str
    built: bool


def configured_mirror(paths=("/etc/apt/sources.list", "/etc/apt/sources.list.d")) -> str:
    """The first Debian mirror URL of this machine's APT sources (one-line ``deb URL suite ...``
    or deb822 ``URIs:`` with ``Types: deb``), skipping security archives. GuestBuildError if none."""
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(p.glob("*.list")) + sorted(p.glob("*.sources")) if p.is_dir() else [p] if p.exists() else []
    for f in files:
        text = f.read_text(errors="replace")
        for m in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s", text, re.M):
            if "security" not in m.group(1):
                return m.group(1)
        for stanza in re.split(r"\n\s*\n", text):
            types = re.search(r"^Types:\s*(.*)$", stanza, re.M)
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            if types and uris and "deb" in types.group(1).split() and "security" not in uris.group(1):
                return uris.group(1)
    raise GuestBuildError("no Debian mirror configured in /etc/apt/sources.list(.d)")


def module_order(moddir: Path, wanted=MODULES) -> list[Path]:
    """The .ko files of ``wanted`` and their dependencies (``depends=`` of each .ko's modinfo),
    dependencies first. GuestBuildError for a module not found."""
    files = {p.stem: p for p in moddir.rglob("*.ko")}
    order: list[Path] = []

    def visit(name: str) -> None:
        name = name.replace("-", "_")
        p = files.get(name)
        if p is None:
            raise GuestBuildError(f"kernel module {name}.ko not found under {moddir}")
        if p in order:
            return
        m = re.search(rb"depends=([\w,-]*)\x00", p.read_bytes())
        for dep in (m.group(1).decode().split(",") if m and m.group(1) else []):
            visit(dep)
        order.append(p)

    for w in wanted:
        visit(w)
    return order


def _initramfs(modules: list[Path]) -> bytes:
    d, x, r = stat.S_IFDIR | 0o755, stat.S_IFREG | 0o755, stat.S_IFREG | 0o644
    entries = [(n, d, b"") for n in ("bin", "dev", "proc", "sys", "tmp", "job", "sbin", "modules", "newroot")]
    entries += [("dev/console", stat.S_IFCHR | 0o600, b"5,1"), ("bin/busybox", x, Path(BUSYBOX).read_bytes()),
                ("init", x, INIT.encode()),
                ("modules.order", r, "\n".join(p.stem for p in modules).encode() + b"\n")]
    entries += [(f"modules/{p.stem}.ko", r, p.read_bytes()) for p in modules]
    packed = gzip.compress(cpio_newc(entries), mtime=0)
    return packed + b"\0" * (-len(packed) % 512)


def _customize(root: Path) -> None:
    """Account, agent, unit, no serial gettys (ttyS0 is the console log, ttyS1 the channel)."""
    with open(root / "etc/passwd", "a") as f:
        f.write("vgrid:x:1000:1000:vgrid job:/job/work:/bin/sh\n")
    with open(root / "etc/group", "a") as f:
        f.write("vgrid:x:1000:\n")
    with open(root / "etc/shadow", "a") as f:
        f.write("vgrid:!:19000:0:99999:7:::\n")
    agent = root / "usr/local/sbin/vgrid-agent"
    agent.parent.mkdir(parents=True, exist_ok=True)
    agent.write_text(AGENT)
    agent.chmod(0o755)
    sysd = root / "etc/systemd/system"
    (sysd / "vgrid-agent.service").write_text(UNIT)
    wants = sysd / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "vgrid-agent.service").symlink_to("/etc/systemd/system/vgrid-agent.service")
    for unit in ("serial-getty@ttyS0.service", "serial-getty@ttyS1.service", "getty@tty1.service",
                 "systemd-timesyncd.service", "apt-daily.timer", "apt-daily-upgrade.timer"):
        (sysd / unit).unlink(missing_ok=True)
        (sysd / unit).symlink_to("/dev/null")
    (root / "etc/hostname").write_text("vgrid-guest\n")
    (root / "etc/fstab").write_text("/dev/vda / ext4 defaults 0 1\n")


def build_debian_guest(cache_dir: str | Path, suite: str = SUITE, mirror: str | None = None,
                       progress=lambda step: None) -> DebianGuest:
    """Module doc; ``progress(step)`` is told each step. GuestBuildError naming the step."""
    mirror = mirror or configured_mirror()
    for tool in ("debootstrap", "mkfs.ext4", "qemu-img"):
        if shutil.which(tool) is None:
            raise GuestBuildError(f"{tool} missing: install debootstrap, e2fsprogs and qemu-utils")
    package, version = kernel_package()
    key = hashlib.sha256(f"{suite}|{mirror}|{package}={version}|{PACKAGES}|{INIT}|{AGENT}|{UNIT}".encode()
                         ).hexdigest()[:16]
    where = Path(cache_dir) / f"debian-{key}"
    kernel, initrd, disk = where / "vmlinuz", where / "initrd.gz", where / "rootfs.qcow2"
    if kernel.exists() and initrd.exists() and disk.exists():
        return DebianGuest(kernel, initrd, disk, key, False)
    base = build_guest(cache_dir)
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="debian-guest-", dir=where.parent))
    try:
        os.chmod(tmp, 0o777)                       # apt-get download runs as _apt
        progress("kernel modules")
        _run(["apt-get", "download", f"{package}={version}"], cwd=str(tmp))
        deb = next(tmp.glob(f"{package}_*.deb"), None)
        if deb is None:
            raise GuestBuildError(f"apt-get download {package}: no .deb")
        _run(["dpkg-deb", "-x", str(deb), str(tmp / "k")])
        mods = module_order(next((tmp / "k" / "lib" / "modules").iterdir()))
        out = tmp / "out"
        out.mkdir()
        (out / "initrd.gz").write_bytes(_initramfs(mods))
        shutil.copyfile(base.kernel, out / "vmlinuz")
        progress(f"debootstrap {suite} from {mirror}")
        root = tmp / "root"
        try:
            _run_long(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite,
                       str(root), mirror])
        except GuestBuildError as exc:
            raise GuestBuildError(f"debootstrap from {mirror}: {exc}") from None
        _customize(root)
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        progress("ext4 image")
        _run_long(["mkfs.ext4", "-q", "-F", "-L", "vgridroot", "-d", str(root), str(tmp / "root.img"), "600M"])
        _run_long(["qemu-img", "convert", "-O", "qcow2", str(tmp / "root.img"), str(out / "rootfs.qcow2")])
        publish(out, where, disk)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return DebianGuest(kernel, initrd, disk, key, True)


def _run_long(argv: list[str]) -> None:
    import subprocess
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GuestBuildError(f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise GuestBuildError(f"{' '.join(argv[:3])}...: {(done.stderr or done.stdout).strip()[-400:]}")
