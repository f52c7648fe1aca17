"""Run-time values of the ClassAd language.

A value is one of: UNDEFINED, ERROR (singletons), bool, int (64-bit, wraps like HTCondor),
float, str, list (of values), or a record: ClassAd (attribute expressions in a scope) or
MappingAd (a read-only view of a plain Python mapping, e.g. a GLUE CE ad from infosys).
Source: HTCondor manual, "ClassAd Evaluation Semantics" (undefined and error values).
"""
from __future__ import annotations

import re
from collections.abc import Mapping


class _Special:
    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def __repr__(self) -> str:
        return self._name

    __str__ = __repr__

    def __bool__(self):  # a bug if reached: three-valued logic must be explicit
        raise TypeError(f"truth value of ClassAd {self._name} is not defined")

    def __reduce__(self):
        return self._name.upper()


UNDEFINED = _Special("undefined")
ERROR = _Special("error")

INT_MIN = -(1 << 63)
_MASK = (1 << 64) - 1


def wrap64(n: int) -> int:
    """Wrap an int to a signed 64-bit integer, as HTCondor's `long long` arithmetic does."""
    if INT_MIN <= n < -INT_MIN:
        return n
    n &= _MASK
    return n - (1 << 64) if n >> 63 else n


def real_to_int(x: float) -> int:
    """C's (long long) cast as HTCondor does it on x86-64: NaN/out of range -> INT64_MIN."""
    if x != x or not (-9.223372036854775808e18 <= x < 9.223372036854775808e18):
        return INT_MIN
    return int(x)


def int32(n: int) -> int:
    """C's (int) truncation of a 64-bit integer (list subscripts, substr offsets)."""
    return ((n + 0x80000000) & 0xFFFFFFFF) - 0x80000000


_STRTOD = re.compile(
    r"\s*([+-]?(?:0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?"
    r"|inf(?:inity)?|nan(?:\([0-9A-Za-z_]*\))?"
    r"|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?))", re.IGNORECASE)


def strtod(s: str):
    """C strtod(): the real at the start of s (after blanks), or None when there is none."""
    m = _STRTOD.match(s)
    if m is None:
        return None
    t = m.group(1)
    body = t.lstrip("+-")
    if body[:2].lower() == "0x":
        if "p" not in body.lower():
            body += "p0"
        v = float.fromhex(body)
        return -v if t.startswith("-") else v
    if body[:3].lower() == "nan":
        return float("nan")
    return float(t)


class ClassAd:
    """A record: attribute definitions (name -> expression node) inside an enclosing scope.

    `attrs` maps lower-case names to nodes.AttrDef; `parent` is the enclosing ClassAd or None.
    Evaluation lives in jdl.evaluator; this class only holds the scope.
    """

    __slots__ = ("attrs", "parent", "record")

    def __init__(self, record, parent: "ClassAd | None" = None):
        self.record = record  # nodes.RecordExpr
        self.attrs = record.attrs
        self.parent = parent

    def __contains__(self, name: str) -> bool:
        return name.lower() in self.attrs

    def __len__(self) -> int:
        return len(self.attrs)

    def names(self) -> list[str]:
        """Attribute names as written (last definition of each), in source order."""
        return [d.name for d in self.record.defs if self.attrs[d.lname] is d]

    def definition(self, name: str):
        """The nodes.AttrDef of `name` (case-insensitive) or None."""
        return self.attrs.get(name.lower())

    def __repr__(self) -> str:
        return f"ClassAd({self.record.text()})"


class MappingAd:
    """A case-insensitive read-only record over a Mapping[str, int|float|str|bool|list|dict].

    Build one per CE ad and reuse it for every job: the lower-cased index is built once.
    Values: None -> UNDEFINED, nested dicts -> MappingAd, lists are converted element-wise.
    """

    __slots__ = ("data", "_lower")

    def __init__(self, data: Mapping):
        self.data = data
        self._lower = None

    def lookup(self, name: str, lname: str):
        """The value of attribute `name` (lname = name.lower()), or None when absent."""
        data = self.data
        v = data.get(name, _MISSING)
        if v is _MISSING:
            low = self._lower
            if low is None:
                low = self._lower = {str(k).lower(): k for k in data}
            key = low.get(lname, _MISSING)
            if key is _MISSING:
                return None
            v = data[key]
        t = type(v)
        if t is str or t is int or t is float or t is bool:
            return v
        return from_python(v)

    def names(self) -> list[str]:
        return [str(k) for k in self.data]

    def __contains__(self, name: str) -> bool:
        return self.lookup(name, name.lower()) is not None

    def __repr__(self) -> str:
        return f"MappingAd({dict(self.data)!r})"


_MISSING = object()


def from_python(v):
    """Convert a plain Python value (from JSON, LDIF, infosys) into a ClassAd value."""
    if v is None:
        return UNDEFINED
    t = type(v)
    if t is str or t is bool or t is float:
        return v
    if t is int:
        return wrap64(v)
    if isinstance(v, (ClassAd, MappingAd)) or v is UNDEFINED or v is ERROR:
        return v
    if isinstance(v, Mapping):
        return MappingAd(v)
    if isinstance(v, (list, tuple)):
        return [from_python(x) for x in v]
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, int):
        return wrap64(int(v))
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str(v)
    return ERROR


def type_name(v) -> str:
    """ClassAd type name of a value: undefined, error, boolean, integer, real, string, list,
    classad."""
    if v is UNDEFINED:
        return "undefined"
    if v is ERROR:
        return "error"
    t = type(v)
    if t is bool:
        return "boolean"
    if t is int:
        return "integer"
    if t is float:
        return "real"
    if t is str:
        return "string"
    if t is list:
        return "list"
    return "classad"


def is_record(v) -> bool:
    return type(v) is ClassAd or type(v) is MappingAd
