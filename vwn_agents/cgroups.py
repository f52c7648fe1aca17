"""CPU caps for virtual worker nodes with Linux control groups.

One VWN = one cgroup ``<base>/<parent>/<node>-<agent pid>/<vwn>`` whose CPU bandwidth is capped at
a fraction of one core. Three drivers share one interface:

- ``CgroupV2``: the unified hierarchy, ``cpu.max`` = ``"<quota_us> <period_us>"``;
- ``CgroupV1``: the ``cpu`` hierarchy, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (plus the
  ``cpuacct`` hierarchy for CPU usage when it is mounted and writable);
- ``Uncapped``: no writable cgroup; nothing is capped and ``reason`` says why (never silent).

``open_cpu_cgroups(node)`` detects what is really writable (it creates the node's parent cgroup
and writes a probe value) and returns the first driver that works, v2 before v1.

A process joins a VWN's cgroup by writing its own pid to each file of ``procs_files(vwn)``
*before* it execs the job, so that every child inherits the cgroup.
"""
from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from .proctree import is_running

PERIOD_US = 100_000          # CFS period: 100 ms, the kernel default
MIN_QUOTA_US = 1_000         # the kernel refuses quotas below 1 ms
GONE = (errno.ENOENT, errno.ENODEV)   # a cgroup removed while in use answers ENODEV


class CgroupError(RuntimeError):
    """A cgroup operation failed (message names the file and the OS error)."""


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mounts for a cgroup filesystem."""

    path: str
    fstype: str                      # "cgroup" (v1) or "cgroup2"
    options: frozenset[str] = field(default_factory=frozenset)


def read_mounts(mounts_file: str = "/proc/self/mounts") -> list[Mount]:
    """The cgroup and cgroup2 mounts listed in ``mounts_file``."""
    out = []
    for line in Path(mounts_file).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            out.append(Mount(parts[1], parts[2], frozenset(parts[3].split(","))))
    return out


def own_cgroups(cgroup_file: str = "/proc/self/cgroup") -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under key ``""`` for v2."""
    out: dict[str, str] = {}
    for line in Path(cgroup_file).read_text().splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for ctrl in (parts[1].split(",") if parts[1] else [""]):
            out[ctrl] = parts[2]
    return out


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror or exc}") from exc


def _mkdir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CgroupError(f"cannot create cgroup {path}: {exc.strerror or exc}") from exc


