"""Who is calling a vgrid service: mutual-TLS authentication for the Flask apps, and the caller.

With TLS configured (:class:`TLSOptions` in every service's configuration), every request must
come with a client certificate chain that :class:`vgrid_runtime.tls.IdentityCache` verifies
(user proxies with VOMS attributes, or host certificates); otherwise the answer is 401 (no
certificate) or 403 (an invalid one), JSON, logged with the caller's subject. The verified
:class:`Caller` is then available to the routes through :func:`caller`; each service's
authorization rules (who may do what) are plain functions over it.

Without TLS a service speaks plain HTTP and may only listen on loopback
(:mod:`vgrid_runtime.wsgi`): a development and test mode in which the caller is anonymous and
no rule can be checked (docs/security.md). Source: RFC 5246/8446 client authentication.
"""
from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from flask import Flask, g, jsonify, request

from .pki import CredentialError
from .proxy import Identity
from .tls import PEER_CHAIN_KEY, PEER_DIGEST_KEY, IdentityCache, TLSFiles

log = logging.getLogger("vgrid.authn")


@dataclass(kw_only=True)
class TLSOptions:
    """The TLS fields of a service configuration (a mixin of each service's config class)."""

    tls_cert: str | None = field(default=None, metadata={
        "help": "host certificate (PEM); when set the service serves HTTPS, requires client "
                "certificates, and calls other services over mutual TLS"})
    tls_key: str | None = field(default=None, metadata={"help": "private key of tls_cert (PEM)"})
    cert_dir: str | None = field(default=None, metadata={
        "help": "trusted CA certificates (default $X509_CERT_DIR or /etc/grid-security/certificates)"})
    voms_dir: str | None = field(default=None, metadata={
        "help": "trusted VO servers, <voms_dir>/<vo>/*.pem (default $X509_VOMS_DIR or "
                "/etc/grid-security/vomsdir)"})

    def tls_files(self) -> TLSFiles | None:
        """The service's credential and trust, or None when TLS is not configured."""
        if not self.tls_cert:
            return None
        from .pki import cert_dir, voms_dir
        return TLSFiles(cert=self.tls_cert, key=self.tls_key, cert_dir=str(cert_dir(self.cert_dir)),
                        voms_dir=str(voms_dir(self.voms_dir)))

    def tls_problem(self) -> str | None:
        """A configuration error of the TLS fields, or None."""
        if self.tls_key and not self.tls_cert:
            return "field 'tls_key': set without tls_cert"
        return None


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of a request; ``identity`` is None only in plain-HTTP mode."""

    identity: Identity | None

    @property
    def authenticated(self) -> bool:
        return self.identity is not None

    @property
    def dn(self) -> str | None:
        return self.identity.dn if self.identity else None

    def is_one_of(self, dns: list[str] | tuple[str, ...]) -> bool:
        """The caller's DN is listed (always False in plain-HTTP mode)."""
        return self.identity is not None and self.identity.dn in dns

    def serves(self, url: str | None) -> bool:
        """The caller's certificate is valid for the host of ``url`` (a DNS or IP
        subjectAltName equal to it), as an HTTPS client checks a server: the caller *is* the
        service at that URL. False without a URL or an identity."""
        if not url or self.identity is None:
            return False
        host = urlsplit(url).hostname or ""
        try:
            host = str(ipaddress.ip_address(host))
        except ValueError:
            host = host.lower()
        return host in self.identity.hosts


def caller() -> Caller:
    """The current request's caller (set by :func:`install_authentication`)."""
    return g.get("vgrid_caller") or Caller(None)


def refusal(status: int, message: str, reason: str):
    """A JSON refusal, logged with the caller's DN (or 'anonymous')."""
    who = caller().dn or "anonymous"
    log.warning("refused %s %s from %s: %s", request.method, request.path, who, message)
    return jsonify({"error": {"message": message, "reason": reason}}), status


def install_authentication(app: Flask, tls: TLSFiles | None, clock) -> None:
    """Authenticate every request of ``app`` before its route runs (see the module doc).

    ``clock``: the service's clock (validity of certificates is judged at ``clock.now()``).
    Refusals: 401 ``{"error": {"message", "reason": "no-certificate"}}``; 403 with the
    CredentialError's reason (``expired``, ``untrusted``, ``bad_proxy``, ...)."""
    cache = IdentityCache(tls) if tls is not None else None
    app.config["VGRID_IDENTITIES"] = cache      # None: plain HTTP (broker.read_path reads it)

    @app.errorhandler(Forbidden)
    def _forbidden(exc: Forbidden):
        return refusal(403, f"{caller().dn} may not {exc.what}", "forbidden")

    @app.before_request
    def _authenticate():
        if cache is None:
            g.vgrid_caller = Caller(None)
            return None
        chain = request.environ.get(PEER_CHAIN_KEY) or []
        if not chain:
            return refusal(401, "a client certificate (host certificate or proxy) is required",
                           "no-certificate")
        try:
            g.vgrid_caller = Caller(cache.identify(chain, clock.now(), request.environ.get(PEER_DIGEST_KEY)))
        except CredentialError as exc:
            return refusal(403, f"credential refused: {exc}", exc.reason)
        return None


class Forbidden(Exception):
    """The authenticated caller may not do ``what`` (answered 403 JSON, logged with the DN)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def authorize(allowed, what: str) -> None:
    """Raise :class:`Forbidden` unless ``allowed`` (a service's rule evaluated for
    :func:`caller`; a bool, or a callable returning one, called only when there is an identity
    to check, e.g. to skip a database read); ``what`` is a phrase such as ``"cancel job X"``.
    In plain-HTTP mode there is no identity and nothing is checked."""
    if caller().identity is None:
        return
    if not (allowed() if callable(allowed) else allowed):
        raise Forbidden(what)
