"""VOC nodes as booted libvirt VMs (issue 15, seed 003 Section 3.3): the watchdog grows a VO's
cluster by booting real qemu domains through ``LibvirtVOCDriver``; each node's boot delay is
measured (libvirt call to the guest agent's first line); a VM killed -9 leaves the pool at the
next check (Section 5.3); shrinking destroys the domain. Skips only where libvirt or qemu cannot
run, saying why."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from vgrid_runtime.clock import WallClock
from vwn_agents.voc.policies import make_policy
from vwn_agents.voc.pool import VOCNodeState, VOCPool
from vwn_agents.voc.watchdog import Watchdog

from .vm_site import libvirt_vms
from .waiting import wait_until


@pytest.fixture(scope="module")
def vms():
    yield from libvirt_vms("vgrid-test-voc-vms-")


def test_voc_nodes_are_booted_vms_with_measured_boot_delay(vms):
    from vwn_agents.voc.vmdriver import LibvirtVOCDriver
    clock, lock = WallClock(), threading.Lock()
    pool_box = {}

    def ready(node_id):
        with lock:
            pool_box["pool"].ready(node_id, clock.now())

    def lost(node_id, why):
        with lock:
            pool_box["pool"].lost(node_id, clock.now(), why)

    driver = LibvirtVOCDriver(vms, 2, f"vt{os.getpid()}", ready, lost, memory_mb=128)
    pool = pool_box["pool"] = VOCPool(2, driver)
    wd = Watchdog(pool, make_policy("greedy"), 1.0)
    booted = []
    try:
        with lock:
            report = wd.tick(clock.now(), {"alpha": (2, 0)})     # two alpha jobs queued: grow to 2
        booted = [nid for ids in report.booted.values() for nid in ids]
        assert len(booted) == 2 and pool.boots == 2
        wait_until(lambda: all(n.state is VOCNodeState.IDLE for n in pool.live()) and len(pool.live()) == 2,
                   "two VOC VMs booted", timeout_s=150)
        boot_s = [n.boot_s for n in pool.live()]
        print(f"VOC VM boot delays {[round(b, 2) for b in boot_s]} s ({vms.why})")
        assert all(b is not None and b > 0 for b in boot_s)
        # one VM dies uncleanly: it leaves the pool at the next check
        victim, other = pool.live()
        os.kill(driver.qemu_pid(victim.id), signal.SIGKILL)
        wait_until(lambda: victim.id in driver.check() or victim.id not in pool.nodes,
                   "the killed VM detected", timeout_s=30)
        assert victim.id not in pool.nodes and pool.gone[-1].gone_reason.startswith("lost: its VM is gone")
        # the queue drained: the greedy watchdog terminates the idle VM, its domain is destroyed
        with lock:
            wd.tick(clock.now(), {"alpha": (0, 0)})
        assert pool.live() == [] and vms.state(driver.vwn(other.id)) == "gone"
    finally:
        for nid in booted:
            vms.remove(driver.vwn(nid))