def _rmdir(path: Path, wait_s: float = 2.0) -> None:
    """Remove an (emptied) cgroup directory, waiting briefly for dying tasks to leave."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            path.rmdir()
            return
        except OSError as exc:
            if exc.errno in GONE:
                return
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise CgroupError(f"cannot remove cgroup {path}: {exc.strerror or exc}") from exc
            time.sleep(0.02)


def _read(path: Path) -> str | None:
    """Text of a cgroup file, None when the file or its cgroup is gone."""
    try:
        return path.read_text()
    except OSError as exc:
        if exc.errno in GONE:
            return None
        raise


def _read_pids(procs: Path) -> list[int]:
    return [int(x) for x in (_read(procs) or "").split()]


def _kill_loop(procs: Path, wait_s: float = 3.0) -> None:
    """SIGKILL every task listed in ``procs`` until the cgroup is empty (forks are caught too)."""
    deadline = time.monotonic() + wait_s
    while True:
        pids = _read_pids(procs)
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)


def quota_us(fraction: float, period_us: int = PERIOD_US) -> int:
    """CFS quota in microseconds for a CPU ``fraction`` (> 0) of one core per ``period_us``."""
    if not fraction > 0:
        raise ValueError(f"CPU fraction must be > 0, got {fraction!r}")
    return max(MIN_QUOTA_US, round(fraction * period_us))


class _Driver:
    """Common part: the node's parent cgroup directory in one hierarchy (``self.node_dir``)."""

    version = "none"
    capped = True
    reason = ""

    def __init__(self, node_dir: Path) -> None:
        self.node_dir = node_dir
        self.homes: dict[str, str] = {}   # adopted VWN -> node directory name of an earlier agent

    def adopt(self, vwn: str, home: str) -> None:
        """``vwn`` lives in sibling node directory ``home`` (``<node>-<earlier agent pid>``):
        a VWN adopted after a restart keeps its cgroup."""
        if home != self.node_dir.name:
            self.homes[vwn] = home

    def home(self, vwn: str) -> str:
        """Name of the node directory holding ``vwn``'s cgroup (recorded to adopt it later)."""
        return self.homes.get(vwn, self.node_dir.name)

    def path(self, vwn: str) -> Path:
        """Directory of the VWN's cgroup in the cpu hierarchy."""
        return self.node_dir.parent / self.home(vwn) / vwn

    def describe(self) -> dict:
        """``{"version", "writable", "reason", "path"}`` for the node agent's status."""
        return {"version": self.version, "writable": self.capped, "reason": self.reason,
                "path": str(self.node_dir) if self.capped else None}

    def pids(self, vwn: str) -> list[int]:
        """Pids of the tasks in the VWN's cgroup."""
        return _read_pids(self.path(vwn) / "cgroup.procs")

    def close(self) -> None:
        """Remove the node's parent cgroup (after every VWN has been removed)."""
        for d in self._dirs(None):
            try:
                children = [c for c in d.iterdir() if c.is_dir()]
            except OSError as exc:
                if exc.errno in GONE:
                    continue
                raise CgroupError(f"cannot list cgroup {d}: {exc.strerror or exc}") from exc
            for child in children:
                _kill_loop(child / "cgroup.procs")
                _rmdir(child)
            _rmdir(d)

    def _dirs(self, vwn: str | None) -> list[Path]:
        return [self.node_dir if vwn is None else self.path(vwn)]

    def create(self, vwn: str) -> None:
        """Create the VWN's cgroup(s); raises CgroupError."""
        for d in self._dirs(vwn):
            _mkdir(d)

    def procs_files(self, vwn: str) -> list[str]:
        """Files a process writes its pid to in order to join the VWN (before exec)."""
        return [str(d / "cgroup.procs") for d in self._dirs(vwn)]

    def kill(self, vwn: str) -> None:
        """SIGKILL every process of the VWN, including children that left the process group."""
        _kill_loop(self.path(vwn) / "cgroup.procs")

    def remove(self, vwn: str) -> None:
        """Kill what is left in the VWN's cgroup(s) and remove them (and an adopted VWN's
        emptied node directory); raises CgroupError."""
        self.kill(vwn)
        dirs = self._dirs(vwn)
        for d in dirs:
            _rmdir(d)
        if self.homes.pop(vwn, None) is not None:
            for d in dirs:
                try:
                    d.parent.rmdir()                 # the earlier agent's, once empty
                except OSError:
                    pass


class CgroupV1(_Driver):
    """cgroup v1: ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` in the cpu hierarchy."""

    version = "v1"

    def __init__(self, node_dir: Path, acct_dir: Path | None = None) -> None:
        super().__init__(node_dir)
        self.acct_dir = acct_dir     # cpuacct hierarchy when mounted apart from cpu

    def _dirs(self, vwn):
        dirs = super()._dirs(vwn)
        if self.acct_dir is not None:
            dirs.append(self.acct_dir if vwn is None else self._acct(vwn))
        return dirs

    def _acct(self, vwn: str) -> Path:
        return self.acct_dir.parent / self.home(vwn) / vwn

    def set_cap(self, vwn: str, fraction: float) -> None:
        """Cap the VWN at ``fraction`` of one core; raises CgroupError."""
        d = self.path(vwn)
        _write(d / "cpu.cfs_period_us", str(PERIOD_US))
        _write(d / "cpu.cfs_quota_us", str(quota_us(fraction)))

    def read_cap(self, vwn: str) -> float | None:
        """The cap read back from the cgroup files (CPU fraction), None if unlimited."""
        d = self.path(vwn)
        quota = int((d / "cpu.cfs_quota_us").read_text())
        period = int((d / "cpu.cfs_period_us").read_text())
        return None if quota < 0 else quota / period

    def cpu_usage_s(self, vwn: str) -> float | None:
        """CPU time (s) used by the VWN's tasks so far (cpuacct.usage), None if not accounted."""
        for d in (self.path(vwn), self._acct(vwn) if self.acct_dir else None):
            text = _read(d / "cpuacct.usage") if d is not None else None
            if text:
                return int(text) / 1e9
        return None

    def throttling(self, vwn: str) -> dict[str, int]:
        """``cpu.stat`` of the VWN: nr_periods, nr_throttled, throttled_time (ns)."""
        return _read_stat(self.path(vwn) / "cpu.stat")


