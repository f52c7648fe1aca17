"""The cgroup v2 freezer path (``cgroup.freeze`` / ``cgroup.events``) on a real v2 hierarchy.

``freezer.Freezer("v2")`` freezes the VWN's cgroup of the v2 CPU driver. A node agent uses it
when its CPU cgroups are v2 (``cgroups.open_cpu_cgroups``), which needs the cpu controller in
the v2 hierarchy. On a host with a hybrid layout (v1 controllers, a controller-less cgroup2 at
``/sys/fs/cgroup/unified``) the node agent runs on v1, but every non-root v2 cgroup still has
``cgroup.freeze`` and ``cpu.stat``'s ``usage_usec`` (no controller needed), so this test drives
the v2 freezer itself through ``open_freezer`` with a ``CgroupV2`` driver made on that mount:
a CPU-burning counter is frozen (no CPU used over a measured window, nothing printed), thawed
(the counter goes on from where it stopped) and killed while frozen. It skips only where no
writable cgroup2 filesystem is mounted (the reason is printed).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vwn_agents.cgroups import CgroupV2, _rmdir, own_cgroups, read_mounts
from vwn_agents.freezer import open_freezer
from vwn_agents.proctree import is_running

from .test_vwn_suspend import BURN, counters, usage_flat
from .waiting import wait_until


def _v2_node_dir() -> tuple[Path | None, str]:
    """A fresh node directory in a writable cgroup2 hierarchy, or (None, why not)."""
    mounts = [m for m in read_mounts() if m.fstype == "cgroup2"]
    if not mounts:
        return None, "no cgroup2 filesystem is mounted"
    base = Path(mounts[0].path) / own_cgroups().get("", "/").lstrip("/")
    parent = base / f"vgrid-test-fz2-{os.getpid()}"
    try:
        parent.mkdir(exist_ok=True)
        node_dir = parent / f"fz2-{os.getpid()}"
        node_dir.mkdir(exist_ok=True)
    except OSError as exc:
        return None, f"cgroup2 at {base} is not writable: {exc.strerror}"
    if not (node_dir / "cgroup.freeze").exists():
        return None, f"cgroup2 at {base}: no cgroup.freeze (kernel older than 5.2)"
    return node_dir, ""


@pytest.fixture
def v2_driver():
    node_dir, why = _v2_node_dir()
    if node_dir is None:
        pytest.skip(f"cgroup v2 freezer not testable here: {why}")
    drv = CgroupV2(node_dir)
    try:
        yield drv
    finally:
        for child in [c for c in node_dir.iterdir() if c.is_dir()]:
            drv.kill(child.name)
            _rmdir(child)
        _rmdir(node_dir)
        _rmdir(node_dir.parent)


def test_the_v2_freezer_freezes_thaws_and_kills_a_burning_job(v2_driver, tmp_path):
    fz = open_freezer("fz2", "auto", "unused", v2_driver)
    assert fz.version == "v2" and fz.available, fz.reason
    vwn = "vwn-1"
    v2_driver.create(vwn)
    fz.create(vwn)
    assert fz.procs_files(vwn) == []              # v2: the CPU cgroup is the freezer cgroup
    assert fz.path(vwn) == v2_driver.path(vwn)
    script, gate, out = tmp_path / "burn.py", tmp_path / "gate", tmp_path / "out.txt"
    script.write_text(BURN)
    procs = v2_driver.path(vwn) / "cgroup.procs"
    with out.open("w") as f:                        # the child joins the cgroup before it execs
        p = subprocess.Popen([sys.executable, str(script), str(gate)], stdout=f,
                             preexec_fn=lambda: procs.write_text(str(os.getpid())))
    try:
        assert v2_driver.pids(vwn) == [p.pid]
        wait_until(lambda: len(counters(out)) >= 3, "the counter to print")
        assert not fz.frozen(vwn)

        fz.freeze(vwn)
        assert fz.frozen(vwn)
        assert "frozen 1" in (v2_driver.path(vwn) / "cgroup.events").read_text().splitlines()
        printed = len(counters(out))
        u0, u1 = usage_flat(lambda: v2_driver.cpu_usage_s(vwn))
        assert u1 - u0 < 0.005, f"a frozen v2 cgroup used {u1 - u0:.4f} s of CPU"
        assert len(counters(out)) == printed, "a frozen job printed"

        fz.thaw(vwn)
        assert not fz.frozen(vwn)
        wait_until(lambda: len(counters(out)) >= printed + 3, "the counter to go on after the thaw")
        seen = counters(out)
        assert seen == list(range(len(seen))), "the job restarted or lost its place"
        assert v2_driver.cpu_usage_s(vwn) > u1

        fz.freeze(vwn)                              # killed while frozen: it dies, never runs again
        frozen_at = len(counters(out))
        fz.kill(vwn)
        wait_until(lambda: p.poll() is not None, "the frozen job to die")
        assert p.returncode == -9 and not is_running(p.pid)
        assert len(counters(out)) == frozen_at
        assert v2_driver.pids(vwn) == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_open_freezer_says_why_there_is_no_v2_freezer(tmp_path):
    class NoFreeze:                                 # a v2 driver whose directory lacks cgroup.freeze
        version, node_dir = "v2", tmp_path
    fz = open_freezer("fz2", "v2", "unused", NoFreeze())
    assert not fz.available
    assert "no cgroup.freeze" in fz.reason and str(tmp_path) in fz.reason
    assert open_freezer("fz2", "none", "unused", NoFreeze()).reason.startswith("cgroups disabled")
