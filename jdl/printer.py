"""Canonical text of expressions, values and records (the JDL canonical printer).

unparse(node) prints an expression with the minimal parentheses the precedence needs, so that
parse(unparse(x)) == x (structural equality, see tests/test_jdl_printer.py); it lives with the
trees in jdl.nodes (a node's repr is its text) and is re-exported here with record_text, quote,
name_text, real_text and literal_text. Values print as HTCondor's unparser does (reals as
%.15E, lists as `{ a,b }`, records as `[ a = 1; b = 2 ]`).
"""
from __future__ import annotations

from .nodes import literal_text, name_text, quote, real_text, record_text, unparse
from .values import ClassAd, MappingAd, from_python

__all__ = ["literal_text", "name_text", "quote", "real_text", "record_text", "unparse",
           "unparse_value"]


def unparse_value(v) -> str:
    """HTCondor's text for a value (used by string(), strcat(), the CLI)."""
    t = type(v)
    if t is list:
        return "{ " + ",".join(_value_in_container(i) for i in v) + " }"
    if t is ClassAd:
        items = [f"{name_text(d.name)} = {unparse(d.expr)}" for d in v.record.defs
                 if v.attrs[d.lname] is d]
        return "[ " + "; ".join(items) + " ]"
    if t is MappingAd:
        items = [f"{name_text(str(k))} = {_value_in_container(val)}" for k, val in v.data.items()]
        return "[ " + "; ".join(items) + " ]"
    if t is str:
        return v
    return literal_text(v, exact=False)


def _value_in_container(v) -> str:
    v = from_python(v) if not isinstance(v, (ClassAd, MappingAd)) else v
    return quote(v) if type(v) is str else unparse_value(v)
