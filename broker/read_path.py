"""The lean read path: ``GET /jobs/<key>`` answered in front of Flask (issue 12, "Reads that
scale": status reads at >= 1,000 requests/s).

Through Flask a status read cost about 0.5 ms of the broker's CPU over mutual TLS, of which
about 0.2 ms was Flask's own (request context, ``before_request`` authentication, URL routing,
a ``Response`` object, ``after_request`` metrics; docs/benchmarks.md, "session 7: reads": 0.49-0.56
→ 0.30-0.32 ms per read), while the answer is already rendered (:mod:`broker.records`). :class:`LeanReads` is WSGI middleware
wrapped around the Flask app (``app.wsgi_app``) that answers the *common* status reads itself
and hands everything else, unchanged, to Flask:

- it answers only ``GET /jobs/<key>`` (no query string, ``<key>`` one non-empty path segment)
  from an authenticated caller who may see the job (its owner or an administrator, the same
  :func:`broker.authz.may_see_owned` on the row read in the same statement) with either no
  ``If-None-Match`` or one strong tag (``"<tag>"``): 304 without a body when it is the
  record's ETag, else 200 with the cached body;
- anything else goes to Flask, which answers exactly as before: no client certificate (401)
  or a refused one (403, logged with the caller), an unknown job or another user's job (the
  same 404, logged nowhere as before), a list of tags, a weak tag or ``*`` in
  ``If-None-Match``, a database error (503/507/500 through :mod:`vgrid_runtime.storage`),
  HEAD, a query string, other routes.

Authentication is the same as :func:`vgrid_runtime.authn.install_authentication`: the peer's
verified chain from the TLS layer (``environ["vgrid.peer_chain"]``), its identity from the
app's own :class:`vgrid_runtime.tls.IdentityCache` (the verification of
:func:`vgrid_runtime.proxy.verify_chain`, cached per chain under the chain's digest that the
TLS layer computes once per connection, expiry judged at the broker's clock); a chain the
cache refuses goes to Flask for the 403. Answers carry the same status lines, headers and
bodies as the Flask route (tests/test_read_path.py compares both paths
byte for byte for 200, 304, 401, 403 and 404), and every answer is counted in
``vgrid_http_requests_total{endpoint="/jobs/<key>", method="GET", status}`` as Flask's
``after_request`` hook counts it.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Callable

from vgrid_runtime.authn import Caller
from vgrid_runtime.pki import CredentialError
from vgrid_runtime.tls import PEER_CHAIN_KEY, PEER_DIGEST_KEY

from .authz import may_see_owned
from .db import UnknownJob

log = logging.getLogger("vgrid.broker.read_path")

#: The Flask rule whose answers the lean path gives (its metric label).
RULE = "/jobs/<key>"
_PREFIX = "/jobs/"
#: one strong entity tag, the only If-None-Match value the lean path compares itself
_ONE_TAG = re.compile(r'"[^",\\\s]*"')
_STATUS_200, _STATUS_304 = "200 OK", "304 NOT MODIFIED"   # werkzeug's status lines


class LeanReads:
    """``wsgi_app`` (the Flask app's own WSGI callable) with ``GET /jobs/<key>`` answered in
    front of it (see the module doc).

    ``records``: the app's :class:`broker.records.RecordCache`; ``admins``: DNs that see every
    job; ``identities``: the app's :class:`~vgrid_runtime.tls.IdentityCache`, None in
    plain-HTTP mode (every caller anonymous, every job visible, as the Flask route);
    ``clock``: the broker's clock (seconds); ``count(status)``: called with the HTTP status of
    each lean answer (the request metric), or None. ``enabled`` False sends every request to
    Flask (the comparison tests). ``served`` counts lean answers; ``passed`` requests handed
    to Flask because only Flask may answer them (refusals, 404, errors)."""

    def __init__(self, wsgi_app: Callable, records, admins: list[str], identities, clock,
                 count: Callable[[int], None] | None = None) -> None:
        self.wsgi_app, self.records, self.admins = wsgi_app, records, list(admins)
        self.identities, self.clock, self.count = identities, clock, count
        self.enabled = True
        self.served = self.passed = 0

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        if self.enabled and environ.get("REQUEST_METHOD") == "GET":
            path = environ.get("PATH_INFO", "")
            if path.startswith(_PREFIX) and not environ.get("QUERY_STRING"):
                key = path[len(_PREFIX):]
                if key and "/" not in key:
                    try:
                        answer = self._answer(environ, key)
                    except Exception:   # noqa: BLE001 - Flask's handlers answer it (500, logged)
                        answer = None
                    if answer is not None:
                        status, headers, body = answer
                        start_response(status, headers)
                        return body
                    self.passed += 1
        return self.wsgi_app(environ, start_response)

    def _caller(self, environ: dict) -> Caller | None:
        """The verified caller, or None when Flask must answer (401/403)."""
        if self.identities is None:
            return Caller(None)
        chain = environ.get(PEER_CHAIN_KEY)
        if not chain:
            return None
        try:
            return Caller(self.identities.identify(chain, self.clock.now(), environ.get(PEER_DIGEST_KEY)))
        except CredentialError:
            return None

    def _answer(self, environ: dict, key: str) -> tuple[str, list, list] | None:
        """(status line, headers, body chunks) of a lean answer, or None: Flask answers. Any
        exception (a database error, a chain that cannot be parsed) also hands the request to
        Flask, whose handlers answer it (503/507/500, logged)."""
        who = self._caller(environ)
        if who is None:
            return None
        try:
            record = self.records.read(key)
        except UnknownJob:
            return None             # Flask's 404 (also for a job that is not the caller's)
        if not may_see_owned(who, record.owner_dn, self.admins):
            return None
        tag = f'"{record.etag}"'
        wanted = environ.get("HTTP_IF_NONE_MATCH")
        if wanted is not None:
            wanted = wanted.strip()
            if not _ONE_TAG.fullmatch(wanted):
                return None                 # lists, weak tags, "*": werkzeug parses them
        if wanted == tag:
            code, answer = 304, (_STATUS_304, [("ETag", tag)], [])
        else:
            code, answer = 200, (_STATUS_200, [("Content-Type", "application/json"),
                                               ("Content-Length", str(len(record.body))), ("ETag", tag)],
                                 [record.body])
        self.served += 1
        if self.count is not None:
            self.count(code)
        return answer


def request_counter(app) -> Callable[[int], None] | None:
    """``count(status)`` adding one ``GET /jobs/<key>`` answer to the app's
    ``vgrid_http_requests_total`` (:mod:`vgrid_runtime.metrics`), or None when the app has
    no such counter. The labelled children are looked up once per status."""
    total = app.config.get("VGRID_REQUESTS_TOTAL")
    if total is None:
        return None
    children: dict[int, Any] = {}

    def count(status: int) -> None:
        child = children.get(status)
        if child is None:
            child = children[status] = total.labels(RULE, "GET", str(status))
        child.inc()
    return count


def install(app, broker, admins: list[str]) -> LeanReads:
    """Wrap ``app.wsgi_app`` (the broker's Flask app, after its metrics are installed) in a
    :class:`LeanReads`; returns it (also ``app.config["VGRID_LEAN_READS"]``)."""
    # KeyError when the app has no authentication installed: never guess "plain HTTP"
    lean = LeanReads(app.wsgi_app, app.config["VGRID_RECORDS"], admins,
                     app.config["VGRID_IDENTITIES"], broker.clock, request_counter(app))
    app.wsgi_app = lean
    app.config["VGRID_LEAN_READS"] = lean
    return lean
