"""VOC VMs that take jobs after boot (issue 15, seed 003 Section 3.3): a VOC node booted as a
real libvirt VM serves its VO's jobs one after another over its job channel
(``drivers.guest_serve``): two jobs run in the same VM -- one boot -- with their outputs and
exit codes returned, as the guest's unprivileged account; then the watchdog shrinks the VOC and
the domain is gone. Skips only where libvirt or qemu cannot run, saying why."""
from __future__ import annotations

import os
import shutil
import tempfile
import threading

import pytest

from vgrid_runtime.clock import WallClock
from vwn_agents.drivers import guest
from vwn_agents.drivers.guest_serve import ServeError, job_state
from vwn_agents.drivers.libvirtd import LibvirtUnavailable, ensure_libvirtd
from vwn_agents.voc.policies import make_policy
from vwn_agents.voc.pool import VOCNodeState, VOCPool
from vwn_agents.voc.watchdog import Watchdog

from .waiting import wait_until


@pytest.fixture(scope="module")
def vms():
    try:
        daemons = ensure_libvirtd()
        g = guest.build_guest("/var/cache/vgrid/guest")
        from vwn_agents.drivers.libvirt_driver import LibvirtVMs
        from vwn_agents.drivers.libvirt_vwn import _probe
        kvm, why = _probe(g, "auto", 10.0)
        d = tempfile.mkdtemp(prefix="vgrid-voc-serve-", dir="/var/tmp")
        os.chmod(d, 0o755)
        v = LibvirtVMs("qemu:///system", d, g, kvm, why)
    except (LibvirtUnavailable, guest.GuestBuildError, ImportError) as exc:
        pytest.skip(f"libvirt/qemu cannot run here: {exc}")
    yield v
    v.close()
    shutil.rmtree(d, ignore_errors=True)
    daemons.stop()


def test_job_state_reads_one_job_of_a_sequence():
    ch = (b"VGRID-RUNNING\nVGRID-READY\nVGRID-JOB 1\nVGRID-RESULT 3\nVGRID-FILES\nVGRID-END\n"
          b"VGRID-READY\nVGRID-JOB 2\nVGRID-PROGRESS 5\n")
    one, two, three = job_state(ch, 1), job_state(ch, 2), job_state(ch, 3)
    assert one.started and one.complete and one.exit_code == 3 and one.files == {}
    assert two.started and not two.complete and two.exit_code is None and two.progress == 5
    assert not three.started and not three.complete
    assert job_state(ch + b"VGRID-BAD 3\n", 3).bad


def test_a_voc_vm_runs_two_jobs_after_one_boot_then_shrinks(vms, tmp_path):
    from vwn_agents.voc.vmdriver import LibvirtVOCDriver
    clock, lock = WallClock(), threading.Lock()
    box = {}

    def ready(node_id):
        with lock:
            box["pool"].ready(node_id, clock.now())

    def lost(node_id, why):
        with lock:
            box["pool"].lost(node_id, clock.now(), why)

    driver = LibvirtVOCDriver(vms, 1, f"vs{os.getpid()}", ready, lost, memory_mb=128)
    pool = box["pool"] = VOCPool(1, driver)
    wd = Watchdog(pool, make_policy("greedy"), 1.0)
    try:
        with lock:
            wd.tick(clock.now(), {"alpha": (2, 0)})
        assert pool.boots == 1
        wait_until(lambda: [n.state for n in pool.live()] == [VOCNodeState.IDLE], "the VOC VM booted",
                   timeout_s=170)
        node = pool.live()[0]
        results = []
        for i in (1, 2):
            with lock:
                assert pool.claim("alpha", f"job-{i}", clock.now()) is node
            work = tmp_path / f"in{i}"
            work.mkdir()
            (work / "data.txt").write_text(f"input {i}\n")
            spec = {"executable": "/bin/sh", "job_id": f"job-{i}", "std_output": "out.txt",
                    "std_error": "out.txt",
                    "arguments": f"-c 'cat data.txt; id -u; echo $VAR; ls /job/work; exit {i + 40}'",
                    "environment": [f"VAR=v{i}"]}
            seq = driver.submit(node.id, spec, work, ["out.txt"])
            wait_until(lambda: driver.result(node.id, seq).complete, f"job {i} done in the VM", timeout_s=60)
            results.append(driver.result(node.id, seq))
            with lock:
                pool.release(node.id, clock.now())
        for i, r in zip((1, 2), results):
            out = r.files["out.txt"].decode().split()
            assert r.exit_code == 40 + i
            assert out[:4] == ["input", str(i), "1000", f"v{i}"], out   # never root; its own env
            assert "out.txt" in out and "data.txt" in out and f"in{3 - i}" not in out
        assert pool.boots == 1 and node.jobs_run == 2 and vms.state(driver.vwn(node.id)) == "running"
        # the queue drained: the watchdog shrinks the VOC; the VM powers off and is gone
        with lock:
            wd.tick(clock.now(), {"alpha": (0, 0)})
        assert pool.live() == [] and vms.state(driver.vwn(node.id)) == "gone"
        with pytest.raises(ServeError):
            driver.submit(node.id, spec, work, [])
    finally:
        for n in list(pool.live()) + pool.gone:
            vms.remove(driver.vwn(n.id))
