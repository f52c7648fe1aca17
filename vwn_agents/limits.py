"""Memory and process limits of a VWN in its cgroup (next to the CPU cap of ``cgroups``).

Each VWN gets ``<controller mount>/<own cgroup>/<parent>/<node>-<agent pid>/<vwn>`` in the
memory and pids hierarchies (cgroup v1), or uses the same directory as its CPU cgroup in the
unified hierarchy (v2), with:

- memory: v1 ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` when swap is
  accounted, so the job cannot swap past it); v2 ``memory.max`` and ``memory.swap.max = 0``.
  An OOM kill is seen in v1 ``memory.oom_control`` (``oom_kill N``; older kernels: a non-zero
  ``memory.failcnt``) or v2 ``memory.events`` (``oom_kill N``);
- pids: ``pids.max`` (tasks, threads included): fork and clone fail with EAGAIN beyond it.

A controller that is not mounted or not writable is missing, never silently: ``missing`` maps
``"memory"``/``"pids"`` to the reason, shown in the node's status and every VWN record.
"""
from __future__ import annotations

import os
from pathlib import Path

from .cgroups import (GONE, CgroupError, _kill_loop, _mkdir, _read, _read_stat, _rmdir, _write,
                      own_cgroups, read_mounts, sweep_stale)

CONTROLLERS = ("memory", "pids")


class ResourceLimits:
    """Memory and pids cgroups of a node's VWNs; ``dirs[controller]`` is the node directory of
    each controller that works (v1: one per hierarchy; v2: both the same directory)."""

    def __init__(self, version: str, dirs: dict[str, Path], missing: dict[str, str]) -> None:
        self.version, self.dirs, self.missing = version, dirs, missing
        self.homes: dict[str, str] = {}   # adopted VWN -> an earlier agent's node directory name

    def adopt(self, vwn: str, home: str | None) -> None:
        """``vwn``'s cgroups are in the sibling node directories ``home`` (an earlier agent's)."""
        if home:
            self.homes[vwn] = home

    def _dir(self, ctrl: str, vwn: str) -> Path:
        d = self.dirs[ctrl]
        return (d.parent / self.homes[vwn] if vwn in self.homes else d) / vwn

    def describe(self) -> dict:
        """``{"version", "controllers", "missing": {controller: reason}}`` for GET /status."""
        return {"version": self.version, "controllers": sorted(self.dirs), "missing": self.missing}

    def _vwn_dirs(self, vwn: str) -> list[Path]:
        return sorted({self._dir(c, vwn) for c in self.dirs})

    def create(self, vwn: str, memory_bytes: int | None, pids_max: int | None) -> None:
        """Create the VWN's cgroups and write its limits (None: no limit); CgroupError."""
        for d in self._vwn_dirs(vwn):
            _mkdir(d)
        if memory_bytes and "memory" in self.dirs:
            d = self._dir("memory", vwn)
            if self.version == "v2":
                _write(d / "memory.max", str(memory_bytes))
                swap = (d / "memory.swap.max", "0")
            else:
                _write(d / "memory.limit_in_bytes", str(memory_bytes))
                swap = (d / "memory.memsw.limit_in_bytes", str(memory_bytes))
            if swap[0].exists():
                try:                         # best effort: swap may not be accounted
                    _write(*swap)
                except CgroupError:
                    pass
        if pids_max and "pids" in self.dirs:
            _write(self._dir("pids", vwn) / "pids.max", str(pids_max))

    def procs_files(self, vwn: str) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid to, to join the VWN."""
        return [str(d / "cgroup.procs") for d in self._vwn_dirs(vwn)]

    def read_limits(self, vwn: str) -> dict[str, int | None]:
        """``{"memory_bytes", "pids_max"}`` read back from the kernel's files (None: none/unknown)."""
        out: dict[str, int | None] = {"memory_bytes": None, "pids_max": None}
        if "memory" in self.dirs:
            f = "memory.max" if self.version == "v2" else "memory.limit_in_bytes"
            text = (_read(self._dir("memory", vwn) / f) or "").strip()
            out["memory_bytes"] = int(text) if text.isdigit() else None
        if "pids" in self.dirs:
            text = (_read(self._dir("pids", vwn) / "pids.max") or "").strip()
            out["pids_max"] = int(text) if text.isdigit() else None
        return out

    def oom_killed(self, vwn: str) -> bool:
        """True when the kernel OOM-killed a task of the VWN (read before ``remove``)."""
        if "memory" not in self.dirs:
            return False
        d = self._dir("memory", vwn)
        if self.version == "v2":
            return _read_stat(d / "memory.events").get("oom_kill", 0) > 0
        stat = _read_stat(d / "memory.oom_control")
        if "oom_kill" in stat:
            return stat["oom_kill"] > 0
        return int((_read(d / "memory.failcnt") or "0").strip() or 0) > 0

    def pids_refused(self, vwn: str) -> int:
        """How many forks the pids limit refused (``pids.events`` max), 0 when unknown."""
        if "pids" not in self.dirs:
            return 0
        return _read_stat(self._dir("pids", vwn) / "pids.events").get("max", 0)

    def kill(self, vwn: str) -> None:
        """SIGKILL every task of the VWN in these hierarchies."""
        for d in self._vwn_dirs(vwn):
            _kill_loop(d / "cgroup.procs")

    def remove(self, vwn: str) -> None:
        """Kill what is left and remove the VWN's cgroups; CgroupError."""
        self.kill(vwn)
        for d in self._vwn_dirs(vwn):
            _rmdir(d)
            if vwn in self.homes:
                try:
                    d.parent.rmdir()                  # the earlier agent's, once empty
                except OSError:
                    pass
        self.homes.pop(vwn, None)

    def close(self) -> None:
        """Remove the node directories (their VWN cgroups first)."""
        for d in sorted(set(self.dirs.values())):
            try:
                children = [c for c in d.iterdir() if c.is_dir()]
            except OSError as exc:
                if exc.errno in GONE:
                    continue
                raise
            for child in children:
                _kill_loop(child / "cgroup.procs")
                _rmdir(child)
            _rmdir(d)


