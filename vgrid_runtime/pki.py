"""X.509 identities for vgrid: a test CA, host, user and VO-server certificates, credential files.

Distinguished names are written the way gLite writes them, in OpenSSL's one-line form
(``/DC=org/DC=vgrid/OU=users/CN=Alice``); :func:`parse_dn` and :func:`dn_of` convert between that
form and ``cryptography`` names. Keys are RSA 2048 (what grid CAs and VOMS servers accept).
Times come from the caller's clock (``now`` in seconds since the epoch), never from the wall clock.

Where the files live follows gLite: trusted CA certificates in ``X509_CERT_DIR``
(``/etc/grid-security/certificates``), trusted VO servers in ``X509_VOMS_DIR``
(``/etc/grid-security/vomsdir/<vo>/``), the user's proxy in ``X509_USER_PROXY``
(``/tmp/x509up_u<uid>``). Source: RFC 5280 (certificates), the IGTF/gLite file conventions.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: gLite DN keywords -> X.509 attribute OIDs (OpenSSL's short names).
_DN_KEYS = {"DC": NameOID.DOMAIN_COMPONENT, "C": NameOID.COUNTRY_NAME, "O": NameOID.ORGANIZATION_NAME,
            "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "CN": NameOID.COMMON_NAME, "L": NameOID.LOCALITY_NAME,
            "ST": NameOID.STATE_OR_PROVINCE_NAME, "emailAddress": NameOID.EMAIL_ADDRESS,
            "UID": NameOID.USER_ID}
_OID_KEYS = {oid: key for key, oid in _DN_KEYS.items()}

DEFAULT_CERT_DIR = "/etc/grid-security/certificates"
DEFAULT_VOMS_DIR = "/etc/grid-security/vomsdir"


class CredentialError(ValueError):
    """A certificate, key, proxy or attribute is missing, malformed, expired or untrusted.

    ``str()`` names the file or the certificate (by DN) and what is wrong with it; ``reason`` is a
    short machine-readable code (``expired``, ``not_yet_valid``, ``untrusted``, ``bad_signature``,
    ``bad_proxy``, ``limited``, ``malformed``, ``missing``, ``vo``)."""

    def __init__(self, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason


def parse_dn(dn: str) -> x509.Name:
    """``/DC=org/CN=Alice`` -> ``x509.Name``; CredentialError naming the bad component."""
    if not dn.startswith("/"):
        raise CredentialError(f"DN {dn!r} must start with '/' (OpenSSL one-line form)")
    attrs = []
    for part in dn.split("/")[1:]:
        key, sep, value = part.partition("=")
        if not sep or key not in _DN_KEYS or not value:
            raise CredentialError(f"DN {dn!r}: cannot read component {part!r}")
        try:
            attrs.append(x509.NameAttribute(_DN_KEYS[key], value))
        except ValueError as exc:
            raise CredentialError(f"DN {dn!r}: component {part!r}: {exc}") from None
    return x509.Name(attrs)


def dn_of(name: x509.Name) -> str:
    """``x509.Name`` -> ``/DC=org/CN=Alice`` (attributes in certificate order)."""
    parts = []
    for rdn in name.rdns:
        for a in rdn:
            parts.append(f"{_OID_KEYS.get(a.oid, a.oid.dotted_string)}={a.value}")
    return "/" + "/".join(parts)


def _utc(now: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(now, datetime.timezone.utc)


def new_key(bits: int = 2048) -> rsa.RSAPrivateKey:
    """A fresh RSA key (generated at run time: vgrid never ships keys)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


@dataclass
class Credential:
    """A certificate with its private key and the certificates between it and a trusted CA.

    ``chain`` lists issuers leaf-side first and excludes the CA (for a proxy: the user
    certificate, then any intermediate proxies in reverse order of creation)."""

    cert: x509.Certificate
    key: rsa.RSAPrivateKey
    chain: list[x509.Certificate] = field(default_factory=list)

    @property
    def dn(self) -> str:
        return dn_of(self.cert.subject)

    def cert_pem(self) -> bytes:
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [self.cert, *self.chain])

    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())

    def save(self, cert_path: str | Path, key_path: str | Path) -> None:
        """Write the certificate (+ chain) and the key (mode 0600) as PEM."""
        Path(cert_path).write_bytes(self.cert_pem())
        write_private(Path(key_path), self.key_pem())

    @classmethod
    def load(cls, cert_path: str | Path, key_path: str | Path | None = None) -> "Credential":
        """Read PEM files written by :meth:`save` (or a proxy file: cert, key, chain in one file)."""
        certs, key = read_pem_bundle(Path(cert_path))
        if key_path is not None:
            _, key = read_pem_bundle(Path(key_path))
        if not certs:
            raise CredentialError(f"{cert_path}: no certificate in file", "missing")
        if key is None:
            raise CredentialError(f"{key_path or cert_path}: no private key in file", "missing")
        return cls(certs[0], key, certs[1:])


