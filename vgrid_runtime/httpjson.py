"""JSON-over-HTTP plumbing shared by the node agent and the CE agent (Flask adapters only).

Every error answer is ``{"error": {"message": ..., ...}}`` with a 4xx/5xx status; no traceback
ever reaches a client (an unexpected exception becomes a 500 with its one-line description and is
logged with its traceback on the server).
"""
from __future__ import annotations

import logging

from flask import Flask, jsonify, request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException

from .config import ConfigError, load
from .openapi import BodyError, check_route_body
from .storage import install_storage_errors

log = logging.getLogger(__name__)

#: Default largest request body of a service (bytes): 413 with a JSON error above it.
MAX_BODY_BYTES = 16_000_000


class ApiError(Exception):
    """An error answer: HTTP ``status`` and ``{"error": {"message": message, **fields}}``."""

    def __init__(self, status: int, message: str, **fields) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"message": message, **fields}


class SafeJSONProvider(DefaultJSONProvider):
    """Flask's JSON provider, except that a document nested too deeply for Python's parser (a
    RecursionError: e.g. 100,000 nested arrays) is a ValueError like any malformed JSON, so the
    request gets a 400 rather than a 500."""

    def loads(self, s, **kwargs):
        try:
            return super().loads(s, **kwargs)
        except RecursionError:
            raise ValueError("JSON document nested too deeply") from None


def install_safe_json(app: Flask) -> None:
    """Use :class:`SafeJSONProvider` for ``app`` (every vgrid service does)."""
    app.json = SafeJSONProvider(app)


def limit_bodies(app: Flask, max_body_bytes: int = MAX_BODY_BYTES) -> None:
    """Refuse request bodies above ``max_body_bytes`` (413, Flask ``MAX_CONTENT_LENGTH``).
    (JSON nested too deeply is a 400 through :class:`SafeJSONProvider`.)"""
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes


def install_error_handlers(app: Flask, max_body_bytes: int = MAX_BODY_BYTES) -> None:
    """Make every error of ``app`` a JSON ``{"error": {...}}`` answer; JSON is parsed safely
    (``install_safe_json``) and bodies above ``max_body_bytes`` are refused with 413
    (``limit_bodies``); a failing write to the service's storage is 507 (disk or database
    full), 503 (database unavailable) or 500 naming the operation (:mod:`vgrid_runtime.storage`;
    ``app.config["VGRID_STATE_DIR"]``, else the agent's ``state_dir``/``work_dir``, is the path
    named when the error has none)."""
    install_safe_json(app)
    limit_bodies(app, max_body_bytes)

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return jsonify({"error": exc.body}), exc.status

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        return jsonify({"error": {"message": exc.description or exc.name,
                                  "status": exc.code}}), exc.code

    install_storage_errors(app, _service_name(app), lambda: _state_dir(app))

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        log.exception("unexpected error in %s %s", request.method, request.path)
        return jsonify({"error": {"message": f"internal error: {type(exc).__name__}: {exc}"}}), 500


def _service_name(app: Flask) -> str:
    """How error messages name the service of ``app`` (``VGRID_SERVICE_NAME``, else from the
    app's name: "CE agent", "node agent")."""
    name = app.config.get("VGRID_SERVICE_NAME")
    if name:
        return name
    if app.name.startswith("vgrid-ce"):
        return "CE agent"
    if app.name.startswith("vgrid-node"):
        return "node agent"
    return app.name


def _state_dir(app: Flask):
    """The directory a storage error names: ``VGRID_STATE_DIR``, else the agent's
    (``VGRID_AGENT``) ``state_dir`` or ``work_dir`` attribute, else None."""
    agent = app.config.get("VGRID_AGENT")
    return (app.config.get("VGRID_STATE_DIR") or getattr(agent, "state_dir", None)
            or getattr(agent, "work_dir", None))


def json_body() -> dict:
    """The request's JSON object; ApiError 400 when absent, malformed (also nested too deeply,
    :class:`SafeJSONProvider`), not an object, or not fitting the pydantic body model the
    route is registered with (:mod:`vgrid_runtime.openapi`; the error names the ``field``);
    413 from Flask when larger than the app's MAX_CONTENT_LENGTH."""
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        return check_route_body(body)
    except BodyError as exc:
        raise ApiError(400, str(exc), field=exc.field) from None


def parse_body(cls, what: str):
    """The request's JSON body loaded into dataclass ``cls`` (unknown/ill-typed fields → 400)."""
    try:
        return load(cls, json_body(), what)
    except ConfigError as exc:
        raise ApiError(400, str(exc)) from None
