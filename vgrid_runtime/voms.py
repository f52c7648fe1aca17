"""VO membership as VOMS does it: an RFC 5755 attribute certificate (AC) in the user's proxy.

A VO server (its own host-style certificate from a trusted CA) signs an AC that binds the
holder (the user certificate, by its issuer and serial number) to the VO and its FQANs
(``/dteam``, ``/dteam/prod/Role=production``) for a lifetime. :func:`issue_ac` makes one,
:func:`ac_extension` wraps it for a proxy, :func:`verify_acs` checks one found in a presented chain
on every use: signature by a VO server trusted for that VO (``vomsdir/<vo>/*.pem``), the VO
server's own certificate issued by a trusted CA, validity at ``now``, holder = the chain's user
certificate.

Why an attribute certificate rather than a home-made signed extension: it is what real
``voms-proxy-init`` puts into proxies (extension 1.3.6.1.4.1.8005.100.100.5, FQANs in attribute
1.3.6.1.4.1.8005.100.100.4 as IetfAttrSyntax, VO name from the ``<vo>://host:port`` policy
authority), so a site can read real VOMS proxies with the same code. Encoding uses pyasn1's RFC
5755 modules; signatures are sha256WithRSAEncryption. Sources: RFC 5755 Section 4; the VOMS AC
format (OGF GFD.182).
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from pyasn1.codec.der import decoder, encoder
from pyasn1.error import PyAsn1Error
from pyasn1.type import univ, useful
from pyasn1_modules import rfc5280, rfc5755

from .pki import Credential, CredentialError, dn_of, load_trusted

#: Extension of a proxy holding the VOMS ACs (SEQUENCE OF SEQUENCE OF AttributeCertificate).
VOMS_EXTENSION_OID = x509.ObjectIdentifier("1.3.6.1.4.1.8005.100.100.5")
#: AC attribute holding the FQANs (IetfAttrSyntax, values as OCTET STRING).
FQAN_ATTRIBUTE_OID = univ.ObjectIdentifier("1.3.6.1.4.1.8005.100.100.4")
_SHA256_RSA = univ.ObjectIdentifier("1.2.840.113549.1.1.11")


@dataclass(frozen=True)
class VOAttributes:
    """A verified VO membership: ``vo`` name, ``fqans`` (short form, ``/Role=NULL`` and
    ``/Capability=NULL`` dropped; the first is the primary FQAN), the VO server's DN and the end
    of the AC's validity (seconds since the epoch)."""

    vo: str
    fqans: tuple[str, ...]
    server_dn: str
    not_after: float


def short_fqan(fqan: str) -> str:
    """``/dteam/Role=NULL/Capability=NULL`` -> ``/dteam``; ``/dteam/Role=prod`` stays."""
    parts = [p for p in fqan.split("/") if p and p not in ("Role=NULL", "Capability=NULL")]
    return "/" + "/".join(parts)


def _gn_dir(name: x509.Name) -> rfc5280.GeneralName:
    rdns, _ = decoder.decode(name.public_bytes(), asn1Spec=rfc5280.Name())
    gn = rfc5280.GeneralName()
    gn["directoryName"].setComponentByPosition(0, rdns[0])
    return gn


