"""Cold migration of libvirt VWNs driven by the CE agent's lease engine, node to node over mutual
TLS (issue 14; ``node_migration``, ``ce_migration``), and its refusals.

* The refusals need no VM: only the CE agent may start a handover or a take-over, only a caller
  with the handover's token may fetch the files, a cgroup node answers 409 "not-libvirt".
* ``test_the_lease_engine_migrates_a_suspended_vm_to_another_node``: one CE agent, two libvirt
  node agents on their own loopback addresses, everything over HTTPS with host certificates. A
  suspendable job counts in a VM on node 1; node 2 is down when an advance reservation arrives,
  so the AR takes node 1 and the job's VM is saved to disk; node 2 comes up, and the engine
  resumes the job there: node 1 hands the memory image over, node 2 pulls it (checksummed) and
  restores it. The counter goes on (1..N, no gap, no repeat); the events show node 1, then
  node 2; the CE's status reports the copy against the model's estimate.
* ``test_kill_9_of_either_node_mid_copy``: node agents as processes; the VM boots from a pool
  overlay; the copy is throttled so it is cut in the middle: kill -9 of the source, then of the
  target, each ends in MigrationFailed with the VM still suspended on the source (adopted by its
  restarted agent) and its overlay still there; a third try moves it (overlay included: A's is
  removed only then) and the job finishes with its counter unbroken.
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from vgrid_runtime.clock import SimulatedClock
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.drivers import guest
from vwn_agents.drivers.libvirtd import LibvirtUnavailable, ensure_libvirtd
from vwn_agents.images.repository import ImageRepositoryConfig, create_app as repository_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app
from vwn_agents.testing import Receiver

from .pki_site import site_pki, tls_fields
from .test_vwn_image_disk import MARKER, make_ext2
from .waiting import wait_until

ADDR = {"ce": "127.0.34.1", "node1": "127.0.34.2", "node2": "127.0.34.3", "rogue": "127.0.34.4",
        "broker": "127.0.34.5"}


def session(d: Path, name: str):
    from vgrid_runtime.tls import TLSFiles
    return new_session(TLSFiles(cert=str(d / f"{name}.pem"), key=str(d / f"{name}.key"),
                                cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir")))


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    _, _, dns, _ = site_pki(d, ADDR)
    return d, dns


# -- refusals (no VM needed) -------------------------------------------------------------------

def test_only_the_ce_starts_a_migration_and_only_the_token_fetches_files(pki, tmp_path):
    d, dns = pki
    cfg = NodeAgentConfig(node="mref", cgroup="none", work_dir=str(tmp_path / "n"), disk_quota_mb=0,
                          gridmapdir=str(tmp_path / "gm"), heartbeat_s=0, ce_dns=[dns["ce"]],
                          **tls_fields(d, "node1"))
    srv = BackgroundServer(node_app(cfg), host=ADDR["node1"], tls=cfg.tls_files())
    try:
        rogue, ce, peer = session(d, "rogue"), session(d, "ce"), session(d, "node2")
        body = {"source_url": "https://127.0.34.3:1", "source_vwn": "v", "source_dir": "/x", "token": "t",
                "files": [{"name": "memory.save", "size": 1, "sha256": "0" * 64}], "request": {}}
        assert rogue.post(f"{srv.url}/vwns/vwn-x/handover", json={}, timeout=10).status_code == 403
        assert rogue.post(f"{srv.url}/vwns/migrations", json=body, timeout=10).status_code == 403
        assert rogue.post(f"{srv.url}/vwns/vwn-x/handover/complete", json={"node": "a", "vwn": "b"},
                          timeout=10).status_code == 403
        # a node of the site without the handover's token gets nothing
        r = peer.get(f"{srv.url}/vwns/vwn-x/handover/files/memory.save", timeout=10,
                     headers={"X-Vgrid-Handover": "guessed"})
        assert r.status_code == 403, r.text
        # the CE agent passes authorization; this node's driver cannot hand a VM over
        r = ce.post(f"{srv.url}/vwns/migrations", json=body, timeout=10)
        assert r.status_code == 409 and r.json()["error"]["code"] == "not-libvirt", r.text
        bad = dict(body, files=[{"name": "../etc/passwd", "size": 1, "sha256": "x"}])
        r = ce.post(f"{srv.url}/vwns/migrations", json=bad, timeout=10)
        assert r.status_code == 400 and "files[0]" in r.text
        # the pool is in /status for the CE agent, not for others
        assert "image_pool" in ce.get(f"{srv.url}/status", timeout=10).json()
        assert "image_pool" not in rogue.get(f"{srv.url}/status", timeout=10).json()
    finally:
        srv.close()


# -- real VMs ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def libvirt_daemons():
    try:
        daemons = ensure_libvirtd()
        guest.build_guest("/var/cache/vgrid/guest")
    except (LibvirtUnavailable, guest.GuestBuildError) as exc:
        pytest.skip(f"libvirt/qemu cannot run here: {exc}")
    yield
    daemons.stop()


@pytest.fixture
def vm_dir():
    d = tempfile.mkdtemp(prefix="vgrid-test-mig-", dir="/var/tmp")
    os.chmod(d, 0o755)                                 # the qemu account must cross it
    yield d
    shutil.rmtree(d, ignore_errors=True)


def counter(n: int) -> str:
    return f"i=0; while [ $i -lt {n} ]; do i=$((i+1)); echo $i; sleep 0.5; done"


def test_the_lease_engine_migrates_a_suspended_vm_to_another_node(pki, tmp_path, libvirt_daemons, vm_dir):
    from vwn_agents.ce_agent import CEAgentConfig, create_app as ce_app
    from .waiting import EngineTicks
    d, dns = pki
    receiver = Receiver()
    clock = SimulatedClock(float(int(time.time())))
    tag = f"mg{os.getpid()}"

    def node_cfg(name: str, port: int = 0) -> NodeAgentConfig:
        return NodeAgentConfig(node=f"{tag}{name}", work_dir=str(tmp_path / name), driver="libvirt",
                               vm_dir=vm_dir, disk_quota_mb=0, vm_memory_mb=128, retry_initial_s=0.05,
                               heartbeat_s=0, gridmapdir=str(tmp_path / f"{name}-gm"), ce_dns=[dns["ce"]],
                               bind=ADDR[name], port=port, **tls_fields(d, name))
    cfg1 = node_cfg("node1")
    n1 = BackgroundServer(node_app(cfg1, clock=clock), host=ADDR["node1"], tls=cfg1.tls_files())
    port2 = free_port(ADDR["node2"])
    url2 = f"https://{ADDR['node2']}:{port2}"
    lease_cfg = tmp_path / "lease.toml"
    lease_cfg.write_text('[scheduling]\nsuspend-rate = 2048.0\nresume-rate = 2048.0\nmigration = "yes"\n')
    ce_cfg = CEAgentConfig.from_dict({
        "ce_id": "ce.vgrid.local:8443/vgrid-vwn-long", "host": "ce.vgrid.local", "site": "VGRID-TEST",
        "queue": "long", "nodes": [n1.url, url2], "si00": 1500, "ram_mb": 2048, "max_wallclock_s": 7200,
        "vos": ["dteam"], "retry_s": 0.2, "retry_initial_s": 0.05, "vwns_per_node": 1,
        "suspend_vwns": True, "migrate_vwns": True, "lease_config": str(lease_cfg),
        # node_lost_s: moved() below runs the injected clock 1.7x faster than real time, so a node
        # agent's 10 s heartbeats look up to 17 s apart; a loaded machine (a migration's copy, TCG
        # guests) then made node 2 "lost" after 30 clock s (session 10 CI) -- not what this tests.
        "node_down_after_s": 3600, "node_lost_s": 600, "broker_dns": [dns["broker"]], **tls_fields(d, "ce")})
    app = ce_app(ce_cfg, clock)
    ce_srv = BackgroundServer(app, host=ADDR["ce"], tls=ce_cfg.tls_files())
    broker = session(d, "broker")
    n2 = app2 = None
    keys = iter(range(1, 100))

    def submit(jdl: str) -> str:
        key = f"mig{next(keys)}"
        body = {"job_id": f"{receiver.url}/jobs/{key}", "key": key, "jdl": jdl, "filename": "job.jdl",
                "callback_url": f"{receiver.url}/jobs/{key}/events",
                "output_upload_url": f"{receiver.url}/jobs/{key}/output", "input_sandbox": []}
        r = broker.post(f"{ce_srv.url}/jobs", json=body, timeout=10)
        assert r.status_code == 202, r.text
        return key

    try:
        ce = app.config["VGRID_AGENT"]
        ce.leases.engine.mark_down(url2)              # node 2 is not up yet
        cfg2 = node_cfg("node2", port2)
        app2 = node_app(cfg2, clock=clock)            # made now (libvirt, guest), served later
        n = 40
        be = submit(f'[ Executable = "/bin/sh"; Arguments = "-c \'{counter(n)}\'"; StdOutput = "out.txt"; '
                    'OutputSandbox = {"out.txt"}; PreemptionClass = "suspendable"; VMMemory = 128; ]')
        first = receiver.wait_event(be, "running", timeout_s=180)
        agent1 = n1.app.config["VGRID_AGENT"]
        ch = agent1.driver.vms.files(first["vwn"]) / "channel.out"
        wait_until(lambda: guest.parse_channel(ch.read_bytes()).progress > 0, "the counter to print", 90)
        ticks = EngineTicks(ce)
        start = int(clock.now()) + 5
        ar = submit('[ Executable = "/bin/true"; LeaseType = "advance-reservation"; '
                    f'LeaseStart = {start}; LeaseDuration = 600; VMMemory = 128; ]')
        ticks.wait()
        assert ce.leases.view(ar)["nodes"] == [n1.url]   # node 2 down: the AR preempts the job
        n2 = BackgroundServer(app2, host=ADDR["node2"], port=port2, tls=cfg2.tls_files())
        wait_until(lambda: dict(ce.leases.nodes_up()).get(url2), "node 2 up in the engine", 30)
        clock.advance_to(start - 0.5)                 # the job's VM is saved to disk on node 1
        receiver.wait_event(be, "suspended", timeout_s=90)

        def moved():
            clock.advance(0.5)
            return receiver.events_for(be, "resumed")
        resumed = wait_until(moved, "the job resumed on node 2", 180, interval_s=0.3)[0]
        assert resumed["node"] == cfg2.node and resumed["vwn"] != first["vwn"], resumed
        clock.advance(30.0)                           # past the planned migration and resumption
        done = receiver.wait_event(be, "done", timeout_s=240)
        assert done["exit_code"] == 0 and done["node"] == cfg2.node and done["vwn"] == resumed["vwn"]
        numbers = [int(x) for x in receiver.outputs[(be, "out.txt")].split()]
        assert numbers == list(range(1, n + 1))        # never restarted, nothing lost
        assert [(e["event"], e["node"]) for e in receiver.events_for(be) if e["event"] != "caps"] == [
            ("running", cfg1.node), ("suspended", cfg1.node), ("resumed", cfg2.node), ("done", cfg2.node)]
        status = broker.get(f"{ce_srv.url}/status", timeout=10).json()["suspension"]
        rec = status["migrations"]["records"][0]
        assert rec["to"] == url2 and rec["image_mb"] > 10 and rec["copy_s"] > 0 and rec["restore_s"] > 0
        assert rec["model_copy_s"] == pytest.approx(128 / 12.5)
        print("\nMIGRATION", rec)
        print("RATES", status["rates"])
        # the measured rates now drive the engine's planning (rate_feedback)
        plan = status["rates"]["planning"]
        assert plan["suspend-rate"]["source"].startswith("measured on ")
        assert plan["migration-bandwidth"]["source"] == f"measured on {url2}"
        assert ce.leases.engine.scheduler.suspend_rate == pytest.approx(plan["suspend-rate"]["mb_s"], abs=1e-3)
        old = agent1.get(first["vwn"])
        assert old.state.value == "cancelled" and "migrated to node" in old.reason
        assert not agent1.driver.vms.files(first["vwn"]).exists()
    finally:
        ce_srv.close()
        for srv in (n2, n1):
            if srv is not None:
                srv.close()
        if n2 is None and app2 is not None:
            app2.config["VGRID_ON_STOP"]()
        receiver.close()


def test_kill_9_of_either_node_mid_copy(pki, tmp_path, libvirt_daemons, vm_dir):
    from vgrid_cli.services import ServiceGroup
    from vwn_agents.ce_migration import LeaseMigration, MigrationFailed
    from vwn_agents.leasing.config import LeaseConfig
    from vwn_agents.node_enactment import NodeAgentEnactment

    from .test_node_restart import kill_9
    d, dns = pki
    receiver = Receiver()
    tag = f"mk{os.getpid()}"
    ports = {name: free_port(ADDR[name]) for name in ("node1", "node2")}

    def toml(name: str) -> str:
        lines = [f'node = "{tag}{name}"', f'bind = "{ADDR[name]}"', f"port = {ports[name]}",
                 f'work_dir = "{tmp_path / name}"', 'driver = "libvirt"', f'vm_dir = "{vm_dir}"',
                 "vm_memory_mb = 128", "disk_quota_mb = 0", "heartbeat_s = 0", "retry_initial_s = 0.05",
                 f'gridmapdir = "{tmp_path / (name + "-gm")}"', f'ce_dns = ["{dns["ce"]}"]',
                 "migration_serve_mb_s = 16.0", "migration_pull_timeout_s = 5.0",
                 f'image_repository = "{repo.url}"', f'image_pool_dir = "{vm_dir}/pool-{tag}{name}"']
        lines += [f'{k} = "{v}"' for k, v in tls_fields(d, name).items()]
        return "\n".join(lines) + "\n"
    ce = session(d, "ce")
    n = 20                 # 10 s of guest time: the VM is suspended from the first handover on
    images = tmp_path / "images"           # the VM boots from a pool overlay: it travels too
    images.mkdir()
    make_ext2(images / "k.img", {"marker.txt": MARKER})
    repo = BackgroundServer(repository_app(ImageRepositoryConfig.from_dict({"images_dir": str(images)})))
    overlay_a = Path(vm_dir) / f"pool-{tag}node1" / "overlays" / "k.qcow2"   # crossable by libvirt-qemu
    try:
        with ServiceGroup(tmp_path / "svc") as group:
            (tmp_path / "svc").mkdir(exist_ok=True)
            a, b = group.start_many([("node", "node1", toml("node1")), ("node", "node2", toml("node2"))])
            r = ce.post(f"{a.url}/images/pulls", json={"image": "k.img", "transfer": "t"}, timeout=30)
            assert r.status_code == 202, r.text
            wait_until(lambda: any(i["state"] == "ready" for i in ce.get(f"{a.url}/images", timeout=10)
                                   .json()["images"]), "the image in node 1's pool", 60)
            body = {"job_id": f"{receiver.url}/jobs/k", "key": "k", "executable": "/bin/sh",
                    "arguments": f"-c '{counter(n)}'", "callback_url": f"{receiver.url}/events",
                    "output_upload_url": f"{receiver.url}/jobs/k/output", "std_output": "c.txt",
                    "output_sandbox": ["c.txt"], "memory_mb": 128, "image": "k.img"}
            r = ce.post(f"{a.url}/vwns", json=body, timeout=30)
            assert r.status_code == 201, r.text
            vwn = r.json()["vwn"]
            receiver.wait_event("k", "running", timeout_s=180)
            channel = Path(vm_dir) / f"{tag}node1" / vwn / "channel.out"
            wait_until(lambda: guest.parse_channel(channel.read_bytes()).progress > 2, "counting", 90)
            enact = NodeAgentEnactment([a.url, b.url], payload=None, session=ce, timeout=30)
            mig = LeaseMigration(LeaseConfig(), attempts=2, backoff_s=0.5, timeout_s=60)
            lease = SimpleNamespace(id=1, per_vm=(100, 128, 0, 0))
            incoming = Path(vm_dir) / f"{tag}node2" / f".incoming-{vwn}" / "memory.save"

            def cut(victim):
                """Start a move, kill -9 ``victim`` once some MB arrived; the move's outcome."""
                out = {}
                t = threading.Thread(target=lambda: out.setdefault("r", _try(mig.move, enact, lease, 0, vwn, 1)))
                t.start()
                wait_until(lambda: incoming.exists() and incoming.stat().st_size > 4e6, "the copy under way", 120)
                kill_9(group, victim)
                t.join(180)
                return out["r"]

            for name in ("node1", "node2"):       # the source, then the target, dies mid-copy
                victim = a if name == "node1" else b
                result = cut(victim)
                assert isinstance(result, MigrationFailed), result
                restarted = group.start("node", name, toml(name))
                if name == "node1":
                    a = restarted
                else:
                    b = restarted
                rec = ce.get(f"{a.url}/vwns/{vwn}", timeout=10).json()
                assert rec["state"] == "suspended", rec        # on node 1's disk, adopted, not lost
                assert (Path(vm_dir) / f"{tag}node1" / vwn / "memory.save").exists()
                assert overlay_a.exists()                      # nor its disk: A keeps its overlay
            assert not incoming.parent.exists()                # the target swept its partial copy
            new = mig.move(enact, lease, 0, vwn, 1)
            end = receiver.wait_event("k", "done", timeout_s=240)
            assert end["vwn"] == new and end["exit_code"] == 0
            assert [int(x) for x in receiver.outputs[("k", "c.txt")].split()] == list(range(1, n + 1))
            assert ce.get(f"{a.url}/vwns/{vwn}", timeout=10).json()["state"] == "cancelled"
            assert not overlay_a.exists()                      # handed over, then removed on A
    finally:
        repo.close()
        receiver.close()


def _try(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc
