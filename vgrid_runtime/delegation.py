"""Proxy delegation (GSI style): a service gets a proxy of a user without any private key
crossing the network.

The receiver makes a key pair and sends a certificate request (:func:`new_request`); the holder
of a proxy signs it as a new RFC 3820 proxy of its own (:func:`sign_request`, "a short proxy
signed by the user's proxy") and sends back the chain; the receiver checks that the chain is
valid and ends in its own key (:func:`accept`). The path length constraints of the proxies
above are honoured: :func:`can_delegate` says whether one more proxy level is allowed, and
:func:`sign_request` refuses otherwise. The VOMS attribute certificate of the user's proxy
travels in the chain (:func:`vgrid_runtime.proxy.verify_chain` finds it there).

Source: RFC 3820 Sections 3-4 (path length), the gLite/GridSite delegation port type (a request
is signed by the delegator; the key never leaves the delegatee).
"""
from __future__ import annotations

import secrets

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID

from .pki import Credential, CredentialError, _builder, dn_of, new_key
from .proxy import LIMITED_POLICY_OID, Identity, _pci_extension, proxy_cert_info, verify_chain


class DelegationError(CredentialError):
    """A delegation cannot be made or is refused; ``reason``: ``path-length``, ``bad-request``,
    ``wrong-key``, or a :class:`CredentialError` reason of the chain (``expired``, ...)."""


def new_request() -> tuple[object, bytes]:
    """``(private key, PEM certificate request)``: the delegatee's half. The subject of the
    request is ignored by the signer (a proxy's subject is its issuer's plus one CN)."""
    key = new_key()
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "delegation")]))
           .sign(key, hashes.SHA256()))
    return key, csr.public_bytes(serialization.Encoding.PEM)


def key_pem(key) -> bytes:
    """PEM (PKCS#8, unencrypted) of a delegatee's private key, for storing it 0600."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def can_delegate(issuer: Credential) -> bool:
    """Whether a proxy signed by ``issuer`` would respect every path length constraint above
    it (RFC 3820 Section 4.1.3): a proxy at depth j below the new one (j >= 1) with
    pCPathLenConstraint p allows it only if j <= p."""
    for depth, cert in enumerate([issuer.cert, *issuer.chain], start=1):
        info = proxy_cert_info(cert)
        if info is not None and info[2] is not None and depth > info[2]:
            return False
    return True


def sign_request(issuer: Credential, csr_pem: bytes, now: float, lifetime_s: float) -> bytes:
    """The PEM chain (new proxy, ``issuer``'s certificate, its chain) of a proxy of ``issuer``
    for the key of ``csr_pem``, valid ``lifetime_s`` seconds from ``now`` (never beyond its
    issuer). A proxy of a limited proxy is limited. DelegationError ``bad-request`` for an
    unreadable or badly signed request, ``path-length`` when ``issuer`` may not delegate."""
    if lifetime_s <= 0:
        raise ValueError(f"delegation lifetime must be > 0 s, got {lifetime_s}")
    try:
        csr = x509.load_pem_x509_csr(csr_pem)
        ok = csr.is_signature_valid
    except (ValueError, TypeError):
        ok = False
    if not ok:
        raise DelegationError("the delegation request is not a signed certificate request", "bad-request")
    if not can_delegate(issuer):
        raise DelegationError(f"{issuer.dn}: its path length constraint allows no further proxy",
                              "path-length")
    parent = proxy_cert_info(issuer.cert)
    limited = parent is not None and parent[1] == LIMITED_POLICY_OID
    serial = secrets.randbits(31) | 1
    subject = x509.Name([*issuer.cert.subject.rdns,
                         x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, str(serial))])])
    end = min(now + lifetime_s, issuer.cert.not_valid_after_utc.timestamp())
    cert = (_builder(subject, issuer.cert.subject, csr.public_key(), now, end - now, serial=serial)
            .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False),
                           critical=True)
            .add_extension(_pci_extension(limited, None), critical=True)
            .sign(issuer.key, hashes.SHA256()))
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, issuer.cert, *issuer.chain])


def accept(key, chain_pem: bytes, trusted_cas: list[x509.Certificate], now: float,
           vomsdir=None) -> tuple[Credential, Identity]:
    """The delegated credential and its verified identity: ``chain_pem`` (leaf first) must be
    a valid chain at ``now`` (:func:`vgrid_runtime.proxy.verify_chain`, VOMS attributes read
    with ``vomsdir``) whose leaf is a proxy certifying ``key``'s public key. DelegationError
    (``bad-request``, ``wrong-key``) or CredentialError (the chain's fault)."""
    try:
        chain = x509.load_pem_x509_certificates(chain_pem)
    except (ValueError, TypeError):
        raise DelegationError("the delegated proxy is not a PEM certificate chain", "bad-request") from None
    if not chain or proxy_cert_info(chain[0]) is None:
        raise DelegationError("the delegated credential must be a proxy certificate", "bad-request")
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    if (chain[0].public_key().public_bytes(serialization.Encoding.DER, pub)
            != key.public_key().public_bytes(serialization.Encoding.DER, pub)):
        raise DelegationError(f"{dn_of(chain[0].subject)}: the proxy is not for the key of this "
                              "delegation request", "wrong-key")
    ident = verify_chain(chain, trusted_cas, now, vomsdir=vomsdir)
    return Credential(chain[0], key, chain[1:]), ident


def load_chain(cred_pem: bytes) -> Credential:
    """A delegated credential from its stored PEM (chain, then key)."""
    certs = x509.load_pem_x509_certificates(cred_pem)
    key = serialization.load_pem_private_key(cred_pem, password=None)
    return Credential(certs[0], key, certs[1:])


def store_pem(cred: Credential) -> bytes:
    """The PEM to store a delegated credential (its chain, then its key; write it 0600)."""
    return cred.cert_pem() + cred.key_pem()
