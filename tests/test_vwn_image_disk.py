"""libvirt VWNs booted from the node image pool (issue 14; seed 000 Section 6.3): a VM's disk is
a qcow2 overlay on the pooled image, the image is pinned while the VM lives and unpinned after.

The image is an ext2 filesystem made at test time (``mke2fs -d``, e2fsprogs) holding a marker
file, served by an in-process image repository (plain HTTP on loopback); the node agent pulls it
into its pool (one transfer), two VMs boot from their own overlays of it (the second pull is a
hit: no transfer), each job reads the marker from ``/image`` and writes into the image (the
write lands in its overlay: the pooled image keeps its checksum). After both are Done the
overlays are gone and the image is unpinned, READY for reuse. A VWN naming an image the pool
does not have is refused 409 before anything boots. Real libvirtd + qemu (TCG), as
tests/test_vwn_libvirt.py; it skips only where they cannot run, saying why.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

import pytest
import requests

from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.images.pool import PoolError
from vwn_agents.images.repository import ImageRepositoryConfig, create_app as repository_app

from .node_site import node_starter
from .test_vwn_libvirt import libvirt_daemons, post, vm_dir  # noqa: F401  (fixtures)

IMAGE = "marker.img"
MARKER = b"vgrid pooled image marker 7f3a\n"


def make_ext2(path, files: dict[str, bytes], kb: int = 2048) -> str:
    """An ext2 image of ``kb`` KiB holding ``files`` (root dir writable by everyone, so the
    unprivileged job may write into its overlay); its SHA-256."""
    src = path.parent / (path.name + ".d")
    src.mkdir()
    os.chmod(src, 0o777)
    for name, data in files.items():
        (src / name).write_bytes(data)
        os.chmod(src / name, 0o666)
    mke2fs = shutil.which("mke2fs") or "/usr/sbin/mke2fs"
    subprocess.run([mke2fs, "-q", "-F", "-t", "ext2", "-d", str(src), str(path), f"{kb}K"],
                   check=True, capture_output=True)
    shutil.rmtree(src)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def repo(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    sha = make_ext2(images / IMAGE, {"marker.txt": MARKER, "scratch.txt": b""})
    server = BackgroundServer(repository_app(ImageRepositoryConfig.from_dict({"images_dir": str(images)})))
    yield server.url, sha
    server.close()


def test_vms_boot_from_pool_overlays(tmp_path, libvirt_daemons, vm_dir, repo, receiver):  # noqa: F811
    repo_url, sha = repo

    def defaults(n):
        return {"work_dir": str(tmp_path / f"w{n}"), "driver": "libvirt", "vm_dir": vm_dir,
                "disk_quota_mb": 0, "vm_memory_mb": 128, "retry_initial_s": 0.05,
                "image_repository": repo_url, "image_pool_dir": f"{vm_dir}/pool{os.getpid()}-{n}"}
    with node_starter(f"lvd{os.getpid()}n", defaults) as start:
        url, agent = start(capacity=1.0)
        pool = agent.images
        # an image the pool does not have: refused before any VM exists
        r = requests.post(f"{url}/vwns", json={"job_id": "j0", "key": "lvd-none", "executable": "/bin/true",
                                               "image": IMAGE}, timeout=30)
        assert r.status_code == 409 and r.json()["error"]["code"] == "not-ready", r.text
        assert agent.records() == []
        # one transfer into the pool
        r = requests.post(f"{url}/images/pulls", json={"image": IMAGE, "transfer": "t1"}, timeout=30)
        assert r.status_code == 202 and r.json()["hit"] is False, r.text
        assert pool.wait(IMAGE, 60).state.value == "ready"
        job = dict(executable="/bin/sh", std_output="out.txt", output_sandbox=["out.txt"], image=IMAGE,
                   arguments="-c 'grep \" /image \" /proc/mounts | cut -d\" \" -f1; cat /image/marker.txt; "
                             "echo written >> /image/scratch.txt; cat /image/scratch.txt'")
        a = post(url, receiver, "lvd-a", **job)["vwn"]
        # the second VM on the same image: a hit (no transfer), its own overlay
        r = requests.post(f"{url}/images/pulls", json={"image": IMAGE, "transfer": "t2"}, timeout=30)
        assert r.status_code == 202 and r.json()["hit"] is True, r.text
        b = post(url, receiver, "lvd-b", **job)["vwn"]
        img = next(i for i in requests.get(f"{url}/images", timeout=10).json()["images"] if i["name"] == IMAGE)
        assert sorted(img["overlays"]) == ["lvd-a", "lvd-b"]
        with pytest.raises(PoolError, match="pinned"):       # in use: never evicted
            pool.evict(IMAGE)
        for key in ("lvd-a", "lvd-b"):
            done = receiver.wait_event(key, "done", timeout_s=180)
            assert done["exit_code"] == 0
            # its disk mounted, the marker read from it, its own write only (separate overlays)
            assert receiver.outputs[(key, "out.txt")] == b"/dev/vda\n" + MARKER + b"written\n"
        assert a != b
        # after Done: overlays removed, the image unpinned and still READY; one transfer in all
        view = requests.get(f"{url}/images", timeout=10).json()
        img = next(i for i in view["images"] if i["name"] == IMAGE)
        assert img["state"] == "ready" and img["overlays"] == [] and img["pins"] == []
        assert not list((pool.root / "overlays").glob("*.qcow2"))
        t1, t2 = (next(t for t in view["transfers"] if t["transfer"] == n) for n in ("t1", "t2"))
        assert t1["bytes"] == img["size"] and t1["hit"] is False
        assert t2["bytes"] == 0 and t2["hit"] is True
        # the jobs' writes went to their overlays: the pooled image is the repository's
        assert hashlib.sha256(pool.path(IMAGE).read_bytes()).hexdigest() == sha == img["sha256"]
        pool.evict(IMAGE)                                    # unpinned: evictable again
