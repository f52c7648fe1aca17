"""RFC 3820 proxy certificates: creating them (like ``voms-proxy-init``) and verifying chains.

A proxy is a short-lived certificate signed by the user's certificate (or by another proxy), whose
subject is its issuer's subject plus one ``CN=<serial>``, with a critical ProxyCertInfo extension
(path length constraint and policy: inherit all rights, or *limited* as Globus defines it). The
user hands a proxy, never the long-lived key, to services; a service delegates by signing a new
proxy. Standard OpenSSL path validation rejects proxies, so :func:`verify_chain` checks a
presented chain (leaf first) explicitly: signatures, validity at ``now``, the naming rule, the
ProxyCertInfo extension and its path length, limited-ness, the user certificate issued by a
trusted CA, and the VOMS attribute certificate if any (:mod:`vgrid_runtime.voms`).

Source: RFC 3820 Sections 3-4 (profile, path validation); Globus' limited-proxy policy OID.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID
from pyasn1.codec.der import decoder, encoder
from pyasn1.error import PyAsn1Error
from pyasn1_modules import rfc3820

from .pki import Credential, CredentialError, _builder, dn_of, new_key, write_private
from .voms import VOAttributes, ac_extension, acs_in, verify_ac

PROXY_CERT_INFO_OID = x509.ObjectIdentifier("1.3.6.1.5.5.7.1.14")
#: Globus' limited-proxy policy language: the proxy may not be used to start jobs.
LIMITED_POLICY_OID = "1.3.6.1.4.1.3536.1.1.1.9"
INHERIT_ALL_OID = str(rfc3820.id_ppl_inheritAll)


def _pci_extension(limited: bool, path_len: int | None) -> x509.UnrecognizedExtension:
    pci = rfc3820.ProxyCertInfoExtension()
    if path_len is not None:
        pci["pCPathLenConstraint"] = path_len
    pci["proxyPolicy"]["policyLanguage"] = LIMITED_POLICY_OID if limited else INHERIT_ALL_OID
    return x509.UnrecognizedExtension(PROXY_CERT_INFO_OID, encoder.encode(pci))


def proxy_cert_info(cert: x509.Certificate) -> tuple[bool, str, int | None] | None:
    """``(critical, policy OID, path length or None)`` of a proxy; None for a non-proxy."""
    try:
        ext = cert.extensions.get_extension_for_oid(PROXY_CERT_INFO_OID)
    except x509.ExtensionNotFound:
        return None
    try:
        pci, _ = decoder.decode(ext.value.value, asn1Spec=rfc3820.ProxyCertInfoExtension())
    except PyAsn1Error as exc:
        raise CredentialError(f"{dn_of(cert.subject)}: unreadable ProxyCertInfo: {exc}",
                              "bad_proxy") from None
    plen = pci["pCPathLenConstraint"]
    return (ext.critical, str(pci["proxyPolicy"]["policyLanguage"]),
            int(plen) if plen.isValue else None)


def create_proxy(issuer: Credential, now: float, lifetime_s: float = 12 * 3600, limited: bool = False,
                 path_len: int | None = None, acs: list[bytes] = ()) -> Credential:
    """A proxy of ``issuer`` (a user credential or a proxy), valid ``lifetime_s`` seconds from
    ``now`` but never beyond its issuer. ``acs``: DER attribute certificates to embed (VOMS).
    A proxy of a limited proxy is limited. ValueError if ``lifetime_s`` <= 0."""
    if lifetime_s <= 0:
        raise ValueError(f"proxy lifetime must be > 0 s, got {lifetime_s}")
    parent = proxy_cert_info(issuer.cert)
    limited = limited or (parent is not None and parent[1] == LIMITED_POLICY_OID)
    key = new_key()
    serial = secrets.randbits(31) | 1
    subject = x509.Name([*issuer.cert.subject.rdns,
                         x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME,
                                                                            str(serial))])])
    end = min(now + lifetime_s, issuer.cert.not_valid_after_utc.timestamp())
    b = (_builder(subject, issuer.cert.subject, key.public_key(), now, end - now, serial=serial)
         .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False),
                        critical=True)
         .add_extension(_pci_extension(limited, path_len), critical=True))
    if acs:
        b = b.add_extension(ac_extension(list(acs)), critical=False)
    cert = b.sign(issuer.key, hashes.SHA256())
    return Credential(cert, key, [issuer.cert, *issuer.chain])


def write_proxy(path: str | Path, proxy: Credential) -> None:
    """The gLite proxy file: proxy certificate, its key, then the chain; mode 0600."""
    pem = proxy.cert_pem()
    first_end = pem.index(b"-----END CERTIFICATE-----") + len(b"-----END CERTIFICATE-----\n")
    write_private(Path(path), pem[:first_end] + proxy.key_pem() + pem[first_end:])


@dataclass(frozen=True)
class Identity:
    """Who called, as verified from a certificate chain.

    ``dn``: the user's (or host's) certificate subject, the identity jobs belong to; ``subject``:
    the leaf's subject (``dn`` plus one ``/CN=<n>`` per proxy level); ``proxy_depth`` (0 = no
    proxy); ``limited``; ``not_after``: end of the chain's validity (seconds since the epoch);
    ``vo``/``fqans``: from a verified VOMS attribute certificate, else None / (); ``hosts``: the
    DNS names (lower case) and IP addresses of the end-entity certificate's subjectAltName (a
    host certificate's; a user certificate has none)."""

    dn: str
    subject: str
    issuer: str
    proxy_depth: int
    limited: bool
    not_after: float
    vo: str | None = None
    fqans: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()

    @property
    def fqan(self) -> str | None:
        """The primary FQAN (the first), or None."""
        return self.fqans[0] if self.fqans else None


