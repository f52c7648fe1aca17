"""The VWN drivers without booting anything (issue 14): the guest's job channel (cpio in, serial
lines out), the domain XML, the cap arithmetic, the node option and the cgroup driver's face."""
from __future__ import annotations

import base64
import io
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from lxml import etree

from vgrid_runtime.config import ConfigError
from vwn_agents.drivers import guest
from vwn_agents.drivers.libvirt_driver import domain_xml, quota_us
from vwn_agents.node_config import NodeAgentConfig


def test_cpio_is_read_by_cpio(tmp_path):
    """The newc writer's archive, unpacked by GNU/busybox cpio: names, modes, contents."""
    data = guest.cpio_newc([("d", stat.S_IFDIR | 0o755, b""), ("d/f", stat.S_IFREG | 0o640, b"abc\n"),
                            ("x", stat.S_IFREG | 0o755, b"#!/bin/sh\n")])
    subprocess.run(["busybox", "cpio", "-i", "-d"], input=data, cwd=tmp_path, check=True,
                   capture_output=True)
    assert (tmp_path / "d" / "f").read_bytes() == b"abc\n"
    assert stat.S_IMODE((tmp_path / "d" / "f").stat().st_mode) == 0o640
    assert (tmp_path / "x").stat().st_mode & 0o100


def test_job_archive_carries_the_job(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "in.txt").write_text("input")
    spec = {"job_id": "https://b/j1", "executable": "run.sh", "arguments": "a 'b c' $HOME",
            "environment": ["GREETING=hi $HOME"], "std_input": "in.txt", "std_output": "o",
            "std_error": "o"}
    data = guest.job_archive(spec, work, ["o", "res/x.dat"])
    subprocess.run(["busybox", "cpio", "-i", "-d"], input=data, cwd=tmp_path, check=True,
                   capture_output=True)
    run = (tmp_path / "job" / "run.sh").read_text()
    assert "export GREETING='hi /job/work'" in run
    assert "export GLITE_WMS_JOBID=https://b/j1" in run
    assert run.rstrip().endswith('''exec "$exe" a 'b c' '$HOME' < in.txt >> o 2>&1''')
    assert (tmp_path / "job" / "work" / "in.txt").read_text() == "input"
    assert (tmp_path / "job" / "outputs").read_text() == "o\nres/x.dat\n"


def test_job_script_runs_in_a_shell(tmp_path):
    """run.sh as the guest's busybox sh runs it (here, in a copy of /job/work on the host)."""
    script = guest.job_script({"executable": "/bin/sh", "arguments": "-c 'echo \"$1|$X\"' - 'two words'",
                               "environment": ["X=${GLITE_WMS_JOBID}!"], "job_id": "j7",
                               "std_output": "out"})
    script = script.replace("/job/work", str(tmp_path))
    subprocess.run(["busybox", "sh", "-c", script], check=True)
    assert (tmp_path / "out").read_text() == "two words|j7!\n"


@pytest.mark.parametrize("spec, message", [
    ({"executable": "/bin/sh", "arguments": "'open"}, "No closing quotation"),
    ({"executable": "/bin/sh", "environment": ["NOEQUALS"]}, "is not of the form NAME=value"),
    ({"executable": ""}, "Executable is empty"),
])
def test_bad_jobs_are_refused_before_boot(spec, message):
    with pytest.raises(ValueError, match=message):
        guest.job_script(spec)


def _channel(code: int, files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    b64 = base64.encodebytes(buf.getvalue()).decode().replace("\n", "\r\n")
    return (f"VGRID-RUNNING\r\nVGRID-PROGRESS 12\r\nVGRID-RESULT {code}\r\nVGRID-FILES\r\n{b64}"
            "VGRID-END\r\n").encode()


@given(code=st.integers(0, 255),
       files=st.dictionaries(st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,3})?", fullmatch=True),
                             st.binary(max_size=300), max_size=4))
def test_channel_round_trip(code, files):
    got = guest.parse_channel(_channel(code, files))
    assert got.running and got.progress == 12 and got.exit_code == code and got.complete
    assert got.files == files


@given(st.binary(max_size=400))
def test_channel_never_raises_on_noise(noise):
    got = guest.parse_channel(noise)
    assert got.exit_code is None or 0 <= got.exit_code


def test_partial_channel_is_not_complete():
    got = guest.parse_channel(_channel(0, {"a": b"x"})[:-12])
    assert got.exit_code == 0 and not got.complete and got.files is None


@given(st.floats(0.0, 4.0))
def test_quota_within_one_vcpu(fraction):
    q = quota_us(fraction)
    assert 1000 <= q <= 100_000
    if 0.01 <= fraction <= 1:
        assert q == round(fraction * 100_000)


def test_domain_xml(tmp_path):
    xml = domain_xml("vgrid-vwn-n-1", memory_mb=192, fraction=1 / 3, kernel=Path("/k"),
                     initrd=Path("/i"), files=tmp_path, kvm=False, disk=tmp_path / "o.qcow2")
    d = etree.fromstring(xml.encode())
    assert d.get("type") == "qemu" and d.findtext("memory") == "192"
    assert d.findtext("cputune/quota") == "33333" and d.findtext("cputune/period") == "100000"
    assert [s.get("path") for s in d.findall("devices/serial/source")] == \
        [str(tmp_path / "console.log"), str(tmp_path / "channel.out")]
    assert d.find("devices/disk/source").get("file") == str(tmp_path / "o.qcow2")
    assert d.find("devices/disk/target").get("bus") == "virtio"
    assert "vgrid.disk" in d.findtext("os/cmdline").split()     # the guest mounts /image
    assert d.findtext("on_poweroff") == "destroy"
    bare = etree.fromstring(domain_xml("x", memory_mb=128, fraction=1, kernel=Path("/k"), initrd=Path("/i"),
                                       files=tmp_path, kvm=False).encode())
    assert bare.find("devices/disk") is None and "vgrid.disk" not in bare.findtext("os/cmdline")