def open_limits(node: str, mode: str = "auto", parent: str = "vgrid", cpu_dir: Path | None = None,
                mounts_file: str = "/proc/self/mounts",
                cgroup_file: str = "/proc/self/cgroup",
                keep: frozenset[str] = frozenset()) -> ResourceLimits:
    """The memory/pids cgroups of node agent ``node`` (``mode`` as ``cgroups.open_cpu_cgroups``).

    v2 is used when the CPU driver is v2 (``cpu_dir``: its node directory) and the unified
    hierarchy offers the controller; otherwise each controller's v1 hierarchy. Stale cgroups of
    this node's dead agents are swept except ``keep`` (``cgroups.sweep_stale``). Never raises for
    an unwritable system: a controller that does not work is listed in ``missing``.
    """
    missing: dict[str, str] = {}
    if mode == "none":
        return ResourceLimits("none", {}, {c: "cgroups disabled by configuration" for c in CONTROLLERS})
    try:
        mounts, own = read_mounts(mounts_file), own_cgroups(cgroup_file)
    except OSError as exc:
        return ResourceLimits("none", {}, {c: f"cannot read the cgroup mounts: {exc}" for c in CONTROLLERS})
    rel = Path(parent) / f"{node}-{os.getpid()}"
    if cpu_dir is not None and mode in ("auto", "v2"):
        dirs = {}
        for ctrl in CONTROLLERS:
            try:
                _enable_v2(cpu_dir, rel, ctrl)
                dirs[ctrl] = cpu_dir
            except (CgroupError, OSError) as exc:
                missing[ctrl] = f"cgroup2: {exc}"
        if dirs:
            return ResourceLimits("v2", dirs, missing)
    dirs = {}
    for ctrl in CONTROLLERS:
        m = next((m for m in mounts if m.fstype == "cgroup" and ctrl in m.options), None)
        if m is None:
            missing[ctrl] = f"no cgroup v1 hierarchy with the {ctrl} controller is mounted"
            continue
        d = Path(m.path) / own.get(ctrl, "/").lstrip("/") / rel
        probe = "memory.limit_in_bytes" if ctrl == "memory" else "pids.max"
        try:
            _mkdir(d)
            if not (d / probe).exists():
                raise CgroupError(f"{d / probe} does not exist")
            sweep_stale(d.parent, node, keep)
            dirs[ctrl] = d
            missing.pop(ctrl, None)
        except CgroupError as exc:
            missing[ctrl] = str(exc)
    return ResourceLimits("v1" if dirs else "none", dirs, missing)


def _enable_v2(cpu_dir: Path, rel: Path, ctrl: str) -> None:
    """Enable ``ctrl`` on the path from the unified root's own cgroup down to ``cpu_dir``."""
    base = cpu_dir
    for _ in rel.parts:
        base = base.parent
    if ctrl not in (base / "cgroup.controllers").read_text().split():
        raise CgroupError(f"{ctrl} controller not available at {base}")
    d = base
    for part in rel.parts:
        _write(d / "cgroup.subtree_control", f"+{ctrl}")
        d = d / part
    _write(d / "cgroup.subtree_control", f"+{ctrl}")
