"""The test guest of libvirt VWNs, built from Debian packages only, and its job channel.

Guest (``build_guest``): the Debian cloud kernel (``linux-image-cloud-amd64``; its ``vmlinuz``
is unpacked with ``apt-get download`` + ``dpkg-deb -x``, never installed) and an initramfs made
here (newc cpio, gzip) holding ``busybox`` from ``busybox-static``, ``/init`` and the guest agent
``/agent.sh``. Both are built once into ``cache_dir/<key>/`` where the key hashes the kernel
package version, the busybox binary and the agent script; a second build is a cache hit.

Channel: *in* is a second cpio archive appended to the initramfs (the kernel unpacks concatenated
archives), ``job_archive``: ``/job/run.sh`` (the job as a shell script: Environment exported,
Executable + Arguments quoted, StdInput/StdOutput/StdError redirections), ``/job/work/`` (the
input sandbox) and ``/job/outputs`` (what to send back). *Out* is the guest's second serial port
``ttyS1``, a file on the host (``channel.out``): the guest agent writes ``VGRID-RUNNING``, then
``VGRID-PROGRESS <bytes of StdOutput>`` every second, then ``VGRID-RESULT <exit code>`` and the
output files as a base64 tar between ``VGRID-FILES`` and ``VGRID-END``, and powers off. No guest
module, network or share is needed, and a saved/restored or migrated guest keeps its channel
(qemu refuses to save a guest with a mounted 9p share). The job runs as the unprivileged guest
account ``vgrid`` (uid 1000), never as root (busybox ``su``).

Disk (``vgrid.disk`` on the kernel command line: the domain has a virtio disk, the qcow2 overlay
of an image in the node's pool): the initramfs carries ``virtio_pci`` and ``virtio_blk`` from
the same kernel package with the modules they depend on (``disk_modules``: read from each
module's ``depends=`` modinfo, loaded in dependency order with busybox ``insmod``); the agent
waits for ``/dev/vda`` (at most 10 s) and mounts it at ``/image`` (``nosuid,nodev``; ext2/3/4 are
built into the cloud kernel). An image without a filesystem is left as the raw device, readable
by the job (e.g. ``tar -xf /dev/vda``). It reports ``VGRID-DISK mounted|raw|absent`` on the
channel before ``VGRID-RUNNING``. Writes go to the overlay, never to the pooled image.
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

KERNEL_META = "linux-image-cloud-amd64"
#: the kernel modules a guest with a disk needs (their dependencies are added, ``disk_modules``)
DISK_MODULES = ("virtio_pci", "virtio_blk")
BUSYBOX = "/bin/busybox"
GUEST_UID = 1000

INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
exec /bin/sh /agent.sh
"""

#: Shell fragment of both busybox guest agents (this one-job ``AGENT`` and the VOC guest's
#: ``guest_serve.SERVE_AGENT``), with ``$out`` the channel: when booted with ``vgrid.disk``, load
#: the disk modules, wait for ``/dev/vda`` (at most 10 s) and mount it at ``/image`` (module doc).
DISK_SH = r"""if grep -q vgrid.disk /proc/cmdline; then
  for m in $(cat /lib/modules/order); do insmod /lib/modules/$m.ko 2>/dev/null; done
  n=0; while [ ! -b /dev/vda ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done
  mkdir -p /image
  if [ ! -b /dev/vda ]; then echo "VGRID-DISK absent" > $out
  elif mount -o nosuid,nodev /dev/vda /image 2>/dev/null; then echo "VGRID-DISK mounted" > $out
  else chown 1000:1000 /dev/vda; echo "VGRID-DISK raw" > $out; fi
fi
"""

#: Shell fragment of both busybox guest agents: run the unpacked ``/job`` (``job_archive``) as
#: ``vgrid`` (uid 1000) in ``/job/work``, report ``VGRID-PROGRESS`` every second, kill whatever
#: of the account's processes outlive the job, then report ``VGRID-RESULT``, ``VGRID-FILES``,
#: the outputs (base64 tar) and ``VGRID-END`` on ``$out``.
JOB_SH = r"""chown -R 1000:1000 /job/work
cd /job/work
su -s /bin/sh vgrid -c 'exec sh /job/run.sh' &
pid=$!
stdout=$(cat /job/stdout 2>/dev/null)
while kill -0 $pid 2>/dev/null; do
  if [ -n "$stdout" ] && [ -f "$stdout" ]; then echo "VGRID-PROGRESS $(wc -c < "$stdout")" > $out; fi
  sleep 1
done
wait $pid
code=$?
su -s /bin/sh vgrid -c 'kill -9 -1' 2>/dev/null
echo "VGRID-RESULT $code" > $out
echo VGRID-FILES > $out
files=""
while read -r f; do [ -e "$f" ] && files="$files $f"; done < /job/outputs
if [ -n "$files" ]; then tar -cf - $files | base64 > $out; fi
echo VGRID-END > $out
"""

