"""The one HTTP client of the broker API, used by the ``vgrid`` CLI and by ``vgrid demo``.

(Events reach the broker through the CE agent's ``vwn_agents.outbox``, sandbox files through the
job wrapper: both use URLs the broker handed out with the job, docs/architecture.md, "Clients".)

Every method raises :class:`ClientError` with a message fit for a person (never a traceback):
the broker's own error message when it answered, or why it could not be reached.
"""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import requests

import jdl as jdlmod
from vgrid_runtime.httpclient import ErrorKind, new_session
from vgrid_runtime.pki import CredentialError, cert_dir as pki_cert_dir, user_proxy_path
from vgrid_runtime.pki import voms_dir as voms_dir_of
from vgrid_runtime.tls import TLSFiles

DEFAULT_BROKER = "http://127.0.0.1:8440"


class ClientError(Exception):
    """The broker refused a request or could not be reached. ``status`` is the HTTP status or
    None; ``kind`` (``vgrid_runtime.httpclient.ErrorKind``): UNREACHABLE, TIMEOUT, HTTP, or None
    for an error found before any call (e.g. an unreadable local file)."""

    def __init__(self, message: str, status: int | None = None, body: dict | None = None,
                 kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body or {}
        self.kind = kind if kind is not None else (ErrorKind.HTTP if status is not None else None)


def default_broker() -> str:
    """$VGRID_BROKER_URL, else http://127.0.0.1:8440."""
    return os.environ.get("VGRID_BROKER_URL", DEFAULT_BROKER).rstrip("/")


def split_job_id(job: str, broker: str | None) -> tuple[str, str]:
    """(broker URL, key) of a job id ``<broker>/jobs/<key>`` or a bare key."""
    if "://" in job and "/jobs/" in job:
        base, key = job.rstrip("/").rsplit("/jobs/", 1)
        return (broker or base).rstrip("/"), key
    return (broker or default_broker()), job


def user_credentials(proxy: str | None = None, cert_dir: str | None = None,
                     voms_dir: str | None = None) -> TLSFiles:
    """The user's proxy and trust, found as gLite users expect: ``proxy`` or
    ``$X509_USER_PROXY`` or ``/tmp/x509up_u<uid>``; ``$X509_CERT_DIR``; ``$X509_VOMS_DIR``.
    ClientError when the proxy file does not exist (with what to do)."""
    path = user_proxy_path(proxy)
    if not path.is_file():
        raise ClientError(f"no proxy at {path}: create one (vgrid ca proxy ...) or set X509_USER_PROXY")
    return TLSFiles(cert=str(path), key=None, cert_dir=str(pki_cert_dir(cert_dir)),
                    voms_dir=str(voms_dir_of(voms_dir)))


class BrokerClient:
    """Client of the broker at ``url`` (default ``$VGRID_BROKER_URL``). An ``https://`` broker
    is called over mutual TLS with ``credentials`` (default: :func:`user_credentials`).

    Submissions are idempotent: each ``submit_file``/``submit_text`` call sends one
    ``Idempotency-Key`` (a new UUID) and, when the broker cannot be reached or does not answer
    in ``timeout_s``, retries the POST with the same key up to ``submit_attempts`` times in all,
    waiting ``retry_backoff_s``, then twice as long each time (at most 8 s); the broker stores
    the request once and answers every attempt with the same job."""

    def __init__(self, url: str | None = None, timeout_s: float = 30.0,
                 credentials: TLSFiles | None = None, submit_attempts: int = 5,
                 retry_backoff_s: float = 0.5) -> None:
        self.url = (url or default_broker()).rstrip("/")
        self.timeout_s = timeout_s
        self.submit_attempts = max(1, submit_attempts)
        self.retry_backoff_s = retry_backoff_s
        if self.url.startswith("https://") and credentials is None:
            credentials = user_credentials()
        try:
            self.http = new_session(credentials)
        except CredentialError as exc:
            raise ClientError(str(exc)) from None

    def _call(self, method: str, path: str, **kw: Any) -> requests.Response:
        try:
            r = self.http.request(method, f"{self.url}{path}", timeout=self.timeout_s, **kw)
        except requests.RequestException as exc:
            kind = ErrorKind.TIMEOUT if isinstance(exc, requests.Timeout) else ErrorKind.UNREACHABLE
            raise ClientError(f"cannot reach the broker at {self.url}: {exc.__class__.__name__}",
                              kind=kind) from None
        if r.status_code >= 400:
            try:
                body = r.json()
                msg = body.get("error", {}).get("message") or r.text
            except ValueError:
                body, msg = {}, r.text.strip() or r.reason
            raise ClientError(msg, r.status_code, body)
        return r

    def _submit(self, data: dict[str, str], files: list | None, key: str | None) -> dict[str, Any]:
        """POST /jobs with ``Idempotency-Key: key`` (a new UUID when None), retried on
        UNREACHABLE and TIMEOUT errors (see the class doc); the last error when all fail."""
        headers = {"Idempotency-Key": key or str(uuid.uuid4())}
        delay = self.retry_backoff_s
        for attempt in range(1, self.submit_attempts + 1):
            try:
                return self._call("POST", "/jobs", data=data, files=files, headers=headers).json()
            except ClientError as exc:
                if exc.kind not in (ErrorKind.UNREACHABLE, ErrorKind.TIMEOUT) \
                        or attempt == self.submit_attempts:
                    raise
            time.sleep(delay)
            delay = min(2 * delay, 8.0)
        raise AssertionError("unreachable")  # pragma: no cover

    def submit_file(self, path: str | Path, idempotency_key: str | None = None) -> dict[str, Any]:
        """Parse ``path`` locally (JDLError on bad JDL), upload it with its InputSandbox files.
        Answers ``{"id", "key", "state"}``; ClientError when the broker refuses it (409 when
        ``idempotency_key`` was used before for another JDL) or stays unreachable.

        Relative InputSandbox names and DAG/collection ``file =`` nodes are resolved against the
        JDL file's directory; node files are inlined, since the broker reads no local files.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ClientError(f"{path}: cannot read: {exc}") from None
        desc = jdlmod.parse_jdl(text, str(path))
        text = jdlmod.inline_nodes(desc)  # DAG/collection file= nodes travel inline (gLite UI)
        files = []
        for name in desc.input_sandbox:
            if "://" in name:
                continue
            local = (path.parent / name) if not os.path.isabs(name) else Path(name)
            if not local.is_file():
                raise ClientError(f"{path}: InputSandbox file {name!r} not found at {local}")
            files.append(("isb", (Path(name).name, local.read_bytes())))
        return self._submit({"jdl": text, "filename": str(path)}, files or None, idempotency_key)

    def submit_text(self, text: str, filename: str = "<string>",
                    idempotency_key: str | None = None) -> dict[str, Any]:
        """Submit JDL ``text`` without sandbox files, as :meth:`submit_file`."""
        return self._submit({"jdl": text, "filename": filename}, None, idempotency_key)

    def delegate(self, proxy: str | Path, now: float, lifetime_s: float = 12 * 3600) -> dict[str, Any]:
        """Delegate the proxy in file ``proxy`` (cert, key, chain) to the broker, which forwards
        the user's jobs to peer brokers with proxies signed from it (docs/federation.md): the
        broker makes the key (``POST /delegations``), this signs its request as a proxy valid
        ``lifetime_s`` s from ``now`` (``PUT /delegations/<id>``). ``{"dn","vo","not_after"}``;
        ClientError (also for a proxy whose path length allows no further proxy)."""
        from vgrid_runtime.delegation import sign_request
        from vgrid_runtime.pki import Credential
        try:
            cred = Credential.load(proxy)
            req = self._call("POST", "/delegations", json={}).json()
            chain = sign_request(cred, req["csr"].encode(), now, lifetime_s)
        except CredentialError as exc:
            raise ClientError(f"cannot delegate {proxy}: {exc}") from None
        return self._call("PUT", f"/delegations/{req['id']}", json={"proxy": chain.decode()}).json()

    def job(self, key: str) -> dict[str, Any]:
        return self._call("GET", f"/jobs/{key}").json()

    def jobs(self, keys: list[str] | None = None, **filters: Any) -> list[dict[str, Any]]:
        """Every job record the caller may see (with ``keys``: only those), following the
        pages of ``GET /jobs`` (``broker.listing``); ``filters``: ``state``, ``owner``,
        ``since``, ``limit`` (page size) as the query string takes them."""
        return [j for page in self.job_pages(keys, **filters) for j in page]

    def job_pages(self, keys: list[str] | None = None, **filters: Any):
        """Yield the pages (lists of job records) of ``GET /jobs`` one request at a time,
        following ``next`` until it is null; raises ClientError."""
        params = {k: v for k, v in filters.items() if v is not None}
        if keys:
            params["ids"] = ",".join(keys)
        while True:
            doc = self._call("GET", "/jobs", params=params).json()
            yield doc["jobs"]
            if not doc.get("next"):
                return
            params["after"] = doc["next"]

    def cancel(self, key: str) -> dict[str, Any]:
        return self._call("POST", f"/jobs/{key}/cancel").json()

    def output(self, key: str, dest: Path) -> list[Path]:
        """Download every OutputSandbox file into ``dest``; then the job is Cleared."""
        names = self._call("GET", f"/jobs/{key}/output").json()["files"]
        dest.mkdir(parents=True, exist_ok=True)
        out = []
        for name in names:
            data = self._call("GET", f"/jobs/{key}/output/{name}").content
            (dest / name).write_bytes(data)
            out.append(dest / name)
        self._call("POST", f"/jobs/{key}/clear")
        return out

    def list_match(self, text: str, filename: str) -> dict[str, Any]:
        return self._call("POST", "/list-match", json={"jdl": text, "filename": filename}).json()

    def ism(self, vo: str | None = None) -> dict[str, Any]:
        """GET /ism: the broker's ISM as ``vgrid info --json`` shows it, with its blacklist."""
        return self._call("GET", "/ism", params={"vo": vo} if vo else None).json()
