"""Suspending a VWN: freeze and thaw every process of it with the cgroup freezer.

A VWN's processes (job wrapper, job, its children) are in several cgroups: the CPU cgroup
(``cgroups``), the memory/pids cgroups (``limits``) and, here, a freezer cgroup. Every one of
them holds *all* the VWN's processes (the wrapper joins them all before it execs, children
inherit them), so freezing one cgroup that is the VWN's freezes the whole VWN:

- cgroup v2 (``Freezer("v2", cpu=<CgroupV2>)``): the CPU, memory and pids controllers share one
  directory per VWN, and every non-root v2 cgroup has ``cgroup.freeze`` (no controller to enable):
  write ``1`` and wait until ``cgroup.events`` says ``frozen 1``; ``0`` thaws;
- cgroup v1 (``Freezer("v1", node_dir)``): the ``freezer`` hierarchy is separate, so the VWN gets
  one more cgroup ``<freezer mount>/<own cgroup>/<parent>/<node>-<agent pid>/<vwn>`` that the wrapper
  joins (``procs_files``); write ``FROZEN`` to ``freezer.state`` and wait until it reads
  ``FROZEN`` (not ``FREEZING``); ``THAWED`` thaws;
- ``Freezer("none", reason=...)``: no freezer; suspending is refused with that reason.

Killing a frozen VWN (``kill``): SIGKILL every task, then thaw (v1 tasks die only once thawed;
v2 kills frozen tasks, the thaw is harmless): a killed VWN never runs again, not even briefly.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .cgroups import (CgroupError, _kill_loop, _mkdir, _read, _read_pids, _rmdir, _write, own_cgroups,
                      read_mounts, sweep_stale)
from .proctree import is_running


class Freezer:
    """The freezer of a node agent's VWNs (module doc). ``version`` is "v2", "v1" or "none";
    ``reason`` says why there is none."""

    def __init__(self, version: str, node_dir: Path | None = None, cpu=None, reason: str = "") -> None:
        self.version, self.node_dir, self.cpu, self.reason = version, node_dir, cpu, reason
        self.homes: dict[str, str] = {}     # adopted VWN (v1) -> an earlier agent's node directory
        self.missing: dict[str, str] = {}   # VWN -> why it has no freezer cgroup (unsuspendable)

    @property
    def available(self) -> bool:
        return self.version != "none"

    def describe(self) -> dict:
        """``{"version", "reason"}`` for GET /status."""
        return {"version": self.version, "reason": self.reason or None}

    def adopt(self, vwn: str, home: str | None) -> None:
        """``vwn``'s freezer cgroup is in the sibling node directory ``home`` (v1; v2 follows
        the CPU driver's own adoption)."""
        if home and self.version == "v1" and home != self.node_dir.name:
            self.homes[vwn] = home

    def path(self, vwn: str) -> Path:
        """The cgroup directory whose freezer holds every process of ``vwn``."""
        if self.version == "v2":
            return self.cpu.path(vwn)
        if self.version == "v1":
            return self.node_dir.parent / self.homes.get(vwn, self.node_dir.name) / vwn
        raise CgroupError(f"no freezer: {self.reason}")

    def create(self, vwn: str) -> None:
        """Create the VWN's freezer cgroup (v1; v2 uses the CPU cgroup); CgroupError."""
        if self.version == "v1":
            _mkdir(self.path(vwn))

    def procs_files(self, vwn: str) -> list[str]:
        """The ``cgroup.procs`` files to join besides the CPU and limit cgroups (v1 only)."""
        return [str(self.path(vwn) / "cgroup.procs")] if self.version == "v1" else []

    def frozen(self, vwn: str) -> bool:
        """True when the kernel reports every task of ``vwn`` frozen."""
        d = self.path(vwn)
        if self.version == "v2":
            return "frozen 1" in (_read(d / "cgroup.events") or "").splitlines()
        return (_read(d / "freezer.state") or "").strip() == "FROZEN"

    def freeze(self, vwn: str, timeout_s: float = 10.0) -> None:
        """Freeze every task of ``vwn`` and wait (up to ``timeout_s`` seconds, monotonic) until
        the kernel says they are frozen. CgroupError when it cannot (the VWN is thawed again)."""
        self._set(vwn, True)
        deadline = time.monotonic() + timeout_s
        while not self.frozen(vwn):
            if time.monotonic() > deadline:
                self.thaw(vwn)
                raise CgroupError(f"{self.path(vwn)}: tasks not frozen after {timeout_s} s")
            time.sleep(0.01)

    def thaw(self, vwn: str) -> None:
        """Let every task of ``vwn`` run again (at once, no wait needed); CgroupError."""
        self._set(vwn, False)

    def _set(self, vwn: str, frozen: bool) -> None:
        d = self.path(vwn)
        if self.version == "v2":
            _write(d / "cgroup.freeze", "1" if frozen else "0")
        else:
            _write(d / "freezer.state", "FROZEN" if frozen else "THAWED")

    def kill(self, vwn: str) -> None:
        """SIGKILL every task of ``vwn``, frozen or not, then thaw so that they die (module
        doc). Never raises (a missing cgroup: nothing to kill)."""
        if not self.available:
            return
        try:
            d = self.path(vwn)
            for pid in _read_pids(d / "cgroup.procs"):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if d.exists():
                self.thaw(vwn)
        except (CgroupError, OSError):
            pass

    def remove(self, vwn: str) -> None:
        """Kill what is left and remove the VWN's freezer cgroup (v1); CgroupError."""
        if self.version != "v1":
            return
        d = self.path(vwn)
        self.kill(vwn)
        _kill_loop(d / "cgroup.procs")
        _rmdir(d)
        if self.homes.pop(vwn, None) is not None:
            try:
                d.parent.rmdir()                 # the earlier agent's, once empty
            except OSError:
                pass

    def close(self) -> None:
        """Remove the node's freezer directory (v1), its VWN cgroups first."""
        if self.version != "v1":
            return
        for child in [c for c in self.node_dir.iterdir() if c.is_dir()] if self.node_dir.exists() else []:
            self.kill(child.name)
            _kill_loop(child / "cgroup.procs")
            _rmdir(child)
        _rmdir(self.node_dir)


