"""A test site's PKI in a directory: one CA (its certificate in ``certs/``), a VOMS server trusted
for the given VOs (``vomsdir/<vo>/voms.pem``) and one host credential per service
(``<name>.pem`` / ``<name>.key``, with the service's loopback address). Users and proxies are
each test's own."""
from __future__ import annotations

from pathlib import Path

from vgrid_runtime.clock import WallClock
from vgrid_runtime.pki import create_ca, issue_host


def site_pki(d: Path, hosts: dict[str, str], vos: tuple[str, ...] = ("dteam",)):
    """Write the CA, VOMS and host credentials of ``hosts`` ({name: IP}, host name
    ``<name>.vgrid.local``) into ``d``; returns ``(ca, voms, {name: DN}, now)`` (now: the wall
    clock in seconds, the certificates' start)."""
    now = WallClock().now()
    ca = create_ca(now=now)
    (d / "certs").mkdir()
    (d / "certs" / "ca.pem").write_bytes(ca.cert_pem())
    voms = issue_host(ca, "voms.vgrid.local", now=now)
    for vo in vos:
        (d / "vomsdir" / vo).mkdir(parents=True)
        (d / "vomsdir" / vo / "voms.pem").write_bytes(voms.cert_pem())
    dns = {}
    for name, ip in hosts.items():
        cred = issue_host(ca, f"{name}.vgrid.local", [ip], now=now)
        cred.save(d / f"{name}.pem", d / f"{name}.key")
        dns[name] = cred.dn
    return ca, voms, dns, now


def tls_fields(d: Path, name: str) -> dict:
    """A service configuration's TLS options for host credential ``name`` of the site in ``d``."""
    return {"tls_cert": str(d / f"{name}.pem"), "tls_key": str(d / f"{name}.key"),
            "cert_dir": str(d / "certs"), "voms_dir": str(d / "vomsdir")}
