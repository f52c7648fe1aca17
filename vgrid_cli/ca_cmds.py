"""``vgrid ca init|host|user|vo|proxy`` and ``vgrid proxy info``: identities for a test grid.

Thin click adapters over :mod:`vgrid_runtime.pki`, :mod:`vgrid_runtime.proxy` and
:mod:`vgrid_runtime.voms`. File names follow gLite: ``hostcert.pem``/``hostkey.pem``,
``usercert.pem``/``userkey.pem``, the proxy in ``$X509_USER_PROXY`` or ``/tmp/x509up_u<uid>``,
trusted CAs in ``<ca dir>/certificates`` (point ``X509_CERT_DIR`` there) and trusted VO servers
in ``<ca dir>/vomsdir/<vo>/`` (``X509_VOMS_DIR``). Private keys are written with mode 0600.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import click
from cryptography.hazmat.primitives.serialization import Encoding

from vgrid_runtime.clock import WallClock
from vgrid_runtime.pki import (Credential, CredentialError, cert_dir, create_ca, dn_of, issue_host,
                               issue_user, load_trusted, user_proxy_path, voms_dir)
from vgrid_runtime.proxy import create_proxy, verify_chain, write_proxy
from vgrid_runtime.voms import issue_ac

from .common import exit_on

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(text: str) -> float:
    """``12h``, ``30m``, ``3600`` -> seconds; click.BadParameter otherwise."""
    unit = text[-1:] if text[-1:] in _DURATION_UNITS else "s"
    number = text[:-1] if text[-1:] in _DURATION_UNITS else text
    try:
        value = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a duration like 12h, 30m or 3600") from None
    if value <= 0:
        raise click.BadParameter(f"{text!r} must be positive")
    return value


def _load_ca(ca_dir: str) -> Credential:
    d = Path(ca_dir)
    return Credential.load(d / "ca.pem", d / "private" / "ca.key")


handle = exit_on((CredentialError, 2), (ValueError, 2), (OSError, 1))
ca_dir_opt = click.option("--ca", "ca_dir", required=True, type=click.Path(file_okay=False),
                          help="the CA directory made by `vgrid ca init`")


@click.group("ca")
def ca_group() -> None:
    """A test certificate authority: CA, host, user and VO-server certificates, proxies."""


@ca_group.command("init")
@click.argument("ca_dir", type=click.Path(file_okay=False))
@click.option("--dn", default="/DC=org/DC=vgrid/CN=vgrid test CA", show_default=True)
@click.option("--lifetime", default="1825d", show_default=True, help="validity (s, m, h or d)")
@handle
def init_cmd(ca_dir: str, dn: str, lifetime: str) -> None:
    """Create a CA in CA_DIR: ca.pem, private/ca.key, certificates/ (the trusted directory)."""
    d = Path(ca_dir)
    if (d / "ca.pem").exists():
        raise CredentialError(f"{d / 'ca.pem'} exists already; choose another directory")
    ca = create_ca(dn, now=WallClock().now(), lifetime_s=_seconds(lifetime))
    d.mkdir(parents=True, exist_ok=True)
    ca.save(d / "ca.pem", d / "private" / "ca.key")
    (d / "certificates").mkdir(exist_ok=True)
    (d / "certificates" / "vgrid-ca.pem").write_bytes(ca.cert_pem())
    (d / "vomsdir").mkdir(exist_ok=True)
    click.echo(f"{dn}\ntrusted directory: export X509_CERT_DIR={(d / 'certificates').resolve()}")


def _issue_to(out: str, stem: str, cred: Credential) -> None:
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    cred.save(o / f"{stem}cert.pem", o / f"{stem}key.pem")
    click.echo(f"{cred.dn}\n{o / f'{stem}cert.pem'}\n{o / f'{stem}key.pem'}")


@ca_group.command("host")
@click.argument("hostname")
@ca_dir_opt
@click.option("--ip", "ips", multiple=True, help="an IP subjectAltName (repeatable)")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="writes hostcert.pem, hostkey.pem")
@click.option("--lifetime", default="365d", show_default=True)
@handle
def host_cmd(hostname: str, ca_dir: str, ips: tuple[str, ...], out: str, lifetime: str) -> None:
    """A host certificate for HOSTNAME (DNS and IP subjectAltNames; TLS server and client)."""
    _issue_to(out, "host", issue_host(_load_ca(ca_dir), hostname, list(ips), now=WallClock().now(),
                                      lifetime_s=_seconds(lifetime)))


@ca_group.command("user")
@click.argument("common_name")
@ca_dir_opt
@click.option("--out", required=True, type=click.Path(file_okay=False), help="writes usercert.pem, userkey.pem")
@click.option("--lifetime", default="365d", show_default=True)
@handle
def user_cmd(common_name: str, ca_dir: str, out: str, lifetime: str) -> None:
    """A user certificate /.../OU=users/CN=COMMON_NAME."""
    _issue_to(out, "user", issue_user(_load_ca(ca_dir), common_name, now=WallClock().now(),
                                      lifetime_s=_seconds(lifetime)))


@ca_group.command("vo")
@click.argument("vo")
@ca_dir_opt
@click.option("--host", default="voms.vgrid.local", show_default=True, help="the VO server's host name")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="writes vomscert.pem, vomskey.pem")
@handle
def vo_cmd(vo: str, ca_dir: str, host: str, out: str) -> None:
    """A VO server for VO: its certificate, trusted in <ca dir>/vomsdir/VO/ (X509_VOMS_DIR)."""
    server = issue_host(_load_ca(ca_dir), host, now=WallClock().now())
    _issue_to(out, "voms", server)
    trusted = Path(ca_dir) / "vomsdir" / vo
    trusted.mkdir(parents=True, exist_ok=True)
    (trusted / f"{host}.pem").write_bytes(server.cert.public_bytes(Encoding.PEM))


@ca_group.command("proxy")
@click.option("--cert", "cert_file", required=True, type=click.Path(dir_okay=False), help="usercert.pem")
@click.option("--key", "key_file", required=True, type=click.Path(dir_okay=False), help="userkey.pem")
@click.option("--vo", default=None, help="VO whose attributes to embed (needs --voms-cert/--voms-key)")
@click.option("--fqan", "fqans", multiple=True, help="FQAN (repeatable; default /<vo>)")
@click.option("--voms-cert", default=None, type=click.Path(dir_okay=False))
@click.option("--voms-key", default=None, type=click.Path(dir_okay=False))
@click.option("--lifetime", default="12h", show_default=True)
@click.option("--limited", is_flag=True, help="a limited proxy (cannot start jobs)")
@click.option("--out", default=None, help="default: $X509_USER_PROXY or /tmp/x509up_u<uid>")
@handle
def proxy_cmd(cert_file, key_file, vo, fqans, voms_cert, voms_key, lifetime, limited, out) -> None:
    """An RFC 3820 proxy of the user certificate, with VOMS-style VO attributes (like
    voms-proxy-init --voms VO[:FQAN])."""
    user = Credential.load(cert_file, key_file)
    now, life = WallClock().now(), _seconds(lifetime)
    acs = []
    if vo:
        if not (voms_cert and voms_key):
            raise click.UsageError("--vo needs --voms-cert and --voms-key (made by `vgrid ca vo`)")
        server = Credential.load(voms_cert, voms_key)
        acs.append(issue_ac(server, vo, list(fqans) or [f"/{vo}"], user.cert, now, life))
    path = user_proxy_path(out)
    write_proxy(path, create_proxy(user, now, life, limited=limited, acs=acs))
    click.echo(f"proxy of {user.dn} valid {life / 3600:.1f} h: {path}")


@click.group("proxy")
def proxy_group() -> None:
    """The user's proxy (gLite: voms-proxy-info)."""


