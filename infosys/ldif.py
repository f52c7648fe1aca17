"""LDIF content records (RFC 2849), as published by GLUE information providers and BDIIs.

Written here rather than taken from PyPI's ``ldif`` package because errors must name
``source:line`` (that package reports neither, and raises bare ValueError/binascii.Error on bad
input); the format subset is small: content records only (``version:``, comments, folded lines,
``attr: value``, ``attr:: base64``, several entries separated by blank lines).
"""
from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field

_ATTR = re.compile(r"^([A-Za-z][A-Za-z0-9-]*(?:;[A-Za-z0-9-]+)*|[0-9]+(?:\.[0-9]+)+)$")


class LdifError(ValueError):
    """Malformed LDIF; ``str()`` is ``source:line: message``."""

    def __init__(self, source: str, line: int, message: str) -> None:
        super().__init__(f"{source}:{line}: {message}")
        self.source = source
        self.line = line
        self.message = message


@dataclass
class LdifEntry:
    """One LDIF entry: ``dn``, ``attrs`` (attribute name as first written -> values in order),
    ``line``, the 1-based line of its ``dn:`` in ``source`` (0 and "" if not from text)."""

    dn: str
    attrs: dict[str, list[str]] = field(default_factory=dict)
    line: int = 0
    source: str = ""

    def values(self, name: str) -> list[str]:
        """All values of attribute ``name`` (case-insensitive); [] if absent."""
        lname = name.lower()
        for k, v in self.attrs.items():
            if k.lower() == lname:
                return v
        return []

    def first(self, name: str, default: str | None = None) -> str | None:
        """The first value of ``name`` (case-insensitive), or ``default``."""
        v = self.values(name)
        return v[0] if v else default

    @property
    def object_classes(self) -> set[str]:
        """objectClass values, lower-cased."""
        return {v.lower() for v in self.values("objectClass")}


def _logical_lines(text: str):
    """(line number, unfolded line) pairs; blank lines come through as ''; comments dropped."""
    cur: str | None = None
    cur_no = 0
    in_comment = False
    for no, raw in enumerate(text.splitlines(), start=1):
        if raw.startswith(" ") and (cur is not None or in_comment):
            if not in_comment:
                cur += raw[1:]
            continue
        if cur is not None:
            yield cur_no, cur
            cur = None
        in_comment = raw.startswith("#")
        if in_comment:
            continue
        if raw.strip() == "":
            yield no, ""
            continue
        if raw.startswith(" "):
            raise LdifError("", no, "continuation line without a line to continue")
        cur, cur_no = raw, no
    if cur is not None:
        yield cur_no, cur


def _split(source: str, no: int, line: str) -> tuple[str, str]:
    name, sep, rest = line.partition(":")
    if not sep:
        raise LdifError(source, no, f"expected 'attribute: value', found {line[:40]!r}")
    if not _ATTR.match(name):
        raise LdifError(source, no, f"invalid attribute name {name!r}")
    if rest.startswith(":"):
        data = rest[1:].strip()
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise LdifError(source, no, f"invalid base64 value of {name}") from None
        try:
            return name, raw.decode("utf-8")
        except UnicodeDecodeError:
            raise LdifError(source, no, f"base64 value of {name} is not UTF-8 text") from None
    if rest.startswith("<"):
        raise LdifError(source, no, f"URL values ({name}:<) are not supported")
    return name, rest.lstrip(" ")


def parse_ldif(text: str, source: str = "<string>") -> list[LdifEntry]:
    """Parse LDIF content records into entries, in file order.

    Attribute names keep the case of their first occurrence in an entry (later spellings in
    another case are merged into it). Raises LdifError(``source:line: message``) for a line that
    is not ``attr: value``, invalid base64, a record not starting with ``dn:``, an empty DN,
    change records (``changetype:``) and URL values.
    """
    entries: list[LdifEntry] = []
    cur: LdifEntry | None = None
    lower_names: dict[str, str] = {}
    seen_record = False
    try:
        for no, line in _logical_lines(text):
            if line == "":
                if cur is not None:
                    entries.append(cur)
                    cur = None
                continue
            name, value = _split(source, no, line)
            lname = name.lower()
            if cur is None:
                if lname == "version" and not seen_record and not entries:
                    if value.strip() != "1":
                        raise LdifError(source, no, f"unsupported LDIF version {value!r}")
                    seen_record = True
                    continue
                if lname != "dn":
                    raise LdifError(source, no, f"record must start with 'dn:', found {name!r}")
                if not value.strip():
                    raise LdifError(source, no, "empty DN")
                cur = LdifEntry(dn=value.strip(), attrs={}, line=no, source=source)
                lower_names = {}
                seen_record = True
                continue
            if lname == "dn":
                raise LdifError(source, no, "second 'dn:' in one record (missing blank line?)")
            if lname == "changetype":
                raise LdifError(source, no, "change records are not supported, only content")
            key = lower_names.setdefault(lname, name)
            cur.attrs.setdefault(key, []).append(value)
    except LdifError as e:
        if e.source == "":
            raise LdifError(source, e.line, e.message) from None
        raise
    if cur is not None:
        entries.append(cur)
    return entries


def _needs_base64(value: str) -> bool:
    if value == "":
        return False
    if value[0] in " :<" or value[-1] == " ":
        return True
    return any(ord(c) < 32 or ord(c) > 126 for c in value)


def format_ldif(entries: list[LdifEntry], width: int = 76) -> str:
    """LDIF text of ``entries`` (inverse of parse_ldif): base64 where RFC 2849 requires it,
    lines folded at ``width`` characters."""
    out: list[str] = []
    for e in entries:
        out.append(_fold(_line("dn", e.dn), width))
        for name, values in e.attrs.items():
            for v in values:
                out.append(_fold(_line(name, v), width))
        out.append("")
    return "\n".join(out) + ("\n" if out else "")


def _line(name: str, value: str) -> str:
    if _needs_base64(value):
        return f"{name}:: {base64.b64encode(value.encode('utf-8')).decode('ascii')}"
    return f"{name}: {value}"


def _fold(line: str, width: int) -> str:
    if len(line) <= width:
        return line
    parts = [line[:width]]
    rest = line[width:]
    while rest:
        parts.append(" " + rest[: width - 1])
        rest = rest[width - 1:]
    return "\n".join(parts)