def _valid_at(cert: x509.Certificate, now: float) -> None:
    if now < cert.not_valid_before_utc.timestamp():
        raise CredentialError(f"{dn_of(cert.subject)}: not valid before "
                              f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M:%S} UTC", "not_yet_valid")
    if now > cert.not_valid_after_utc.timestamp():
        raise CredentialError(f"{dn_of(cert.subject)}: expired at "
                              f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC", "expired")


def _signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> None:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        raise CredentialError(f"{dn_of(cert.subject)}: signature does not verify with the key of "
                              f"{dn_of(issuer.subject)}", "bad_signature") from None


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def _check_proxy(proxy: x509.Certificate, signer: x509.Certificate) -> None:
    """RFC 3820 Section 4.1: issuer = signer's subject, subject = issuer + one CN, PCI critical."""
    who = dn_of(proxy.subject)
    if proxy.issuer != signer.subject:
        raise CredentialError(f"{who}: issuer {dn_of(proxy.issuer)} is not the next certificate "
                              f"of the chain ({dn_of(signer.subject)})", "bad_proxy")
    rdns = proxy.subject.rdns
    last = rdns[-1] if rdns else None
    if (list(rdns[:-1]) != list(signer.subject.rdns) or last is None or len(last) != 1
            or next(iter(last)).oid != NameOID.COMMON_NAME):
        raise CredentialError(f"{who}: a proxy's subject must be its issuer's subject "
                              f"{dn_of(signer.subject)} plus one CN", "bad_proxy")
    if not proxy_cert_info(proxy)[0]:
        raise CredentialError(f"{who}: ProxyCertInfo must be critical", "bad_proxy")
    _signed_by(proxy, signer)


def verify_chain(chain: list[x509.Certificate], trusted_cas: list[x509.Certificate], now: float,
                 vomsdir: Path | None = None) -> Identity:
    """Verify ``chain`` (leaf first: proxies, the user/host certificate, optional intermediate
    CAs) at ``now`` (seconds since the epoch) against ``trusted_cas``.

    With ``vomsdir``, a VOMS attribute certificate found in the chain (the proxy nearest the leaf
    that has one) is verified and gives ``vo`` and ``fqans``; an invalid one is an error, not
    ignored. Raises CredentialError whose ``reason`` says what failed."""
    if not chain:
        raise CredentialError("no client certificate", "missing")
    for c in chain:
        _valid_at(c, now)
    n_proxies = 0
    while n_proxies < len(chain) and proxy_cert_info(chain[n_proxies]) is not None:
        n_proxies += 1
    if n_proxies == len(chain):
        raise CredentialError("the chain holds only proxies, not the certificate they derive from",
                              "bad_proxy")
    eec = chain[n_proxies]
    if _is_ca(eec):
        raise CredentialError(f"{dn_of(eec.subject)}: a CA certificate cannot identify a caller",
                              "untrusted")
    _check_trust(eec, chain[n_proxies + 1:], trusted_cas)
    limited = False
    for i in range(n_proxies - 1, -1, -1):        # from the first proxy down to the leaf
        _check_proxy(chain[i], chain[i + 1])
        _, policy, plen = proxy_cert_info(chain[i])
        if plen is not None and i > plen:         # i proxies were signed below this one
            raise CredentialError(f"{dn_of(chain[i].subject)}: path length {plen} exceeded by "
                                  f"{i} further proxies", "bad_proxy")
        if limited and policy != LIMITED_POLICY_OID:
            raise CredentialError(f"{dn_of(chain[i].subject)}: a proxy of a limited proxy must "
                                  "be limited", "bad_proxy")
        limited = limited or policy == LIMITED_POLICY_OID
    attrs = _vo_attributes(chain[:n_proxies], eec, vomsdir, trusted_cas, now)
    not_after = min(c.not_valid_after_utc.timestamp() for c in chain)
    return Identity(dn=dn_of(eec.subject), subject=dn_of(chain[0].subject), issuer=dn_of(eec.issuer),
                    proxy_depth=n_proxies, limited=limited,
                    not_after=min(not_after, attrs.not_after) if attrs else not_after,
                    vo=attrs.vo if attrs else None, fqans=attrs.fqans if attrs else (),
                    hosts=_alt_names(eec))


def _alt_names(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return (tuple(n.lower() for n in san.get_values_for_type(x509.DNSName))
            + tuple(str(ip) for ip in san.get_values_for_type(x509.IPAddress)))


def _check_trust(eec: x509.Certificate, presented: list[x509.Certificate],
                 trusted_cas: list[x509.Certificate]) -> None:
    """The end-entity certificate chains (through presented CA certificates) to a trusted CA."""
    cert, pool = eec, list(presented)
    for _ in range(len(presented) + 1):
        anchors = [ca for ca in trusted_cas if ca.subject == cert.issuer]
        for ca in anchors:
            try:
                _signed_by(cert, ca)
                return
            except CredentialError:
                continue
        step = next((c for c in pool if c.subject == cert.issuer and _is_ca(c)), None)
        if step is None:
            break
        _signed_by(cert, step)
        pool.remove(step)
        cert = step
    raise CredentialError(f"{dn_of(eec.subject)}: not issued by a trusted CA "
                          f"(issuer {dn_of(cert.issuer)})", "untrusted")


def _vo_attributes(proxies, eec, vomsdir, trusted_cas, now) -> VOAttributes | None:
    if vomsdir is None:
        return None
    for p in proxies:
        acs = acs_in(p)
        if acs:
            return verify_ac(acs[0], eec, vomsdir, trusted_cas, now)
    return None
