"""The base of every vgrid service client: one ``requests.Session``, timeouts, typed errors.

Each service API has exactly one client module built on ``ServiceClient`` (docs/architecture.md,
"Clients"): ``vwn_agents/node_client.py`` (node agent), ``vwn_agents/ce_client.py`` (CE agent).
Sessions come from ``new_session()``, the one place where transport security (mutual TLS) is
to be configured.

Every failure of a call is a ``ServiceError`` (each client raises its own subclass) whose
``kind`` says what went wrong, so callers branch on ``kind`` and ``status``, never on text:

* ``ErrorKind.UNREACHABLE``: no answer (connection refused or reset, unknown host, TLS failure);
* ``ErrorKind.TIMEOUT``: no answer within the timeout (connect or read);
* ``ErrorKind.HTTP``: the service answered with a status >= 300 (``status``; ``body`` is its
  JSON error ``{"error": {...}}`` or ``{}``);
* ``ErrorKind.BAD_ANSWER``: a 2xx answer that is not the JSON the contract promises.
"""
from __future__ import annotations

import enum
import threading
from typing import Any
from urllib.parse import urlsplit

import orjson
import requests
from requests.adapters import HTTPAdapter

from .keptalive import KeptAlive, LeanError

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .tls import TLSFiles


class ErrorKind(enum.StrEnum):
    """What went wrong with a call to a service (see module doc)."""

    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    HTTP = "http"
    BAD_ANSWER = "bad-answer"


