"""LDAP attribute types, read from OpenLDAP ``.schema`` files, and typing of GLUE values.

An LDAP directory stores every value as text; the server schema says what it means. vgrid types
CE-ad values the way the schema does (issue 4): an attribute whose EQUALITY rule is
``integerMatch`` becomes an ``int``, ``booleanMatch`` a ``bool``, and an attribute that is not
SINGLE-VALUE a ``list`` (e.g. GlueCEAccessControlBaseRule, GlueHostApplicationSoftwareRunTimeEnvironment).

``GLUE_TYPES`` is the table for the Debian ``glue-schema`` package (GLUE 1.3 ``Glue-*.schema``,
GLUE 2.0 ``GLUE20.schema``), kept in :mod:`infosys.glue_types` so that parsing LDIF needs no
installed schema; ``tests/test_infosys_schema.py`` checks it against the installed files.
A live BDII's own schema is read by ldap3 (:mod:`infosys.ldapclient`) into the same shape.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from infosys import glue_types

INTEGER = "integer"
BOOLEAN = "boolean"
STRING = "string"

_TOKEN = re.compile(r"\(|\)|'[^']*'|[^\s()']+")


@dataclass(frozen=True)
class AttributeType:
    """One LDAP attribute type: ``kind`` is "integer", "boolean" or "string"."""

    name: str
    kind: str
    single_value: bool


class SchemaTypes:
    """Attribute name (case-insensitive) -> AttributeType, and value conversion."""

    def __init__(self, types: Iterable[AttributeType]) -> None:
        self._by_lower: dict[str, AttributeType] = {t.name.lower(): t for t in types}
        self.cache: dict[str, tuple] = {}
        """Per-spelling lookups memoised by consumers (infosys.glue); safe to clear."""

    def __len__(self) -> int:
        return len(self._by_lower)

    def get(self, name: str) -> AttributeType | None:
        return self._by_lower.get(name.lower())

    def convert(self, name: str, values: list[str]) -> object:
        """Typed value of attribute ``name`` from its raw LDAP ``values``.

        Integers/booleans per the schema; a list for a multi-valued attribute (always, even with
        one value); the first value for a single-valued one; unknown attributes are kept as a
        string (one value) or a list of strings. Raises ValueError naming the attribute when a
        value does not fit its type (e.g. ``GlueCEStateRunningJobs: many``).
        """
        t = self._by_lower.get(name.lower())
        if t is None:
            return values[0] if len(values) == 1 else list(values)
        typed = [_convert_one(t, v) for v in values]
        if t.single_value:
            if len(typed) != 1:
                raise ValueError(f"{t.name} is single-valued but has {len(typed)} values")
            return typed[0]
        return typed


def _convert_one(t: AttributeType, value: str) -> object:
    if t.kind == INTEGER:
        try:
            return int(value.strip())
        except ValueError:
            raise ValueError(f"{t.name}: {value!r} is not an integer") from None
    if t.kind == BOOLEAN:
        v = value.strip().upper()
        if v not in ("TRUE", "FALSE"):
            raise ValueError(f"{t.name}: {value!r} is not TRUE or FALSE")
        return v == "TRUE"
    return value


def kind_of(equality: str | None, syntax: str | None) -> str:
    """The value kind of an attribute type from its EQUALITY rule and SYNTAX OID."""
    eq = (equality or "").lower()
    syn = (syntax or "").split("{")[0]
    if eq == "integermatch" or syn == "1.3.6.1.4.1.1466.115.121.1.27":
        return INTEGER
    if eq == "booleanmatch" or syn == "1.3.6.1.4.1.1466.115.121.1.7":
        return BOOLEAN
    return STRING


def parse_schema_text(text: str) -> list[AttributeType]:
    """Attribute types of one OpenLDAP ``.schema`` file (``attributetype ( ... )`` blocks).

    Inherited types (``SUP name``) take the kind of their superior when they have none of their
    own. Raises ValueError on unbalanced parentheses.
    """
    # "\n" only: str.splitlines() also breaks at \x1c-\x1e, \x85, \u2028 ... inside a DESC '...'
    lines = [ln for ln in text.split("\n") if not ln.lstrip().startswith("#")]
    tokens = _TOKEN.findall("\n".join(lines))
    found: list[tuple[list[str], dict]] = []
    i = 0
    while i < len(tokens):
        if tokens[i].lower() == "attributetype" and i + 1 < len(tokens) and tokens[i + 1] == "(":
            body, i = _balanced(tokens, i + 1)
            found.append(_describe(body))
        else:
            i += 1
    by_name: dict[str, dict] = {}
    for names, d in found:
        for n in names:
            by_name[n.lower()] = d
    out = []
    for names, d in found:
        eq, syn = d.get("EQUALITY"), d.get("SYNTAX")
        sup = d.get("SUP")
        if eq is None and syn is None and sup and sup.lower() in by_name:
            eq, syn = by_name[sup.lower()].get("EQUALITY"), by_name[sup.lower()].get("SYNTAX")
        for n in names:
            out.append(AttributeType(n, kind_of(eq, syn), d.get("SINGLE-VALUE", False)))
    return out


def _balanced(tokens: list[str], start: int) -> tuple[list[str], int]:
    depth = 0
    for j in range(start, len(tokens)):
        if tokens[j] == "(":
            depth += 1
        elif tokens[j] == ")":
            depth -= 1
            if depth == 0:
                return tokens[start + 1:j], j + 1
    raise ValueError("unbalanced parentheses in attributetype")


def _describe(body: list[str]) -> tuple[list[str], dict]:
    names: list[str] = []
    d: dict = {}
    i = 1  # body[0] is the OID
    while i < len(body):
        key = body[i].upper()
        if key == "NAME":
            if body[i + 1] == "(":
                j = body.index(")", i + 1)
                names = [t.strip("'") for t in body[i + 2:j]]
                i = j + 1
            else:
                names = [body[i + 1].strip("'")]
                i += 2
        elif key in ("SINGLE-VALUE", "COLLECTIVE", "NO-USER-MODIFICATION", "OBSOLETE"):
            d[key] = True
            i += 1
        elif key in ("EQUALITY", "SYNTAX", "SUP", "ORDERING", "SUBSTR", "USAGE"):
            d[key] = body[i + 1].strip("'")
            i += 2
        elif key == "DESC":
            i += 2
        else:
            i += 1
    return names, d


def load_schema_files(paths: Iterable[Path]) -> SchemaTypes:
    """SchemaTypes from OpenLDAP schema files. Raises OSError / ValueError."""
    types: list[AttributeType] = []
    for p in paths:
        types.extend(parse_schema_text(Path(p).read_text(encoding="utf-8", errors="replace")))
    return SchemaTypes(types)


def _builtin() -> SchemaTypes:
    types = []
    for kind, single, names in glue_types.TABLE:
        types.extend(AttributeType(n, kind, single) for n in names.split())
    return SchemaTypes(types)


GLUE_TYPES: SchemaTypes = _builtin()
"""The GLUE 1.3 + 2.0 attribute types of the Debian glue-schema package."""


def table_from(types: Mapping[str, AttributeType] | SchemaTypes) -> list[tuple[str, bool, str]]:
    """(kind, single_value, space-separated names) rows, the shape of ``glue_types.TABLE``."""
    items = types._by_lower.values() if isinstance(types, SchemaTypes) else types.values()
    rows: dict[tuple[str, bool], list[str]] = {}
    for t in items:
        rows.setdefault((t.kind, t.single_value), []).append(t.name)
    return [(k, s, " ".join(sorted(ns))) for (k, s), ns in sorted(rows.items())]
