"""The node image pool against a real image repository over mutual TLS: verified pulls, hits,
qcow2 overlays made by the real qemu-img, LRU eviction that never takes a pinned image, typed
failures (checksum mismatch, unknown image, no room) and the state kept in pool.json."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from vgrid_runtime.clock import WallClock
from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.images.client import ImageRepositoryClient
from vwn_agents.images.pool import ImageFailure, ImagePool, ImageState, PoolError, PullRequest
from vwn_agents.images.repository import ImageRepositoryConfig, create_app

from .image_site import ADDR, make_image, make_pki, session

needs_qemu_img = pytest.mark.skipif(shutil.which("qemu-img") is None,
                                    reason="qemu-img not installed (Debian package qemu-utils; scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    dns = make_pki(d)
    images = tmp_path_factory.mktemp("images")
    sums = {n: make_image(images / n, 0.4, seed=i) for i, n in enumerate(["a.img", "b.img", "c.img", "d.img"])}
    cfg = ImageRepositoryConfig(images_dir=str(images), node_dns=[dns["node1"]], ce_dns=[dns["ce"]],
                                tls_cert=str(d / "repo.pem"), tls_key=str(d / "repo.key"),
                                cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir"))
    srv = BackgroundServer(create_app(cfg), host=ADDR["repo"], tls=cfg.tls_files())
    yield {"url": srv.url, "d": d, "images": images, "sums": sums}
    srv.close()


def new_pool(repo, root, who="node1", **kw) -> ImagePool:
    client = ImageRepositoryClient(repo["url"], session=session(repo["d"], who), timeout_s=10)
    return ImagePool(root, client, WallClock(), patience_s=2.0, **kw)


def pulled(pool, name, **kw):
    pool.pull(PullRequest(name, **kw))
    return pool.wait(name, 30)


@needs_qemu_img
def test_a_verified_pull_then_a_hit_and_overlays_on_the_pooled_image(repo, tmp_path):
    pool = new_pool(repo, tmp_path / "pool")
    img = pulled(pool, "a.img", transfer="t1", pins=["L1"])
    assert img.state is ImageState.READY and img.sha256 == repo["sums"]["a.img"]
    assert (tmp_path / "pool" / img.file).read_bytes() == (repo["images"] / "a.img").read_bytes()
    again = pool.pull(PullRequest("a.img", transfer="t2", pins=["L2"]))
    assert again["hit"] is True and again["transfer"]["bytes"] == 0
    assert [t["transfer"] for t in pool.transfers if not t["hit"]] == ["t1"]   # one transfer only
    disks = [pool.overlay("a.img", vwn) for vwn in ("vwn-n-1", "vwn-n-2")]
    for disk in disks:
        info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", disk["path"]],
                                         capture_output=True, text=True, check=True).stdout)
        assert info["format"] == "qcow2" and info["backing-filename"] == str((tmp_path / "pool" / img.file).resolve())
        assert info["backing-filename-format"] == "raw"
    assert disks[0]["path"] != disks[1]["path"]
    assert pool.disk_of("vwn-n-1") == disks[0]["path"] and pool.disk_of("vwn-n-9") is None
    assert sorted(pool.view()["images"][0]["overlays"]) == ["vwn-n-1", "vwn-n-2"]
    with pytest.raises(PoolError) as exc:
        pool.overlay("b.img", "vwn-n-3")                     # not in the pool
    assert exc.value.code == "not-ready"


@needs_qemu_img
def test_eviction_is_lru_and_never_takes_a_pinned_or_overlaid_image(repo, tmp_path):
    pool = new_pool(repo, tmp_path / "pool", capacity_mb=1.0)           # room for two 0.4 MB images
    assert pulled(pool, "a.img", pins=["L1"]).state is ImageState.READY  # oldest, but pinned
    assert pulled(pool, "b.img").state is ImageState.READY
    assert pulled(pool, "c.img").state is ImageState.READY               # evicts b, not the pinned a
    states = {i["name"]: i["state"] for i in pool.view()["images"]}
    assert states == {"a.img": "ready", "b.img": "evicted", "c.img": "ready"}
    assert not any((tmp_path / "pool").glob("b.img.*"))
    pool.set_pins({"c.img": ["L3"]})                     # the CE's view: a is free, c is pinned
    pool.overlay("a.img", "vwn-x-1")                     # ... but a VM runs on a
    d = pulled(pool, "d.img")
    assert d.state is ImageState.FAILED and d.failure == ImageFailure.NO_ROOM
    assert "pinned" in d.reason
    assert {i["name"]: i["state"] for i in pool.view()["images"]}["a.img"] == "ready"
    with pytest.raises(PoolError) as exc:
        pool.evict("c.img")
    assert exc.value.code == "pinned"
    pool.remove_overlay("vwn-x-1")                       # the VM is gone: a may go now
    assert pulled(pool, "d.img").state is ImageState.READY
    states = {i["name"]: i["state"] for i in pool.view()["images"]}
    assert states == {"a.img": "evicted", "b.img": "evicted", "c.img": "ready", "d.img": "ready"}
    # the state survives: a new pool on the same directory sees the same images and pins
    pool.close()
    again = new_pool(repo, tmp_path / "pool", capacity_mb=1.0)
    assert {i["name"]: (i["state"], i["pins"]) for i in again.view()["images"]} == {
        "a.img": ("evicted", []), "b.img": ("evicted", []), "c.img": ("ready", ["L3"]), "d.img": ("ready", [])}
    assert again.pull(PullRequest("c.img"))["hit"] is True


def test_a_corrupted_image_fails_with_checksum_mismatch_and_leaves_nothing(repo, tmp_path):
    images = repo["images"]
    good = make_image(images / "e.img", 0.2, seed=9)
    (images / "SHA256SUMS").write_text(f"{good}  e.img\n")               # what the publisher shipped
    try:
        data = bytearray((images / "e.img").read_bytes())
        data[12345] ^= 0xFF                                               # bit rot on the repository's disk
        (images / "e.img").write_bytes(bytes(data))
        pool = new_pool(repo, tmp_path / "pool")
        img = pulled(pool, "e.img", transfer="t-e")
        assert img.state is ImageState.FAILED and img.failure == ImageFailure.CHECKSUM_MISMATCH
        assert good in img.reason
        assert pool.transfers[-1]["outcome"] == "checksum-mismatch"
        assert not any((tmp_path / "pool").glob("e.img*"))                # no partial, no image
        with pytest.raises(PoolError):
            pool.path("e.img")
    finally:
        (images / "SHA256SUMS").unlink()
        (images / "e.img").unlink()


def test_expected_checksum_unknown_image_and_refused_node_are_typed(repo, tmp_path):
    pool = new_pool(repo, tmp_path / "pool")
    wrong = pulled(pool, "a.img", sha256="0" * 64)
    assert wrong.state is ImageState.FAILED and wrong.failure == ImageFailure.CHECKSUM_MISMATCH
    missing = pulled(pool, "nope.img")
    assert missing.state is ImageState.FAILED and missing.failure == ImageFailure.NOT_FOUND
    rogue = new_pool(repo, tmp_path / "rogue", who="rogue")              # a host the repository does not list
    assert pulled(rogue, "a.img").failure == ImageFailure.REFUSED
    with pytest.raises(PoolError) as exc:
        pool.pull(PullRequest("../etc/passwd"))
    assert exc.value.code == "bad-name"
    assert pulled(pool, "a.img").state is ImageState.READY              # a failed image is pulled again


def test_a_partial_file_is_resumed_by_range(repo, tmp_path):
    """A pool killed mid-download (state PULLING in pool.json, a .part file) resumes at start()
    from the partial file's size: only the rest crosses the network, and the result verifies."""
    pool = new_pool(repo, tmp_path / "pool")
    img = pulled(pool, "b.img")
    full = (tmp_path / "pool" / img.file).read_bytes()
    pool.close()
    state = json.loads((tmp_path / "pool" / "pool.json").read_text())
    state["images"][0]["state"] = "pulling"                               # as a kill -9 leaves it
    (tmp_path / "pool" / "pool.json").write_text(json.dumps(state))
    (tmp_path / "pool" / img.file).unlink()
    (tmp_path / "pool" / (img.file + ".part")).write_bytes(full[:150_000])
    again = new_pool(repo, tmp_path / "pool")
    assert again.get("b.img").state is ImageState.INTERRUPTED
    again.start()
    done = again.wait("b.img", 30)
    assert done.state is ImageState.READY
    assert (tmp_path / "pool" / img.file).read_bytes() == full
    rec = done.transfer
    assert rec["resumed_by_restart"] and rec["restart_offset"] == 150_000
    assert rec["bytes"] - rec["bytes_at_restart"] == len(full) - 150_000   # only the tail was sent


