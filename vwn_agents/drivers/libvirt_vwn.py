"""The ``libvirt`` VWN driver: every VWN a qemu domain (``libvirt_driver.LibvirtVMs``).

``open_libvirt(config)`` builds (or finds cached) the test guest (``guest.build_guest``),
decides KVM or TCG (``libvirt_driver.probe_kvm``, its verdict cached per guest and boot) and
connects to libvirt. ``LibvirtDriver`` is both faces the node agent uses (``base`` module doc):

* CPU caps (``cg``): ``set_cap`` = live ``vcpu_quota`` of the domain, ``read_cap`` = libvirt's
  ``schedinfo`` read back; ``capped`` is always True (a domain that is not running yet gets its
  cap in its XML when it starts); ``home`` None (no cgroup to adopt: the domain name is the key);
* suspend (``fz``): ``freeze`` = pause + save the memory image to the node's disk, ``thaw`` =
  restore + unpause; every save and restore is measured (MB, s, MB/s) and published in
  ``describe()`` (GET /status ``driver``): ``save_rate_mb_s`` / ``restore_rate_mb_s`` are the
  rates of seed 000's suspension-time model (time = memory / rate).

The job runs inside the guest (``runs_jobs``): ``vm_job.run`` starts, watches and collects it.
Errors: ``VMError`` from libvirt calls is turned into ``CgroupError`` where the node agent's
modules expect it (suspend / resume answer 503 with libvirt's message).
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ..cgroups import CgroupError
from .base import VWNDriver
from .guest import build_guest, describe as describe_guest
from .libvirt_driver import LibvirtVMs, VMError, probe_kvm

log = logging.getLogger(__name__)


class LibvirtDriver(VWNDriver):
    """The libvirt driver of one node agent (module doc); ``vms``: its ``LibvirtVMs``;
    ``memory_mb``: the memory of a VWN whose job states no ``VMMemory`` (MB)."""

    kind = "libvirt"
    runs_jobs = True
    capped = True
    version = "libvirt"
    available = True
    reason = ""
    node_dir = None

    def __init__(self, vms: LibvirtVMs, memory_mb: int, keep_files: bool = False) -> None:
        self.vms, self.memory_mb, self.keep_files = vms, memory_mb, keep_files
        kind = "debian" if getattr(vms.guest, "disk", None) is not None else "busybox"
        self.why = f"libvirt, {vms.why}; {kind} guest"
        self.missing: dict[str, str] = {}        # the Freezer face: VWNs that cannot be suspended
        self.stats = {"saves": 0, "restores": 0, "last_boot_s": None, "boots": 0, "mean_boot_s": None,
                      "max_boot_s": None, "last_boot_cpu_s": None, "cpu_boots": 0, "mean_boot_cpu_s": None}
        self._closed = False

    @property
    def cg(self):
        return self

    @property
    def fz(self):
        return self

    def describe(self) -> dict:
        vms = self.vms
        return {"kind": self.kind, "why": self.why, "uri": vms.uri, "domain_type":
                "kvm" if vms.kvm else "qemu", "guest": describe_guest(vms.guest),
                "vm_dir": str(vms.vm_dir), "writable": True, "version": "libvirt",
                "reason": None, "path": str(vms.vm_dir),
                "save_rate_mb_s": vms.last_save.mb_s if vms.last_save else None,
                "restore_rate_mb_s": vms.last_restore.mb_s if vms.last_restore else None,
                "last_save": vms.last_save.record() if vms.last_save else None,
                "last_restore": vms.last_restore.record() if vms.last_restore else None, **self.stats}

    def record_boot(self, seconds: float, cpu_s: float | None = None) -> None:
        """One guest boot (domain start to the agent's ``VGRID-RUNNING``, s): ``last_boot_s``,
        ``boots``, ``mean_boot_s``, ``max_boot_s`` in GET /status (the CE's ``vm_boot_lead_s =
        -1`` and ``benchmarks/live_vs_sim.py --vms`` read them); ``cpu_s``, the CPU time the
        domain had used by then (libvirt's ``info``), gives ``last_boot_cpu_s`` and
        ``mean_boot_cpu_s``: a TCG boot needs about the same CPU every time, so its wall time
        grows with the host's load (docs/vwn.md)."""
        st, n = self.stats, self.stats["boots"] + 1
        st["last_boot_s"], st["boots"] = round(seconds, 2), n
        st["mean_boot_s"] = round(((st["mean_boot_s"] or 0.0) * (n - 1) + seconds) / n, 2)
        st["max_boot_s"] = round(max(st["max_boot_s"] or 0.0, seconds), 2)
        if cpu_s is not None:
            k = st.get("cpu_boots", 0) + 1
            st["last_boot_cpu_s"], st["cpu_boots"] = round(cpu_s, 2), k
            st["mean_boot_cpu_s"] = round(((st.get("mean_boot_cpu_s") or 0.0) * (k - 1) + cpu_s) / k, 2)

    def state(self, vwn: str) -> str:
        st = self.vms.state(vwn)
        return {"saved": "suspended", "paused": "suspended"}.get(st, st)

    # -- the CPU-cap face (cgroups.CpuCgroups) -----------------------------------------------

    def create(self, vwn: str) -> None: ...
    def procs_files(self, vwn: str) -> list[str]: return []
    def home(self, vwn: str) -> str | None: return None
    def pids(self, vwn: str) -> list[int]:
        pid = self.vms.qemu_pid(vwn)
        return [pid] if pid else []

    def set_cap(self, vwn: str, fraction: float) -> None:
        try:
            self.vms.set_cap(vwn, fraction)
        except VMError as exc:
            raise CgroupError(str(exc)) from None

    def read_cap(self, vwn: str) -> float | None:
        return self.vms.read_cap(vwn)

    def cpu_usage_s(self, vwn: str) -> float | None:
        dom = self.vms._dom(vwn)
        try:
            return dom.info()[4] / 1e9 if dom is not None else None
        except Exception:  # noqa: BLE001 - it powered off meanwhile
            return None

    def throttling(self, vwn: str) -> dict[str, int]: return {}

    def adopt(self, vwn: str, home: str | None) -> None:
        self.vms.adopt(vwn)

    def kill(self, vwn: str) -> None:
        self.vms.destroy(vwn)

    def remove(self, vwn: str) -> None:
        if self.keep_files:
            self.vms.destroy(vwn)
        else:
            self.vms.remove(vwn)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.vms.close()

    # -- the suspend face (freezer.Freezer) ---------------------------------------------------

    def frozen(self, vwn: str) -> bool:
        return self.state(vwn) == "suspended"

    def freeze(self, vwn: str, timeout_s: float = 0) -> None:
        """Pause + save (module doc); nothing when already saved; CgroupError on failure."""
        if self.vms.state(vwn) == "saved":
            return
        self._timed(self.vms.suspend, vwn, "saves", "saved")

    def thaw(self, vwn: str, timeout_s: float = 0) -> None:
        """Restore + unpause (module doc); nothing when it runs; CgroupError on failure."""
        st = self.vms.state(vwn)
        if st == "paused":
            try:
                self.vms._dom(vwn).resume()
            except Exception as exc:  # noqa: BLE001 - libvirtError or gone meanwhile
                raise CgroupError(f"{vwn}: cannot unpause: {exc}") from None
            return
        if st != "saved":
            return
        self._timed(self.vms.resume, vwn, "restores", "restored")

    def _timed(self, op, vwn: str, counter: str, verb: str) -> None:
        """``op(vwn)`` (save or restore, which measure themselves: MB, s, MB/s), counted in
        ``stats[counter]`` and logged; a VMError becomes a CgroupError (the freezer's error)."""
        try:
            t = op(vwn)
        except VMError as exc:
            raise CgroupError(str(exc)) from None
        self.stats[counter] += 1
        log.info("%s: %s %.1f MB in %.2f s (%.1f MB/s)", vwn, verb, t.mb, t.seconds, t.mb_s)


def _probe(guest, accel: str, timeout_s: float) -> tuple[bool, str]:
    """KVM or TCG (``accel``: auto | kvm | tcg); the auto probe's verdict is cached next to the
    guest for this boot of the host (/proc/sys/kernel/random/boot_id)."""
    if accel == "tcg":
        return False, "TCG: configured (vm_accel = \"tcg\")"
    if accel == "kvm":
        return True, "KVM: configured (vm_accel = \"kvm\")"
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "unknown"
    cache = guest.kernel.parent / "kvm-probe.json"
    try:
        seen = json.loads(cache.read_text())
        if seen.get("boot") == boot:
            return bool(seen["kvm"]), seen["why"]
    except (OSError, ValueError, KeyError):
        pass
    kvm, why = probe_kvm(guest, timeout_s)
    try:
        tmp = cache.with_suffix(f".{os.getpid()}")
        tmp.write_text(json.dumps({"boot": boot, "kvm": kvm, "why": why}))
        os.replace(tmp, cache)
    except OSError:
        pass
    return kvm, why


def open_libvirt(config) -> LibvirtDriver:
    """The libvirt driver of a node agent (``config``: NodeAgentConfig); RuntimeError naming what
    is missing (libvirt-python, the daemon, the guest's packages)."""
    from .guest import GuestBuildError
    try:
        guest = build_guest(config.guest_cache)      # also the KVM probe's guest
        booted = guest
        if config.guest == "debian":                 # python3 + systemd (docs/vwn.md, "The Debian guest")
            from .debian_guest import build_debian_guest
            booted = build_debian_guest(config.guest_cache)
    except (GuestBuildError, OSError) as exc:
        raise RuntimeError(f"node {config.node}: cannot build the {config.guest} VM guest: {exc}") from None
    kvm, why = _probe(guest, config.vm_accel, config.kvm_probe_s)
    try:
        vms = LibvirtVMs(config.libvirt_uri, Path(config.vm_dir) / config.node, booted, kvm, why)
    except ImportError:
        raise RuntimeError("driver = \"libvirt\" needs libvirt-python (pip install 'vgrid[libvirt]')") from None
    except VMError as exc:
        raise RuntimeError(f"node {config.node}: {exc}") from None
    return LibvirtDriver(vms, config.vm_memory_mb, keep_files=config.keep_workdirs)
