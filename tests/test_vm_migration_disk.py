"""Cold migration hands a VM's pool overlay over (issue 14; ``disk_handover``, ``node_migration``):
a VM booted from the node image pool moves with its disk, node to node over mutual TLS.

Two libvirt node agents (in-process, HTTPS with host certificates) pull from one image repository
(plain HTTP on loopback). Node A pulls an ext2 image and boots a VM from its overlay; the guest
writes a file into ``/image`` (its overlay) and counts. The VM migrates A -> B: B's pool lacks
the image, so B stages it through its pool (a verified transfer) and rebases the copied overlay
onto it; A unpins its image and removes its overlay only when the handover completed. Then B ->
A: A's pool still has the image (READY, unpinned), so no byte of the image moves (a hit). The
job ends Done on A: the counter never restarted and the file written before both migrations
is read back from ``/image`` after them. Real libvirtd + qemu (TCG); skips only where they cannot
run, saying why.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_migration import LeaseMigration
from vwn_agents.images.repository import ImageRepositoryConfig, create_app as repository_app
from vwn_agents.leasing.config import LeaseConfig
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app
from vwn_agents.node_enactment import NodeAgentEnactment
from vwn_agents.testing import Receiver

from .pki_site import site_pki, tls_fields
from .test_vm_migration import counter, libvirt_daemons, session, vm_dir  # noqa: F401  (fixtures)
from .test_vwn_image_disk import MARKER, make_ext2
from .waiting import wait_until

ADDR = {"ce": "127.0.36.1", "node1": "127.0.36.2", "node2": "127.0.36.3"}
IMAGE = "mig-disk.img"
TOKEN = "written-on-node-A-before-migrating-5c1e"


@pytest.fixture
def site(tmp_path):
    d = tmp_path / "pki"
    d.mkdir()
    _, _, dns, _ = site_pki(d, ADDR)
    images = tmp_path / "images"
    images.mkdir()
    sha = make_ext2(images / IMAGE, {"marker.txt": MARKER, "mine.txt": b""}, kb=3072)
    repo = BackgroundServer(repository_app(ImageRepositoryConfig.from_dict({"images_dir": str(images)})))
    yield d, dns, repo.url, sha
    repo.close()


def transfers(pool, transfer: str) -> list[dict]:
    return [t for t in pool.view()["transfers"] if t["transfer"] == transfer]


def test_migration_hands_the_pool_overlay_over(site, tmp_path, libvirt_daemons, vm_dir):  # noqa: F811
    d, dns, repo_url, sha = site
    receiver = Receiver()
    tag = f"md{os.getpid()}"
    servers = []

    def start(name: str):
        cfg = NodeAgentConfig(node=f"{tag}{name}", work_dir=str(tmp_path / name), driver="libvirt",
                              vm_dir=vm_dir, disk_quota_mb=0, vm_memory_mb=128, retry_initial_s=0.05,
                              heartbeat_s=0, gridmapdir=str(tmp_path / f"{name}-gm"), ce_dns=[dns["ce"]],
                              image_repository=repo_url, image_pool_dir=f"{vm_dir}/pool-{tag}-{name}",
                              **tls_fields(d, name))
        srv = BackgroundServer(node_app(cfg), host=ADDR[name], tls=cfg.tls_files())
        servers.append(srv)
        return srv.url, srv.app.config["VGRID_AGENT"]

    try:
        (a_url, a), (b_url, b) = start("node1"), start("node2")
        ce = session(d, "ce")
        r = ce.post(f"{a_url}/images/pulls", json={"image": IMAGE, "transfer": "first"}, timeout=30)
        assert r.status_code == 202, r.text
        assert a.images.wait(IMAGE, 60).state.value == "ready"
        n = 40
        job = (f"echo {TOKEN} >> /image/mine.txt && sync && {counter(n)}; "
               "cat /image/mine.txt /image/marker.txt")
        body = {"job_id": f"{receiver.url}/jobs/k", "key": "mdk", "executable": "/bin/sh",
                "arguments": f"-c '{job}'", "callback_url": f"{receiver.url}/events",
                "output_upload_url": f"{receiver.url}/jobs/mdk/output", "std_output": "c.txt",
                "output_sandbox": ["c.txt"], "memory_mb": 128, "image": IMAGE}
        r = ce.post(f"{a_url}/vwns", json=body, timeout=60)
        assert r.status_code == 201, r.text
        vwn = r.json()["vwn"]
        receiver.wait_event("mdk", "running", timeout_s=180)
        from vwn_agents.drivers import guest
        channel = a.driver.vms.files(vwn) / "channel.out"
        wait_until(lambda: receiver.events_for("mdk", "done") or guest.parse_channel(channel.read_bytes()).progress > 4,
                   "the counter to print", 120)
        assert not receiver.events_for("mdk", "done"), (receiver.events_for("mdk"), receiver.outputs)
        a_overlay = Path(a.images.disk_of("mdk"))
        enact = NodeAgentEnactment([a_url, b_url], payload=None, session=ce, timeout=60)
        mig = LeaseMigration(LeaseConfig(), attempts=2, backoff_s=0.5, timeout_s=180)
        lease = SimpleNamespace(id=1, per_vm=(100, 128, 0, 0))

        # A -> B: B lacks the image; it stages it through its pool, then takes the overlay over
        assert b.images.get(IMAGE) is None
        on_b = mig.move(enact, lease, 0, vwn, 1)
        staged = transfers(b.images, "migration:mdk")
        assert len(staged) == 1 and staged[0]["hit"] is False and staged[0]["bytes"] == 3072 * 1024, staged
        assert b.images.get(IMAGE).sha256 == sha
        b_overlay = Path(b.images.disk_of("mdk"))
        assert b_overlay.parent == b.images.root / "overlays"
        info = json.loads(subprocess.run(["qemu-img", "info", "-U", "--output=json", str(b_overlay)],
                                         capture_output=True, text=True, check=True).stdout)
        assert info["backing-filename"] == str(b.images.path(IMAGE).resolve()), info
        assert TOKEN.encode() in b_overlay.read_bytes()      # the guest's write travelled in the overlay
        assert b.images.pinned(IMAGE)
        # A released its overlay only now, after the completion: its image is unpinned, still READY
        wait_until(lambda: a.get(vwn).state.value == "cancelled", "A's VWN ended (migrated)", 30)
        assert not a_overlay.exists() and a.images.disk_of("mdk") is None
        assert not a.images.pinned(IMAGE) and a.images.get(IMAGE).state.value == "ready"

        # B -> A: A's pool has the image: a hit, no byte of the image moves, only the overlay
        back = mig.move(enact, lease, 1, on_b, 0)
        hit = transfers(a.images, "migration:mdk")
        assert len(hit) == 1 and hit[0]["hit"] is True and hit[0]["bytes"] == 0, hit
        assert len([t for t in a.images.view()["transfers"] if t["bytes"]]) == 1   # the first pull only
        assert not b.images.pinned(IMAGE) and b.images.disk_of("mdk") is None

        done = receiver.wait_event("mdk", "done", timeout_s=240)
        assert done["exit_code"] == 0 and done["vwn"] == back, done
        out = receiver.outputs[("mdk", "c.txt")].decode().split("\n")
        assert [int(x) for x in out[:n]] == list(range(1, n + 1))          # never restarted
        assert out[n] == TOKEN and (out[n + 1] + "\n").encode() == MARKER   # written before, read after
        # after Done the overlay is gone on A too; the image is READY and unpinned on both nodes
        wait_until(lambda: a.images.disk_of("mdk") is None and not a.images.pinned(IMAGE), "A's overlay removed", 30)
        assert a.images.get(IMAGE).sha256 == sha == b.images.get(IMAGE).sha256
        print("\nMIGRATED-DISK", json.dumps({"b": staged[0], "a": hit[0]}))
    finally:
        for srv in servers:
            srv.close()
        receiver.close()


@pytest.mark.parametrize("disk, error", [
    ({"image": "a.img", "image_sha256": "0" * 64, "format": "raw", "path": "/p/overlays/k.qcow2",
      "backing": "/p/a.img.000000000000"}, None),
    (None, "needs \"disk\""),
    ({"image": "a.img", "image_sha256": "0" * 64, "format": "raw", "path": "k.qcow2", "backing": "/p/a"},
     "absolute paths"),
    ({"image": "a.img", "image_sha256": "0" * 64, "format": "raw", "path": "/p/k'.qcow2", "backing": "/p/a"},
     "absolute paths"),
    ({"image": "a.img", "image_sha256": 7, "format": "raw", "path": "/p/k.qcow2", "backing": "/p/a"},
     "(strings)"),
])
def test_a_bad_disk_entry_is_refused_naming_the_field(disk, error):
    """The manifest's disk.qcow2 must say which pooled image backs it and where (no VM needed)."""
    from vgrid_runtime.httpjson import ApiError
    from vwn_agents import disk_handover
    files = [{"name": "memory.save", "size": 1, "sha256": "0" * 64},
             {"name": "disk.qcow2", "size": 1, "sha256": "0" * 64, **({"disk": disk} if disk else {})}]
    if error is None:
        assert disk_handover.entry(files) == disk
        assert disk_handover.entry(files[:1]) is None           # a VM without a pool disk
        return
    with pytest.raises(ApiError, match="field 'files'") as exc:
        disk_handover.entry(files)
    assert error in str(exc.value) and exc.value.status == 400
