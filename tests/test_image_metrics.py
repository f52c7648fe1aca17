"""Image-transfer metrics (issue 17): a node agent pulls from a real image repository (plain HTTP
on loopback; the TLS refusal of the repository's /metrics is in test_openapi_fuzz.py) and both
/metrics follow what happened: bytes pulled and served equal the image's size, one transfer
ready, one hit, one not-found, the pool's bytes and images by state."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from vgrid_runtime.wsgi import BackgroundServer
from vwn_agents.images.repository import ImageRepositoryConfig, create_app as repo_app
from vwn_agents.node_agent import NodeAgentConfig, create_app as node_app

from .image_site import make_image
from .waiting import wait_until


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    r = requests.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200, r.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def value(samples, name, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def pair(tmp_path):
    (tmp_path / "images").mkdir()
    make_image(tmp_path / "images" / "a.img", 0.25, seed=3)
    repo = BackgroundServer(repo_app(ImageRepositoryConfig(images_dir=str(tmp_path / "images"))))
    node = BackgroundServer(node_app(NodeAgentConfig(node="im1", cgroup="none", disk_quota_mb=0,
                                                     work_dir=str(tmp_path / "node"), image_repository=repo.url,
                                                     image_pool_mb=10)))
    yield repo.url, node.url, (tmp_path / "images" / "a.img").stat().st_size
    node.close()
    repo.close()


def test_pulls_hits_and_failures_move_the_node_and_repository_metrics(pair):
    repo, node, size = pair
    before = scrape(node)
    assert value(before, "vgrid_image_pull_bytes_total") == 0
    assert value(before, "vgrid_image_transfers_total", outcome="ready") == 0
    assert value(before, "vgrid_image_pool_capacity_bytes") == 10_000_000
    assert value(scrape(repo), "vgrid_image_repo_bytes") == size

    def pull(name):
        r = requests.post(f"{node}/images/pulls", json={"image": name, "transfer": f"t-{name}"}, timeout=10)
        assert r.status_code == 202, r.text
        return r.json()

    pull("a.img")
    wait_until(lambda: value(scrape(node), "vgrid_image_transfers_total", outcome="ready") == 1, "a.img ready")
    assert pull("a.img")["hit"] is True
    pull("nosuch.img")
    s = wait_until(lambda: (m := scrape(node)) and value(m, "vgrid_image_transfers_total", outcome="not-found") == 1
                   and m, "nosuch.img failed")
    assert value(s, "vgrid_image_pull_bytes_total") == size
    assert value(s, "vgrid_image_transfers_total", outcome="hit") == 1
    assert value(s, "vgrid_image_transfers_total", outcome="running") == 0
    assert value(s, "vgrid_image_pool_lookups_total", result="hit") == 1
    assert value(s, "vgrid_image_pool_lookups_total", result="miss") == 2
    assert value(s, "vgrid_image_pool_lookups_total", result="joined") == 0
    assert value(s, "vgrid_image_pool_bytes") == size
    assert value(s, "vgrid_image_pool_images", state="ready") == 1
    assert value(s, "vgrid_image_pool_images", state="failed") == 1
    r = scrape(repo)
    assert value(r, "vgrid_image_repo_served_bytes_total") == size
    assert sum(v for (n, labels), v in r.items()
               if n == "vgrid_image_repo_downloads_total" and dict(labels)["status"] in ("200", "206")) == 1
    assert value(r, "vgrid_image_repo_images") == 1


def test_the_dashboards_image_panels_query_metrics_that_exist(pair):
    repo, node, _ = pair
    board = json.loads((Path(__file__).resolve().parent.parent / "docs" / "grafana" / "vgrid.json").read_text())
    used = {m for p in board["panels"] for t in p.get("targets", [])
            for m in re.findall(r"\bvgrid_image_[a-z_]+", t["expr"])}
    served = {name for name, _ in scrape(node)} | {name for name, _ in scrape(repo)}
    assert len(used) >= 5 and used <= served, used - served