def test_an_unreadable_pool_state_refuses_to_start(repo, tmp_path):
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "pool.json").write_text('{"images": [{"name": "a.img", "state": "weird"}]}')
    with pytest.raises(RuntimeError, match="pool.json is unreadable"):
        new_pool(repo, tmp_path / "pool")


@pytest.fixture(scope="module")
def small_repo(tmp_path_factory):
    """A plain-HTTP loopback repository of six 10 kB images (the property test's many pulls)."""
    images = tmp_path_factory.mktemp("small")
    for i in range(6):
        make_image(images / f"s{i}.img", 0.01, seed=40 + i)
    srv = BackgroundServer(create_app(ImageRepositoryConfig(images_dir=str(images))))
    yield srv.url
    srv.close()


@needs_qemu_img
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.one_of(
    st.tuples(st.just("pull"), st.integers(0, 5), st.lists(st.sampled_from(["L1", "L2", "L3"]), max_size=2)),
    st.tuples(st.just("pins"), st.dictionaries(st.integers(0, 5).map(lambda i: f"s{i}.img"),
                                               st.lists(st.sampled_from(["L1", "L2"]), min_size=1, max_size=2),
                                               max_size=3), st.none()),
    st.tuples(st.just("overlay"), st.integers(0, 5), st.none()),
    st.tuples(st.just("unoverlay"), st.integers(0, 5), st.none())), min_size=1, max_size=12))
