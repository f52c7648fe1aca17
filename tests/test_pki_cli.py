"""`vgrid ca init|host|user|vo|proxy` and `vgrid proxy info` as a user runs them."""
from __future__ import annotations

import json
import subprocess

from click.testing import CliRunner

from vgrid_cli.main import main


def run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_ca_host_user_vo_proxy_and_info(tmp_path):
    ca, out = tmp_path / "ca", tmp_path
    assert run("ca", "init", str(ca)).exit_code == 0
    assert (ca / "private" / "ca.key").stat().st_mode & 0o077 == 0
    r = run("ca", "host", "ce1.vgrid.local", "--ip", "127.0.0.1", "--ca", str(ca), "--out", str(out / "h"))
    assert r.exit_code == 0 and "/OU=hosts/CN=ce1.vgrid.local" in r.output
    assert run("ca", "user", "Alice", "--ca", str(ca), "--out", str(out / "a")).exit_code == 0
    assert run("ca", "vo", "dteam", "--ca", str(ca), "--out", str(out / "v")).exit_code == 0
    proxy = out / "x509up"
    r = run("ca", "proxy", "--cert", str(out / "a" / "usercert.pem"), "--key", str(out / "a" / "userkey.pem"),
            "--vo", "dteam", "--fqan", "/dteam/prod", "--voms-cert", str(out / "v" / "vomscert.pem"),
            "--voms-key", str(out / "v" / "vomskey.pem"), "--lifetime", "2h", "--out", str(proxy))
    assert r.exit_code == 0, r.output
    assert proxy.stat().st_mode & 0o777 == 0o600
    env = {"X509_USER_PROXY": str(proxy), "X509_CERT_DIR": str(ca / "certificates"),
           "X509_VOMS_DIR": str(ca / "vomsdir")}
    r = run("proxy", "info", "--json", env=env)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["identity"] == "/DC=org/DC=vgrid/OU=users/CN=Alice"
    assert doc["vo"] == "dteam" and doc["fqans"] == ["/dteam/prod"]
    assert 7000 < doc["timeleft_s"] <= 7200
    assert doc["subject"].startswith(doc["identity"] + "/CN=")
    # OpenSSL's own RFC 3820 path validation accepts the proxy (interoperability)
    pem = proxy.read_text()
    first = pem[:pem.index("-----END CERTIFICATE-----") + 26]
    (tmp_path / "leaf.pem").write_text(first)
    check = subprocess.run(["openssl", "verify", "-allow_proxy_certs", "-CAfile", str(ca / "ca.pem"),
                            "-untrusted", str(out / "a" / "usercert.pem"), str(tmp_path / "leaf.pem")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_refusals_are_one_line_errors(tmp_path):
    ca = tmp_path / "ca"
    assert run("ca", "init", str(ca)).exit_code == 0
    r = run("ca", "init", str(ca))
    assert r.exit_code == 2 and "exists already" in r.output and "Traceback" not in r.output
    r = run("proxy", "info", "--file", str(tmp_path / "none"), "--cert-dir", str(ca / "certificates"))
    assert r.exit_code == 1 and "none" in r.output and "Traceback" not in r.output
    assert run("ca", "user", "Bob", "--ca", str(ca), "--out", str(tmp_path / "b")).exit_code == 0
    other = tmp_path / "other"
    assert run("ca", "init", str(other), "--dn", "/DC=org/CN=Other CA").exit_code == 0
    proxy = tmp_path / "p"
    assert run("ca", "proxy", "--cert", str(tmp_path / "b" / "usercert.pem"), "--key",
               str(tmp_path / "b" / "userkey.pem"), "--out", str(proxy)).exit_code == 0
    r = run("proxy", "info", "--file", str(proxy), "--cert-dir", str(other / "certificates"))
    assert r.exit_code == 1 and "not issued by a trusted CA" in r.output
    r = run("ca", "proxy", "--cert", str(tmp_path / "b" / "usercert.pem"), "--key",
            str(tmp_path / "b" / "userkey.pem"), "--vo", "dteam", "--out", str(proxy))
    assert r.exit_code == 2 and "--voms-cert" in r.output
    r = run("ca", "host", "h", "--ip", "not-an-ip", "--ca", str(ca), "--out", str(tmp_path / "h"))
    assert r.exit_code == 2 and "not-an-ip" in r.output
