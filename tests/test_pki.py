"""X.509 identities: test CA, host/user certificates, RFC 3820 proxies, VOMS attribute certificates.

Every refusal the issue names is checked: expired, not-yet-valid, wrong CA, tampered, limited,
proxy of another user, path length, untrusted VO server, AC of another holder.
"""
from __future__ import annotations

import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding
from hypothesis import given, strategies as st

from vgrid_runtime.pki import (Credential, CredentialError, create_ca, dn_of, issue_host, issue_user,
                               load_trusted, parse_dn, read_pem_bundle)
from vgrid_runtime.proxy import Identity, create_proxy, verify_chain, write_proxy
from vgrid_runtime.voms import issue_ac

NOW = 1_800_000_000.0   # an injected "now" (2027-01-15), never the wall clock
DAY = 86400.0


@pytest.fixture(scope="module")
def pki():
    ca = create_ca(now=NOW)
    other_ca = create_ca("/DC=org/DC=elsewhere/CN=other CA", now=NOW)
    alice = issue_user(ca, "Alice", now=NOW)
    bob = issue_user(ca, "Bob", now=NOW)
    voms = issue_host(ca, "voms.vgrid.local", now=NOW)
    return {"ca": ca, "other_ca": other_ca, "alice": alice, "bob": bob, "voms": voms}


@pytest.fixture()
def vomsdir(tmp_path, pki):
    d = tmp_path / "vomsdir" / "dteam"
    d.mkdir(parents=True)
    (d / "voms.pem").write_bytes(pki["voms"].cert_pem())
    return tmp_path / "vomsdir"


def chain_of(cred: Credential) -> list[x509.Certificate]:
    return [cred.cert, *cred.chain]


def test_dn_round_trip_and_names(pki):
    assert pki["alice"].dn == "/DC=org/DC=vgrid/OU=users/CN=Alice"
    assert dn_of(parse_dn(pki["alice"].dn)) == pki["alice"].dn
    with pytest.raises(CredentialError, match="cannot read component"):
        parse_dn("/DC=org/XX=1")
    with pytest.raises(CredentialError, match="must start with '/'"):
        parse_dn("CN=x")


@given(st.lists(st.tuples(st.sampled_from(["DC", "O", "OU", "CN", "C"]),
                          st.text(st.characters(blacklist_characters="/=\x00",
                                                blacklist_categories=("Cs",)), min_size=1,
                                  max_size=12)), min_size=1, max_size=6))
def test_dn_parse_print_property(parts):
    """Every DN either prints back exactly as parsed or is refused with a CredentialError."""
    dn = "/" + "/".join(f"{k}={v}" for k, v in parts)
    try:
        name = parse_dn(dn)
    except CredentialError as exc:
        assert "DN" in str(exc)
        assert any(k == "C" and len(v.encode()) != 2 for k, v in parts)
        return
    assert dn_of(name) == dn