def open_freezer(node: str, mode: str, parent: str, cpu, mounts_file: str = "/proc/self/mounts",
                 cgroup_file: str = "/proc/self/cgroup",
                 keep: frozenset[str] = frozenset()) -> Freezer:
    """The freezer of node agent ``node`` (``mode``, ``parent`` as ``cgroups.open_cpu_cgroups``;
    ``cpu``: its CPU driver). v2 when the CPU driver is v2 and its directory has
    ``cgroup.freeze`` (kernel >= 5.2), else the v1 freezer hierarchy when mounted and writable,
    else ``Freezer("none", reason=...)``. Stale v1 cgroups of dead agents are swept except
    ``keep``. Never raises for an unwritable system."""
    if mode == "none":
        return Freezer("none", reason="cgroups disabled by configuration (cgroup = \"none\")")
    reasons = []
    if getattr(cpu, "version", None) == "v2":
        if (cpu.node_dir / "cgroup.freeze").exists():
            return Freezer("v2", cpu=cpu)
        reasons.append(f"cgroup2: no cgroup.freeze in {cpu.node_dir} (kernel older than 5.2)")
    if mode in ("auto", "v1"):
        try:
            mounts, own = read_mounts(mounts_file), own_cgroups(cgroup_file)
        except OSError as exc:
            return Freezer("none", reason=f"cannot read the cgroup mounts: {exc}")
        m = next((m for m in mounts if m.fstype == "cgroup" and "freezer" in m.options), None)
        if m is None:
            reasons.append("no cgroup v1 hierarchy with the freezer controller is mounted")
        else:
            d = Path(m.path) / own.get("freezer", "/").lstrip("/") / parent / f"{node}-{os.getpid()}"
            try:
                _mkdir(d)
                if not (d / "freezer.state").exists():
                    raise CgroupError(f"{d / 'freezer.state'} does not exist")
                _thaw_stale(d.parent, node, keep)
                sweep_stale(d.parent, node, keep)
                return Freezer("v1", d)
            except CgroupError as exc:
                reasons.append(str(exc))
    return Freezer("none", reason="no freezer cgroup: " + "; ".join(reasons or ["not tried"]))


def _thaw_stale(parent_dir: Path, node: str, keep: frozenset[str]) -> None:
    """Thaw the VWN freezer cgroups of ``node``'s dead agents that ``keep`` does not claim, so
    that ``sweep_stale`` can kill their tasks (v1 frozen tasks die only once thawed)."""
    try:
        dirs = [d for d in parent_dir.iterdir() if d.is_dir()]
    except OSError:
        return
    for d in dirs:
        owner, _, pid = d.name.rpartition("-")
        if owner != node or not pid.isdigit() or is_running(int(pid)):
            continue
        try:
            for child in [c for c in d.iterdir() if c.is_dir() and f"{d.name}/{c.name}" not in keep]:
                _write(child / "freezer.state", "THAWED")
        except (CgroupError, OSError):
            continue
