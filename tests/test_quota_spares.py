"""Spare quota file systems (issue 12, ``vwn_agents.quota_spares``) and the mount system calls
behind them (``vwn_agents.mounts``): real loop-mounted ext4 images, real mount moves."""
from __future__ import annotations

import errno
import os
import subprocess

import pytest

from vwn_agents import mounts, quota
from vwn_agents.quota_spares import SpareImages

from .waiting import wait_until


@pytest.fixture
def loop_ok(tmp_path):
    why = quota.probe(tmp_path)
    if why:
        pytest.skip(f"this host cannot loop-mount an ext4 image: {why}")


def _mounts_under(d) -> list[str]:
    with open("/proc/self/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(str(d))]


def test_a_taken_spare_is_mounted_in_place_holds_its_quota_and_is_replaced(tmp_path, loop_ok):
    d = tmp_path / "spares"
    spares = SpareImages(d, 8, keep=2, retry_s=0.1)
    try:
        wait_until(lambda: len(spares.ready()) == 2, "two spares", timeout_s=60)
        ready = spares.ready()
        work = tmp_path / "work"
        work.mkdir()
        assert spares.take(tmp_path / "disk.img", work)
        assert os.path.ismount(work) and (tmp_path / "disk.img").stat().st_size == 8_000_000
        assert not (work / "lost+found").exists() and not any(work.iterdir())     # empty
        assert not (d / f"{ready[0].stem}.mnt").exists() and not ready[0].exists()  # moved, not copied
        with pytest.raises(OSError) as full:                                      # the quota holds
            with open(work / "big", "wb") as f:
                for _ in range(16):
                    f.write(b"\0" * 1_000_000)
                    f.flush()
                    os.fsync(f.fileno())
        assert full.value.errno == errno.ENOSPC
        again = wait_until(lambda: len(spares.ready()) == 2 and spares.ready(), "a new spare", timeout_s=60)
        assert ready[0] not in again                                              # never used twice
        assert spares.taken == 1
        quota.detach(tmp_path / "disk.img", work)
        assert not os.path.ismount(work) and not (tmp_path / "disk.img").exists()
    finally:
        spares.close()
    assert _mounts_under(d) == [] and list(d.iterdir()) == []                    # close removes them


def test_no_spare_ready_answers_false_at_once(tmp_path, loop_ok):
    spares = SpareImages(tmp_path / "spares", 8, keep=1, retry_s=0.1)
    try:
        wait_until(lambda: spares.ready(), "a spare", timeout_s=60)
        work = [tmp_path / f"w{i}" for i in range(2)]
        for w in work:
            w.mkdir()
        assert spares.take(tmp_path / "a.img", work[0])
        # the next one is being made: a second take does not wait for it
        took = spares.take(tmp_path / "b.img", work[1])
        assert took or spares.misses == 1
        if not took:
            assert not os.path.ismount(work[1]) and not (tmp_path / "b.img").exists()
        for w, img in zip(work, ("a.img", "b.img")):
            quota.detach(tmp_path / img, w)
    finally:
        spares.close()


def test_what_an_earlier_agent_left_is_unmounted_and_removed(tmp_path, loop_ok):
    d = tmp_path / "spares"
    d.mkdir()
    for name in ("8mb-half.tmp", "16mb-other.img", "notes.txt"):
        (d / name).write_bytes(b"x")
    killed = d / "8mb-killed.mnt"                 # a spare of an agent killed with kill -9
    killed.mkdir()
    quota.attach(d / "8mb-killed.img", killed, 8)
    assert os.path.ismount(killed)
    spares = SpareImages(d, 8, keep=1, retry_s=0.1)
    try:
        assert not any((d / n).exists() for n in ("8mb-half.tmp", "16mb-other.img", "notes.txt",
                                                   "8mb-killed.img", "8mb-killed.mnt"))
        wait_until(lambda: spares.ready(), "a spare", timeout_s=60)
        assert _mounts_under(d) == [str(d / f"{spares.ready()[0].stem}.mnt")]
    finally:
        spares.close()


def test_a_mount_under_a_shared_mount_is_moved_by_bind_and_detach(tmp_path, loop_ok):
    """MS_MOVE is refused (EINVAL) below a shared mount (systemd hosts): ``mounts.move`` then
    binds and detaches the source; the file system ends up at the target either way."""
    shared = tmp_path / "shared"
    shared.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "vgrid-test", str(shared)], check=True)
    try:
        subprocess.run(["mount", "--make-shared", str(shared)], check=True)
        src, dst = shared / "src", tmp_path / "dst"
        src.mkdir()
        dst.mkdir()
        quota.attach(tmp_path / "s.img", src, 8)
        (src / "mark").write_text("here")
        mounts.move(src, dst)
        assert os.path.ismount(dst) and (dst / "mark").read_text() == "here"
        assert not os.path.ismount(src)
        quota.detach(tmp_path / "s.img", dst)
        assert not os.path.ismount(dst)
    finally:
        subprocess.run(["umount", "-l", str(shared)], check=False)


def test_unmount_refuses_what_is_not_a_mount_point(tmp_path):
    with pytest.raises(OSError) as exc:
        mounts.unmount(tmp_path)
    assert exc.value.errno == errno.EINVAL


def test_detach_takes_the_mount_away_at_once_and_the_loop_device_is_released(tmp_path, loop_ok):
    mnt = tmp_path / "m"
    mnt.mkdir()
    quota.attach(tmp_path / "d.img", mnt, 8)
    (mnt / "data").write_bytes(b"x" * 1_000_000)

    def loops() -> str:
        return subprocess.run(["losetup", "-j", str(tmp_path / "d.img")], capture_output=True,
                              text=True).stdout.strip()

    assert loops()
    mounts.detach(mnt)
    assert not os.path.ismount(mnt) and _mounts_under(tmp_path) == []
    wait_until(lambda: not loops(), "the loop device to be released", timeout_s=30)
