"""A guest that serves a sequence of jobs: the VM of a VOC node (issue 15, seed 003 Section 3.3).

The test guest (``guest``) takes one job at boot (an appended initramfs archive) and powers off.
A VOC node is a VM booted *before* jobs arrive that runs its VO's jobs one after another for as
long as the watchdog keeps it, so its guest agent is replaced: the archive appended at boot
(``serve_archive``) carries ``/agent.sh`` = ``SERVE_AGENT`` (the kernel unpacks concatenated
archives in order, so it overwrites the base agent: the base initramfs and its cache key stay
the same).

Channels (``serving_xml`` adds the third serial port to the driver's domain XML):

* *in* -- serial port 2 (``ttyS2`` in the guest) is a UNIX socket on the host
  (``<files>/channel.in``, libvirt binds it; the host connects per command). A command is one
  line: ``VGRID-JOB <seq> <n>`` followed by ``n`` bytes of base64 (the ``guest.job_archive`` of
  the job: run.sh, input sandbox, outputs to send back), or ``VGRID-POWEROFF``.
* *out* -- serial port 1 (``ttyS1``, ``<files>/channel.out``, appended, as for one-job guests):
  ``VGRID-RUNNING`` once booted (the node is ready), ``VGRID-READY`` whenever it waits for a
  job, ``VGRID-JOB <seq>`` when job ``seq`` was received and starts, then -- as the one-job
  guest -- ``VGRID-PROGRESS``, ``VGRID-RESULT <exit code>``, ``VGRID-FILES`` ... ``VGRID-END``;
  ``VGRID-BAD <seq>`` when the job's bytes did not all arrive (the host fails the job).

Each job runs as the guest's unprivileged account ``vgrid`` (uid 1000, the VO's pool account
inside the guest) in a fresh ``/job``; every process of that account is killed after the job, so
nothing of one job outlives it into the next. The VO's image: a VM started with a disk (the qcow2
overlay of an image of the node's pool, ``start_serving(disk=...)``) mounts it at ``/image`` at
boot, as the one-job guest does (``VGRID-DISK mounted|raw|absent`` before ``VGRID-RUNNING``); its
jobs share it (writes go to the node's overlay, never to the pooled image).
Limit: the job archive travels over an emulated UART (about 10-100 kB/s under TCG), so input
sandboxes of VOC jobs should stay small (``MAX_JOB_BYTES``).
"""
from __future__ import annotations

import base64
import socket
import stat
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from .guest import DISK_SH, JOB_SH, cpio_newc, parse_channel

#: The largest job archive sent to a serving guest (bytes, before base64).
MAX_JOB_BYTES = 4_000_000

SERVE_AGENT = r"""# vgrid VOC guest agent (busybox sh): serves jobs from ttyS2 one after another (guest_serve)
out=/dev/ttyS1
in=/dev/ttyS2
stty -F $out raw -echo 2>/dev/null
stty -F $in raw -echo -icanon min 1 time 0 2>/dev/null
exec 3<$in
""" + DISK_SH + r"""echo VGRID-RUNNING > $out
while true; do
  echo VGRID-READY > $out
  cmd=""; seq=""; size=""
  read -r cmd seq size <&3 || { sleep 0.2; continue; }
  case "$cmd" in
    VGRID-POWEROFF) sync; poweroff -f ;;
    VGRID-JOB) ;;
    *) continue ;;
  esac
  case "$size" in ''|*[!0-9]*) echo "VGRID-BAD $seq" > $out; continue ;; esac
  rm -rf /job /tmp/job.b64
  head -c "$size" <&3 > /tmp/job.b64
  if [ "$(wc -c < /tmp/job.b64)" != "$size" ]; then echo "VGRID-BAD $seq" > $out; continue; fi
  cd /
  if ! base64 -d /tmp/job.b64 | cpio -i -d -u 2>/dev/null || [ ! -f /job/run.sh ]; then
    echo "VGRID-BAD $seq" > $out; continue
  fi
  rm -f /tmp/job.b64
  echo "VGRID-JOB $seq" > $out
""" + textwrap.indent(JOB_SH, "  ") + """  cd /
done
"""


class ServeError(Exception):
    """A job could not be handed to a serving guest (no socket, too large); the message says why."""


def serve_archive() -> bytes:
    """The archive appended to the guest's initramfs at a VOC VM's boot: ``/agent.sh`` =
    ``SERVE_AGENT`` and an empty ``/job``."""
    return cpio_newc([("job", stat.S_IFDIR | 0o755, b""),
                      ("agent.sh", stat.S_IFREG | 0o644, SERVE_AGENT.encode())])


