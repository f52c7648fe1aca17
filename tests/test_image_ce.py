"""The CE agent with an ``image_repository`` (in-process services on loopback): a JDL with
``VMImage`` (size from the repository's manifest) is an advance reservation whose image its
node agent pulls before the start, on the engine's schedule; an image the repository does not
have is a 400 naming VMImage."""
from __future__ import annotations

import itertools

import pytest
import requests

from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.ce_agent import CEAgentConfig, create_app
from vwn_agents.images.pool import ImageState, PoolError
from vwn_agents.images.repository import ImageRepositoryConfig, create_app as repo_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app

from .image_site import make_image
from .test_ce_agent import submit
from .waiting import wait_until

_n = itertools.count(1)


@pytest.fixture
def ce_site(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    make_image(images / "c.img", 1.5, seed=5)
    servers = [BackgroundServer(repo_app(ImageRepositoryConfig(images_dir=str(images))))]
    repo = servers[0].url
    node = node_app(NodeAgentConfig.from_dict({"node": f"imgce{next(_n)}", "work_dir": str(tmp_path / "wn"),
                                               "cgroup": "none", "retry_initial_s": 0.05,
                                               "image_repository": repo}))
    servers.append(BackgroundServer(node))
    lease_toml = tmp_path / "lease.toml"
    lease_toml.write_text('[deploy-imagetransfer]\nar-transfer-strategy = "edf"\n'
                          '[simulation]\nimagetransfer-bandwidth = 24\n')          # 3 MB/s
    ce = create_app(CEAgentConfig.from_dict({
        "ce_id": "ce1.vgrid.local:8443/vgrid-vwn-long", "host": "ce1.vgrid.local", "site": "S", "queue": "long",
        "nodes": [servers[1].url], "ram_mb": 2048, "max_wallclock_s": 600, "vos": ["dteam"], "retry_s": 0.2,
        "retry_initial_s": 0.05, "lease_tick_s": 0.1, "image_repository": repo, "lease_config": str(lease_toml)}))
    servers.append(BackgroundServer(ce))
    yield servers[2].url, ce.config["VGRID_AGENT"], node.config["VGRID_AGENT"]
    for s in reversed(servers[1:]):
        s.close()
    servers[0].close()


def test_a_vmimage_job_is_staged_before_its_reservation(ce_site, receiver):
    ce_url, ce, node = ce_site
    start = int(ce.clock.now()) + 5
    jdl = (f'[ Executable = "/bin/sleep"; Arguments = "0.2"; VMImage = "https://images.example.org/c.img"; '
           f'LeaseType = "advance-reservation"; LeaseStart = {int(start)}; LeaseDuration = 3; ]')
    key, resp = submit(ce_url, receiver, jdl)
    assert resp.status_code == 202, resp.text
    lease = requests.get(f"{ce_url}/jobs/{key}", timeout=5).json()["lease"]
    assert lease["image"] == "c.img" and lease["image_mb"] == pytest.approx(1.5)   # the manifest's size
    run = receiver.wait_event(key, "running", timeout_s=30)
    receiver.wait_event(key, "done", timeout_s=30)
    img = node.images.get("c.img")
    assert img.state.value == "ready" and img.transfer["transfer"].startswith(f"{key}:")
    rec = img.transfer
    assert rec["bytes"] == 1_500_000 and rec["rate_mbs"] == pytest.approx(3.0)
    assert rec["ended"] <= run["time"] and run["time"] >= start - 0.05      # the image came first


def test_an_image_the_repository_lacks_is_refused_naming_vmimage(ce_site, receiver):
    ce_url, _, _ = ce_site
    _, resp = submit(ce_url, receiver, '[ Executable = "/bin/true"; VMImage = "/images/missing.img"; ]')
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["field"] == "VMImage" and "missing.img" in err["message"]


def test_best_effort_jobs_on_one_image_share_one_fifo_transfer(ce_site, receiver):
    ce_url, ce, node = ce_site
    keys = []
    for _ in range(2):
        key, resp = submit(ce_url, receiver, '[ Executable = "/bin/sleep"; Arguments = "0.2"; '
                                             'VMImage = "/srv/images/c.img"; LeaseDuration = 30; ]')
        assert resp.status_code == 202, resp.text
        keys.append(key)
    runs = [receiver.wait_event(k, "running", timeout_s=30) for k in keys]
    for k in keys:
        receiver.wait_event(k, "done", timeout_s=30)
    pulls = [t for t in node.images.transfers if t["image"] == "c.img" and not t["hit"]]
    assert len(pulls) == 1 and pulls[0]["bytes"] == 1_500_000           # one transfer, the second reuses it
    assert all(r["time"] >= pulls[0]["ended"] - 0.05 for r in runs)     # no VM before its image


def test_the_ce_pins_an_image_from_acceptance_to_the_end_of_its_lease(ce_site, receiver):
    ce_url, ce, node = ce_site
    start = int(ce.clock.now()) + 6
    key, resp = submit(ce_url, receiver, f'[ Executable = "/bin/sleep"; Arguments = "0.2"; VMImage = "/x/c.img"; '
                                         f'LeaseType = "advance-reservation"; LeaseStart = {start}; LeaseDuration = 2; ]')
    assert resp.status_code == 202, resp.text
    wait_until(lambda: key in node.images.pins.get("c.img", ()), "the AR's pin on the node", 10)
    wait_until(lambda: getattr(node.images.get("c.img"), "state", None) is ImageState.READY,
               "c.img pulled (the pin may come before the pull starts)", 30)
    with pytest.raises(PoolError):
        node.images.evict("c.img")                          # the AR still needs it
    receiver.wait_event(key, "done", timeout_s=30)
    wait_until(lambda: not node.images.pins.get("c.img"), "the pin released after the lease", 30)
    node.images.evict("c.img")                              # now it may go


def test_a_vwn_naming_a_pool_image_waits_for_it_and_pins_it_while_it_lives(ce_site):
    """``POST /vwns`` with ``image`` (images.vwn_disk) on a cgroup node: refused 409 "not-ready"
    before the image is in the pool (no VWN made); once it is, the VWN's overlay pins the image
    while it runs and is removed when it ends (the image stays READY, unpinned)."""
    from vgrid_runtime.httpjson import ApiError
    from vwn_agents.images.pool import PullRequest
    from vwn_agents.vwn_model import VWNRequest
    _, _, node = ce_site
    req = VWNRequest("j-img", "k-img", "/bin/sleep", arguments="1", image="c.img")
    with pytest.raises(ApiError) as refused:
        node.create_vwn(req)
    assert refused.value.status == 409 and refused.value.body["code"] == "not-ready"
    assert "k-img" not in node.by_key
    node.images.pull(PullRequest("c.img"))
    assert node.images.wait("c.img", 30).state is ImageState.READY
    v, created = node.create_vwn(req)
    assert created and node.images.overlays == {"k-img": "c.img"}
    with pytest.raises(PoolError, match="pinned"):
        node.images.evict("c.img")
    wait_until(lambda: node.get(v.vwn).state.value == "done", "the VWN done", 30)
    assert node.images.overlays == {} and not (node.images.root / "overlays" / "k-img.qcow2").exists()
    node.images.evict("c.img")                              # unpinned once the VWN ended
