"""The image tests' site: a CA, host certificates and a user proxy; TOML for ``vgrid serve
images`` and ``vgrid serve node`` over mutual TLS; image files made at test time.

Each service has its own loopback address (127.0.30.x) and a host certificate for it, so "the
caller is the service at URL U" is checked as an HTTPS client checks a server. Credentials are
made with the wall clock (OpenSSL checks validity against it during the handshake).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from vgrid_runtime.clock import WallClock
from vgrid_runtime.httpclient import new_session
from vgrid_runtime.pki import create_ca, issue_host, issue_user
from vgrid_runtime.proxy import create_proxy, write_proxy
from vgrid_runtime.tls import TLSFiles

ADDR = {"repo": "127.0.30.1", "ce": "127.0.30.2", "node1": "127.0.30.3", "node2": "127.0.30.4",
        "rogue": "127.0.30.5"}


def make_pki(d: Path) -> dict:
    """Credentials under ``d``: ``<name>.pem``/``.key`` for every ADDR name, ``alice.proxy``
    (a user), trust in ``d/certs``; returns ``{name: DN}``."""
    now = WallClock().now()
    ca = create_ca(now=now)
    (d / "certs").mkdir(parents=True)
    (d / "certs" / "ca.pem").write_bytes(ca.cert_pem())
    (d / "vomsdir").mkdir()
    dns = {}
    for name, ip in ADDR.items():
        cred = issue_host(ca, f"{name}.vgrid.local", [ip], now=now)
        cred.save(d / f"{name}.pem", d / f"{name}.key")
        dns[name] = cred.dn
    alice = issue_user(ca, "Alice", now=now)
    write_proxy(d / "alice.proxy", create_proxy(alice, now, 3600))
    dns["alice"] = alice.dn
    return dns


def tls_files(d: Path, name: str) -> TLSFiles:
    if name.endswith(".proxy"):
        return TLSFiles(cert=str(d / name), key=None, cert_dir=str(d / "certs"), voms_dir=str(d / "vomsdir"))
    return TLSFiles(cert=str(d / f"{name}.pem"), key=str(d / f"{name}.key"), cert_dir=str(d / "certs"),
                    voms_dir=str(d / "vomsdir"))


def session(d: Path, name: str):
    """A requests session presenting ``name``'s credential (host or ``alice.proxy``)."""
    return new_session(tls_files(d, name))


def tls_toml(d: Path, name: str) -> str:
    return "\n".join([f'tls_cert = "{d / f"{name}.pem"}"', f'tls_key = "{d / f"{name}.key"}"',
                      f'cert_dir = "{d / "certs"}"', f'voms_dir = "{d / "vomsdir"}"', ""])


def repo_toml(d: Path, images: Path, dns: dict) -> str:
    return "\n".join([f'images_dir = "{images}"', f'bind = "{ADDR["repo"]}"',
                      f'node_dns = ["{dns["node1"]}", "{dns["node2"]}"]', f'ce_dns = ["{dns["ce"]}"]',
                      tls_toml(d, "repo")])


def node_toml(d: Path, name: str, work: Path, jobs: Path, repo_url: str, dns: dict, **extra) -> str:
    lines = [f'node = "{name}"', f'bind = "{ADDR[name]}"', f'work_dir = "{work}"', f'jobs_dir = "{jobs}"',
             f'gridmapdir = "{work.parent / (name + "-gridmapdir")}"', 'cgroup = "none"', "disk_quota_mb = 0",
             "heartbeat_s = 0", "retry_initial_s = 0.05", f'image_repository = "{repo_url}"',
             f'ce_dns = ["{dns["ce"]}"]']
    lines += [f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in extra.items()]
    return "\n".join(lines) + "\n" + tls_toml(d, name)


def make_image(path: Path, mb: float, seed: int = 0) -> str:
    """Write ``mb`` MB (10^6 bytes) of pseudo-random bytes; returns their SHA-256 hex."""
    n = int(mb * 1_000_000)
    data = (hashlib.sha256(f"{seed}".encode()).digest() * (n // 32 + 1))[:n]
    data = bytes(b ^ (i * 7 + seed) % 256 for i, b in enumerate(data[:4096])) + data[4096:]
    path.write_bytes(data)
    os.utime(path)
    return hashlib.sha256(data).hexdigest()
