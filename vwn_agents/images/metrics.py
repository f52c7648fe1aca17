"""Image-transfer metrics (issue 17) of the node agent's image pool and the image repository
(``GET /metrics``, Prometheus text; plumbing in :mod:`vgrid_runtime.metrics`).

Node agent, read at scrape time from its :class:`.pool.ImagePool` (:func:`pool_families`):

* ``vgrid_image_pull_bytes_total`` (counter, bytes): bytes downloaded into the pool by every
  transfer (a resumed download counts only what it fetched after the resume);
* ``vgrid_image_transfers_total{outcome}`` (counter): pull requests by how they ended: ``hit``
  (READY already), ``joined`` (a pull of it was running), ``ready``, a failure code of
  ``ImageFailure`` (``checksum-mismatch``, ``not-found``, ``unreachable``, ...), ``interrupted``,
  or ``running`` (not ended yet); the common outcomes are always present (0 when none);
* ``vgrid_image_pool_lookups_total{result}`` (counter): ``hit`` / ``miss`` (a transfer was
  started) / ``joined``: the pool hit rate is ``hit / (hit + miss + joined)``;
* ``vgrid_image_pool_bytes`` and ``vgrid_image_pool_capacity_bytes`` (gauges, bytes): what the
  pool holds or is pulling, and its limit (``image_pool_mb``);
* ``vgrid_image_pool_images{state}`` (gauge): images by state (pulling, ready, failed, ...).

The counters sum the pool's transfer records (kept in ``pool.json``, the last
``KEEP_TRANSFERS`` across a restart): they restart with the agent, as Prometheus counters do.

Image repository (:func:`install_repo_metrics`): ``vgrid_image_repo_served_bytes_total``
(counter, bytes: the bodies of answered image downloads, a range counting its length),
``vgrid_image_repo_downloads_total{status}`` (counter: 200 whole, 206 range, 304, 404, 416, ...),
``vgrid_image_repo_images`` and ``vgrid_image_repo_bytes`` (gauges: the catalogue). Who may
scrape: the repository's ``metrics_dns`` and its own host certificate. Source: seed 000
Section 6.2 (image staging), whose transfer times these let an operator compare.
"""
from __future__ import annotations

from flask import request
from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from vgrid_runtime.metrics import gauge_by, install_metrics, may_scrape

from .pool_model import ImageFailure, ImageState

#: outcomes always exported (0 when none) so a dashboard's rate() has a series from the start
OUTCOMES = ("hit", "joined", "ready", "running", ImageFailure.CHECKSUM_MISMATCH.value,
            ImageFailure.NOT_FOUND.value, ImageFailure.UNREACHABLE.value)


def pool_families(pool):
    """The node's image-pool families (module doc) from ``pool`` (an ImagePool)."""
    with pool._lock:
        transfers = [dict(r) for r in pool.transfers]
        states = [i.state.value for i in pool.images.values()]
    pulled = sum(int(r.get("bytes") or 0) for r in transfers)
    outcomes: dict[str, int] = {o: 0 for o in OUTCOMES}
    lookups = {"hit": 0, "miss": 0, "joined": 0}
    for r in transfers:
        outcome = r.get("outcome") or "running"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        lookups["hit" if r.get("hit") else "joined" if r.get("joined") else "miss"] += 1
    yield CounterMetricFamily("vgrid_image_pull_bytes", "bytes downloaded into the image pool",
                              value=pulled)
    fam = CounterMetricFamily("vgrid_image_transfers", "image pull requests by outcome",
                              labels=["outcome"])
    for outcome, n in sorted(outcomes.items()):
        fam.add_metric([outcome], n)
    yield fam
    fam = CounterMetricFamily("vgrid_image_pool_lookups", "image pull requests by pool result "
                              "(hit: READY already; miss: a transfer started; joined: one ran)",
                              labels=["result"])
    for result, n in sorted(lookups.items()):
        fam.add_metric([result], n)
    yield fam
    yield GaugeMetricFamily("vgrid_image_pool_bytes", "bytes the image pool holds or is pulling",
                            value=pool.used_bytes())
    yield GaugeMetricFamily("vgrid_image_pool_capacity_bytes", "the image pool's limit (bytes)",
                            value=pool.capacity_bytes)
    counts: dict[str, int] = {}
    for s in states:
        counts[s] = counts.get(s, 0) + 1
    yield gauge_by("vgrid_image_pool_images", "images in the pool by state", "state", counts,
                   [s.value for s in ImageState])


def install_repo_metrics(app, catalog, config) -> None:
    """``GET /metrics`` on the image repository's ``app`` (module doc); the download route's
    answers (endpoint ``download``) are counted after each request."""
    registry = install_metrics(
        app, lambda: _repo_families(catalog),
        lambda who: may_scrape(who, config.metrics_dns, (), app.config.get("VGRID_URL")))
    served = Counter("vgrid_image_repo_served_bytes", "bytes of image bodies the repository "
                     "answered (a range: its length)", registry=registry)
    downloads = Counter("vgrid_image_repo_downloads", "image downloads answered, by HTTP status",
                        ["status"], registry=registry)

    @app.after_request
    def _count_download(resp):
        if request.endpoint == "download":
            downloads.labels(str(resp.status_code)).inc()
            if resp.status_code in (200, 206) and resp.content_length:
                served.inc(resp.content_length)
        return resp


def _repo_families(catalog):
    entries = catalog.entries()
    yield GaugeMetricFamily("vgrid_image_repo_images", "images the repository serves", value=len(entries))
    yield GaugeMetricFamily("vgrid_image_repo_bytes", "bytes of the images the repository serves",
                            value=sum(e["size"] for e in entries))
