"""VOC nodes as booted libvirt VMs: a ``VOCDriver`` (``pool.VOCDriver``) over issue 14's
``LibvirtVMs`` (issue 15, seed 003 Section 3.3: a VOC is a cluster of VMs of one VO).

``boot(node)`` creates and boots a transient domain of the test guest (Debian cloud kernel,
busybox initramfs, ``vwn_agents.drivers.guest``) in a thread; the guest agent's first line on
its channel (``VGRID-RUNNING``: the kernel booted and the agent runs the node's resident
process) makes the node ready -- the boot delay ``ready_at - booted_at`` is the measured time
from the libvirt call to that line, never assumed. A domain that is gone before it is ready, or
no ready line within ``boot_timeout_s``, makes the node lost. ``terminate(node)`` destroys the
domain and deletes its files. ``check()`` (the watchdog's fault-tolerance pass, Section 5.3)
reports every node whose domain is gone (a killed qemu, a crashed guest) as lost at once.

The driver never touches the pool: it calls ``on_ready(node_id)`` and ``on_lost(node_id, why)``,
which the owner wires to ``VOCPool.ready`` / ``VOCPool.lost`` under its lock with its clock.
``boot`` is idempotent per node id (a CE agent restarted while a node booted asks again:
``VOCScheduling.start``): a domain that already exists is watched, not booted a second time.

Jobs run *inside* the booted VM, one after another (``drivers.guest_serve``: the VM boots a
serving guest agent; ``submit(node_id, spec, workdir, outputs)`` hands it a job over its job
channel, ``result(node_id, seq)`` reads what it said): the boot is paid once per node, not per
job. ``terminate`` tells the guest to power off, then destroys what is left.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Callable

from ..drivers.guest import job_archive, parse_channel
from ..drivers.guest_serve import JobChannel, ServeError, job_state, power_off, send_job, start_serving
from ..drivers.libvirt_driver import LibvirtVMs, VMError
from .pool import VOCNode

log = logging.getLogger(__name__)


class LibvirtVOCDriver:
    """``slots`` VM slots named ``<prefix>-<i>``; each VOC node's domain is ``vgrid-<prefix>-<node id>``.

    ``vms``: a ``LibvirtVMs``; ``memory_mb`` per VM; ``fraction``: the CPU cap of each VM
    (CPU fraction of the host, default 1 / slots); ``poll_s``: how often a booting VM's channel
    is read; ``boot_timeout_s``: a VM not ready by then is lost. ``monotonic``: the timer of the
    boot-timeout wait (seconds; injected)."""

    def __init__(self, vms: LibvirtVMs, slots: int, prefix: str, on_ready: Callable[[str], None],
                 on_lost: Callable[[str, str], None], memory_mb: int = 128, fraction: float | None = None,
                 poll_s: float = 0.2, boot_timeout_s: float = 180.0, monotonic=time.monotonic) -> None:
        self.vms, self.prefix = vms, prefix
        self.slots = [f"{prefix}-{i}" for i in range(slots)]
        self.on_ready, self.on_lost = on_ready, on_lost
        self.memory_mb, self.fraction = memory_mb, fraction if fraction is not None else 1.0 / max(1, slots)
        self.poll_s, self.boot_timeout_s, self.monotonic = poll_s, boot_timeout_s, monotonic
        self.vwns: dict[str, str] = {}          # node id -> VWN name (its domain is vms.name(vwn))
        self.started: set[str] = set()          # node ids whose domain was created
        self.seq: dict[str, int] = {}           # node id -> the last job sequence number sent
        self.disks: dict[str, Path] = {}        # node id -> its disk (the VO's image overlay), if any
        self._lock = threading.Lock()

    def vwn(self, node_id: str) -> str:
        return f"{self.prefix}-{node_id}"

    def free_slots(self, busy: set[str]) -> list[str]:
        return [s for s in self.slots if s not in busy]

    def boot(self, node: VOCNode) -> None:
        with self._lock:
            self.vwns[node.id] = self.vwn(node.id)
        threading.Thread(target=self._boot, args=(node.id,), name=f"voc-vm-{node.id}", daemon=True).start()

    def _boot(self, node_id: str) -> None:
        vwn = self.vwn(node_id)
        try:
            if self.vms.state(vwn) == "gone":
                start_serving(self.vms, vwn, self.memory_mb, self.fraction, disk=self.disks.get(node_id))
        except (VMError, ServeError, OSError, ValueError) as exc:
            self._forget(node_id)
            self.on_lost(node_id, f"boot failed: {exc}")
            return
        with self._lock:
            self.started.add(node_id)
        deadline = self.monotonic() + self.boot_timeout_s
        channel = self.vms.files(vwn) / "channel.out"
        while self.monotonic() < deadline:
            try:
                if parse_channel(channel.read_bytes()).running:
                    self.on_ready(node_id)
                    return
            except OSError:
                pass
            if self.vms.state(vwn) == "gone":
                self._forget(node_id)
                self.on_lost(node_id, "its VM stopped while booting")
                return
            time.sleep(self.poll_s)
        self.vms.destroy(vwn)
        self._forget(node_id)
        self.on_lost(node_id, f"its VM did not boot within {self.boot_timeout_s:g} s")

    def _forget(self, node_id: str) -> None:
        with self._lock:
            self.disks.pop(node_id, None)
            self.vwns.pop(node_id, None)
            self.started.discard(node_id)

    def terminate(self, node: VOCNode) -> None:
        with self._lock:
            vwn = self.vwns.get(node.id, self.vwn(node.id))
        self._forget(node.id)
        try:
            power_off(self.vms.files(vwn), timeout_s=2.0)
        except ServeError:
            pass
        self.vms.remove(vwn)

    def submit(self, node_id: str, spec: dict, workdir: Path, outputs: list[str]) -> int:
        """Hand a job to node ``node_id``'s VM: ``spec`` (wrapper spec fields, ``guest.job_script``),
        ``workdir`` (its staged input sandbox), ``outputs`` (names to send back). Returns the job's
        sequence number on this VM (for ``result``). ValueError on a bad spec, ServeError when
        the VM cannot take it (gone, archive too large)."""
        with self._lock:
            vwn = self.vwns.get(node_id)
            if vwn is None or node_id not in self.started:
                raise ServeError(f"VOC node {node_id} has no running VM")
            if node_id not in self.seq:             # a restarted owner: continue after the channel's
                self.seq[node_id] = _last_seq(self.vms.files(vwn) / "channel.out")
            self.seq[node_id] = seq = self.seq[node_id] + 1
        send_job(self.vms.files(vwn), seq, job_archive(spec, Path(workdir), outputs))
        return seq

    def result(self, node_id: str, seq: int) -> JobChannel:
        """What node ``node_id``'s guest said so far about its job ``seq`` (``guest_serve.job_state``)."""
        try:
            data = (self.vms.files(self.vwn(node_id)) / "channel.out").read_bytes()
        except OSError:
            return JobChannel()
        return job_state(data, seq)

    def check(self) -> list[str]:
        """Report every node whose domain is gone as lost (``on_lost``); returns their ids.
        ``unknown`` (libvirt does not answer) concludes nothing."""
        with self._lock:
            known = {nid: v for nid, v in self.vwns.items() if nid in self.started}
        gone = [nid for nid, vwn in known.items() if self.vms.state(vwn) == "gone"]
        for nid in gone:
            self._forget(nid)
            self.on_lost(nid, "its VM is gone (killed or crashed)")
        return gone

    def qemu_pid(self, node_id: str) -> int | None:
        return self.vms.qemu_pid(self.vwn(node_id))


def _last_seq(channel: Path) -> int:
    """The highest ``VGRID-JOB <seq>`` a serving guest wrote on ``channel`` (0: none)."""
    try:
        text = channel.read_bytes().decode("latin-1")
    except OSError:
        return 0
    seqs = [int(m) for m in re.findall(r"VGRID-(?:JOB|BAD) (\d+)", text)]
    return max(seqs, default=0)
