"""Semantic validation of a parsed JDL: every problem, each with file:line:column.

Phase-1 rules: Type must be a string; a Type "job" needs Executable (string); every node of a
collection or DAG needs an Executable (directly or via file=/description=).
Source: gLite JDL Attributes Specification, Section 3 (mandatory attributes).
"""
from __future__ import annotations

from . import nodes as n
from .errors import Problem
from .evaluator import evaluate
from .values import ClassAd


def _attr(rec: n.RecordExpr, name: str):
    return rec.attrs.get(name.lower())


def _const(rec: n.RecordExpr, name: str):
    d = _attr(rec, name)
    if d is None:
        return None
    return evaluate(d.expr, ClassAd(rec), None)


def validate_record(rec: n.RecordExpr, filename: str) -> list[Problem]:
    """Every problem found in the JDL record `rec` (empty list when it is valid)."""
    problems: list[Problem] = []
    typ = _const(rec, "Type")
    d = _attr(rec, "Type")
    if d is not None and type(typ) is not str:
        problems.append(Problem(filename, d.expr.line, d.expr.column,
                                "Type must be a string (\"job\", \"dag\" or \"collection\")"))
        return problems
    kind = (typ or "job").lower()
    if kind == "job":
        problems += _check_executable(rec, filename, rec.line, rec.column)
    elif kind in ("collection", "dag"):
        problems += _check_nodes(rec, filename, kind)
    else:
        problems.append(Problem(filename, d.expr.line, d.expr.column,
                                f"unknown Type {typ!r}: expected \"job\", \"dag\" or \"collection\""))
    return problems


def _check_executable(rec: n.RecordExpr, filename: str, line: int, column: int) -> list[Problem]:
    d = _attr(rec, "Executable")
    if d is None:
        return [Problem(filename, line, column, "a job needs an Executable")]
    if type(_const(rec, "Executable")) is not str:
        return [Problem(filename, d.expr.line, d.expr.column, "Executable must be a string")]
    return []


def _check_nodes(rec: n.RecordExpr, filename: str, kind: str) -> list[Problem]:
    d = _attr(rec, "Nodes")
    if d is None:
        return [Problem(filename, rec.line, rec.column, f"a {kind} needs Nodes")]
    nodes = d.expr
    if kind == "collection":
        if not isinstance(nodes, n.ListExpr):
            return [Problem(filename, nodes.line, nodes.column,
                            "Nodes of a collection must be a list of job descriptions")]
        items = list(nodes.items)
    else:
        if not isinstance(nodes, n.RecordExpr):
            return [Problem(filename, nodes.line, nodes.column,
                            "Nodes of a dag must be a record of node descriptions")]
        items = [x.expr for x in nodes.defs if x.lname != "dependencies"]
    problems = []
    for item in items:
        if not isinstance(item, n.RecordExpr):
            problems.append(Problem(filename, item.line, item.column,
                                    "a node must be a record [ ... ]"))
            continue
        inner = _node_description(item)
        if inner is None:
            continue  # file= reference: checked when expanded
        problems += _check_executable(inner, filename, item.line, item.column)
    return problems


def _node_description(item: n.RecordExpr):
    desc = _attr(item, "description")
    if desc is not None and isinstance(desc.expr, n.RecordExpr):
        return desc.expr
    if _attr(item, "file") is not None:
        return None
    return item
