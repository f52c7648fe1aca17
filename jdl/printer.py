"""Canonical text of expressions, values and records (the JDL canonical printer).

unparse(node) prints an expression with the minimal parentheses the precedence needs, so that
parse(unparse(x)) == x (structural equality, see tests/test_jdl_printer.py). Values print as
HTCondor's unparser does (reals as %.15E, lists as `{ a,b }`, records as `[ a = 1; b = 2 ]`).
"""
from __future__ import annotations

import math
import re

from . import nodes as n
from .values import ERROR, UNDEFINED, ClassAd, MappingAd

# binding strength, higher binds tighter (jdl.grammar lists the same order)
_PREC = {"||": 2, "&&": 3, "|": 4, "^": 5, "&": 6,
         "==": 7, "!=": 7, "=?=": 7, "=!=": 7, "is": 7, "isnt": 7,
         "<": 8, "<=": 8, ">": 8, ">=": 8, "<<": 9, ">>": 9, ">>>": 9,
         "+": 10, "-": 10, "*": 11, "/": 11, "%": 11}
_COND, _UNARY, _ELVIS, _POSTFIX = 1, 12, 13, 14
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = {"true", "false", "undefined", "error", "is", "isnt"}
_STR_ESC = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b",
            "\f": "\\f"}


def quote(s: str) -> str:
    """A ClassAd string literal for s."""
    out = []
    for ch in s:
        e = _STR_ESC.get(ch)
        if e is not None:
            out.append(e)
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append("\\%03o" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def name_text(name: str) -> str:
    """An attribute name, quoted with '...' when it is not a plain identifier."""
    if _NAME_RE.match(name) and name.lower() not in _RESERVED:
        return name
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


def real_text(x: float, exact: bool = True) -> str:
    """Text of a real: shortest exact form (exact=True, the canonical printer) or HTCondor's
    %.15E (exact=False, what string() and strcat() produce)."""
    if math.isnan(x):
        return "real(\"NaN\")"
    if math.isinf(x):
        return "real(\"INF\")" if x > 0 else "real(\"-INF\")"
    if x == 0 and math.copysign(1, x) < 0:
        return "-0.0"
    if x == 0:
        return "0.0"
    if exact:
        r = repr(x)
        return r if ("." in r or "e" in r) else r + ".0"
    return "%.15E" % x


def literal_text(v, exact: bool = True) -> str:
    if v is UNDEFINED:
        return "undefined"
    if v is ERROR:
        return "error"
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return real_text(v, exact)
    if t is str:
        return quote(v)
    raise TypeError(f"not a literal: {v!r}")


def unparse(node: n.Node) -> str:
    """Canonical one-line text of an expression node."""
    return _un(node)


def _un(x: n.Node) -> str:
    t = type(x)
    if t is n.Literal:
        v = x.value
        if type(v) is int and v < 0:
            return str(v)
        return literal_text(v)
    if t is n.AttrRef:
        return ("." if x.absolute else "") + name_text(x.name)
    if t is n.Select:
        return _base(x.base) + "." + name_text(x.name)
    if t is n.Subscript:
        return _base(x.base) + "[" + _un(x.index) + "]"
    if t is n.Unary:
        return x.op + _wrap(x.operand, _UNARY)
    if t is n.Binary:  # left-nested chains are printed in a loop (no deep recursion)
        spine = []
        while type(x.left) is n.Binary and _PREC[x.left.op] >= _PREC[x.op]:
            spine.append(x)
            x = x.left
        p = _PREC[x.op]
        parts = [_wrap(x.left, p), f" {x.op} ", _wrap(x.right, p + 1)]
        for b in reversed(spine):
            parts += [f" {b.op} ", _wrap(b.right, _PREC[b.op] + 1)]
        return "".join(parts)
    if t is n.Conditional:
        if x.then is None:
            o = x.otherwise
            if (type(o) is n.Unary and o.op in "+-" and type(o.operand) is n.Literal
                    and type(o.operand.value) in (int, float)):
                rhs = _un(o)  # `a ?: -2` is accepted
            else:
                rhs = _wrap(o, _POSTFIX)
            return _wrap(x.cond, _ELVIS) + " ?: " + rhs
        return (_wrap(x.cond, _COND + 1) + " ? " + _wrap(x.then, _COND) + " : "
                + _wrap(x.otherwise, _COND))
    if t is n.Call:
        return x.name + "(" + ", ".join(_un(a) for a in x.args) + ")"
    if t is n.ListExpr:
        return "{ " + ", ".join(_un(i) for i in x.items) + " }" if x.items else "{ }"
    if t is n.RecordExpr:
        return record_text(x)
    raise TypeError(f"unknown node {x!r}")


def _strength(x: n.Node) -> int:
    t = type(x)
    if t is n.Binary:
        return _PREC[x.op]
    if t is n.Conditional:
        return _COND if x.then is not None else _ELVIS
    if t is n.Unary:
        return _UNARY
    if t is n.Literal and type(x.value) in (int, float) and _un(x).startswith("-"):
        return _UNARY
    return _POSTFIX + 1


def _base(x: n.Node) -> str:
    """The base of `.name` / `[i]`: `(0).a`, since `0.a` would lex as a real."""
    if type(x) is n.Literal and type(x.value) in (int, float):
        return "(" + _un(x) + ")"
    return _wrap(x, _POSTFIX)


def _wrap(x: n.Node, need: int) -> str:
    s = _un(x)
    return s if _strength(x) >= need else "(" + s + ")"


def record_text(rec: n.RecordExpr, indent: int | None = None) -> str:
    """`[ a = 1; b = 2 ]` on one line, or one attribute per line when indent is given."""
    items = [f"{name_text(d.name)} = {_un(d.expr)}" for d in rec.defs if rec.attrs[d.lname] is d]
    if indent is None:
        return "[ " + "; ".join(items) + " ]" if items else "[ ]"
    pad = " " * indent
    return "[\n" + "".join(f"{pad}{i};\n" for i in items) + "]"


def unparse_value(v) -> str:
    """HTCondor's text for a value (used by string(), strcat(), the CLI)."""
    t = type(v)
    if t is list:
        return "{ " + ",".join(_value_in_container(i) for i in v) + " }"
    if t is ClassAd:
        items = [f"{name_text(d.name)} = {_un(d.expr)}" for d in v.record.defs
                 if v.attrs[d.lname] is d]
        return "[ " + "; ".join(items) + " ]"
    if t is MappingAd:
        items = [f"{name_text(str(k))} = {_value_in_container(val)}" for k, val in v.data.items()]
        return "[ " + "; ".join(items) + " ]"
    if t is str:
        return v
    return literal_text(v, exact=False)


def _value_in_container(v) -> str:
    from .values import from_python
    v = from_python(v) if not isinstance(v, (ClassAd, MappingAd)) else v
    return quote(v) if type(v) is str else unparse_value(v)