AGENT = r"""# vgrid guest agent (busybox sh): runs /job/run.sh, reports on ttyS1, powers off.
out=/dev/ttyS1
stty -F $out raw -echo 2>/dev/null
if grep -q vgrid.probe /proc/cmdline; then echo VGRID-PROBE-OK > $out; sync; poweroff -f; fi
""" + DISK_SH + "echo VGRID-RUNNING > $out\n" + JOB_SH + """umount /image 2>/dev/null
sync
poweroff -f
"""

MARKERS = ("VGRID-DISK", "VGRID-RUNNING", "VGRID-PROGRESS", "VGRID-RESULT", "VGRID-FILES", "VGRID-END")


class GuestBuildError(Exception):
    """The guest could not be built (apt, dpkg-deb, busybox missing); the message says which."""


@dataclass(frozen=True)
class Guest:
    """A built guest: ``kernel`` (vmlinuz) and ``initrd`` (base initramfs), ``key`` (cache key),
    ``kernel_package`` (name=version), ``built`` (False: taken from the cache)."""

    kernel: Path
    initrd: Path
    key: str
    kernel_package: str
    built: bool


def _run(argv: list[str], cwd: str | None = None) -> str:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GuestBuildError(f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise GuestBuildError(f"{' '.join(argv)}: {done.stderr.strip()[-400:]}")
    return done.stdout


def kernel_package() -> tuple[str, str]:
    """(package, version) of the kernel ``linux-image-cloud-amd64`` depends on (apt-cache)."""
    show = _run(["apt-cache", "show", "--no-all-versions", KERNEL_META])
    m = re.search(r"^Depends:.*?(linux-image-[\w.+-]+-cloud-amd64)", show, re.M)
    v = re.search(r"^Version: (\S+)", show, re.M)
    if not m or not v:
        raise GuestBuildError(f"apt-cache show {KERNEL_META}: no kernel dependency found")
    return m.group(1), v.group(1)


def cpio_newc(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A newc cpio archive of ``(name, mode, data)`` entries (mode with the file type bits;
    a character device's data is ``b"major,minor"``), with the trailer."""
    out = io.BytesIO()
    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], 1):
        rmaj = rmin = 0
        if stat.S_ISCHR(mode):
            rmaj, rmin = (int(x) for x in data.split(b","))
            data = b""
        nm = name.encode() + b"\0"
        head = "070701" + "".join(f"{x:08X}" for x in (
            ino, mode, 0, 0, 2 if stat.S_ISDIR(mode) else 1, 0, len(data), 0, 0, rmaj, rmin,
            len(nm), 0))
        out.write(head.encode() + nm)
        out.write(b"\0" * (-(110 + len(nm)) % 4))
        out.write(data)
        out.write(b"\0" * (-len(data) % 4))
    return out.getvalue()


def disk_modules(tree: Path, wanted=DISK_MODULES) -> list[tuple[str, bytes]]:
    """``[(name, .ko bytes)]`` of the ``wanted`` kernel modules under ``tree`` (an unpacked
    kernel package's ``lib/modules/<version>``) and of every module they depend on (each
    module's ``depends=`` modinfo string), dependencies first: the ``insmod`` order.
    GuestBuildError naming a module that is missing (compressed ``.ko.xz`` is not handled)."""
    files = {p.name.removesuffix(".ko").replace("-", "_"): p for p in Path(tree).rglob("*.ko")}
    order: list[tuple[str, bytes]] = []
    seen: set[str] = set()

    def add(name: str, path: tuple) -> None:
        name = name.replace("-", "_")
        if name in seen:
            return
        if name in path:
            raise GuestBuildError(f"kernel module dependency cycle: {' -> '.join((*path, name))}")
        if name not in files:
            raise GuestBuildError(f"kernel module {name}.ko not in {tree}")
        data = files[name].read_bytes()
        m = re.search(rb"(?:^|\0)depends=([\w,-]*)\0", data)
        for dep in (m.group(1).decode().split(",") if m and m.group(1) else []):
            add(dep, (*path, name))
        seen.add(name)
        order.append((name, data))

    for w in wanted:
        add(w, ())
    return order


def base_initramfs(modules: list[tuple[str, bytes]] = ()) -> bytes:
    """The guest's initramfs (gzip'd newc cpio): busybox, /init, /agent.sh, the ``vgrid``
    account, and ``modules`` (``disk_modules``) as ``/lib/modules/<name>.ko`` with their load
    order in ``/lib/modules/order``. GuestBuildError without busybox-static."""
    if not os.path.exists(BUSYBOX):
        raise GuestBuildError(f"{BUSYBOX} missing: install busybox-static")
    d, x = stat.S_IFDIR | 0o755, stat.S_IFREG | 0o755
    entries = [(n, d, b"") for n in ("bin", "dev", "proc", "sys", "tmp", "etc", "job", "sbin",
                                     "lib", "lib/modules")]
    entries += [(f"lib/modules/{n}.ko", stat.S_IFREG | 0o644, data) for n, data in modules]
    entries.append(("lib/modules/order", stat.S_IFREG | 0o644, "".join(f"{n}\n" for n, _ in modules).encode()))
    entries += [("dev/console", stat.S_IFCHR | 0o600, b"5,1"),
                ("bin/busybox", x, Path(BUSYBOX).read_bytes()),
                ("init", x, INIT.encode()), ("agent.sh", stat.S_IFREG | 0o644, AGENT.encode()),
                ("etc/passwd", stat.S_IFREG | 0o644,
                 b"root:x:0:0:root:/:/bin/sh\nvgrid:x:1000:1000:vgrid job:/job/work:/bin/sh\n"),
                ("etc/group", stat.S_IFREG | 0o644, b"root:x:0:\nvgrid:x:1000:\n")]
    packed = gzip.compress(cpio_newc(entries), mtime=0)
    return packed + b"\0" * (-len(packed) % 512)     # the appended job archive starts aligned


def build_guest(cache_dir: str | Path) -> Guest:
    """The guest kernel + base initramfs under ``cache_dir/<key>/``, built if not cached (module
    doc; about 30 MB downloaded once). GuestBuildError names the failing step."""
    package, version = kernel_package()
    bb = hashlib.sha256(Path(BUSYBOX).read_bytes()).hexdigest() if os.path.exists(BUSYBOX) else "-"
    key = hashlib.sha256(f"{package}={version}|{bb}|{INIT}|{AGENT}|{DISK_MODULES}".encode()).hexdigest()[:16]
    where = Path(cache_dir) / key
    kernel, initrd = where / "vmlinuz", where / "initrd.gz"
    if kernel.exists() and initrd.exists():
        return Guest(kernel, initrd, key, f"{package}={version}", False)
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="guest-", dir=where.parent))
    try:
        os.chmod(tmp, 0o777)                       # apt-get download runs as _apt
        _run(["apt-get", "download", f"{package}={version}"], cwd=str(tmp))
        debs = list(tmp.glob(f"{package}_*.deb"))
        if not debs:
            raise GuestBuildError(f"apt-get download {package}: no .deb")
        _run(["dpkg-deb", "-x", str(debs[0]), str(tmp / "x")])
        vmlinuz = next((tmp / "x" / "boot").glob("vmlinuz-*"), None)
        if vmlinuz is None:
            raise GuestBuildError(f"{debs[0].name}: no /boot/vmlinuz-*")
        out = tmp / "out"
        out.mkdir()
        shutil.copyfile(vmlinuz, out / "vmlinuz")
        trees = list((tmp / "x" / "lib" / "modules").glob("*"))
        if not trees:
            raise GuestBuildError(f"{debs[0].name}: no /lib/modules/<version>")
        (out / "initrd.gz").write_bytes(base_initramfs(disk_modules(trees[0])))
        publish(out, where, kernel)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Guest(kernel, initrd, key, f"{package}={version}", True)