def test_property_the_pool_stays_within_its_size_and_never_loses_a_pinned_image(small_repo, tmp_path, ops):
    root = tmp_path / f"p{abs(hash(str(ops))) % 10**9}"
    pool = ImagePool(root, ImageRepositoryClient(small_repo, timeout_s=10), WallClock(), capacity_mb=0.035,
                     patience_s=1.0)                            # room for three 10 kB images
    try:
        for op, arg, extra in ops:
            ready_pinned = {n for n, i in pool.images.items() if i.state is ImageState.READY and pool.pinned(n)}
            if op == "pull":
                img = pulled(pool, f"s{arg}.img", pins=extra)
                assert img.state in (ImageState.READY, ImageState.FAILED)
                if img.state is ImageState.FAILED:
                    assert img.failure == ImageFailure.NO_ROOM
            elif op == "pins":
                pool.set_pins(arg)
            elif op == "overlay":
                try:
                    pool.overlay(f"s{arg}.img", f"v{arg}")
                except PoolError as exc:
                    assert exc.code == "not-ready"
            else:
                pool.remove_overlay(f"v{arg}")
            assert pool.used_bytes() <= 35_000
            for name in ready_pinned:                      # what was pinned and there is still there
                assert pool.images[name].state is ImageState.READY and (root / pool.images[name].file).exists()
    finally:
        pool.close()