class CgroupV2(_Driver):
    """cgroup v2: ``cpu.max`` = ``"<quota_us> <period_us>"`` in the unified hierarchy."""

    version = "v2"

    def set_cap(self, vwn: str, fraction: float) -> None:
        _write(self.path(vwn) / "cpu.max", f"{quota_us(fraction)} {PERIOD_US}")

    def read_cap(self, vwn: str) -> float | None:
        quota, period = (self.path(vwn) / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)

    def cpu_usage_s(self, vwn: str) -> float | None:
        stat = _read_stat(self.path(vwn) / "cpu.stat")
        return stat["usage_usec"] / 1e6 if "usage_usec" in stat else None

    def throttling(self, vwn: str) -> dict[str, int]:
        return _read_stat(self.path(vwn) / "cpu.stat")

    def kill(self, vwn: str) -> None:
        kill_file = self.path(vwn) / "cgroup.kill"
        if kill_file.exists():
            try:
                kill_file.write_text("1")
            except OSError:
                pass
        super().kill(vwn)


class Uncapped:
    """No writable cgroup: VWNs run without a CPU cap; ``reason`` says why."""

    version = "none"
    capped = False

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def describe(self) -> dict:
        return {"version": "none", "writable": False, "reason": self.reason, "path": None}

    def create(self, vwn: str) -> None: ...
    def set_cap(self, vwn: str, fraction: float) -> None: ...
    def read_cap(self, vwn: str) -> float | None: return None
    def cpu_usage_s(self, vwn: str) -> float | None: return None
    def throttling(self, vwn: str) -> dict[str, int]: return {}
    def procs_files(self, vwn: str) -> list[str]: return []
    def adopt(self, vwn: str, home: str) -> None: ...
    def home(self, vwn: str) -> str | None: return None
    def pids(self, vwn: str) -> list[int]: return []
    def kill(self, vwn: str) -> None: ...
    def remove(self, vwn: str) -> None: ...
    def close(self) -> None: ...


CpuCgroups = CgroupV1 | CgroupV2 | Uncapped


def _read_stat(path: Path) -> dict[str, int]:
    lines = (_read(path) or "").splitlines()
    return {k: int(v) for k, v in (ln.split() for ln in lines if len(ln.split()) == 2)}


def sweep_stale(parent_dir: Path, node: str | None = None,
                keep: frozenset[str] = frozenset()) -> list[str]:
    """Remove node cgroups ``<node>-<pid>`` left by node agents that died (pid gone).

    ``node``: only that node's directories (None: every node's); ``keep``: VWN cgroups
    (``<home>/<vwn>`` as ``"<home>/<vwn>"``) that a node agent's database still claims: they and
    their node directory stay, their tasks untouched. The remaining tasks of the other VWN
    cgroups are killed first. Returns the removed directory names (``<home>`` or
    ``<home>/<vwn>``); errors on one directory are ignored (retried by the next agent).
    """
    removed = []
    try:
        entries = list(parent_dir.iterdir())
    except OSError:
        return removed
    for d in entries:
        owner, _, pid = d.name.rpartition("-")
        if not pid.isdigit() or is_running(int(pid)) or (node is not None and owner != node):
            continue
        try:
            if not d.is_dir():
                continue
            kept = False
            for child in [c for c in d.iterdir() if c.is_dir()]:
                if f"{d.name}/{child.name}" in keep:
                    kept = True
                    continue
                _kill_loop(child / "cgroup.procs")
                _rmdir(child)
                removed.append(f"{d.name}/{child.name}")
            if not kept:
                _rmdir(d)
                removed.append(d.name)
        except (CgroupError, OSError):
            continue
    return removed


