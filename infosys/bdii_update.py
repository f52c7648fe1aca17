"""Load information-provider output into a BDII by difference, as the BDII's updater does.

``update_bdii(url, entries)`` compares the wanted entries with what the server holds under
``o=grid`` and ``o=glue`` and sends only the difference: adds (parents first), modifies
(replace changed attributes, delete dropped ones; an objectClass change is a delete + add) and
deletes (children first) of entries no provider publishes any more. Missing ``Mds-Vo-name=…`` and
``GLUE2GroupID=…`` parents are created, as a site BDII's configuration does. Entries the
server refuses (schema violations, missing parents) are reported with slapd's reason and the
update goes on: a bad provider entry never stops the others.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import ldap3

from infosys.glue import Rejected
from infosys.ldapclient import LdapError, connect, search_entries
from infosys.ldif import LdifEntry

BASE_ENTRIES = (
    LdifEntry("o=grid", {"objectClass": ["organization"], "o": ["grid"]}),
    LdifEntry("Mds-Vo-name=local,o=grid", {"objectClass": ["MDS"], "Mds-Vo-name": ["local"]}),
    LdifEntry("o=glue", {"objectClass": ["organization"], "o": ["glue"]}),
    LdifEntry("GLUE2GroupID=grid,o=glue", {"objectClass": ["GLUE2Group"],
                                           "GLUE2GroupID": ["grid"]}),
)
SUFFIXES = ("o=grid", "o=glue")


@dataclass
class UpdateReport:
    """Outcome of one update: counts of entries added/modified/deleted/unchanged and the
    entries refused, with reasons."""

    added: int = 0
    modified: int = 0
    deleted: int = 0
    unchanged: int = 0
    rejected: list[Rejected] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"added": self.added, "modified": self.modified, "deleted": self.deleted,
                "unchanged": self.unchanged, "rejected": [r.as_dict() for r in self.rejected]}


def norm_dn(dn: str) -> str:
    """Case- and blank-insensitive form of a DN for comparisons."""
    parts = []
    for rdn in dn.split(","):
        a, _, v = rdn.partition("=")
        parts.append(f"{a.strip().lower()}={v.strip().lower()}")
    return ",".join(parts)


def _depth(dn: str) -> int:
    return norm_dn(dn).count(",")


def _parent(dn: str) -> str | None:
    i = dn.find(",")
    return dn[i + 1:].strip() if i >= 0 else None


def _synthesize(dn: str) -> LdifEntry | None:
    """A structural parent entry we may create: Mds-Vo-name=X or GLUE2GroupID=X."""
    rdn = dn.split(",", 1)[0]
    attr, _, value = rdn.partition("=")
    if attr.strip().lower() == "mds-vo-name":
        return LdifEntry(dn, {"objectClass": ["MDS"], "Mds-Vo-name": [value.strip()]})
    if attr.strip().lower() == "glue2groupid":
        return LdifEntry(dn, {"objectClass": ["GLUE2Group"], "GLUE2GroupID": [value.strip()]})
    return None


def _attrs_norm(e: LdifEntry) -> dict[str, frozenset[str]]:
    """Attribute name -> set of values; objectClass values case-insensitive (the server returns
    its schema spelling, e.g. ``Mds`` for ``MDS``)."""
    out = {k.lower(): frozenset(v) for k, v in e.attrs.items()}
    if "objectclass" in out:
        out["objectclass"] = frozenset(v.lower() for v in out["objectclass"])
    return out


def ensure_base(url: str, timeout_s: float = 10.0) -> None:
    """Create the suffix and base entries of a fresh BDII (existing ones are left alone)."""
    conn = connect(url, timeout_s=timeout_s)
    try:
        for e in BASE_ENTRIES:
            conn.add(e.dn, attributes=e.attrs)
            if conn.result["result"] not in (0, 68):  # 68: entryAlreadyExists
                raise LdapError(f"{url}: cannot create {e.dn}: {conn.result['description']}")
    finally:
        conn.unbind()


def _wanted(entries: Iterable[LdifEntry], report: UpdateReport) -> dict[str, LdifEntry]:
    wanted: dict[str, LdifEntry] = {}
    for e in entries:
        n = norm_dn(e.dn)
        if not any(n == s or n.endswith("," + s) for s in SUFFIXES):
            report.rejected.append(Rejected(e.dn, "not under o=grid or o=glue", e.source, e.line))
            continue
        wanted[n] = e  # the same DN from two providers: the later one wins
    for n, e in list(wanted.items()):
        p = _parent(e.dn)
        while p and norm_dn(p) not in wanted and norm_dn(p) not in SUFFIXES:
            s = _synthesize(p)
            if s is None:
                break
            wanted[norm_dn(p)] = s
            p = _parent(p)
    for b in BASE_ENTRIES:
        wanted.setdefault(norm_dn(b.dn), b)
    return wanted


def update_bdii(url: str, entries: Iterable[LdifEntry], timeout_s: float = 30.0,
                bind_dn: str | None = None, password: str | None = None,
                progress: Callable[[int, int], None] | None = None) -> UpdateReport:
    """Make the BDII at ``url`` hold exactly ``entries`` (plus base and parent entries).

    ``progress(done, total)`` is called as wanted entries are compared/sent. Raises LdapError
    if the server cannot be reached; refused entries are in the report.
    """
    report = UpdateReport()
    wanted = _wanted(entries, report)
    conn = connect(url, timeout_s=timeout_s, bind_dn=bind_dn, password=password)
    try:
        current: dict[str, LdifEntry] = {}
        for suffix in SUFFIXES:
            for e in search_entries(conn, suffix, "(objectClass=*)"):
                current[norm_dn(e.dn)] = e
        _delete(conn, [current[n] for n in current if n not in wanted], report)
        failed: set[str] = set()
        order = sorted(wanted, key=lambda k: k.count(","))
        for i, n in enumerate(order, start=1):
            e = wanted[n]
            if n in current:
                _modify(conn, current[n], e, report, failed)
            else:
                _add(conn, e, report, failed)
            if progress is not None and (i % 200 == 0 or i == len(order)):
                progress(i, len(order))
    finally:
        conn.unbind()
    return report


def _add(conn, e: LdifEntry, report: UpdateReport, failed: set[str]) -> None:
    parent = _parent(e.dn)
    if parent and norm_dn(parent) in failed:
        failed.add(norm_dn(e.dn))
        report.rejected.append(Rejected(e.dn, f"parent {parent} was refused", e.source, e.line))
        return
    conn.add(e.dn, attributes=e.attrs)
    if conn.result["result"] == 0:
        report.added += 1
    else:
        failed.add(norm_dn(e.dn))
        msg = conn.result.get("message") or ""
        report.rejected.append(Rejected(
            e.dn, f"refused by the server: {conn.result['description']}"
                  + (f" ({msg})" if msg else ""), e.source, e.line))


def _modify(conn, old: LdifEntry, new: LdifEntry, report: UpdateReport, failed: set[str]) -> None:
    a_old, a_new = _attrs_norm(old), _attrs_norm(new)
    if a_old == a_new:
        report.unchanged += 1
        return
    if a_old.get("objectclass") != a_new.get("objectclass"):
        conn.delete(old.dn)
        if conn.result["result"] != 0:
            report.rejected.append(Rejected(new.dn, f"cannot replace: {conn.result['description']}",
                                            new.source, new.line))
            return
        before = report.added
        _add(conn, new, report, failed)
        if report.added > before:
            report.added -= 1
            report.modified += 1
        return
    names = {k.lower(): k for k in new.attrs}
    changes = {}
    for low, vals in a_new.items():
        if a_old.get(low) != vals:
            changes[names[low]] = [(ldap3.MODIFY_REPLACE, list(new.attrs[names[low]]))]
    for low in a_old:
        if low not in a_new:
            changes[next(k for k in old.attrs if k.lower() == low)] = [(ldap3.MODIFY_DELETE, [])]
    conn.modify(old.dn, changes)
    if conn.result["result"] == 0:
        report.modified += 1
    else:
        report.rejected.append(Rejected(new.dn, f"modify refused: {conn.result['description']} "
                                                f"{conn.result.get('message') or ''}".rstrip(),
                                        new.source, new.line))


def _delete(conn, entries: list[LdifEntry], report: UpdateReport) -> None:
    for e in sorted(entries, key=lambda x: -_depth(x.dn)):
        conn.delete(e.dn)
        if conn.result["result"] == 0:
            report.deleted += 1
        else:
            report.rejected.append(Rejected(e.dn, f"delete refused: {conn.result['description']}"))