def test_host_certificate_has_dns_and_ip_alt_names(pki):
    host = issue_host(pki["ca"], "ce1.vgrid.local", ["127.0.0.1"], now=NOW)
    san = host.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["ce1.vgrid.local"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    ident = verify_chain(chain_of(host), [pki["ca"].cert], NOW)
    assert ident.dn == "/DC=org/DC=vgrid/OU=hosts/CN=ce1.vgrid.local" and ident.proxy_depth == 0
    assert ident.hosts == ("ce1.vgrid.local", "127.0.0.1")


def test_user_proxy_with_vo_attributes(pki, vomsdir):
    alice = pki["alice"]
    ac = issue_ac(pki["voms"], "dteam", ["/dteam/Role=NULL/Capability=NULL", "/dteam/prod/Role=production"],
                  alice.cert, now=NOW, lifetime_s=DAY)
    proxy = create_proxy(alice, NOW, lifetime_s=12 * 3600, acs=[ac])
    ident = verify_chain(chain_of(proxy), [pki["ca"].cert], NOW + 60, vomsdir=vomsdir)
    assert ident == Identity(dn=alice.dn, subject=dn_of(proxy.cert.subject), issuer=dn_of(pki["ca"].cert.subject),
                             proxy_depth=1, limited=False, not_after=proxy.cert.not_valid_after_utc.timestamp(),
                             vo="dteam", fqans=("/dteam", "/dteam/prod/Role=production"), hosts=())
    assert ident.fqan == "/dteam"
    assert ident.subject.startswith(alice.dn + "/CN=")


def test_proxy_lifetime_is_bounded_by_its_issuer(pki):
    short = issue_user(pki["ca"], "Short", now=NOW, lifetime_s=3600)
    proxy = create_proxy(short, NOW, lifetime_s=DAY)
    assert proxy.cert.not_valid_after_utc == short.cert.not_valid_after_utc


@pytest.mark.parametrize("at, reason", [(NOW + 13 * 3600, "expired"), (NOW - 3600, "not_yet_valid")])
def test_expired_and_not_yet_valid_proxies_are_refused(pki, at, reason):
    proxy = create_proxy(pki["alice"], NOW, lifetime_s=12 * 3600)
    with pytest.raises(CredentialError) as exc:
        verify_chain(chain_of(proxy), [pki["ca"].cert], at)
    assert exc.value.reason == reason


def test_wrong_ca_is_refused(pki):
    proxy = create_proxy(pki["alice"], NOW)
    with pytest.raises(CredentialError, match="not issued by a trusted CA") as exc:
        verify_chain(chain_of(proxy), [pki["other_ca"].cert], NOW)
    assert exc.value.reason == "untrusted"


def test_tampered_proxy_is_refused(pki):
    proxy = create_proxy(pki["alice"], NOW)
    der = bytearray(proxy.cert.public_bytes(Encoding.DER))
    der[-10] ^= 0xFF                                   # flip bits in the signature
    tampered = x509.load_der_x509_certificate(bytes(der))
    with pytest.raises(CredentialError) as exc:
        verify_chain([tampered, *proxy.chain], [pki["ca"].cert], NOW)
    assert exc.value.reason == "bad_signature"


def test_proxy_of_another_user_is_refused(pki):
    """Bob signs a 'proxy' whose subject claims Alice: the naming rule and signature refuse it."""
    alice, bob = pki["alice"], pki["bob"]
    forged = create_proxy(Credential(alice.cert, bob.key, alice.chain), NOW)
    with pytest.raises(CredentialError) as exc:
        verify_chain(chain_of(forged), [pki["ca"].cert], NOW)
    assert exc.value.reason == "bad_signature"
    # Bob's genuine proxy presented with Alice's certificate as its issuer: naming rule
    bobs = create_proxy(bob, NOW)
    with pytest.raises(CredentialError) as exc:
        verify_chain([bobs.cert, alice.cert], [pki["ca"].cert], NOW)
    assert exc.value.reason == "bad_proxy"


def test_limited_proxies_are_marked_and_stay_limited(pki):
    limited = create_proxy(pki["alice"], NOW, limited=True)
    assert verify_chain(chain_of(limited), [pki["ca"].cert], NOW).limited is True
    below = create_proxy(limited, NOW)                 # asked for a full one: still limited
    ident = verify_chain(chain_of(below), [pki["ca"].cert], NOW)
    assert ident.limited is True and ident.proxy_depth == 2 and ident.dn == pki["alice"].dn


def test_path_length_constraint(pki):
    first = create_proxy(pki["alice"], NOW, path_len=0)
    assert verify_chain(chain_of(first), [pki["ca"].cert], NOW).proxy_depth == 1
    second = create_proxy(first, NOW)
    with pytest.raises(CredentialError, match="path length 0 exceeded"):
        verify_chain(chain_of(second), [pki["ca"].cert], NOW)


def test_only_proxies_or_a_ca_cannot_identify(pki):
    proxy = create_proxy(pki["alice"], NOW)
    with pytest.raises(CredentialError, match="only proxies"):
        verify_chain([proxy.cert], [pki["ca"].cert], NOW)
    with pytest.raises(CredentialError, match="CA certificate"):
        verify_chain([pki["ca"].cert], [pki["ca"].cert], NOW)
    with pytest.raises(CredentialError) as exc:
        verify_chain([], [pki["ca"].cert], NOW)
    assert exc.value.reason == "missing"


def test_vo_attributes_from_untrusted_server_or_other_holder_are_refused(pki, vomsdir):
    alice, bob = pki["alice"], pki["bob"]
    rogue = issue_host(pki["ca"], "rogue.vgrid.local", now=NOW)
    bad = create_proxy(alice, NOW, acs=[issue_ac(rogue, "dteam", ["/dteam"], alice.cert, NOW, DAY)])
    with pytest.raises(CredentialError, match="not a trusted VO server") as exc:
        verify_chain(chain_of(bad), [pki["ca"].cert], NOW, vomsdir=vomsdir)
    assert exc.value.reason == "untrusted"
    stolen = create_proxy(bob, NOW, acs=[issue_ac(pki["voms"], "dteam", ["/dteam"], alice.cert, NOW, DAY)])
    with pytest.raises(CredentialError, match="issued to another certificate"):
        verify_chain(chain_of(stolen), [pki["ca"].cert], NOW, vomsdir=vomsdir)
    expired = create_proxy(alice, NOW, acs=[issue_ac(pki["voms"], "dteam", ["/dteam"], alice.cert, NOW, 60)])
    with pytest.raises(CredentialError) as exc:
        verify_chain(chain_of(expired), [pki["ca"].cert], NOW + 3600, vomsdir=vomsdir)
    assert exc.value.reason == "expired"
    with pytest.raises(ValueError, match="not in VO"):
        issue_ac(pki["voms"], "dteam", ["/atlas"], alice.cert, NOW, DAY)


def test_proxy_file_round_trip_is_private(pki, tmp_path, vomsdir):
    ac = issue_ac(pki["voms"], "dteam", ["/dteam"], pki["alice"].cert, NOW, DAY)
    proxy = create_proxy(pki["alice"], NOW, acs=[ac])
    path = tmp_path / "x509up_u0"
    write_proxy(path, proxy)
    assert path.stat().st_mode & 0o777 == 0o600
    back = Credential.load(path)
    assert back.cert == proxy.cert and back.chain == proxy.chain
    assert back.key.public_key().public_numbers() == proxy.key.public_key().public_numbers()
    assert verify_chain(chain_of(back), [pki["ca"].cert], NOW, vomsdir=vomsdir).vo == "dteam"
    certs, key = read_pem_bundle(path)
    assert len(certs) == 2 and key is not None


def test_trusted_directory(tmp_path, pki):
    (tmp_path / "vgrid-ca.pem").write_bytes(pki["ca"].cert_pem())
    (tmp_path / "a1b2c3d4.0").write_bytes(pki["other_ca"].cert_pem())
    (tmp_path / "README").write_text("not a certificate")
    got = {c.fingerprint(hashes.SHA256()) for c in load_trusted(tmp_path)}
    assert got == {pki["ca"].cert.fingerprint(hashes.SHA256()), pki["other_ca"].cert.fingerprint(hashes.SHA256())}
    with pytest.raises(CredentialError) as exc:
        load_trusted(tmp_path / "absent")
    assert exc.value.reason == "missing"


def test_times_come_from_the_callers_clock(pki):
    """A CA made 'now' in 2027 is not yet valid for a caller whose clock says 2026."""
    then = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc).timestamp()
    with pytest.raises(CredentialError) as exc:
        verify_chain(chain_of(pki["alice"]), [pki["ca"].cert], then)
    assert exc.value.reason == "not_yet_valid"