def _gt(t: float) -> useful.GeneralizedTime:
    return useful.GeneralizedTime(
        datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y%m%d%H%M%SZ"))


def issue_ac(server: Credential, vo: str, fqans: list[str], holder: x509.Certificate,
             now: float, lifetime_s: float, server_uri: str = "voms.vgrid.local:15000") -> bytes:
    """DER of an AC signed by ``server`` giving ``holder`` (the user certificate) ``fqans`` in
    ``vo``, valid from ``now - 300`` to ``now + lifetime_s`` seconds. ValueError if an FQAN is not
    in ``vo`` (``/<vo>`` or below)."""
    for f in fqans:
        if f != f"/{vo}" and not f.startswith(f"/{vo}/"):
            raise ValueError(f"FQAN {f!r} is not in VO {vo!r}")
    info = rfc5755.AttributeCertificateInfo()
    info["version"] = 1   # v2
    info["holder"]["baseCertificateID"]["issuer"].append(_gn_dir(holder.issuer))
    info["holder"]["baseCertificateID"]["serial"] = holder.serial_number
    info["issuer"]["v2Form"]["issuerName"].append(_gn_dir(server.cert.subject))
    info["signature"]["algorithm"] = _SHA256_RSA
    info["serialNumber"] = x509.random_serial_number()
    info["attrCertValidityPeriod"]["notBeforeTime"] = _gt(now - 300)
    info["attrCertValidityPeriod"]["notAfterTime"] = _gt(now + lifetime_s)
    ietf = rfc5755.IetfAttrSyntax()
    authority = rfc5280.GeneralName()
    authority["uniformResourceIdentifier"] = f"{vo}://{server_uri}"
    ietf["policyAuthority"].append(authority)
    for f in fqans:
        value = ietf["values"].componentType.clone()
        value["octets"] = f.encode()
        ietf["values"].append(value)
    attr = rfc5755.Attribute()
    attr["type"] = FQAN_ATTRIBUTE_OID
    attr["values"].append(univ.Any(encoder.encode(ietf)))
    info["attributes"].append(attr)
    signed = encoder.encode(info)
    ac = rfc5755.AttributeCertificate()
    ac["acinfo"] = info
    ac["signatureAlgorithm"]["algorithm"] = _SHA256_RSA
    ac["signatureValue"] = univ.BitString.fromOctetString(
        server.key.sign(signed, padding.PKCS1v15(), hashes.SHA256()))
    return encoder.encode(ac)


def _ac_seq_spec():
    return univ.SequenceOf(componentType=univ.SequenceOf(componentType=rfc5755.AttributeCertificate()))


def ac_extension(acs: list[bytes]) -> x509.UnrecognizedExtension:
    """The proxy extension carrying ``acs`` (DER ACs), as voms-proxy-init writes it."""
    outer = _ac_seq_spec()
    inner = outer.componentType.clone()
    for der in acs:
        inner.append(decoder.decode(der, asn1Spec=rfc5755.AttributeCertificate())[0])
    outer.append(inner)
    return x509.UnrecognizedExtension(VOMS_EXTENSION_OID, encoder.encode(outer))


def acs_in(cert: x509.Certificate) -> list:
    """The decoded ACs of ``cert``'s VOMS extension (empty when it has none)."""
    try:
        ext = cert.extensions.get_extension_for_oid(VOMS_EXTENSION_OID)
    except x509.ExtensionNotFound:
        return []
    try:
        outer, _ = decoder.decode(ext.value.value, asn1Spec=_ac_seq_spec())
    except PyAsn1Error as exc:
        raise CredentialError(f"{dn_of(cert.subject)}: unreadable VOMS extension: {exc}") from None
    return [ac for inner in outer for ac in inner]


def trusted_vo_servers(vomsdir: Path, vo: str) -> list[x509.Certificate]:
    """VO server certificates trusted for ``vo``: ``vomsdir/<vo>/*.pem`` (none: empty list)."""
    d = vomsdir / vo
    return load_trusted(d) if d.is_dir() else []


def _fqans_of(info) -> tuple[str, str]:
    for attr in info["attributes"]:
        if attr["type"] == FQAN_ATTRIBUTE_OID:
            ietf, _ = decoder.decode(bytes(attr["values"][0]), asn1Spec=rfc5755.IetfAttrSyntax())
            uri = str(ietf["policyAuthority"][0]["uniformResourceIdentifier"])
            return uri.split("://", 1)[0], [bytes(v["octets"]).decode() for v in ietf["values"]]
    raise CredentialError("attribute certificate without FQANs", "vo")


def verify_ac(ac, holder: x509.Certificate, vomsdir: Path, trusted_cas: list[x509.Certificate],
              now: float) -> VOAttributes:
    """Check one decoded AC against ``holder`` (the user certificate) at ``now``.

    Raises CredentialError (reason ``vo``, ``expired``, ``not_yet_valid``, ``bad_signature`` or
    ``untrusted``) naming what failed."""
    info = ac["acinfo"]
    try:
        vo, fqans = _fqans_of(info)
        base = info["holder"]["baseCertificateID"]
        holder_issuer = encoder.encode(base["issuer"][0]["directoryName"][0])
        server_name = encoder.encode(info["issuer"]["v2Form"]["issuerName"][0]["directoryName"][0])
        period = info["attrCertValidityPeriod"]
        not_before = period["notBeforeTime"].asDateTime.timestamp()
        not_after = period["notAfterTime"].asDateTime.timestamp()
    except (PyAsn1Error, KeyError, IndexError, ValueError) as exc:
        raise CredentialError(f"malformed attribute certificate: {exc}") from None
    if holder_issuer != holder.issuer.public_bytes() or int(base["serial"]) != holder.serial_number:
        raise CredentialError(f"VO {vo}: attribute certificate was issued to another certificate "
                              f"than {dn_of(holder.subject)}", "vo")
    if now < not_before:
        raise CredentialError(f"VO {vo}: attribute certificate not valid before {not_before:.0f}",
                              "not_yet_valid")
    if now > not_after:
        raise CredentialError(f"VO {vo}: attribute certificate expired at {not_after:.0f}", "expired")
    servers = [s for s in trusted_vo_servers(vomsdir, vo) if s.subject.public_bytes() == server_name]
    if not servers:
        raise CredentialError(f"VO {vo}: the attribute certificate's issuer is not a trusted VO "
                              f"server for {vo} (looked in {vomsdir / vo})", "untrusted")
    server = servers[0]
    if not any(_issued_by(server, ca) for ca in trusted_cas):
        raise CredentialError(f"VO {vo}: VO server {dn_of(server.subject)} is not issued by a "
                              "trusted CA", "untrusted")
    if not (server.not_valid_before_utc.timestamp() <= now <= server.not_valid_after_utc.timestamp()):
        raise CredentialError(f"VO {vo}: VO server certificate {dn_of(server.subject)} is not "
                              "valid now", "expired")
    try:
        server.public_key().verify(bytes(ac["signatureValue"].asOctets()), encoder.encode(info),
                                   padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        raise CredentialError(f"VO {vo}: attribute certificate signature does not verify",
                              "bad_signature") from None
    return VOAttributes(vo, tuple(short_fqan(f) for f in fqans), dn_of(server.subject), not_after)


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
        return True
    except (ValueError, TypeError, InvalidSignature):
        return False
