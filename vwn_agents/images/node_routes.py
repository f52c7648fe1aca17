"""The node agent's image routes: its image pool (``pool``) over HTTP, for its CE agent only.

Installed by ``node_agent.create_app`` (``install_routes``); the pool lives in
``<work_dir>/images`` (``image_pool_dir``) and pulls from ``image_repository`` (node agent
options, docs/vwn.md "Image repository, pools and live staging"). The node pulls only from its
configured repository: a caller names an image, never a URL.

* ``POST /images/pulls`` ``PullRequest`` JSON -> 202 ``{"image","state","hit","transfer"}``
  (``hit``: the image was READY, nothing is transferred; a pull of an image being pulled joins
  it); 400 a bad body or image name; 501 no image repository configured.
* ``GET /images`` -> ``ImagePool.view()``: images (state, sha256, size, pins, overlays,
  failure), capacity, and the transfer records (scheduled vs actual start/end, bytes).
* ``PUT /images/pins`` ``{"pins": {image: [lease keys]}}`` -> 200 the view: replaces the pins.
* ``POST /images/<name>/overlays`` ``{"vwn"}`` -> 201 ``{"path","backing","format"}``; 409
  ``{"error": {"message","code": "not-ready"}}`` when the image is not READY; 500 "overlay-failed".
* ``DELETE /images/overlays/<vwn>`` -> 200 the view.

Authorization: every route only for the CE agents of ``ce_dns`` (the rule of POST /vwns);
anyone else 403 (docs/security.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flask import jsonify

from vgrid_runtime.httpclient import new_session
from vgrid_runtime.httpjson import ApiError, parse_body

from .client import ImageRepositoryClient
from .pool import ImagePool, PoolError, PullRequest


@dataclass
class PinsBody:
    """Body of PUT /images/pins: ``pins`` = ``{image: [lease keys]}``."""

    pins: dict


@dataclass
class OverlayBody:
    """Body of POST /images/<name>/overlays: the VWN whose disk it is."""

    vwn: str


def open_pool(config, work_dir: Path, clock) -> ImagePool:
    """The node's pool from its ``NodeAgentConfig`` (client with the node's host credential)."""
    client = None
    if config.image_repository:
        client = ImageRepositoryClient(config.image_repository, session=new_session(config.tls_files()),
                                       timeout_s=30.0)
    root = Path(config.image_pool_dir) if config.image_pool_dir else work_dir / "images"
    return ImagePool(root, client, clock, capacity_mb=config.image_pool_mb,
                     patience_s=config.image_pull_patience_s)


def status(agent) -> dict:
    """``{"image_pool": {...}}`` for the node's GET /status (``{}`` before the pool is open):
    ``images`` ``[{"name","state","size" (bytes),"pins","overlays","last_use"}]``, ``bytes`` held,
    ``capacity_mb`` (0 = unlimited), ``used_mb``, and from the pool's persisted transfer records
    ``hits`` (pulls answered from the pool), ``misses`` (pulls that transferred) and ``joined``
    (pulls that joined a running transfer)."""
    pool = getattr(agent, "images", None)
    if pool is None:
        return {}
    view = pool.view()
    recs = view["transfers"]
    images = [{k: i.get(k) for k in ("name", "state", "size", "pins", "overlays", "last_use")}
              for i in view["images"]]
    return {"image_pool": {"images": images, "bytes": pool.used_bytes(),
                           "capacity_mb": view["capacity_mb"], "used_mb": round(view["used_mb"], 3),
                           "hits": sum(1 for r in recs if r.get("hit")),
                           "misses": sum(1 for r in recs if not r.get("hit") and not r.get("joined")),
                           "joined": sum(1 for r in recs if r.get("joined"))}}


def _api(exc: PoolError) -> ApiError:
    status = {"not-ready": 409, "pinned": 409, "unknown-image": 404, "bad-name": 400}.get(exc.code, 500)
    return ApiError(status, str(exc), code=exc.code)


def install_routes(app, agent, from_ce) -> ImagePool:
    """Open the pool (``agent.images``), resume interrupted pulls, add the routes; the pool is
    closed (pulls stay resumable) before the agent's own shutdown."""
    pool = open_pool(agent.config, agent.work_dir, agent.clock)
    agent.images = pool
    pool.start()
    agent_stop = app.config.get("VGRID_ON_STOP")

    def stop():
        pool.close()
        if agent_stop:
            agent_stop()

    app.config["VGRID_ON_STOP"] = stop

    @app.post("/images/pulls")
    def pull_image():
        from_ce("pull images")
        if not agent.config.image_repository:
            raise ApiError(501, f"node {agent.config.node} has no image_repository configured")
        req = parse_body(PullRequest, "POST /images/pulls")
        try:
            return jsonify(pool.pull(req)), 202
        except PoolError as exc:
            raise _api(exc) from None

    @app.get("/images")
    def list_images():
        from_ce("list the image pool")
        return jsonify(pool.view())

    @app.put("/images/pins")
    def put_pins():
        from_ce("pin images")
        body = parse_body(PinsBody, "PUT /images/pins")
        if not all(isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v)
                   for k, v in body.pins.items()):
            raise ApiError(400, "field 'pins': must map image names to lists of lease keys", field="pins")
        pool.set_pins(body.pins)
        return jsonify(pool.view())

    @app.post("/images/<name>/overlays")
    def make_overlay(name):
        from_ce(f"make an overlay of image {name}")
        body = parse_body(OverlayBody, f"POST /images/{name}/overlays")
        try:
            return jsonify(pool.overlay(name, body.vwn)), 201
        except PoolError as exc:
            raise _api(exc) from None

    @app.delete("/images/overlays/<vwn>")
    def delete_overlay(vwn):
        from_ce(f"delete the overlay of {vwn}")
        pool.remove_overlay(vwn)
        return jsonify(pool.view())

    return pool
