"""Mutual TLS for vgrid's services and their clients: contexts, the caller's verified identity.

Servers present a host certificate and ask every client for a certificate (``CERT_OPTIONAL``, so
that a client without one gets a JSON 401 from the application rather than a bare handshake
failure; a certificate that is presented is verified by OpenSSL during the handshake, with RFC
3820 proxies allowed). OpenSSL's acceptance is not the end: the whole presented chain is
re-verified by :func:`vgrid_runtime.proxy.verify_chain` (proxy naming, ProxyCertInfo, limited
proxies, VOMS attributes) before the application sees an :class:`~vgrid_runtime.proxy.Identity`.

The peer's chain reaches the WSGI application as ``environ["vgrid.peer_chain"]`` (DER certificates,
leaf first), put there by :class:`GridSSLAdapter` for the cheroot server (Python 3.11's private
``get_verified_chain``; public from Python 3.13). Source: RFC 3820, RFC 5246/8446 client
authentication; mod_ssl's ``SSL_CLIENT_CERT_CHAIN_n`` idea.
"""
from __future__ import annotations

import hashlib
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cheroot.ssl.builtin import BuiltinSSLAdapter
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from .pki import CredentialError, load_trusted
from .proxy import Identity, verify_chain

PEER_CHAIN_KEY = "vgrid.peer_chain"
#: environ key of the SHA-256 digest of the peer's chain, computed once per connection
PEER_DIGEST_KEY = "vgrid.peer_chain_sha256"


def chain_digest(chain_der: list[bytes]) -> bytes:
    """The key of a DER chain in :class:`IdentityCache` (SHA-256 of the concatenation)."""
    return hashlib.sha256(b"".join(chain_der)).digest()


@dataclass
class TLSFiles:
    """Where a process finds its credential and what it trusts.

    ``cert``/``key``: PEM host certificate and key (a service), or a proxy file holding both (a
    user; ``key`` may then be None); ``cert_dir``: trusted CA certificates (``X509_CERT_DIR``);
    ``voms_dir``: trusted VO servers (``X509_VOMS_DIR``), None to ignore VO attributes."""

    cert: str
    key: str | None
    cert_dir: str
    voms_dir: str | None = None
    trusted: list[x509.Certificate] = field(default_factory=list, repr=False)

    def trusted_cas(self) -> list[x509.Certificate]:
        """The trusted CA certificates, read once (CredentialError if the directory is missing)."""
        if not self.trusted:
            self.trusted = load_trusted(Path(self.cert_dir))
        return self.trusted


def _context(protocol: int, files: TLSFiles, role: str) -> ssl.SSLContext:
    """A TLS >= 1.2 context presenting ``files.cert`` and trusting only ``files.cert_dir``."""
    ctx = ssl.SSLContext(protocol)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as exc:
        raise CredentialError(f"{files.cert}: cannot load the {role}: {exc}", "missing") from None
    pems = "".join(c.public_bytes(Encoding.PEM).decode() for c in files.trusted_cas())
    if not pems:
        raise CredentialError(f"{files.cert_dir}: no trusted CA certificate in it", "missing")
    ctx.load_verify_locations(cadata=pems)
    return ctx


def server_context(files: TLSFiles) -> ssl.SSLContext:
    """TLS >= 1.2 server context: our certificate, clients' certificates (proxies allowed)
    verified against ``files.cert_dir`` when presented. CredentialError on unreadable files."""
    ctx = _context(ssl.PROTOCOL_TLS_SERVER, files, "service certificate")
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.verify_flags |= ssl.VERIFY_ALLOW_PROXY_CERTS
    return ctx


def client_context(files: TLSFiles) -> ssl.SSLContext:
    """TLS >= 1.2 client context presenting ``files.cert`` (host certificate or proxy) and
    checking the server's certificate and host name against ``files.cert_dir``."""
    return _context(ssl.PROTOCOL_TLS_CLIENT, files, "client credential")


class GridSSLAdapter(BuiltinSSLAdapter):
    """cheroot's TLS adapter with our server context, passing the peer's chain to the app."""

    def __init__(self, files: TLSFiles) -> None:
        context = server_context(files)           # CredentialError before cheroot reads files
        super().__init__(files.cert, files.key or files.cert)
        self.context = context

    def get_environ(self, sock) -> dict:
        env = super().get_environ(sock)
        try:
            chain = sock._sslobj.get_verified_chain() if sock.getpeercert(binary_form=True) else []
        except (AttributeError, ValueError):
            chain = []
        env[PEER_CHAIN_KEY] = [c.public_bytes(ssl._ssl.ENCODING_DER) for c in chain]
        env[PEER_DIGEST_KEY] = chain_digest(env[PEER_CHAIN_KEY])   # once per connection
        return env


class IdentityCache:
    """Verified identities by chain, so a keep-alive client is not re-verified per request.

    ``identify(chain_der, now, digest=None)`` -> Identity or raises CredentialError (``digest``:
    :func:`chain_digest` of ``chain_der`` when the caller has it, e.g. ``environ[PEER_DIGEST_KEY]``
    computed once per connection); an entry is dropped once its chain expires. Thread-safe; at
    most ``size`` entries (oldest dropped)."""

    def __init__(self, files: TLSFiles, size: int = 4096) -> None:
        self.files = files
        self.size = size
        self._cache: dict[bytes, Identity] = {}
        self._lock = threading.Lock()

    def identify(self, chain_der: list[bytes], now: float, digest: bytes | None = None) -> Identity:
        key = digest or chain_digest(chain_der)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and now <= hit.not_after:
            return hit
        chain = [x509.load_der_x509_certificate(d) for d in chain_der]
        vomsdir = Path(self.files.voms_dir) if self.files.voms_dir else None
        ident = verify_chain(chain, self.files.trusted_cas(), now, vomsdir=vomsdir)
        with self._lock:
            if len(self._cache) >= self.size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = ident
        return ident
