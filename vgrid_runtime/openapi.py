"""OpenAPI 3.1 descriptions of the vgrid services (issue 17): ``GET /openapi.json`` and the
request-body validation, both from ONE registry of routes -> models per service.

Library: pydantic v2 (docs/api.md says why). A service lists its routes as :class:`Op` records
(method, OpenAPI path, who may call it, request body model, answers by status); the body and
answer models are either pydantic ``BaseModel`` classes or the service's existing request
dataclasses (``JobRequest``, ``VWNRequest``, ...), whose JSON Schema pydantic derives with
``TypeAdapter``. The same registry then

* validates JSON request bodies (:func:`validate_body`, called by
  :func:`vgrid_runtime.httpjson.json_body` and the broker's body reader): a body that does not
  fit its model is a 400 ``{"error": {"message", "field"}}`` naming the first bad field
  (``jobs.0.key``), as before; the dataclass bodies keep being loaded by
  :func:`vgrid_runtime.config.load` (the same class the schema is generated from);
* is published as ``GET /openapi.json`` (:func:`install_openapi`): any authenticated caller may
  read it (a user proxy, a host certificate); without a certificate the TLS service answers 401
  as for every route (docs/security.md). The security scheme is OpenAPI 3.1 ``mutualTLS``.

Every error answer is documented with the shared shape :class:`ErrorBody`. Routes that are not
part of the JSON API (HTML pages) are simply not listed; :func:`flask_paths` lets a test check
that every JSON route of an app is.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, current_app, jsonify, request
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

OPENAPI_VERSION = "3.1.0"
REF = "#/components/schemas/{model}"

#: What the errors of every route may be (beside those an Op names): refusals, bad bodies and
#: the storage / internal errors every service answers (vgrid_runtime.storage, httpjson).
COMMON_ERRORS = {401: "no client certificate (TLS mode)",
                 403: "credential refused or the caller may not do this (reason in the body)",
                 500: "unexpected error (no traceback; logged on the server)"}


class ErrorDetail(BaseModel):
    """``error`` of every error answer: a message for people plus typed fields (``reason``,
    ``field``, ``code``, ``outcome``, ``file``/``line``/``column`` of a JDL error, ...)."""

    model_config = ConfigDict(extra="allow")
    message: str


class ErrorBody(BaseModel):
    """Every 4xx/5xx JSON answer of a vgrid service."""

    error: ErrorDetail


@dataclass(frozen=True)
class Op:
    """One route of a service: ``path`` in OpenAPI form (``/jobs/{key}``), ``who``: the
    authorization rule in words; ``body``: model of a JSON body (``form=True``: also or only a
    multipart form, ``raw=True``: raw bytes); ``answers``: ``{status: model | "text" | "binary" |
    "empty" (no body: 304) | None (JSON, any shape)}``; ``errors``: ``{status: when}`` beside :data:`COMMON_ERRORS`;
    ``query``: ``{name: (JSON Schema, description)}``."""

    method: str
    path: str
    summary: str
    who: str
    answers: dict[int, Any]
    body: Any = None
    form: bool = False
    raw: bool = False
    errors: dict[int, str] = field(default_factory=dict)
    query: dict[str, tuple[dict, str]] = field(default_factory=dict)

    @property
    def flask_rule(self) -> str:
        return re.sub(r"\{(\w+)\}", r"<\1>", self.path)


def _schema_of(model, components: dict, mode: str) -> dict:
    """A ``$ref`` to ``model``'s schema, added (with its definitions) to ``components``
    (``list[M]``: an array of ``$ref``)."""
    if typing.get_origin(model) is list:
        return {"type": "array", "items": _schema_of(typing.get_args(model)[0], components, mode)}
    name = model.__name__
    if name not in components:
        schema = TypeAdapter(model).json_schema(ref_template=REF, mode=mode)
        for sub, s in schema.pop("$defs", {}).items():
            components.setdefault(sub, s)
        if dataclasses.is_dataclass(model):      # config.load refuses unknown fields
            schema["additionalProperties"] = False
        components[name] = schema
    return {"$ref": REF.format(model=name)}


def _content(kind, components: dict, mode: str) -> dict:
    if kind == "text":
        return {"text/plain": {"schema": {"type": "string"}}}
    if kind == "binary":
        return {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
    if kind is None:
        return {"application/json": {"schema": {}}}
    return {"application/json": {"schema": _schema_of(kind, components, mode)}}


@dataclass
class ApiSpec:
    """The routes of one service and their OpenAPI document (:meth:`document`)."""

    title: str
    description: str
    ops: list[Op]
    version: str = "1"

    def op(self, method: str, rule: str) -> Op | None:
        """The Op of Flask ``rule`` (``/jobs/<key>``) and ``method``, None if not listed."""
        for o in self.ops:
            if o.method == method.upper() and o.flask_rule == rule:
                return o
        return None

    def document(self, only: set[tuple[str, str]] | None = None) -> dict:
        """The OpenAPI 3.1 document (a JSON-ready dict, deterministic); ``only``: keep the
        routes whose ``(METHOD, Flask rule)`` is in it (those an app really has)."""
        components: dict[str, dict] = {}
        error_ref = _schema_of(ErrorBody, components, "serialization")
        paths: dict[str, dict] = {}
        for o in self.ops:
            if only is not None and (o.method, o.flask_rule) not in only:
                continue
            params = [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                      for n in re.findall(r"\{(\w+)\}", o.path)]
            params += [{"name": n, "in": "query", "required": False, "schema": s, "description": d}
                       for n, (s, d) in o.query.items()]
            responses = {}
            for status, kind in sorted(o.answers.items()):
                if kind == "empty":          # 304 Not Modified: no body
                    responses[str(status)] = {"description": "not modified (If-None-Match)"}
                    continue
                responses[str(status)] = {"description": "success",
                                          "content": _content(kind, components, "serialization")}
            for status, when in sorted({**COMMON_ERRORS, **o.errors}.items()):
                responses[str(status)] = {"description": when,
                                          "content": {"application/json": {"schema": error_ref}}}
            entry: dict[str, Any] = {"summary": o.summary, "description": f"Who may: {o.who}.",
                                     "operationId": f"{o.method.lower()}{_op_name(o.path)}",
                                     "responses": responses}
            if params:
                entry["parameters"] = params
            if o.body is not None or o.raw:
                content = {}
                if o.body is not None:
                    content["application/json"] = {"schema": _schema_of(o.body, components, "validation")}
                if o.form:
                    content["multipart/form-data"] = {"schema": {
                        "type": "object", "required": ["jdl"],
                        "properties": {"jdl": {"type": "string"}, "filename": {"type": "string"},
                                       "isb": {"type": "array", "items": {"type": "string", "format": "binary"}}}}}
                if o.raw:
                    content["application/octet-stream"] = {"schema": {"type": "string", "format": "binary"}}
                entry["requestBody"] = {"required": True, "content": content}
            paths.setdefault(o.path, {})[o.method.lower()] = entry
        return {"openapi": OPENAPI_VERSION,
                "info": {"title": self.title, "version": self.version, "description": self.description},
                "paths": dict(sorted(paths.items())),
                "components": {"schemas": dict(sorted(components.items())),
                               "securitySchemes": {"mutualTLS": {
                                   "type": "mutualTLS",
                                   "description": "a client certificate chain the service trusts: a "
                                                  "user proxy with VOMS attributes or a host certificate "
                                                  "(plain-HTTP mode on loopback: none, nothing checked)"}}},
                "security": [{"mutualTLS": []}]}


def _op_name(path: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", path.replace("{", "by-"))
    return "".join(w[:1].upper() + w[1:] for w in words) or "Root"


class BodyError(ValueError):
    """A JSON body that does not fit its model: ``field`` (dotted path) and the message."""

    def __init__(self, message: str, field: str | None) -> None:
        super().__init__(message)
        self.field = field


@functools.lru_cache(maxsize=None)
def _adapter(model) -> TypeAdapter:
    return TypeAdapter(model)


def validate_body(model, body: Any, what: str) -> Any:
    """``body`` validated by ``model`` (a pydantic model or dataclass; about 2.5 us of CPU for a
    CE event); BodyError naming the first bad field (dotted path)."""
    try:
        return _adapter(model).validate_python(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        raise BodyError(f"{what}: field {where!r}: {first['msg']}" if where else f"{what}: {first['msg']}",
                        where) from None


def route_body_model(app: Flask | None = None):
    """The pydantic body model the current request's route is registered with, or None (no
    registry, a route not listed, or a dataclass body that config.load validates)."""
    app = app or current_app
    spec: ApiSpec | None = app.config.get("VGRID_OPENAPI")
    if spec is None or request.url_rule is None:
        return None
    o = spec.op(request.method, request.url_rule.rule)
    if o is None or not (isinstance(o.body, type) and issubclass(o.body, BaseModel)):
        return None
    return o.body


def check_route_body(body: Any) -> Any:
    """``body`` (a request's parsed JSON) checked by the pydantic model of the current route
    (:func:`route_body_model`; nothing to check for a non-object or a route without one);
    BodyError naming the first bad field."""
    model = route_body_model()
    if model is not None and isinstance(body, dict):
        validate_body(model, body, f"{request.method} {request.url_rule.rule}")
    return body


def install_openapi(app: Flask, spec: ApiSpec) -> None:
    """Register ``spec`` (``app.config["VGRID_OPENAPI"]``) and serve it as ``GET /openapi.json``
    to any authenticated caller (the app's :func:`vgrid_runtime.authn.install_authentication`
    answers 401/403 before this route for a missing or refused certificate)."""
    app.config["VGRID_OPENAPI"] = spec
    cached: list[dict] = []

    @app.get("/openapi.json")
    def openapi_json():
        if not cached:       # built on first use: blueprints (federation) are registered by then
            cached.append(spec.document(only=flask_paths(app)))
        return jsonify(cached[0])


#: Blueprints whose routes are part of a JSON API (others, e.g. an HTML dashboard, are not
#: described: :func:`flask_paths` with ``api_only``).
API_BLUEPRINTS = {"federation"}


def flask_paths(app: Flask, api_only: bool = False) -> set[tuple[str, str]]:
    """``{(METHOD, rule)}`` of every route of ``app`` (HEAD/OPTIONS and static left out);
    ``api_only``: without the routes of blueprints not in :data:`API_BLUEPRINTS` (HTML pages)."""
    def api(endpoint: str) -> bool:
        return "." not in endpoint or endpoint.split(".", 1)[0] in API_BLUEPRINTS
    return {(m, r.rule) for r in app.url_map.iter_rules() if r.endpoint != "static"
            and (not api_only or api(r.endpoint)) for m in r.methods - {"HEAD", "OPTIONS"}}
