"""Sending a BDII change set through OpenLDAP's ``ldapmodify`` (Debian ldap-utils).

The BDII's own updater computes the difference between the providers' output and the server
and pipes it into ldapmodify; so does this module (with the OpenLDAP 2.5 options: ``-H``, not
the removed ``-h``/``-p`` the Debian bdii package still passes). ``-c`` goes on after a refused
record and ``-S <file>`` writes each refused record with the server's reason as a comment, which
is how the report gets its reasons.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from infosys.glue import Rejected
from infosys.ldapclient import LdapError
from infosys.ldif import LdifEntry, format_line, norm_dn, parent_dn, parse_dn_line


@dataclass
class Op:
    """One planned change: kind "delete" | "add" | "modify" | "replace" (objectClass change:
    delete + add); ``entry`` the wanted entry (the current one for a delete), ``old`` the
    current entry, ``changes`` attribute -> new values (None = delete the attribute)."""

    kind: str
    entry: LdifEntry
    old: LdifEntry | None = None
    changes: dict[str, list[str] | None] = field(default_factory=dict)


def ldap_tools_available() -> bool:
    """True if ldapsearch and ldapmodify (Debian ldap-utils) are on PATH."""
    return shutil.which("ldapmodify") is not None and shutil.which("ldapsearch") is not None


def change_ldif(ops: list[Op]) -> str:
    """The change-LDIF (RFC 2849 change records) of ``ops``, in order."""
    out: list[str] = []
    for op in ops:
        e = op.entry
        if op.kind in ("delete", "replace"):
            dn = op.old.dn if op.kind == "replace" else e.dn
            out += [format_line("dn", dn), "changetype: delete", ""]
        if op.kind in ("add", "replace"):
            out += [format_line("dn", e.dn), "changetype: add"]
            out += [format_line(k, v) for k, vs in e.attrs.items() for v in vs]
            out.append("")
        elif op.kind == "modify":
            out += [format_line("dn", op.old.dn), "changetype: modify"]
            for name, values in op.changes.items():
                if values is None:
                    out += [f"delete: {name}", "-"]
                else:
                    out += [f"replace: {name}"] + [format_line(name, v) for v in values] + ["-"]
            out.append("")
    return "\n".join(out) + "\n"


def _skipped(path: Path) -> list[tuple[str, str]]:
    """(dn, server's reason) of every record ldapmodify wrote to its -S file."""
    out: list[tuple[str, str]] = []
    reason = ""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("# Error:"):
            reason = line[len("# Error:"):].strip()
        elif line.lower().startswith("dn:") and reason:
            out.append((parse_dn_line(line), reason))
            reason = ""
    return out


def apply_with_ldapmodify(url: str, ops: list[Op], report, timeout_s: float = 30.0,
                          bind_dn: str | None = None, password: str | None = None) -> None:
    """Send ``ops`` in one ``ldapmodify -c`` run and account for them in ``report``
    (an UpdateReport). Raises LdapError if the server cannot be reached."""
    if not ops:
        return
    t = max(1, math.ceil(timeout_s))
    with tempfile.TemporaryDirectory(prefix="vgrid-ldapmodify-") as tmp:
        skipped = Path(tmp) / "skipped.ldif"
        cmd = ["ldapmodify", "-c", "-x", "-H", url, "-o", f"nettimeout={t}", "-S", str(skipped)]
        if bind_dn:
            pw = Path(tmp) / "pw"
            pw.write_text(password or "")
            os.chmod(pw, 0o600)
            cmd += ["-D", bind_dn, "-y", str(pw)]
        try:
            proc = subprocess.run(cmd, input=change_ldif(ops).encode("utf-8"),
                                  capture_output=True, timeout=t + 10 + len(ops) // 100)
        except FileNotFoundError:
            raise LdapError("ldapmodify not found: apt-get install -y ldap-utils") from None
        except subprocess.TimeoutExpired:
            raise LdapError(f"{url}: ldapmodify timed out") from None
        err = proc.stderr.decode("utf-8", "replace")
        if proc.returncode != 0 and ("Can't contact LDAP server" in err
                                     or not skipped.exists()):
            raise LdapError(f"{url}: cannot connect: {err.strip().splitlines()[0] if err else ''}")
        refused = _skipped(skipped) if skipped.exists() else []
    by_dn = {norm_dn(op.old.dn if op.kind in ("modify", "replace") else op.entry.dn): op
             for op in ops}
    failed: set[str] = set()
    counts = {"delete": 0, "add": 0, "modify": 0, "replace": 0}
    for op in ops:
        counts[op.kind] += 1
    for dn, reason in refused:
        op = by_dn.get(norm_dn(dn))
        if op is None:
            continue
        counts[op.kind] -= 1
        e = op.entry
        if op.kind == "delete":
            report.rejected.append(Rejected(e.dn, f"delete refused: {reason}"))
            continue
        if op.kind == "modify":
            report.rejected.append(Rejected(e.dn, f"modify refused: {reason}", e.source, e.line))
            continue
        failed.add(norm_dn(e.dn))
        parent = parent_dn(e.dn)
        why = (f"parent {parent} was refused" if parent and norm_dn(parent) in failed
               else f"refused by the server: {reason}")
        report.rejected.append(Rejected(e.dn, why, e.source, e.line))
    report.deleted += counts["delete"]
    report.added += counts["add"]
    report.modified += counts["modify"] + counts["replace"]