def _try_v2(mount: Mount, own: dict[str, str], rel: Path) -> CgroupV2:
    base = Path(mount.path) / own.get("", "/").lstrip("/")
    controllers = (base / "cgroup.controllers").read_text().split()
    if "cpu" not in controllers:
        raise CgroupError(f"cgroup2 at {base}: cpu controller not available "
                          f"(cgroup.controllers: {' '.join(controllers) or 'empty'})")
    d = base
    for part in rel.parts:
        _write(d / "cgroup.subtree_control", "+cpu")
        d = d / part
        _mkdir(d)
    _write(d / "cgroup.subtree_control", "+cpu")
    return CgroupV2(d)


def _try_v1(mounts: list[Mount], own: dict[str, str], rel: Path) -> CgroupV1:
    cpu = next((m for m in mounts if m.fstype == "cgroup" and "cpu" in m.options), None)
    if cpu is None:
        raise CgroupError("no cgroup v1 hierarchy with the cpu controller is mounted")
    node_dir = Path(cpu.path) / own.get("cpu", "/").lstrip("/") / rel
    _mkdir(node_dir)
    _write(node_dir / "cpu.cfs_quota_us", "-1")          # probe: is the hierarchy writable?
    acct_dir = None
    acct = next((m for m in mounts if m.fstype == "cgroup" and "cpuacct" in m.options), None)
    if acct is not None and acct.path != cpu.path:
        candidate = Path(acct.path) / own.get("cpuacct", "/").lstrip("/") / rel
        try:
            _mkdir(candidate)
            acct_dir = candidate
        except CgroupError:
            acct_dir = None                              # caps still work, usage is not accounted
    return CgroupV1(node_dir, acct_dir)


def open_cpu_cgroups(node: str, mode: str = "auto", parent: str = "vgrid",
                     mounts_file: str = "/proc/self/mounts",
                     cgroup_file: str = "/proc/self/cgroup",
                     keep: frozenset[str] = frozenset()) -> CpuCgroups:
    """The CPU-cap driver for node agent ``node``: v2, else v1, else ``Uncapped(reason)``.

    ``mode`` is "auto" (try v2 then v1), "v2", "v1" or "none" (always uncapped). The node's
    parent cgroup ``<parent>/<node>-<pid>`` is created and probed here; a failure of every
    candidate yields ``Uncapped`` whose reason lists what each attempt found. Stale cgroups of
    this node's dead agents are swept, except ``keep`` (``sweep_stale``). Never raises for
    an unwritable system; raises ValueError for an unknown ``mode``.
    """
    if mode not in ("auto", "v1", "v2", "none"):
        raise ValueError(f"cgroup mode must be auto, v1, v2 or none, got {mode!r}")
    if mode == "none":
        return Uncapped("cgroups disabled by configuration (cgroup = \"none\")")
    rel = Path(parent) / f"{node}-{os.getpid()}"
    reasons = []
    try:
        mounts = read_mounts(mounts_file)
        own = own_cgroups(cgroup_file)
    except OSError as exc:
        return Uncapped(f"cannot read the cgroup mounts: {exc}")
    if mode in ("auto", "v2"):
        for m in (m for m in mounts if m.fstype == "cgroup2"):
            try:
                driver = _try_v2(m, own, rel)
            except (CgroupError, OSError) as exc:
                reasons.append(str(exc))
                continue
            sweep_stale(driver.node_dir.parent, node, keep)
            return driver
        if not any(m.fstype == "cgroup2" for m in mounts):
            reasons.append("no cgroup2 filesystem is mounted")
    if mode in ("auto", "v1"):
        try:
            driver = _try_v1(mounts, own, rel)
        except (CgroupError, OSError) as exc:
            reasons.append(str(exc))
        else:
            for d in driver._dirs(None):
                sweep_stale(d.parent, node, keep)
            return driver
    return Uncapped("no writable CPU cgroup: " + "; ".join(reasons))