def write_private(path: Path, data: bytes) -> None:
    """Create ``path`` with mode 0600 before writing (never world-readable, not even briefly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_pem_bundle(path: Path) -> tuple[list[x509.Certificate], rsa.RSAPrivateKey | None]:
    """Every certificate and the (first) private key of a PEM file, in file order."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CredentialError(f"{path}: {exc.strerror or exc}", "missing") from None
    try:
        certs = (x509.load_pem_x509_certificates(data)
                 if b"-----BEGIN CERTIFICATE-----" in data else [])
        key = (serialization.load_pem_private_key(data, password=None)
               if b"PRIVATE KEY-----" in data else None)
    except (ValueError, TypeError) as exc:
        raise CredentialError(f"{path}: unreadable PEM: {exc}") from None
    return certs, key


def _builder(subject: x509.Name, issuer: x509.Name, public_key, now: float, lifetime_s: float,
             serial: int | None = None) -> x509.CertificateBuilder:
    start = _utc(now - 300)   # 5 minutes of clock skew, as grid CAs allow
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(serial or x509.random_serial_number())
            .not_valid_before(start).not_valid_after(_utc(now + lifetime_s))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False))


def create_ca(dn: str = "/DC=org/DC=vgrid/CN=vgrid test CA", now: float = 0.0,
              lifetime_s: float = 5 * 365 * 86400) -> Credential:
    """A self-signed CA (basicConstraints CA:TRUE, keyCertSign, cRLSign). Not an IGTF CA:
    for the demo and the tests only (docs/security.md says how to use a real one)."""
    key = new_key()
    name = parse_dn(dn)
    cert = (_builder(name, name, key.public_key(), now, lifetime_s)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    return Credential(cert, key)


def _issue(ca: Credential, dn: str, now: float, lifetime_s: float, eku: list, san=None) -> Credential:
    key = new_key()
    b = (_builder(parse_dn(dn), ca.cert.subject, key.public_key(), now, lifetime_s)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False),
                        critical=True)
         .add_extension(x509.ExtendedKeyUsage(eku), critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
                        critical=False))
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return Credential(b.sign(ca.key, hashes.SHA256()), key)


def issue_host(ca: Credential, hostname: str, ips: list[str] = (), now: float = 0.0,
               lifetime_s: float = 365 * 86400) -> Credential:
    """A host certificate ``/DC=org/DC=vgrid/OU=hosts/CN=<hostname>`` with DNS and IP
    subjectAltNames, usable as TLS server and client (a service calls other services with it).
    ValueError for an IP address that does not parse."""
    san = [x509.DNSName(hostname)] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    base = dn_of(ca.cert.subject).rsplit("/CN=", 1)[0]
    return _issue(ca, f"{base}/OU=hosts/CN={hostname}", now, lifetime_s,
                  [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], san)


def issue_user(ca: Credential, common_name: str, now: float = 0.0,
               lifetime_s: float = 365 * 86400) -> Credential:
    """A user certificate ``/DC=org/DC=vgrid/OU=users/CN=<common_name>`` (TLS client)."""
    base = dn_of(ca.cert.subject).rsplit("/CN=", 1)[0]
    return _issue(ca, f"{base}/OU=users/CN={common_name}", now, lifetime_s,
                  [ExtendedKeyUsageOID.CLIENT_AUTH])


def cert_dir(explicit: str | None = None) -> Path:
    """Trusted CAs: ``explicit``, else ``$X509_CERT_DIR``, else /etc/grid-security/certificates."""
    return Path(explicit or os.environ.get("X509_CERT_DIR") or DEFAULT_CERT_DIR)


def voms_dir(explicit: str | None = None) -> Path:
    """Trusted VO servers: ``explicit``, else ``$X509_VOMS_DIR``, else /etc/grid-security/vomsdir."""
    return Path(explicit or os.environ.get("X509_VOMS_DIR") or DEFAULT_VOMS_DIR)


def user_proxy_path(explicit: str | None = None) -> Path:
    """The user's proxy: ``explicit``, else ``$X509_USER_PROXY``, else /tmp/x509up_u<uid>."""
    return Path(explicit or os.environ.get("X509_USER_PROXY") or f"/tmp/x509up_u{os.getuid()}")


def load_trusted(directory: Path) -> list[x509.Certificate]:
    """Every certificate in ``*.pem``, ``*.crt`` and hashed ``*.0`` files of ``directory``."""
    found: dict[bytes, x509.Certificate] = {}
    if not directory.is_dir():
        raise CredentialError(f"{directory}: trusted certificate directory does not exist", "missing")
    for p in sorted(directory.iterdir()):
        if p.is_file() and (p.suffix in (".pem", ".crt") or p.suffix[1:].isdigit()):
            for c in read_pem_bundle(p)[0]:
                found[c.fingerprint(hashes.SHA256())] = c
    return list(found.values())