class ServiceError(Exception):
    """A call to a vgrid service failed. ``kind``: ``ErrorKind``; ``status``: the HTTP status
    when the service answered, else None; ``url``: the URL called; ``body``: the decoded JSON
    answer of an HTTP error, else ``{}``; ``cause``: the class name of the transport error
    (e.g. "ConnectionError", "ReadTimeout") for UNREACHABLE and TIMEOUT, else None.

    ``str()`` is for people: "<cause>: <detail>" (no answer), "HTTP <status> <first 200
    characters of the answer>" (HTTP), "HTTP <status> from <url>: <why>" (bad answer).
    """

    def __init__(self, kind: ErrorKind, message: str, url: str, status: int | None = None,
                 body: dict | None = None, cause: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.url = url
        self.status = status
        self.body = body or {}
        self.cause = cause

    @property
    def answered(self) -> bool:
        """True when the service answered below 500 (it is up, though it refused the request
        or garbled its answer); False for no answer, a timeout or a 5xx."""
        return self.status is not None and self.status < 500

    def brief(self) -> str:
        """A short form for a job's reason: the transport error's class name when there was
        no answer, else ``str(self)``."""
        return self.cause if self.cause else str(self)


def new_session(tls: "TLSFiles | None" = None) -> requests.Session:
    """A new HTTP session for service clients; with ``tls`` (a :class:`vgrid_runtime.tls.TLSFiles`)
    every ``https://`` call presents that credential (host certificate or proxy) and trusts
    only the CAs of ``tls.cert_dir`` (never the public CA bundle). CredentialError when the
    files cannot be loaded."""
    session = _Session()
    if tls is not None:
        from .tls import client_context
        session.tls_context = client_context(tls)
        session.mount("https://", _ContextAdapter(session.tls_context))
    return session


_KEPT_ALIVE_LOCK = threading.Lock()
_NOT_JSON = object()     # an answer body that did not decode as JSON (ServiceClient._checked)


class _Session(requests.Session):
    """A ``requests.Session`` that reads the environment's settings (``http(s)_proxy``,
    ``no_proxy``, ``REQUESTS_CA_BUNDLE``) once per scheme and host, not once per request.

    requests walks ``os.environ`` (twice, for the proxies and their bypass list) on every
    request: ~0.4 ms of CPU per call on a loaded host, a third of a bulk dispatch POST
    (issue 12, session 6). A service's environment does not change while it runs; the answer
    for one scheme and host is the same for every path. Requests with explicit ``proxies``
    take requests' own path. At most 1,024 hosts are remembered (then the memo restarts)."""

    def __init__(self) -> None:
        super().__init__()
        self._environment: dict[tuple, dict[str, Any]] = {}
        self.tls_context = None          # the mutual-TLS context of https:// (new_session)
        self._kept_alive: KeptAlive | None = None

    def kept_alive(self, url: str) -> KeptAlive | None:
        """The session's :class:`vgrid_runtime.keptalive.KeptAlive` pool (same TLS context)
        for a JSON POST to ``url``, or None when requests must send it: a proxy applies to
        ``url`` (environment), an ``https://`` URL without the session's mutual-TLS context
        (requests' CA bundle rules apply), or the session was given its own auth,
        certificate or adapters."""
        if self.auth is not None or self.cert is not None or set(self.adapters) != {"https://", "http://"} \
                or type(self.adapters["http://"]) is not HTTPAdapter \
                or type(self.adapters["https://"]) not in (HTTPAdapter, _ContextAdapter):
            return None
        if self.tls_context is None and not url.startswith("http://"):
            return None
        if self.merge_environment_settings(url, {}, None, None, None)["proxies"]:
            return None
        if self._kept_alive is None:
            with _KEPT_ALIVE_LOCK:              # sender threads share the session
                if self._kept_alive is None:
                    self._kept_alive = KeptAlive(self.tls_context)
        return self._kept_alive

    def close(self) -> None:
        if self._kept_alive is not None:
            self._kept_alive.close()
        super().close()

    def merge_environment_settings(self, url, proxies, stream, verify, cert):
        if proxies or not self.trust_env:
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        parts = urlsplit(url)
        try:
            key = (parts.scheme, parts.netloc, stream, verify, cert, tuple(sorted(self.proxies.items())))
            known = self._environment.get(key)
        except TypeError:     # an unhashable verify / cert: not remembered
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        if known is None:
            if len(self._environment) >= 1024:
                self._environment.clear()
            known = self._environment[key] = super().merge_environment_settings(url, {}, stream, verify, cert)
        return {**known, "proxies": dict(known["proxies"])}   # a fresh proxies dict per request


class _ContextAdapter(HTTPAdapter):
    """A requests transport adapter whose TLS is exactly ``context`` (requests' own CA bundle
    and ``verify`` handling are bypassed: the context verifies the server and its name)."""

    def __init__(self, context) -> None:
        self._context = context
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs["ssl_context"] = self._context
        return super().init_poolmanager(*args, **kwargs)

    def cert_verify(self, conn, url, verify, cert):  # noqa: ARG002 - the context decides
        return None


class ServiceClient:
    """JSON client of one service at ``base_url`` (no trailing slash needed).

    ``session``: a shared ``requests.Session`` (default: a new one, closed by ``close()``);
    ``timeout_s``: connect and read timeout of each call in seconds. Subclasses set ``Error``
    (the ``ServiceError`` subclass they raise) and add one typed method per API call.
    """

    Error: type[ServiceError] = ServiceError

    def __init__(self, base_url: str, session: requests.Session | None = None,
                 timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session or new_session()
        self._own_session = session is None
        self.timeout_s = timeout_s

    def close(self) -> None:
        """Close the session if this client created it."""
        if self._own_session:
            self.session.close()

    def _send(self, method: str, url: str, timeout_s: float | None, **kwargs):
        """``session.request`` with the errors mapped to ``self.Error``: TIMEOUT, UNREACHABLE,
        or HTTP for a status >= 300 (with the JSON error body when there is one)."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            r = self.session.request(method, url, timeout=timeout, **kwargs)
        except requests.Timeout as exc:        # before ConnectionError: ConnectTimeout is both
            raise self.Error(ErrorKind.TIMEOUT, f"{type(exc).__name__}: {exc}", url,
                             cause=type(exc).__name__) from exc
        except requests.RequestException as exc:
            raise self.Error(ErrorKind.UNREACHABLE, f"{type(exc).__name__}: {exc}", url,
                             cause=type(exc).__name__) from exc
        if r.status_code >= 300:
            try:
                body = r.json()
            except ValueError:
                body = None
            r.close()
            raise self.Error(ErrorKind.HTTP, f"HTTP {r.status_code} {r.text[:200]}", url, r.status_code,
                             body if isinstance(body, dict) else None)
        return r

    def _call(self, method: str, path: str, json: Any = None, timeout_s: float | None = None,
              answer: type | None = dict, required: tuple[str, ...] = ()) -> Any:
        """``method`` ``base_url + path`` with an optional JSON body; returns the decoded JSON
        answer, checked to be an instance of ``answer`` (None: the answer is not read) with
        every key of ``required``. Raises ``self.Error`` (see module doc)."""
        url = f"{self.base_url}{path}"
        r = self._send(method, url, timeout_s, json=json)
        if answer is None:
            return None
        try:
            data = r.json()
        except ValueError:
            data = _NOT_JSON
        return self._checked(url, r.status_code, data, answer, required, lambda: r.text[:200])

    def _checked(self, url: str, status: int, data: Any, answer: type, required: tuple[str, ...],
                 text) -> Any:
        """``data`` (a decoded JSON answer of HTTP ``status``, or ``_NOT_JSON``) when it is an
        instance of ``answer`` with every key of ``required``; else ``self.Error`` BAD_ANSWER
        (``text()``: the start of the answer's text, for the message). Both transports
        (:meth:`_call`, :meth:`_post_json_lean`) check their answers here."""
        if data is _NOT_JSON:
            raise self.Error(ErrorKind.BAD_ANSWER, f"HTTP {status} from {url}: not JSON: {text()!r}",
                             url, status)
        if not isinstance(data, answer):
            raise self.Error(ErrorKind.BAD_ANSWER, f"HTTP {status} from {url}: expected a JSON "
                             f"{answer.__name__}, got {type(data).__name__}", url, status)
        missing = [k for k in required if k not in data]
        if missing:
            raise self.Error(ErrorKind.BAD_ANSWER, f"HTTP {status} from {url}: the answer lacks "
                             f"{', '.join(missing)}", url, status)
        return data

    def _post_json_lean(self, path: str, json: Any, required: tuple[str, ...] = ()) -> dict:
        """:meth:`_call` ``POST`` for an **idempotent** request whose answer is a JSON object,
        sent over the session's kept-alive ``http.client`` connections
        (:mod:`vgrid_runtime.keptalive`: ~4x less CPU per request than requests; a stale
        kept-alive connection is retried once) when the session allows it
        (``_Session.kept_alive``), else through requests. Same answers and the same typed
        errors as :meth:`_call`."""
        url = f"{self.base_url}{path}"
        pool = self.session.kept_alive(url) if isinstance(self.session, _Session) else None
        if pool is None:
            return self._call("POST", path, json=json, required=required)
        body = orjson.dumps(json)      # ~6x faster than json.dumps for the bulk bodies' JDL texts
        try:
            status, data = pool.post_json(url, body, self.timeout_s)
        except LeanError as exc:
            kind = ErrorKind.TIMEOUT if exc.kind == "timeout" else ErrorKind.UNREACHABLE
            raise self.Error(kind, f"{exc.cause}: {exc}", url, cause=exc.cause) from exc
        try:
            answer = orjson.loads(data)
        except ValueError:   # orjson.JSONDecodeError is one
            answer = _NOT_JSON
        text = data[:200].decode("utf-8", "replace")
        if status >= 300:
            raise self.Error(ErrorKind.HTTP, f"HTTP {status} {text}", url, status,
                             answer if isinstance(answer, dict) else None)
        return self._checked(url, status, answer, dict, required, lambda: text)

    def _get_stream(self, path: str, headers: dict | None = None, timeout_s: float | None = None,
                    chunk_bytes: int = 65536):
        """GET ``base_url + path`` without reading the answer: returns ``(status, headers,
        chunks)`` where ``chunks`` yields the body in pieces of at most ``chunk_bytes`` (a large
        download, e.g. a VM image). Raises ``self.Error`` for no answer, a timeout or a status
        >= 300 (HTTP, with the JSON error body); iterating ``chunks`` raises ``self.Error``
        (UNREACHABLE or TIMEOUT) when the transfer breaks. The caller must exhaust or close
        ``chunks``."""
        url = f"{self.base_url}{path}"
        r = self._send("GET", url, timeout_s, headers=headers or {}, stream=True)

        def chunks():
            try:
                yield from r.iter_content(chunk_bytes)
            except requests.Timeout as exc:   # ReadTimeout inside iter_content
                raise self.Error(ErrorKind.TIMEOUT, f"{type(exc).__name__}: {exc}", url,
                                 cause=type(exc).__name__) from exc
            except (requests.RequestException, OSError) as exc:
                raise self.Error(ErrorKind.UNREACHABLE, f"{type(exc).__name__}: {exc}", url,
                                 cause=type(exc).__name__) from exc
            finally:
                r.close()

        return r.status_code, dict(r.headers), chunks()
