"""LDIF content records (RFC 2849), as published by GLUE information providers and BDIIs.

Written here rather than taken from PyPI's ``ldif`` package because errors must name
``source:line`` (that package reports neither, and raises bare ValueError/binascii.Error on bad
input); the format subset is small: content records only (``version:``, comments, folded lines,
``attr: value``, ``attr:: base64``, several entries separated by blank lines). Also the DN
helpers the BDII updaters share (``norm_dn``, ``parent_dn``).
"""
from __future__ import annotations

import base64
import binascii
import re
from itertools import islice
from dataclasses import dataclass, field

_ATTR = re.compile(r"^([A-Za-z][A-Za-z0-9-]*(?:;[A-Za-z0-9-]+)*|[0-9]+(?:\.[0-9]+)+)$")


class LdifError(ValueError):
    """Malformed LDIF; ``str()`` is ``source:line: message``."""

    def __init__(self, source: str, line: int, message: str) -> None:
        super().__init__(f"{source}:{line}: {message}")
        self.source = source
        self.line = line
        self.message = message


@dataclass(slots=True)
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

    Well-formed text takes a block-at-a-time fast path (a BDII dump of 50,000 entries parses in
    about a second); anything unusual is re-parsed line by line to report the exact line.
    """
    try:
        return _parse_fast(text, source)
    except _Unusual:
        return _parse_lines(text, source)


class _Unusual(Exception):
    """Internal: the fast path met something it leaves to the line-by-line parser."""


_VALID_LOWER: dict[str, str] = {}
"""Attribute names seen valid by the fast path -> their lower case (never dn/changetype)."""


def _validate_names(names) -> None:
    for name in names:
        if name not in _VALID_LOWER:
            low = name.lower()
            if not _ATTR.match(name) or low in ("dn", "changetype") or len(_VALID_LOWER) > 50_000:
                raise _Unusual
            _VALID_LOWER[name] = low


def parse_ldif_stream(stream, source: str = "<stream>", chunk_size: int = 1 << 20
                      ) -> list[LdifEntry]:
    """``parse_ldif`` of UTF-8 LDIF read from a binary stream (e.g. a pipe from ldapsearch),
    parsed block by block as it arrives so that parsing overlaps the producer's work.

    Same result and errors as ``parse_ldif(stream.read().decode(), source)``.
    """
    entries: list[LdifEntry] = []
    parts: list[bytes] = []
    buf = b""
    line = 1
    first = True
    try:
        while True:
            chunk = stream.read(chunk_size)
            if chunk:
                buf += chunk
                cut = buf.rfind(b"\n\n")
                if cut < 0:
                    continue
                part, buf = buf[:cut + 2], buf[cut + 2:]
            else:
                part, buf = buf, b""
            parts.append(part)
            text = part.decode("utf-8", "replace")
            entries += _parse_fast(text, source, line, first)
            first = False
            line += text.count("\n")
            if not chunk:
                return entries
    except _Unusual:
        rest = buf + stream.read()
        return _parse_lines(b"".join(parts).decode("utf-8", "replace")
                            + rest.decode("utf-8", "replace"), source)


def _parse_fast(text: str, source: str, line: int = 1, first: bool = True) -> list[LdifEntry]:
    if "\r" in text:
        raise _Unusual
    entries: list[LdifEntry] = []
    for block in text.split("\n\n"):
        start = line
        line += block.count("\n") + 2
        if block.startswith("\n"):
            stripped = block.lstrip("\n")
            start += len(block) - len(stripped)
            block = stripped
        block = block.rstrip("\n")
        if not block:
            continue
        if block[0] == " ":
            raise _Unusual
        unfolded = block.replace("\n ", "")
        if unfolded[:4] == "dn: " and ":  " not in unfolded:
            entry = _tight_entry(unfolded, start, source)
            if entry is not None:
                entries.append(entry)
                first = False
                continue
        lines = unfolded.split("\n")
        if lines[0][:1] == "#":
            offset = 0
            for raw in block.split("\n"):
                if raw[:1] not in ("#", " "):
                    break
                offset += 1
            start += offset
            lines = [ln for ln in lines if ln[:1] != "#"]
            if not lines:
                continue
        if first:
            first = False
            if lines[0][:8].lower() == "version:":
                if lines[0][8:].strip() != "1":
                    raise _Unusual
                lines = lines[1:]
                start += 1
                if not lines:
                    continue
        entries.append(_fast_entry(lines, start, source))
    return entries


def _tight_entry(unfolded: str, start: int, source: str) -> LdifEntry | None:
    """The common case, as cheaply as Python allows: every line ``attr: value`` (one blank),
    names already seen valid, no name in two cases. None when the block needs a closer look
    (base64, URL, no blank after the colon, a new or odd name)."""
    lines = unfolded.split("\n")
    attrs: dict[str, list[str]] = {}
    for ln in islice(lines, 1, None):
        n, _, v = ln.partition(": ")
        if n in attrs:
            attrs[n].append(v)
        else:
            attrs[n] = [v]
    if not _VALID_LOWER.keys() >= attrs.keys():
        return None
    if len(set(map(_VALID_LOWER.__getitem__, attrs))) != len(attrs):
        return None
    dn = lines[0][4:].strip()
    if not dn:
        return None
    return LdifEntry(dn, attrs, start, source)


def _fast_entry(lines: list[str], start: int, source: str) -> LdifEntry:
    head = lines[0]
    if head[:3] != "dn:" or head[3:4] == "<":
        raise _Unusual
    dn = _fast_value("dn", head[3:]).strip()
    if not dn:
        raise _Unusual
    attrs: dict[str, list[str]] = {}
    get = attrs.get
    for i in range(1, len(lines)):
        name, sep, value = lines[i].partition(": ")
        if not sep or ":" in name:
            name, sep, rest = lines[i].partition(":")
            if not sep or not name:
                raise _Unusual
            value = _fast_value(name, rest)
        elif value[:1] == " ":
            value = value.lstrip(" ")
        vals = get(name)
        if vals is None:
            attrs[name] = [value]
        else:
            vals.append(value)
    if not _VALID_LOWER.keys() >= attrs.keys():
        _validate_names(attrs)
    if len(set(map(_VALID_LOWER.__getitem__, attrs))) != len(attrs):
        raise _Unusual  # one attribute spelt in two cases: the line parser merges in order
    return LdifEntry(dn, attrs, start, source)


def _fast_value(name: str, rest: str) -> str:
    if rest[:1] == "<":
        raise _Unusual
    if rest[:1] != ":":
        return rest.lstrip(" ")
    try:
        return base64.b64decode(rest[1:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise _Unusual from None


def _parse_lines(text: str, source: str) -> list[LdifEntry]:
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


def format_line(name: str, value: str) -> str:
    """One unfolded LDIF line ``name: value``, or ``name:: base64`` where RFC 2849 requires it."""
    return _line(name, value)


def parse_dn_line(line: str) -> str:
    """The DN of a ``dn: ...`` / ``dn:: base64`` line. Raises LdifError if it is not one."""
    name, value = _split("<line>", 1, line)
    if name.lower() != "dn":
        raise LdifError("<line>", 1, f"expected 'dn:', found {name!r}")
    return value.strip()


def norm_dn(dn: str) -> str:
    """Case- and blank-insensitive form of a DN for comparisons."""
    parts = []
    for rdn in dn.split(","):
        a, _, v = rdn.partition("=")
        parts.append(f"{a.strip().lower()}={v.strip().lower()}")
    return ",".join(parts)


def parent_dn(dn: str) -> str | None:
    """The DN one level up (`a=1,b=2` -> `b=2`), None for a single RDN."""
    i = dn.find(",")
    return dn[i + 1:].strip() if i >= 0 else None


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
