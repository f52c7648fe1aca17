"""The broker's web dashboard (issue 17): read-only HTML views of the grid, a CE's site and jobs.

Routes (a Flask blueprint under ``/dashboard``, registered by :func:`install` from
``broker.api.create_app``)::

    GET /dashboard/               -> redirect to the grid view
    GET /dashboard/grid           every CE of the ISM, the peer gateways       (any caller)
    GET /dashboard/site?ce=ID     one CE: nodes, VWNs, caps, image pools, slot table (any caller;
                                  jobs not theirs shown without key or owner)
    GET /dashboard/jobs           the caller's jobs (administrators: everyone's); the query of
                                  GET /jobs (state, owner, since, limit, after) plus q (search)
    GET /dashboard/jobs/<key>     one job: history, VWN caps, output files, DAG nodes and edges
                                  (owner or administrator, else 403)
    GET /dashboard/static/<file>  the page script and style sheet

Every route sits behind the app's mutual-TLS authentication (401 without a certificate) and
``broker.authz``'s rules, exactly as the JSON API. Pages are server-rendered (Jinja, with Flask)
and complete without JavaScript. Live updates: the page script polls its own URL every
``POLL_S`` seconds with ``If-None-Match``; every page has a strong ETag computed from the data it
shows (not from the clock), so an unchanged page answers 304 with no body. Why polling with
ETags and not server-sent events: an SSE stream holds a worker thread of the broker's bounded
pool (and an open connection against ``max_connections``) per open tab for as long as it is
open, and the broker's slowloris guards close idle or slow answers; a conditional GET every few
seconds costs one short request and passes every proxy (docs/dashboard.md).
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, redirect, render_template, request, url_for

from vgrid_runtime.authn import Forbidden, caller

from .. import authz, listing
from ..db import UnknownJob
from . import model, svg

#: Seconds between two polls of a page by its script.
POLL_S = 2.0
#: Bumped when templates change, so a cached page is not kept across a software update.
TEMPLATE_VERSION = "1"

HERE = Path(__file__).parent


#: Job fields no page shows that change without anything shown changing (heartbeats): left
#: out of ETags, so that a running job's page answers 304 between its state changes.
UNSHOWN_JOB_FIELDS = ("last_heard", "updated_at")


def _plain(o: Any):
    if dataclasses.is_dataclass(o):
        d = dict(vars(o))          # shallow: json.dumps walks the nested lists and dicts
        for name in UNSHOWN_JOB_FIELDS:
            d.pop(name, None)
        return d
    if isinstance(o, enum.Enum):
        return o.value
    return str(o)


def etag_of(view: str, data: Any) -> str:
    """A strong ETag of what a page shows: a hash of the view name, the caller, the template
    version and the page's data (JSON, keys sorted)."""
    raw = json.dumps([TEMPLATE_VERSION, view, caller().dn, data], default=_plain, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def _short_ce(ce_id: str | None) -> str:
    """A CE's alias: the host part of its GlueCEUniqueID up to the first dot."""
    return (ce_id or "").split(".", 1)[0].split(":", 1)[0] or "-"


def create_blueprint(broker, admins: list[str]) -> Blueprint:
    """The dashboard blueprint over ``broker`` (``admins``: DNs that see every job)."""
    bp = Blueprint("dashboard", __name__, url_prefix="/dashboard",
                   template_folder=str(HERE / "templates"), static_folder=str(HERE / "static"))

    @bp.app_template_filter("clock")
    def _clock(t):
        return svg.clock_text(t)

    @bp.app_template_filter("num")
    def _num(v, digits: int = 3):
        if v is None:
            return "-"
        return f"{v:.{digits}g}" if isinstance(v, float) else str(v)

    bp.add_app_template_filter(_short_ce, "ce_alias")

    def page(template: str, view: str, data: dict, status: int = 200, tag_data: Any = None) -> Response:
        """Render ``template`` with ``data``; its ETag is from ``tag_data`` (default ``data``):
        304 on If-None-Match."""
        tag = etag_of(view, data if tag_data is None else tag_data)
        if status == 200 and request.if_none_match.contains(tag):
            resp = Response(status=304)
            resp.set_etag(tag)
            return _nocache(resp)
        who = caller()
        html = render_template(template, view=view, now=broker.clock.now(), poll_s=POLL_S,
                               who=who, is_admin=who.is_one_of(admins) or who.identity is None,
                               etag=tag, svg=svg, broker=broker, **data)
        resp = Response(html, status=status, mimetype="text/html")
        if status == 200:
            resp.set_etag(tag)
        return _nocache(resp)

    def problem(status: int, message: str) -> Response:
        return page("error.html", "error", {"status": status, "message": message}, status=status)

    @bp.errorhandler(authz.NotAllowed)
    def _not_allowed(exc):
        return problem(403, f"{caller().dn} may not {exc}")

    @bp.errorhandler(Forbidden)
    def _forbidden(exc):
        return problem(403, f"{caller().dn} may not {exc.what}")

    @bp.errorhandler(UnknownJob)
    def _unknown(exc):
        return problem(404, f"unknown job {exc.args[0]}")

    @bp.errorhandler(model.NotFound)
    def _no_ce(exc):
        return problem(404, str(exc))

    @bp.errorhandler(listing.BadQuery)
    def _bad_query(exc):
        return problem(400, f"{exc} (parameter {exc.field!r})")

    @bp.get("/")
    def index():
        return redirect(url_for("dashboard.grid"))

    @bp.get("/grid")
    def grid():
        return page("grid.html", "grid", model.grid_model(broker))

    @bp.get("/site")
    def site():
        ce_id = request.args.get("ce", "")
        if not ce_id:
            return problem(400, "which CE? (parameter 'ce': a GlueCEUniqueID of the grid view)")
        data = model.site_model(broker, ce_id, caller(), admins)
        stable = {k: v for k, v in data.items() if k != "now"}
        if isinstance(stable.get("slots"), dict):
            stable["slots"] = {k: v for k, v in stable["slots"].items() if k != "now"}
        return page("site.html", "site", {"site": data}, tag_data=stable)

    @bp.get("/jobs")
    def jobs():
        data = model.jobs_model(broker, request.args, caller(), admins)
        args = {k: v for k, v in request.args.items() if k != "after"}
        return page("jobs.html", "jobs", {**data, "args": args})

    @bp.get("/jobs/<key>")
    def job(key: str):
        return page("job.html", "job", model.job_model(broker, key, caller(), admins))

    return bp


def _nocache(resp: Response) -> Response:
    """Pages change: the browser must revalidate (the ETag makes that cheap)."""
    resp.headers["Cache-Control"] = "no-cache, private"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Content-Security-Policy"] = ("default-src 'self'; img-src 'self' data:; "
                                               "style-src 'self'; script-src 'self'; frame-ancestors 'none'")
    return resp


def install(app, broker, admins: list[str]) -> None:
    """Register the dashboard on the broker's Flask ``app`` (see module doc)."""
    app.register_blueprint(create_blueprint(broker, list(admins)))
