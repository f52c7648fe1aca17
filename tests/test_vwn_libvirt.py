"""libvirt VWNs on real qemu (issue 14): boot, job to Done, caps read back, suspend/resume to
disk, cold migration to a second node agent.

One long counting guest (A) and one short job (B) share the module's boots (TCG boots take
10-20 s): B runs while A counts (both capped at C/2, read back from libvirt's ``schedinfo``;
after B ends A is back at C), A is suspended (pause + save of its memory image to disk) and
resumed (its counter goes on, no restart), then migrated cold to a second node agent, where it
finishes; its StdOutput is 1..N without a gap or a repeat. The test starts libvirtd and virtlogd
itself (no init system here) and stops what it started; it skips only where libvirt or qemu
cannot run, saying why.
"""
from __future__ import annotations

import os
import shutil
import time
import tempfile

import pytest
import requests

from vwn_agents.drivers import guest
from vwn_agents.drivers.libvirtd import LibvirtUnavailable, ensure_libvirtd
from vwn_agents.drivers.vm_migrate import migrate

from .node_site import node_starter
from .waiting import wait_until

COUNT = 90                 # A counts 1..COUNT, one line each 0.5 s (45 s of guest time)
COUNTER = f'i=0; while [ $i -lt {COUNT} ]; do i=$((i+1)); echo $i; sleep 0.5; done'


@pytest.fixture(scope="module")
def libvirt_daemons():
    try:
        daemons = ensure_libvirtd()
        guest.build_guest("/var/cache/vgrid/guest")
    except (LibvirtUnavailable, guest.GuestBuildError) as exc:
        pytest.skip(f"libvirt/qemu cannot run here: {exc}")
    yield
    daemons.stop()


@pytest.fixture(scope="module")
def vm_dir():
    d = tempfile.mkdtemp(prefix="vgrid-test-vms-", dir="/var/tmp")
    os.chmod(d, 0o755)                                 # the qemu account must cross it
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def start_node(tmp_path, libvirt_daemons, vm_dir):
    def defaults(n):
        return {"work_dir": str(tmp_path / f"w{n}"), "driver": "libvirt", "vm_dir": vm_dir,
                "disk_quota_mb": 0, "vm_memory_mb": 128, "retry_initial_s": 0.05}
    with node_starter(f"lv{os.getpid()}n", defaults) as start_:     # unique domain names
        yield start_