def publish(out: Path, where: Path, marker: Path) -> None:
    """Make a finished build directory ``out`` readable by the qemu account and move it to its
    cache place ``where`` in one rename; a concurrent build that got there first (``marker``,
    one of its files, exists) wins, else the OSError propagates."""
    for f in out.iterdir():
        os.chmod(f, 0o644)
    os.chmod(out, 0o755)
    try:
        os.rename(out, where)
    except OSError:
        if not marker.exists():
            raise


def job_script(spec: dict) -> str:
    """``/job/run.sh`` for the wrapper spec ``spec`` (``vwn_agents.wrapper`` fields): the JDL
    Environment exported (``$NAME`` expanded as the wrapper does), the Executable with its
    Arguments, the std files redirected. ValueError with the wrapper's message on bad input."""
    from ..wrapper import WrapperError, job_environment, split_arguments
    try:
        env = job_environment(spec.get("environment") or [], "/job/work", spec.get("job_id", ""))
        args = split_arguments(spec.get("arguments", ""))
    except WrapperError as exc:
        raise ValueError(str(exc)) from None
    env.pop("LANG", None)
    exe = spec.get("executable") or ""
    if not exe:
        raise ValueError("Executable is empty")
    if exe.startswith("/"):
        prep = f"exe={shlex.quote(exe)}"
    else:                                      # a sandbox file (made executable), else on PATH
        q = shlex.quote(exe)
        prep = (f"if [ -f {q} ]; then chmod u+x {q}; exe={shlex.quote('./' + exe)}; "
                f"else exe={q}; fi")
    lines = ["cd /job/work", *(f"export {k}={shlex.quote(v)}" for k, v in env.items()), prep]
    redir = f" < {shlex.quote(spec['std_input'])}" if spec.get("std_input") else " < /dev/null"
    out, err = spec.get("std_output"), spec.get("std_error")
    redir += f" >> {shlex.quote(out)}" if out else " > /dev/null"
    redir += " 2>&1" if err and err == out else (f" 2>> {shlex.quote(err)}" if err else " 2> /dev/null")
    lines.append(f'exec "$exe" {" ".join(shlex.quote(a) for a in args)}{redir}')
    return "\n".join(lines) + "\n"