@proxy_group.command("info")
@click.option("--file", "proxy_file", default=None, help="default: $X509_USER_PROXY or /tmp/x509up_u<uid>")
@click.option("--cert-dir", "cd", default=None, help="trusted CAs (default $X509_CERT_DIR)")
@click.option("--voms-dir", "vd", default=None, help="trusted VO servers (default $X509_VOMS_DIR)")
@click.option("--json", "as_json", is_flag=True)
@exit_on((CredentialError, 1), (OSError, 1))
def info_cmd(proxy_file: str | None, cd: str | None, vd: str | None, as_json: bool) -> None:
    """Subject, issuer, identity, VO, FQANs and time left of a proxy, verified (exit 1 if the
    proxy is invalid, expired or untrusted)."""
    proxy = Credential.load(user_proxy_path(proxy_file))
    now = WallClock().now()
    ident = verify_chain([proxy.cert, *proxy.chain], load_trusted(cert_dir(cd)), now,
                         vomsdir=voms_dir(vd))
    doc = {"subject": ident.subject, "issuer": dn_of(proxy.cert.issuer), "identity": ident.dn,
           "type": "RFC 3820 " + ("limited proxy" if ident.limited else "proxy"),
           "vo": ident.vo, "fqans": list(ident.fqans), "timeleft_s": max(0, int(ident.not_after - now)),
           "path": str(user_proxy_path(proxy_file))}
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    for k in ("subject", "issuer", "identity", "type", "vo", "fqans", "path"):
        v = doc[k]
        click.echo(f"{k:<9}: {', '.join(v) if isinstance(v, list) else v if v is not None else '-'}")
    click.echo(f"{'timeleft':<9}: {time.strftime('%H:%M:%S', time.gmtime(doc['timeleft_s']))}"
               if doc["timeleft_s"] < 86400 else f"timeleft : {doc['timeleft_s'] / 86400:.1f} days")
