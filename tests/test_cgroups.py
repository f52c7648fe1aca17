"""CPU caps: the fair-share rule (seed 004, 5.1), cgroup detection, and real cgroup files."""
from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from vwn_agents import cgroups, fairshare
from vwn_agents.node_agent import JOIN_AND_EXEC
from vwn_agents.proctree import is_running

from .waiting import wait_until


# -- the VWN capacity rule ----------------------------------------------------------------------

def test_vwn_cap_is_capacity_over_running_plus_one():
    assert fairshare.vwn_cap(1.0, 0) == 1.0
    assert fairshare.vwn_cap(1.0, 1) == 0.5
    assert fairshare.vwn_cap(0.5, 3) == 0.125
    assert fairshare.equal_shares(1.0, 3) == pytest.approx(1 / 3)
    assert fairshare.equal_shares(1.0, 0) is None


@pytest.mark.parametrize("capacity, running", [(0, 0), (-1.0, 2), (1.0, -1)])
def test_vwn_cap_rejects_bad_input(capacity, running):
    with pytest.raises(ValueError):
        fairshare.vwn_cap(capacity, running)


@given(st.floats(min_value=0.01, max_value=64), st.lists(st.booleans(), max_size=40))
def test_shares_always_split_capacity_equally(capacity, arrivals):
    """Figure 2 of seed 004: after any arrivals/departures every VWN has C/n and they sum to C."""
    caps: list[float] = []
    for arrive in arrivals:
        if arrive:
            share = fairshare.vwn_cap(capacity, len(caps))
            caps = [share] * (len(caps) + 1)
        elif caps:
            caps.pop()
            share = fairshare.equal_shares(capacity, len(caps))
            caps = [share] * len(caps)
        if caps:
            assert sum(caps) == pytest.approx(capacity)
            assert len(set(caps)) == 1


def test_quota_us():
    assert cgroups.quota_us(1.0) == 100_000
    assert cgroups.quota_us(0.5) == 50_000
    assert cgroups.quota_us(2.0) == 200_000
    assert cgroups.quota_us(0.001) == cgroups.MIN_QUOTA_US
    with pytest.raises(ValueError):
        cgroups.quota_us(0)


# -- detection ------------------------------------------------------------------------------------

def test_parse_mounts_and_own_cgroups(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "proc /proc proc rw 0 0\n"
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
        "cgroup /sys/fs/cgroup/cpuset cgroup rw,cpuset 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n")
    found = cgroups.read_mounts(str(mounts))
    assert [(m.path, m.fstype) for m in found] == [
        ("/sys/fs/cgroup/cpu,cpuacct", "cgroup"), ("/sys/fs/cgroup/cpuset", "cgroup"),
        ("/sys/fs/cgroup/unified", "cgroup2")]
    assert "cpu" in found[0].options and "cpu" not in found[1].options
    own = tmp_path / "cgroup"
    own.write_text("3:cpu,cpuacct:/batch/a\n2:cpuset:/\n0::/user.slice\n")
    assert cgroups.own_cgroups(str(own)) == {"cpu": "/batch/a", "cpuacct": "/batch/a",
                                             "cpuset": "/", "": "/user.slice"}


def test_unwritable_system_gives_uncapped_with_reasons(tmp_path):
    """A cgroup2 without the cpu controller and no v1 cpu hierarchy: uncapped, and it says why."""
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("memory pids\n")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup2 {unified} cgroup2 rw 0 0\n")
    own = tmp_path / "cgroup"
    own.write_text("0::/\n")
    driver = cgroups.open_cpu_cgroups("n1", mounts_file=str(mounts), cgroup_file=str(own))
    assert isinstance(driver, cgroups.Uncapped) and not driver.capped
    assert "cpu controller not available (cgroup.controllers: memory pids)" in driver.reason
    assert "no cgroup v1 hierarchy with the cpu controller" in driver.reason
    assert driver.describe() == {"version": "none", "writable": False,
                                 "reason": driver.reason, "path": None}