def job_archive(spec: dict, workdir: Path, outputs: list[str]) -> bytes:
    """The appended initramfs archive carrying the job (module doc): ``run.sh``, the files of
    ``workdir`` (the staged input sandbox, plain files), the ``outputs`` to send back
    (StdOutput, StdError, OutputSandbox names). ValueError on a bad spec."""
    d, f = stat.S_IFDIR | 0o755, stat.S_IFREG | 0o644
    entries = [("job", d, b""), ("job/work", d, b""),
               ("job/run.sh", f, job_script(spec).encode()),
               ("job/outputs", f, "".join(f"{o}\n" for o in outputs).encode()),
               ("job/stdout", f, (spec.get("std_output") or "").encode())]
    for p in sorted(Path(workdir).rglob("*")):
        rel = p.relative_to(workdir).as_posix()
        if p.is_dir() and not p.is_symlink():
            entries.append((f"job/work/{rel}", d, b""))
        elif p.is_file() and not p.is_symlink():
            entries.append((f"job/work/{rel}", stat.S_IFREG | (p.stat().st_mode & 0o777), p.read_bytes()))
    return cpio_newc(entries)


@dataclass
class ChannelState:
    """What the guest said so far on its channel (``parse_channel``): ``running``, ``progress``
    (bytes of StdOutput), ``disk`` (what the guest made of its disk), ``exit_code`` (None until VGRID-RESULT), ``files`` (name -> bytes,
    once VGRID-END arrived), ``complete``."""

    running: bool = False
    disk: str | None = None          # "mounted", "raw", "absent" (VGRID-DISK), None: no disk
    progress: int = 0
    exit_code: int | None = None
    files: dict | None = None
    complete: bool = False


def parse_channel(data: bytes) -> ChannelState:
    """Parse the host side of the channel (``channel.out``). Serial line noise (``\\r``) is
    ignored; a base64 tar that does not decode leaves ``files`` empty (complete all the same)."""
    st = ChannelState()
    text = data.decode("latin-1").replace("\r", "")
    body: list[str] | None = None
    for line in text.split("\n"):
        line = line.strip()
        if body is not None and line != "VGRID-END":
            body.append(line)
        elif line == "VGRID-RUNNING":
            st.running = True
        elif line.startswith("VGRID-DISK ") and line.split()[1] in ("mounted", "raw", "absent"):
            st.disk = line.split()[1]
        elif line.startswith("VGRID-PROGRESS "):
            st.progress = int(line.split()[1]) if line.split()[1].isdigit() else st.progress
        elif line.startswith("VGRID-RESULT "):
            val = line.split()[1]
            st.exit_code = int(val) if val.isdigit() else None
        elif line == "VGRID-FILES":
            body = []
        elif line == "VGRID-END" and body is not None:
            st.files, st.complete = _untar("".join(body)), True
            body = None
    return st


def _untar(b64: str) -> dict:
    if not b64:
        return {}
    try:
        raw = base64.b64decode(b64)
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            return {m.name.removeprefix("./"): tar.extractfile(m).read()
                    for m in tar.getmembers() if m.isfile()}
    except (ValueError, tarfile.TarError, OSError):
        return {}


def describe(guest) -> dict:
    """JSON-ready description of ``guest`` (a ``Guest``, or a ``debian_guest.DebianGuest``: it
    has a root ``disk``) for GET /status: ``kind`` "busybox" | "debian", files, cache key."""
    disk = getattr(guest, "disk", None)
    return json.loads(json.dumps({"kind": "debian" if disk is not None else "busybox",
                                  "kernel": str(guest.kernel), "initrd": str(guest.initrd),
                                  "key": guest.key, "kernel_package": getattr(guest, "kernel_package", None),
                                  "root_disk": str(disk) if disk is not None else None}))