def serving_xml(xml: str, files: Path) -> str:
    """``xml`` (``libvirt_driver.domain_xml``) with serial port 2 = the UNIX socket
    ``<files>/channel.in`` bound by libvirt (the job channel into the guest)."""
    d = etree.fromstring(xml.encode())
    dev = d.find("devices")
    ser = etree.Element("serial", type="unix")
    etree.SubElement(ser, "source", mode="bind", path=str(Path(files) / "channel.in"))
    etree.SubElement(ser, "target", port="2")
    last = dev.findall("serial")[-1]
    last.addnext(ser)
    return etree.tostring(d, pretty_print=True).decode()


def start_serving(vms, vwn: str, memory_mb: int, fraction: float, disk: Path | None = None) -> int | None:
    """Create and boot ``vwn``'s transient domain as a serving guest on ``vms`` (a
    ``libvirt_driver.LibvirtVMs``), with ``disk`` (a qcow2 overlay: the VO's image, mounted at
    ``/image``) if given; returns the qemu pid (None if unknown). The UNIX socket path must fit
    ``sun_path`` (107 bytes): ServeError otherwise; VMError from libvirt."""
    from .libvirt_driver import domain_xml
    d = vms.files(vwn)
    if len(str(d / "channel.in")) > 107:
        raise ServeError(f"{d}/channel.in is longer than a UNIX socket path may be: use a shorter vm_dir")
    d, initrd = vms.prepare(vwn, serve_archive())
    xml = serving_xml(domain_xml(vms.name(vwn), memory_mb=memory_mb, fraction=fraction,
                                 kernel=vms.guest.kernel, initrd=initrd, files=d, kvm=vms.kvm,
                                 disk=disk), d)
    return vms.create(vwn, d, xml, fraction)


def _send(files: Path, line: bytes, timeout_s: float) -> None:
    path = str(Path(files) / "channel.in")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(path)
            s.sendall(line)
            s.shutdown(socket.SHUT_WR)
            # hold the connection until qemu has read it all (it reads as the guest's UART
            # accepts): qemu closes nothing, so wait for the socket's send queue to drain
            deadline = time.monotonic() + timeout_s
            while _unsent(s) > 0 and time.monotonic() < deadline:
                time.sleep(0.05)
    except OSError as exc:
        raise ServeError(f"the VM's job channel {path}: {exc}") from None


def _unsent(s: socket.socket) -> int:
    import fcntl
    import termios
    try:
        buf = fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
        return int.from_bytes(buf, "little")
    except OSError:
        return 0


def send_job(files: Path, seq: int, cpio: bytes, timeout_s: float = 60.0) -> None:
    """Hand job ``seq`` (a ``guest.job_archive``) to the serving guest whose files are
    ``files``. ServeError when the archive exceeds ``MAX_JOB_BYTES`` or the socket fails."""
    if len(cpio) > MAX_JOB_BYTES:
        raise ServeError(f"the job's archive is {len(cpio)} bytes; a VOC VM takes at most {MAX_JOB_BYTES}")
    body = base64.b64encode(cpio)
    _send(files, f"VGRID-JOB {seq} {len(body)}\n".encode() + body, timeout_s)


def power_off(files: Path, timeout_s: float = 5.0) -> None:
    """Tell the serving guest to power off (its domain then disappears). ServeError."""
    _send(files, b"VGRID-POWEROFF\n", timeout_s)


@dataclass
class JobChannel:
    """What a serving guest said about job ``seq`` (``job_state``): ``started`` (``VGRID-JOB``
    seen), ``bad`` (``VGRID-BAD``), ``progress`` (bytes of StdOutput), ``exit_code``, ``files``,
    ``complete`` (``VGRID-END`` after its result)."""

    started: bool = False
    bad: bool = False
    progress: int = 0
    exit_code: int | None = None
    files: dict | None = None
    complete: bool = False


def job_state(data: bytes, seq: int) -> JobChannel:
    """Parse ``channel.out`` of a serving guest for job ``seq`` (what follows its
    ``VGRID-JOB <seq>`` line, up to the next job's)."""
    text = data.decode("latin-1").replace("\r", "")
    if f"\nVGRID-BAD {seq}\n" in "\n" + text:
        return JobChannel(bad=True)
    mark = f"VGRID-JOB {seq}\n"
    at = ("\n" + text).rfind("\n" + mark)
    if at < 0:
        return JobChannel()
    part = text[at + len(mark):]
    nxt = part.find("\nVGRID-JOB ")
    if nxt >= 0:
        part = part[:nxt + 1]
    st = parse_channel(part.encode("latin-1"))
    return JobChannel(True, False, st.progress, st.exit_code, st.files, st.complete)


def ready_count(data: bytes) -> int:
    """How many times the guest said ``VGRID-READY`` (it waits for a job after each)."""
    return data.decode("latin-1").replace("\r", "").count("VGRID-READY\n")