def test_mode_none_and_bad_mode():
    assert "disabled by configuration" in cgroups.open_cpu_cgroups("n", mode="none").reason
    with pytest.raises(ValueError):
        cgroups.open_cpu_cgroups("n", mode="v3")


# -- real cgroups ---------------------------------------------------------------------------------

@pytest.fixture
def real_cgroups(request):
    """The real CPU cgroup driver of this machine; skips (saying why) when none is writable."""
    driver = cgroups.open_cpu_cgroups(f"test-{request.node.name[:20]}")
    if not driver.capped:
        pytest.skip(f"this kernel offers no writable CPU cgroup: {driver.reason}")
    yield driver
    driver.close()
    assert not driver.node_dir.exists()


def test_cap_written_to_the_kernel_files(real_cgroups):
    d = real_cgroups
    d.create("vwn-t-1")
    d.set_cap("vwn-t-1", 0.25)
    path = d.path("vwn-t-1")
    if d.version == "v1":
        assert (path / "cpu.cfs_quota_us").read_text().strip() == "25000"
        assert (path / "cpu.cfs_period_us").read_text().strip() == "100000"
    else:
        assert (path / "cpu.max").read_text().split() == ["25000", "100000"]
    assert d.read_cap("vwn-t-1") == 0.25
    d.set_cap("vwn-t-1", 1.0)
    assert d.read_cap("vwn-t-1") == 1.0
    d.remove("vwn-t-1")
    assert not path.exists()


def _burn_in_cgroup(driver, vwn: str, cpu_s: float, until_throttled_s: float = 0.0) -> subprocess.Popen:
    """A CPU-bound Python process that joins ``vwn``'s cgroup before exec and burns ``cpu_s``;
    with ``until_throttled_s``, it goes on burning until the cgroup's cpu.stat counts a throttled
    period or that many seconds of wall time have passed (on a loaded machine a process may get
    less CPU than its cap for a while, and then the kernel has nothing to throttle)."""
    burn = ("import sys, time\nt, c = time.monotonic(), time.process_time()\n"
            "def throttled():\n"
            "    stat = dict(l.split() for l in open(sys.argv[1]) if l.strip())\n"
            "    return int(stat.get('nr_throttled', 0)) > 0\n"
            "checked = c\n"
            "while time.process_time() - c < %r or (time.monotonic() - t < %r and not throttled()):\n"
            "    while time.process_time() - checked < 0.01: pass\n"
            "    checked = time.process_time()\n"
            "print(time.monotonic() - t, time.process_time() - c)" % (cpu_s, until_throttled_s))
    return subprocess.Popen(["/bin/sh", "-c", JOIN_AND_EXEC, "join", *driver.procs_files(vwn),
                             "--", sys.executable, "-c", burn, str(driver.path(vwn) / "cpu.stat")],
                            stdout=subprocess.PIPE, text=True)


def test_cpu_bound_process_is_throttled(real_cgroups):
    """0.25 s of CPU under a 0.2-core cap needs ~1.25 s of wall time; the kernel throttled it.

    What the cgroup guarantees, and so what is asserted: the cap written in the kernel's file,
    and an upper bound on the CPU consumed (at most the cap per period, whatever the machine's
    load; a loaded machine only lowers it). That the process *reached* its cap is not asserted
    as a rate: the burner goes on until the kernel has throttled it once (within 60 s)."""
    d = real_cgroups
    d.create("vwn-burn")
    d.set_cap("vwn-burn", 0.2)
    assert d.read_cap("vwn-burn") == 0.2
    proc = _burn_in_cgroup(d, "vwn-burn", 0.25, until_throttled_s=60.0)
    out, _ = proc.communicate(timeout=120)
    wall, cpu = map(float, out.split())
    assert cpu >= 0.25
    assert wall >= 0.85 * cpu / 0.2, f"wall {wall:.2f} s for {cpu:.2f} s CPU: not capped at 0.2"
    assert d.throttling("vwn-burn")["nr_throttled"] > 0, f"never throttled in {wall:.1f} s ({cpu:.2f} s CPU)"
    usage = d.cpu_usage_s("vwn-burn")
    if usage is not None:
        assert usage >= 0.25
    d.remove("vwn-burn")


