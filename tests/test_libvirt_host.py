"""The host side of libvirt VWNs that needs no VM (session 11's CI failures).

- ``kvm_device_access`` gives a device closed to the ``kvm`` group Debian's udev permissions
  (group kvm, mode 0660), and leaves alone what is already right or cannot be changed: without
  them libvirt re-probed qemu about a dozen times per ``createXML`` (48 s per VM start here).
- ``stage_in_and_start(..., hold_lock=False)`` (a VM boot) calls ``start`` without the node
  agent's lock, so another thread (``POST /vwns``, a heartbeat) takes the lock during a boot;
  the default (a zygote fork) keeps it; a VWN cancelled before the check is not started.
"""
from __future__ import annotations

import grp
import os
import stat
import threading
from types import SimpleNamespace

import pytest

from vwn_agents.drivers.libvirtd import kvm_device_access
from vwn_agents.vwn_process import stage_in_and_start


def _group(name: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        pytest.fail(f"group {name!r} is missing: the test machine needs Debian's qemu packages")


def test_a_device_closed_to_the_kvm_group_gets_debians_permissions(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("this test changes a file's group: it runs as root (CI does)")
    kvm = _group("kvm")
    dev = tmp_path / "kvm"
    dev.write_bytes(b"")
    os.chown(dev, 0, 0)
    os.chmod(dev, 0o600)
    changed = kvm_device_access(str(dev))
    st = os.stat(dev)
    assert changed is not None and "group kvm" in changed
    assert st.st_gid == kvm and stat.S_IMODE(st.st_mode) == 0o660
    assert kvm_device_access(str(dev)) is None            # already right: nothing to do
    assert stat.S_IMODE(os.stat(dev).st_mode) == 0o660


def test_a_missing_device_or_group_is_left_alone(tmp_path):
    assert kvm_device_access(str(tmp_path / "absent")) is None
    dev = tmp_path / "kvm"
    dev.write_bytes(b"")
    os.chmod(dev, 0o600)
    assert kvm_device_access(str(dev), group="no-such-group-vgrid") is None
    assert stat.S_IMODE(os.stat(dev).st_mode) == 0o600


def _agent_and_vwn(cancelled: bool = False):
    agent = SimpleNamespace(_lock=threading.RLock(), _stopping=False,
                            conf=SimpleNamespace(prepare=lambda jail, sandbox, stop: None))
    v = SimpleNamespace(jail=None, request=SimpleNamespace(input_sandbox=[]), cancelled=cancelled)
    return agent, v


def _lock_free_elsewhere(agent) -> bool:
    """Can another thread take the agent's lock within 10 s?"""
    got = []

    def other():
        if agent._lock.acquire(timeout=10):
            got.append(True)
            agent._lock.release()
    t = threading.Thread(target=other)
    t.start()
    t.join(20)
    return bool(got)


def test_a_vm_boot_does_not_hold_the_node_agents_lock():
    agent, v = _agent_and_vwn()
    seen = []
    assert stage_in_and_start(agent, v, lambda v: seen.append(_lock_free_elsewhere(agent)),
                              hold_lock=False)
    assert seen == [True]


def test_a_wrapper_start_holds_the_lock_and_a_cancelled_vwn_is_not_started():
    agent, v = _agent_and_vwn()
    seen = []

    def start(v):                     # the other thread must wait: give up after 0.2 s
        got = []
        t = threading.Thread(target=lambda: got.append(agent._lock.acquire(timeout=0.2)))
        t.start()
        t.join(20)
        seen.append(got == [False])
    assert stage_in_and_start(agent, v, start)
    assert seen == [True]
    agent, v = _agent_and_vwn(cancelled=True)
    assert not stage_in_and_start(agent, v, lambda v: seen.append("started"), hold_lock=False)
    assert seen == [True]
