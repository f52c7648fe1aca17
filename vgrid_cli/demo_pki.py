"""The identities of a demo or personal grid: a CA, one host certificate per service on its own
loopback address, a VO server and the user's VOMS proxy, all made at run time in a directory.

Every service gets an address 127.77.0.N (Linux answers on all of 127.0.0.0/8) and a host
certificate for it, so that "the caller is the service at URL U" is checked as an HTTPS client
checks a server, as on a real multi-host site. Nothing here is for production: a real site uses
IGTF CA certificates and a real VOMS server (docs/security.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from vgrid_runtime.pki import create_ca, issue_host, issue_user, write_private
from vgrid_runtime.proxy import create_proxy, write_proxy
from vgrid_runtime.tls import TLSFiles
from vgrid_runtime.voms import issue_ac

USER_CN = "vgrid demo user"
#: Password of the demo user's PKCS#12 file for a browser (a test credential, not a secret).
BROWSER_PASSWORD = "vgrid"
VOS = ("dteam", "vgrid")


@dataclass
class DemoPKI:
    """Paths and names of the demo identities (see :func:`make_demo_pki`)."""

    dir: Path
    user_dn: str
    hosts: dict[str, tuple[str, str]] = field(default_factory=dict)   # service -> (address, DN)
    users: dict[str, tuple[str, Path]] = field(default_factory=dict)  # more users: CN -> (DN, proxy)

    @property
    def cert_dir(self) -> Path:
        return self.dir / "certificates"

    @property
    def voms_dir(self) -> Path:
        return self.dir / "vomsdir"

    @property
    def proxy(self) -> Path:
        return self.dir / "x509up_demo"

    @property
    def browser_p12(self) -> Path:
        """The demo user's end-entity certificate and key as PKCS#12 (password
        :data:`BROWSER_PASSWORD`): what a web browser imports to open the broker's dashboard."""
        return self.dir / "user" / "browser.p12"

    def address(self, service: str) -> str:
        return self.hosts[service][0]

    def dn(self, service: str) -> str:
        return self.hosts[service][1]

    def toml(self, service: str) -> str:
        """The TOML lines that make ``service`` listen on its address over mutual TLS."""
        d = self.dir / "hosts" / service
        return (f'bind = "{self.address(service)}"\ntls_cert = "{d / "hostcert.pem"}"\n'
                f'tls_key = "{d / "hostkey.pem"}"\ncert_dir = "{self.cert_dir}"\n'
                f'voms_dir = "{self.voms_dir}"\n')

    def host_credentials(self, service: str) -> TLSFiles:
        """``service``'s host certificate and trust (a process acting for that service)."""
        d = self.dir / "hosts" / service
        return TLSFiles(cert=str(d / "hostcert.pem"), key=str(d / "hostkey.pem"),
                        cert_dir=str(self.cert_dir), voms_dir=str(self.voms_dir))

    def user_credentials(self) -> TLSFiles:
        return TLSFiles(cert=str(self.proxy), key=None, cert_dir=str(self.cert_dir),
                        voms_dir=str(self.voms_dir))

    def env(self) -> dict[str, str]:
        """What a client shell needs (with VGRID_BROKER_URL) to use the site with the CLI."""
        return {"X509_USER_PROXY": str(self.proxy), "X509_CERT_DIR": str(self.cert_dir),
                "X509_VOMS_DIR": str(self.voms_dir)}


def write_browser_p12(path: Path, user, ca_cert) -> None:
    """``user``'s certificate and key, with the CA certificate, as PKCS#12 (mode 0600), for a
    browser: browsers present an end-entity certificate, not an RFC 3820 proxy chain, and the
    dashboard's rules depend only on the DN (docs/dashboard.md, "Logging in")."""
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12
    path.parent.mkdir(parents=True, exist_ok=True)
    data = pkcs12.serialize_key_and_certificates(b"vgrid demo user", user.key, user.cert, [ca_cert],
                                                 BestAvailableEncryption(BROWSER_PASSWORD.encode()))
    write_private(path, data)


def make_demo_pki(directory: Path, services: list[str], now: float, vo: str = "dteam",
                  lifetime_s: float = 24 * 3600, users: tuple[str, ...] = ()) -> DemoPKI:
    """Create the CA, VO servers for :data:`VOS`, a host certificate for each of ``services``
    (address 127.77.0.<i+1>, DNS name <service>.vgrid.local) and the user's proxy with ``vo``
    attributes (``/<vo>``), valid ``lifetime_s`` seconds from ``now``. Keys are mode 0600.
    ``users``: common names of more users, each with a proxy like the demo user's in
    ``<directory>/x509up_<i>`` (``DemoPKI.users``: CN -> (DN, proxy path); tests of isolation)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = create_ca("/DC=org/DC=vgrid-demo/CN=vgrid demo CA", now=now)
    pki = DemoPKI(directory, user_dn="")
    pki.cert_dir.mkdir(exist_ok=True)
    (pki.cert_dir / "vgrid-demo-ca.pem").write_bytes(ca.cert_pem())
    server = issue_host(ca, "voms.vgrid.local", now=now)
    for name in VOS:
        (pki.voms_dir / name).mkdir(parents=True, exist_ok=True)
        (pki.voms_dir / name / "voms.vgrid.local.pem").write_bytes(server.cert_pem())
    for i, service in enumerate(services):
        address = f"127.77.0.{i + 1}"
        host = issue_host(ca, f"{service}.vgrid.local", [address], now=now)
        d = directory / "hosts" / service
        d.mkdir(parents=True, exist_ok=True)
        host.save(d / "hostcert.pem", d / "hostkey.pem")
        pki.hosts[service] = (address, host.dn)
    user = issue_user(ca, USER_CN, now=now)
    pki.user_dn = user.dn
    write_browser_p12(pki.browser_p12, user, ca.cert)
    ac = issue_ac(server, vo, [f"/{vo}"], user.cert, now, lifetime_s)
    write_proxy(pki.proxy, create_proxy(user, now, lifetime_s, acs=[ac]))
    for i, cn in enumerate(users, start=1):
        other = issue_user(ca, cn, now=now)
        path = directory / f"x509up_{i}"
        write_proxy(path, create_proxy(other, now, lifetime_s,
                                       acs=[issue_ac(server, vo, [f"/{vo}"], other.cert, now, lifetime_s)]))
        pki.users[cn] = (other.dn, path)
    return pki