def test_kill_reaches_children_that_left_the_process_group(real_cgroups):
    d = real_cgroups
    d.create("vwn-kill")
    proc = subprocess.Popen(["/bin/sh", "-c", JOIN_AND_EXEC, "join", *d.procs_files("vwn-kill"),
                             "--", "/bin/sh", "-c", "setsid sleep 300 & sleep 300"])
    try:
        wait_until(lambda: len(d.pids("vwn-kill")) >= 3, "3 processes in the cgroup", interval_s=0.02)
    except AssertionError:
        pass                                      # the assertion below names what is missing
    pids = d.pids("vwn-kill")
    assert len(pids) >= 3
    d.remove("vwn-kill")
    proc.wait(timeout=5)
    assert not [pid for pid in pids if is_running(pid)]


def test_stale_node_cgroups_of_dead_agents_are_swept(real_cgroups):
    parent = real_cgroups.node_dir.parent
    stale = parent / "ghost-999999999"
    stale.mkdir()
    (stale / "vwn-ghost-1").mkdir()
    removed = cgroups.sweep_stale(parent)
    assert "ghost-999999999" in removed and not stale.exists()
    assert real_cgroups.node_dir.exists()       # a live agent's cgroup is left alone


def test_the_sweep_spares_claimed_vwns_and_other_nodes(real_cgroups):
    """A restarted node agent sweeps only its own dead agents' cgroups, minus the VWN cgroups its
    database still claims (they are adopted)."""
    parent = real_cgroups.node_dir.parent
    mine, other = parent / "spare-999999998", parent / "elsewhere-999999998"
    for d in (mine / "vwn-spare-1", mine / "vwn-spare-2", other / "vwn-elsewhere-1"):
        d.mkdir(parents=True)
    removed = cgroups.sweep_stale(parent, "spare", frozenset({"spare-999999998/vwn-spare-1"}))
    assert removed == ["spare-999999998/vwn-spare-2"]
    assert (mine / "vwn-spare-1").exists() and (other / "vwn-elsewhere-1").exists()
    real_cgroups.adopt("vwn-spare-1", "spare-999999998")
    assert real_cgroups.path("vwn-spare-1") == mine / "vwn-spare-1"
    real_cgroups.remove("vwn-spare-1")              # the adopted VWN ends: its old directory goes
    assert not mine.exists()
    assert cgroups.sweep_stale(parent, "elsewhere") == ["elsewhere-999999998/vwn-elsewhere-1",
                                                        "elsewhere-999999998"]


def test_v2_driver_file_format_on_a_stand_in_tree(tmp_path):
    """The cgroup v2 path (this kernel's cgroup2 has no cpu controller, so the kernel cannot be
    used): plain files stand in for the unified hierarchy to check what the driver writes."""
    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup2 {root} cgroup2 rw 0 0\n")
    own = tmp_path / "cgroup"
    own.write_text("0::/\n")
    driver = cgroups.open_cpu_cgroups("wn9", mode="v2", mounts_file=str(mounts),
                                      cgroup_file=str(own))
    assert isinstance(driver, cgroups.CgroupV2) and driver.capped
    assert (root / "cgroup.subtree_control").read_text() == "+cpu"
    assert (root / "vgrid" / "cgroup.subtree_control").read_text() == "+cpu"
    driver.create("vwn-wn9-1")
    driver.set_cap("vwn-wn9-1", 0.5)
    assert (driver.path("vwn-wn9-1") / "cpu.max").read_text() == "50000 100000"
    assert driver.read_cap("vwn-wn9-1") == 0.5
    (driver.path("vwn-wn9-1") / "cpu.max").write_text("max 100000")
    assert driver.read_cap("vwn-wn9-1") is None
    (driver.path("vwn-wn9-1") / "cpu.stat").write_text("usage_usec 1500000\nnr_throttled 4\n")
    assert driver.cpu_usage_s("vwn-wn9-1") == 1.5
    assert driver.procs_files("vwn-wn9-1") == [str(driver.path("vwn-wn9-1") / "cgroup.procs")]