def _ko(tree: Path, name: str, depends: str) -> None:
    """A stand-in kernel module: only its modinfo strings matter to ``disk_modules``."""
    (tree / f"{name}.ko").write_bytes(b"\x7fELF...\0license=GPL\0depends=" + depends.encode() + b"\0vermagic=6.1\0")


def test_disk_modules_come_in_dependency_order(tmp_path):
    (tmp_path / "drivers" / "virtio").mkdir(parents=True)
    (tmp_path / "drivers" / "block").mkdir()
    for name, deps in (("virtio", ""), ("virtio_ring", ""), ("virtio_pci_modern_dev", ""),
                       ("virtio_pci", "virtio_ring,virtio_pci_modern_dev,virtio")):
        _ko(tmp_path / "drivers" / "virtio", name, deps)
    _ko(tmp_path / "drivers" / "block", "virtio_blk", "virtio,virtio_ring")
    names = [n for n, _ in guest.disk_modules(tmp_path)]
    assert sorted(names) == ["virtio", "virtio_blk", "virtio_pci", "virtio_pci_modern_dev", "virtio_ring"]
    assert names.index("virtio_pci") > max(names.index(n) for n in ("virtio", "virtio_ring", "virtio_pci_modern_dev"))
    assert names.index("virtio_blk") > max(names.index("virtio"), names.index("virtio_ring"))
    with pytest.raises(guest.GuestBuildError, match="virtio_scsi.ko"):
        guest.disk_modules(tmp_path, ("virtio_scsi",))
    _ko(tmp_path / "drivers" / "virtio", "virtio", "virtio_blk")   # a cycle is named, not recursed into
    with pytest.raises(guest.GuestBuildError, match="dependency cycle"):
        guest.disk_modules(tmp_path)


def test_initramfs_carries_the_modules_and_their_order(tmp_path):
    import zlib
    mods = [("virtio", b"A" * 10), ("virtio_blk", b"B" * 7)]
    (tmp_path / "i.cpio").write_bytes(zlib.decompressobj(31).decompress(guest.base_initramfs(mods)))
    listing = subprocess.run(["busybox", "cpio", "-t", "-F", str(tmp_path / "i.cpio")],
                             capture_output=True, text=True).stdout.split()
    assert {"lib/modules/virtio.ko", "lib/modules/virtio_blk.ko", "lib/modules/order"} <= set(listing)
    subprocess.run(["busybox", "cpio", "-i", "-d", "-F", str(tmp_path / "i.cpio")], cwd=tmp_path,
                   capture_output=True, check=True)
    assert (tmp_path / "lib/modules/order").read_text() == "virtio\nvirtio_blk\n"


@pytest.mark.parametrize("line, disk", [("VGRID-DISK mounted", "mounted"), ("VGRID-DISK raw", "raw"),
                                        ("VGRID-DISK absent", "absent"), ("VGRID-DISK bogus", None), ("", None)])
def test_channel_says_what_the_guest_made_of_its_disk(line, disk):
    assert guest.parse_channel(f"{line}\r\nVGRID-RUNNING\r\n".encode()).disk == disk


def test_a_vwn_request_names_a_pool_image():
    from vwn_agents.vwn_model import VWNRequest
    assert VWNRequest("j", "k", "/bin/true", image="sl5-worker.img").validate() is None
    assert "field 'image'" in VWNRequest("j", "k", "/bin/true", image="../etc/passwd").validate()


@pytest.mark.parametrize("field, value, message", [
    ("driver", "xen", "field 'driver': must be cgroup or libvirt"),
    ("vm_accel", "hvf", "field 'vm_accel'"),
])
def test_driver_options_are_checked(field, value, message):
    with pytest.raises(ConfigError, match=message):
        NodeAgentConfig.from_dict({"node": "n", field: value})


def test_cgroup_driver_says_what_it_uses(tmp_path):
    from vwn_agents.cgroups import Uncapped
    from vwn_agents.drivers import open_driver
    cfg = NodeAgentConfig.from_dict({"node": "drv", "cgroup": "none"})
    drv = open_driver(cfg, Uncapped("test: none"), [])
    assert drv.kind == "cgroup" and not drv.runs_jobs
    assert drv.describe()["why"].startswith("cgroup none, uncapped: test: none")
    assert drv.read_cap("x") is None and drv.state("x") == "gone"


@given(st.lists(st.lists(st.integers(0, 11), max_size=4), min_size=1, max_size=12))
def test_disk_modules_order_respects_every_dependency(deps):
    """Any acyclic dependency graph (module i depends only on modules j < i): every module comes
    after all it depends on, each once, and exactly the wanted ones and their dependencies."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        graph = {f"m{i}": sorted({f"m{j}" for j in ds if j < i}) for i, ds in enumerate(deps)}
        for name, ds in graph.items():
            _ko(Path(tmp), name, ",".join(ds))
        wanted = (f"m{len(deps) - 1}",)
        names = [n for n, _ in guest.disk_modules(Path(tmp), wanted)]
        assert len(names) == len(set(names))
        for n in names:
            assert all(names.index(d) < names.index(n) for d in graph[n])
        closure, todo = set(), list(wanted)
        while todo:
            n = todo.pop()
            if n not in closure:
                closure.add(n)
                todo += graph[n]
        assert set(names) == closure
