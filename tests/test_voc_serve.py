"""VOC VMs that take jobs after boot (issue 15, seed 003 Section 3.3): a VOC node booted as a
real libvirt VM serves its VO's jobs one after another over its job channel
(``drivers.guest_serve``): two jobs run in the same VM -- one boot -- with their outputs and
exit codes returned, as the guest's unprivileged account; then the watchdog shrinks the VOC and
the domain is gone. Skips only where libvirt or qemu cannot run, saying why."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import requests

from vgrid_runtime.clock import WallClock
from vwn_agents.drivers.guest_serve import ServeError, job_state
from vwn_agents.voc.policies import make_policy
from vwn_agents.voc.pool import VOCNodeState, VOCPool
from vwn_agents.voc.watchdog import Watchdog

from .vm_site import libvirt_vms
from .waiting import wait_until


@pytest.fixture(scope="module")
def vms():
    yield from libvirt_vms("vgrid-voc-serve-")


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


# -- the live path: a CE agent (scheduler = voc, voc_driver = libvirt) and a libvirt node agent --

INTERVAL_S = 0.5


def _submit(ce_url, receiver, key, vo, args, sandbox=()):
    jdl = (f'[ Executable = "/bin/sh"; Arguments = "{args}"; StdOutput = "out.txt"; StdError = "out.txt"; '
           f'InputSandbox = {{{", ".join(chr(34) + s + chr(34) for s in sandbox)}}}; OutputSandbox = {{"out.txt"}}; ]')
    body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "jdl": jdl, "filename": "j.jdl",
            "callback_url": f"{receiver.url}/jobs/{key}/events",
            "output_upload_url": f"{receiver.url}/jobs/{key}/output",
            "input_sandbox": [{"name": s, "url": f"{receiver.url}/files/{s}"} for s in sandbox],
            "owner": {"dn": f"/DC=org/DC=vgrid/CN={vo}-user", "vo": vo, "fqans": [f"/{vo}"]}}
    r = requests.post(f"{ce_url}/jobs", json=body, timeout=10)
    assert r.status_code == 202, r.text


def test_the_ce_agent_runs_a_vos_jobs_in_its_voc_vm_and_a_killed_vm_loses_its_job(vms, tmp_path, receiver):
    """The VO's cluster is the VO's: its VMs boot with an overlay of the VO's image (an ext2 image
    served by an image repository, pulled into the node's pool) at /image, and run its jobs as
    the guest's unprivileged account."""
    from vgrid_runtime.wsgi import BackgroundServer
    from vwn_agents.ce_agent import CEAgentConfig, create_app as ce_app
    from vwn_agents.images.repository import ImageRepositoryConfig, create_app as repository_app
    from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app
    from .test_vwn_image_disk import make_ext2
    images = tmp_path / "images"
    images.mkdir()
    make_ext2(images / "alpha.img", {"marker.txt": b"alpha image\n"})
    repo = BackgroundServer(repository_app(ImageRepositoryConfig.from_dict({"images_dir": str(images)})))
    node_app_ = node_app(NodeAgentConfig.from_dict({
        "node": f"vs{os.getpid()}n", "work_dir": str(tmp_path / "node"), "driver": "libvirt",
        "vm_dir": str(vms.vm_dir), "disk_quota_mb": 0, "vm_memory_mb": 128, "retry_initial_s": 0.05,
        "heartbeat_s": 0.5, "image_repository": repo.url, "image_pool_dir": f"{vms.vm_dir}/pool{os.getpid()}"}))
    node_srv = BackgroundServer(node_app_)
    node = node_app_.config["VGRID_AGENT"]
    cfg = CEAgentConfig.from_dict({
        "ce_id": "vocvm.vgrid.local:8443/vgrid-vwn-vocvm", "host": "vocvm", "site": "T", "queue": "vocvm",
        "nodes": [node_srv.url], "cpus_per_node": 1, "scheduler": "voc", "voc_driver": "libvirt",
        "voc_images": ["alpha=alpha.img"], "voc_policy": "greedy", "voc_interval_s": INTERVAL_S, "retry_s": 0.2, "retry_initial_s": 0.05,
        "retry_max_s": 0.3, "heartbeat_s": 0})
    ce_srv = BackgroundServer(ce_app(cfg))
    ce = ce_srv.url
    voc = lambda: requests.get(f"{ce}/status", timeout=5).json()["voc"]      # noqa: E731
    receiver.inputs["data.txt"] = b"payload\n"
    try:
        # two alpha jobs, one slot: one VM is booted and runs both, one after the other
        _submit(ce, receiver, "vm1", "alpha", "-c 'cat data.txt /image/marker.txt; id -u; exit 3'", ["data.txt"])
        _submit(ce, receiver, "vm2", "alpha", "-c 'echo second; id -u'")
        one = receiver.wait_event("vm1", "done", timeout_s=170)
        two = receiver.wait_event("vm2", "done", timeout_s=60)
        assert (one["exit_code"], two["exit_code"]) == (3, 0)
        assert receiver.wait_for(lambda r: r.outputs.get(("vm2", "out.txt"))) == b"second\n1000\n"
        assert receiver.outputs[("vm1", "out.txt")] == b"payload\nalpha image\n1000\n"
        status = voc()
        assert status["boots"] == 1, status                     # the boot was paid once
        vms_ = requests.get(f"{node_srv.url}/voc/vms", timeout=5).json()["vms"]
        assert [(v["state"], v["jobs"], v["vo"], v["image"]) for v in vms_] == [("ready", 2, "alpha", "alpha.img")]
        assert node.images.disk_of(f"voc-{vms_[0]['node']}") is not None      # the image pinned by its VM
        first_vm = node.voc.vwn(vms_[0]["node"])
        # the queue drained: the greedy watchdog shrinks the VOC and the VM is gone
        wait_until(lambda: voc()["nodes"] == [] and vms.state(first_vm) == "gone", "the VOC shrunk, its VM gone",
                   timeout_s=30)
        assert any(g["gone_reason"] == "terminated" and g["jobs_run"] == 2 for g in voc()["gone"])
        wait_until(lambda: node.images.disk_of(f"voc-{vms_[0]['node']}") is None, "its overlay removed", timeout_s=10)

        # a third job boots a VM again; the VM is killed while the job runs: the job ends
        # node-lost (resubmittable by the broker) and the node leaves the pool within an interval
        _submit(ce, receiver, "vm3", "alpha", "-c 'echo started; sleep 600'")
        receiver.wait_event("vm3", "running", timeout_s=170)
        busy = next(n for n in voc()["nodes"] if n["job"] == "vm3")
        # a fourth job waits (one slot, busy): it must run once the VM dies, never wait on it
        _submit(ce, receiver, "vm4", "alpha", "-c 'echo fourth'")
        wait_until(lambda: "waiting for a node of VO alpha" in (requests.get(f"{ce}/jobs/vm4", timeout=5).json()
                                                               .get("reason") or ""), "vm4 waiting for a node")
        pid = node.voc.driver.qemu_pid(busy["id"])
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: all(n["id"] != busy["id"] for n in voc()["nodes"]), "the killed VM out of the pool",
                   timeout_s=20)
        left_s = time.monotonic() - t0
        aborted = receiver.wait_event("vm3", "aborted", timeout_s=20)
        from broker.resubmission import resubmittable
        assert aborted["outcome"] == "node-lost" and resubmittable(aborted["outcome"]), aborted
        assert any(g["id"] == busy["id"] and g["gone_reason"].startswith("lost:") for g in voc()["gone"])
        assert receiver.wait_event("vm4", "done", timeout_s=170)["exit_code"] == 0     # on a new VM
        assert receiver.outputs.get(("vm4", "out.txt")) == b"fourth\n" and voc()["boots"] == 3
        boots = [g["boot_s"] for g in voc()["gone"]]
        print(f"VOC VM: 2 jobs after 1 boot; boot_s {boots}; killed VM out of the pool {left_s:.2f} s after SIGKILL")
        assert left_s < 2 * INTERVAL_S + 5
        # refusals: a job for an unknown VOC node, a VOC VM request without the CE's identity
        r = requests.post(f"{node_srv.url}/vwns", json={"job_id": "x", "key": "x", "executable": "/bin/true",
                                                        "voc_node": "voc-nobody-1"}, timeout=10)
        assert r.status_code == 409 and r.json()["error"]["code"] == "voc-node-not-ready"
    finally:
        ce_srv.close()
        for rec in requests.get(f"{node_srv.url}/voc/vms", timeout=5).json()["vms"]:
            requests.delete(f"{node_srv.url}/voc/vms/{rec['node']}", timeout=10)
        node_srv.close()
        repo.close()