def post(url: str, receiver, key: str, **job) -> dict:
    body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "callback_url": f"{receiver.url}/events",
            "output_upload_url": f"{receiver.url}/jobs/{key}/output", **job}
    r = requests.post(f"{url}/vwns", json=body, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()


def progress(agent, vwn: str) -> int:
    return guest.parse_channel((agent.driver.vms.files(vwn) / "channel.out").read_bytes()).progress


def test_vm_jobs_caps_suspend_resume_migrate(start_node, receiver):
    url, agent = start_node(capacity=1.0)
    status = requests.get(f"{url}/status", timeout=10).json()
    assert status["driver"]["kind"] == "libvirt"
    assert status["driver"]["why"].startswith("libvirt, ")      # KVM or "TCG: ..." and why
    a = post(url, receiver, "lv-a", executable="/bin/sh", arguments=f"-c '{COUNTER}'",
             std_output="count.txt", output_sandbox=["count.txt"])["vwn"]
    wait_until(lambda: agent.read_cap(a) == pytest.approx(1.0), "A booting at C (alone)", 60)
    receiver.inputs["in.txt"] = b"hello from the host\n"
    b = post(url, receiver, "lv-b", executable="/bin/sh",
             arguments="-c 'cat in.txt; id -u; echo oops >&2; exit 3'", std_output="out.txt",
             std_error="err.txt", output_sandbox=["out.txt", "err.txt"],
             input_sandbox=[{"name": "in.txt", "url": f"{receiver.url}/files/in.txt"}])["vwn"]
    # B's arrival: both at C/(N+1) = 0.5, as libvirt has them
    wait_until(lambda: agent.read_cap(a) == pytest.approx(0.5) == agent.read_cap(b),
               "A and B at C/2 in libvirt", 60)
    done = receiver.wait_event("lv-b", "done", timeout_s=180)
    assert done["exit_code"] == 3
    assert receiver.outputs[("lv-b", "out.txt")] == b"hello from the host\n1000\n"   # never root
    assert receiver.outputs[("lv-b", "err.txt")] == b"oops\n"
    wait_until(lambda: agent.read_cap(a) == pytest.approx(1.0), "A back at C after B left", 30)
    assert [c[1] for c in agent.get(a).cpu_caps] == [1.0, 0.5, 1.0]

    # suspend to disk and resume: the counter goes on
    wait_until(lambda: progress(agent, a) > 0, "A counting", timeout_s=180)
    r = requests.post(f"{url}/vwns/{a}/suspend", timeout=120)
    assert r.status_code == 200 and r.json()["state"] == "suspended", r.text
    drv = requests.get(f"{url}/status", timeout=10).json()["driver"]
    assert drv["last_save"]["mb"] > 10 and drv["save_rate_mb_s"] > 0
    assert agent.driver.vms.state(a) == "saved" and agent.driver.vms.qemu_pid(a) is None
    assert (agent.driver.vms.files(a) / "memory.save").stat().st_size > 10e6
    r = requests.post(f"{url}/vwns/{a}/resume", timeout=120)
    assert r.status_code == 200 and r.json()["state"] == "running", r.text
    assert agent.read_cap(a) == pytest.approx(1.0)               # the cap survives the restore
    assert requests.get(f"{url}/status", timeout=10).json()["driver"]["restore_rate_mb_s"] > 0
    seen = progress(agent, a)
    wait_until(lambda: progress(agent, a) > seen, "A counting again after resume", timeout_s=60)

    # cold migration to a second node agent, where A finishes
    url2, agent2 = start_node(capacity=0.5)
    moved = migrate(agent, a, agent2)
    a2 = moved["vwn"]
    assert moved["restore_s"] > 0 and moved["mb"] > 10
    assert agent.get(a).state.value == "cancelled" and "migrated to node" in agent.get(a).reason
    assert agent2.read_cap(a2) == pytest.approx(0.5)
    end = receiver.wait_event("lv-a", "done", timeout_s=240)
    assert end["vwn"] == a2 and end["exit_code"] == 0
    numbers = [int(x) for x in receiver.outputs[("lv-a", "count.txt")].split()]
    assert numbers == list(range(1, COUNT + 1))                   # never restarted, nothing lost
    assert receiver.events_for("lv-a", "suspended") and receiver.events_for("lv-a", "resumed")


def test_bad_job_is_refused_before_boot(start_node, receiver):
    url, agent = start_node()
    v = post(url, receiver, "lv-bad", executable="/bin/sh", arguments="'unclosed")["vwn"]
    ab = receiver.wait_event("lv-bad", "aborted", timeout_s=60)
    assert ab["outcome"] == "wrapper-error" and "No closing quotation" in ab["reason"]
    assert agent.driver.vms.qemu_pid(v) is None


def test_restarted_agent_adopts_its_running_vm(tmp_path, libvirt_daemons, vm_dir):
    """kill -9 of a node agent process: its VM runs on under libvirtd; the restarted agent adopts
    it (same qemu process), reports no second ``running`` and the ``done`` with the whole output."""
    from vgrid_cli.services import ServiceGroup
    from vwn_agents.drivers.libvirt_driver import LibvirtVMs
    from vwn_agents.testing import Receiver

    from .test_node_restart import kill_9
    receiver = Receiver()
    config = "\n".join([f'node = "lvr{os.getpid()}"', f'work_dir = "{tmp_path / "node"}"',
                        'driver = "libvirt"', f'vm_dir = "{vm_dir}"', "vm_memory_mb = 128",
                        "disk_quota_mb = 0", "heartbeat_s = 0", "retry_initial_s = 0.05",
                        f'gridmapdir = "{tmp_path / "gridmapdir"}"', ""])
    count = 30
    try:
        with ServiceGroup(tmp_path / "svc") as group:
            (tmp_path / "svc").mkdir(exist_ok=True)
            svc = group.start("node", "node", config)
            vwn = post(svc.url, receiver, "lv-r", executable="/bin/sh",
                       arguments=f"-c 'i=0; while [ $i -lt {count} ]; do i=$((i+1)); echo $i; sleep 0.5; done'",
                       std_output="c.txt", output_sandbox=["c.txt"])["vwn"]
            receiver.wait_event("lv-r", "running", timeout_s=180)
            name = LibvirtVMs.name(vwn)
            pid = int(open(f"/run/libvirt/qemu/{name}.pid").read())
            kill_9(group, svc)
            svc = group.start("node", "node", config)
            rec = requests.get(f"{svc.url}/vwns/{vwn}", timeout=10).json()
            assert rec["adopted"] and rec["state"] == "running"
            assert int(open(f"/run/libvirt/qemu/{name}.pid").read()) == pid      # not restarted
            end = receiver.wait_event("lv-r", "done", timeout_s=180)
            assert end["exit_code"] == 0
            assert [int(x) for x in receiver.outputs[("lv-r", "c.txt")].split()] == list(range(1, count + 1))
            # one running event (the outbox delivers at least once: a resend of the same event
            # after the kill -9 is allowed, a second one made by the new agent is not)
            assert len({e["time"] for e in receiver.events_for("lv-r", "running")}) == 1
    finally:
        receiver.close()


def test_the_lease_engine_suspends_a_vm_to_disk_and_resumes_it(start_node, tmp_path, receiver):
    """The CE agent's lease engine (``suspend_vwns``) on a libvirt node: an advance reservation
    on the full node suspends the Best-Effort-Suspendable job's VM (its memory image saved to
    disk, qemu gone), the AR runs in its own VM, and the job's VM is restored and finishes with
    its counter unbroken (issue 13's flow, enacted by save/restore). Both state their VMMemory:
    a frozen lease's memory stays held, so without it each would ask the whole node's RAM and the
    engine would stop and requeue the job instead of suspending it."""
    from vgrid_runtime.clock import SimulatedClock
    from vgrid_runtime.wsgi import BackgroundServer
    from vwn_agents.ce_agent import CEAgentConfig, create_app

    from .test_ce_agent import submit
    from .waiting import EngineTicks
    lease_cfg = tmp_path / "lease.toml"
    lease_cfg.write_text('[scheduling]\nsuspend-rate = 2048.0\nresume-rate = 2048.0\n')
    clock = SimulatedClock(float(int(time.time())))
    node_url, node = start_node(clock=clock)
    ce_app = create_app(CEAgentConfig.from_dict({
        "ce_id": "ce1.vgrid.local:8443/vgrid-vwn-long", "host": "ce1.vgrid.local",
        "site": "VGRID-TEST", "queue": "long", "nodes": [node_url], "si00": 1500, "ram_mb": 2048,
        "max_wallclock_s": 7200, "vos": ["dteam"], "retry_s": 0.2, "retry_initial_s": 0.05,
        "vwns_per_node": 1, "suspend_vwns": True, "lease_config": str(lease_cfg)}), clock)
    server = BackgroundServer(ce_app)
    try:
        ce = ce_app.config["VGRID_AGENT"]
        n = 60
        be, resp = submit(server.url, receiver, (
            f'[ Executable = "/bin/sh"; Arguments = "-c \'i=0; while [ $i -lt {n} ]; do i=$((i+1)); '
            'echo $i; sleep 0.5; done\'"; StdOutput = "out.txt"; OutputSandbox = {"out.txt"}; '
            'PreemptionClass = "suspendable"; VMMemory = 128; ]'))
        assert resp.status_code == 202, resp.text
        vwn = receiver.wait_event(be, "running", timeout_s=180)["vwn"]
        wait_until(lambda: progress(node, vwn) > 0, "the counter to print", timeout_s=60)
        ticks = EngineTicks(ce)
        start = int(clock.now()) + 5
        ar, resp = submit(server.url, receiver, '[ Executable = "/bin/true"; LeaseType = '
                          f'"advance-reservation"; LeaseStart = {start}; LeaseDuration = 60; VMMemory = 128; ]')
        assert resp.status_code == 202, resp.text
        ticks.wait()
        clock.advance_to(start - 0.5)          # the job's VM reservation ended: suspension
        receiver.wait_event(be, "suspended", timeout_s=60)
        assert node.driver.vms.state(vwn) == "saved" and node.driver.vms.qemu_pid(vwn) is None
        clock.advance_to(start)                # the AR starts on the freed node, in its own VM
        receiver.wait_event(ar, "done", timeout_s=180)
        clock.advance(2.0)                     # the AR ended early: the job's VM is restored
        receiver.wait_event(be, "resumed", timeout_s=60)
        clock.advance(2.0)
        done = receiver.wait_event(be, "done", timeout_s=180)
        assert done["exit_code"] == 0
        assert [int(x) for x in receiver.outputs[(be, "out.txt")].split()] == list(range(1, n + 1))
        kinds = [e["event"] for e in receiver.events_for(be)]
        assert "aborted" not in kinds and kinds.count("running") == 1, kinds
        rates = requests.get(f"{node_url}/status", timeout=10).json()["driver"]
        assert rates["save_rate_mb_s"] > 0 and rates["restore_rate_mb_s"] > 0
    finally:
        server.close()
