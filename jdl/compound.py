"""Nodes of DAGs and collections: node entries, file= / description= resolution, inheritance
of the compound's attributes, and DAG dependencies (with cycle detection).

Source: gLite JDL Attributes Specification, Section 4 (DAG: Nodes, Dependencies, node
description / file) and Section 5 (collections; DefaultNodeRetryCount, ...).
Both DAG syntaxes are read: Nodes as a record `[ a = [file = "a.jdl"]; ... ;
dependencies = {...} ]` (gLite 3.0) and Nodes as a list of ads with NodeName (gLite 3.1).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from . import nodes as n
from .attributes import STRUCTURAL
from .errors import JDLError, Problem


@dataclass
class NodeEntry:
    """A node as written: its name, the wrapper ad, and where its description comes from."""

    name: str
    wrapper: n.RecordExpr
    description: n.RecordExpr | None  # inline description (or the wrapper itself)
    file: str | None  # file= reference, relative to the JDL's directory
    line: int
    column: int


def _str_literal(rec: n.RecordExpr, name: str):
    d = rec.attrs.get(name)
    if d is not None and type(d.expr) is n.Literal and type(d.expr.value) is str:
        return d.expr.value
    return None


def node_entries(rec: n.RecordExpr, kind: str, filename: str):
    """(entries, nodes_record_or_None, problems) for a dag or collection record."""
    problems: list[Problem] = []
    d = rec.attrs.get("nodes")
    if d is None:
        return [], None, [Problem(filename, rec.line, rec.column, f"a {kind} needs Nodes")]
    expr = d.expr
    pairs = []
    if type(expr) is n.ListExpr:
        for i, item in enumerate(expr.items):
            pairs.append((None, item, i))
    elif type(expr) is n.RecordExpr and kind == "dag":
        for i, nd in enumerate(expr.defs):
            if nd.lname != "dependencies":
                pairs.append((nd.name, nd.expr, i))
    else:
        what = "a list of node ads" + (" or a record of named nodes" if kind == "dag" else "")
        return [], None, [Problem(filename, expr.line, expr.column, f"Nodes must be {what}")]
    entries, seen = [], {}
    for given, item, i in pairs:
        if type(item) is not n.RecordExpr:
            problems.append(Problem(filename, item.line, item.column,
                                    "a node must be an ad [ ... ]"))
            continue
        name = given or _str_literal(item, "nodename") or f"Node_{i}"
        desc_def = item.attrs.get("description")
        desc, file = None, None
        if desc_def is not None:
            if type(desc_def.expr) is n.RecordExpr:
                desc = desc_def.expr
            else:
                problems.append(Problem(filename, desc_def.expr.line, desc_def.expr.column,
                                        "node description must be an ad [ ... ]"))
                continue
        elif item.attrs.get("file") is not None:
            file = _str_literal(item, "file")
            if file is None:
                fd = item.attrs["file"]
                problems.append(Problem(filename, fd.expr.line, fd.expr.column,
                                        "node file must be a string"))
                continue
        else:
            desc = item
        low = name.lower()
        if low in seen:
            problems.append(Problem(filename, item.line, item.column,
                                    f"node name {name!r} used twice"))
            continue
        seen[low] = True
        entries.append(NodeEntry(name, item, desc, file, item.line, item.column))
    return entries, (expr if type(expr) is n.RecordExpr else None), problems


def load_node_file(entry: NodeEntry, base_dir: str | None, filename: str):
    """(record, path, problem) of a file= node. base_dir None: the JDL did not come from a
    file (e.g. over HTTP), so no local file is read and the node is a problem."""
    from .parser import parse_classad
    fd = entry.wrapper.attrs["file"]
    if base_dir is None:
        return None, entry.file, Problem(filename, fd.expr.line, fd.expr.column,
                                         f"node file {entry.file!r} cannot be read: the JDL "
                                         "was not read from a file (use description = [...])")
    path = entry.file if os.path.isabs(entry.file) else os.path.join(base_dir, entry.file)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        return None, path, Problem(filename, fd.expr.line, fd.expr.column,
                                   f"cannot read node file {entry.file!r}: {e.strerror}")
    try:
        return parse_classad(text, path), path, None
    except JDLError as e:
        return None, path, e.problems[0]


def inherit(compound: n.RecordExpr, node: n.RecordExpr) -> n.RecordExpr:
    """The node's ad plus every non-structural attribute of the compound it does not set;
    DefaultNodeRetryCount / DefaultNodeShallowRetryCount become RetryCount / ShallowRetryCount."""
    defs = [d for d in node.defs if d.lname not in ("description", "file")]
    have = {d.lname for d in defs}
    for d in compound.defs:
        if d.lname in STRUCTURAL or d.lname in have or compound.attrs[d.lname] is not d:
            continue
        defs.append(d)
        have.add(d.lname)
    for src, dst in (("defaultnoderetrycount", "RetryCount"),
                     ("defaultnodeshallowretrycount", "ShallowRetryCount")):
        d = compound.attrs.get(src)
        if d is not None and dst.lower() not in have:
            defs.append(n.AttrDef(dst, d.expr, d.line, d.column))
    return n.RecordExpr(tuple(defs), node.line, node.column)


def _refs(expr: n.Node):
    """Node references in one side of a dependency: names (AttrRef/string) or a list."""
    if type(expr) is n.ListExpr:
        out = []
        for item in expr.items:
            r = _refs(item) if type(item) is not n.ListExpr else None
            if r is None:
                return None
            out += r
        return out
    if type(expr) is n.AttrRef:
        return [(expr.name, expr)]
    if type(expr) is n.Literal and type(expr.value) is str:
        return [(expr.value, expr)]
    return None


def dependencies(rec: n.RecordExpr, nodes_rec, names: list[str], filename: str):
    """(edges [(parent, child)], problems): unknown nodes, malformed pairs and cycles."""
    d = rec.attrs.get("dependencies")
    if d is None and nodes_rec is not None:
        d = nodes_rec.attrs.get("dependencies")
    if d is None:
        return [], []
    canon = {x.lower(): x for x in names}
    edges, where, problems = [], {}, []
    if type(d.expr) is not n.ListExpr:
        return [], [Problem(filename, d.expr.line, d.expr.column,
                            "Dependencies must be a list of {parent, child} pairs")]
    for pair in d.expr.items:
        if type(pair) is not n.ListExpr or len(pair.items) != 2:
            problems.append(Problem(filename, pair.line, pair.column,
                                    "a dependency must be a pair {parent, child}"))
            continue
        sides = [_refs(pair.items[0]), _refs(pair.items[1])]
        if sides[0] is None or sides[1] is None:
            problems.append(Problem(filename, pair.line, pair.column,
                                    "a dependency names nodes (or lists of nodes)"))
            continue
        ok = True
        for name, ref in sides[0] + sides[1]:
            if name.lower() not in canon:
                problems.append(Problem(filename, ref.line, ref.column,
                                        f"dependency on unknown node {name!r}"))
                ok = False
        if ok:
            for p, _ in sides[0]:
                for c, _ in sides[1]:
                    e = (canon[p.lower()], canon[c.lower()])
                    edges.append(e)
                    where.setdefault(e, pair)
    problems += _cycles(names, edges, where, filename)
    return edges, problems


def _cycles(names, edges, where, filename):
    indeg = {x: 0 for x in names}
    out = {x: [] for x in names}
    for p, c in edges:
        out[p].append(c)
        indeg[c] += 1
    ready = [x for x in names if indeg[x] == 0]
    while ready:
        x = ready.pop()
        for c in out[x]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    stuck = [x for x in names if indeg[x] > 0]
    if not stuck:
        return []
    inside = set(stuck)
    e = next(e for e in edges if e[0] in inside and e[1] in inside)
    pair = where[e]
    return [Problem(filename, pair.line, pair.column,
                    "dependency cycle among nodes " + ", ".join(repr(x) for x in stuck))]


def topological(names: list[str], edges) -> list[str]:
    """Node names with every parent before its children (stable: source order)."""
    indeg = {x: 0 for x in names}
    for _, c in edges:
        indeg[c] += 1
    out, done = [], set()
    while len(out) < len(names):
        for x in names:
            if x not in done and indeg[x] == 0:
                out.append(x)
                done.add(x)
                for p, c in edges:
                    if p == x:
                        indeg[c] -= 1
                break
        else:
            break
    return out


def inline_node_files(rec: n.RecordExpr, kind: str, filename: str, base_dir: str):
    """``rec`` with every ``file = "x.jdl"`` node of a DAG/collection replaced by
    ``description = [ ...x.jdl's ad... ]`` (read relative to ``base_dir``), as the gLite UI does
    before sending a compound request to the WMS. Returns (new record or None when no node
    uses ``file =``, problems)."""
    entries, _, problems = node_entries(rec, kind, filename)
    if problems or not any(e.file for e in entries):
        return None, problems
    loaded: dict[int, n.RecordExpr] = {}
    for e in entries:
        if e.file:
            node_rec, _, problem = load_node_file(e, base_dir, filename)
            if problem is not None:
                problems.append(problem)
            else:
                loaded[id(e.wrapper)] = node_rec
    if problems:
        return None, problems

    def swap(wrapper: n.Node) -> n.Node:
        if type(wrapper) is not n.RecordExpr or id(wrapper) not in loaded:
            return wrapper
        defs = tuple(d for d in wrapper.defs if d.lname != "file")
        defs += (n.AttrDef("description", loaded[id(wrapper)], wrapper.line, wrapper.column),)
        return n.RecordExpr(defs, wrapper.line, wrapper.column)

    nodes_def = rec.attrs["nodes"]
    expr = nodes_def.expr
    if type(expr) is n.ListExpr:
        new_nodes: n.Node = n.ListExpr(tuple(swap(i) for i in expr.items), expr.line, expr.column)
    else:
        new_nodes = n.RecordExpr(tuple(n.AttrDef(d.name, swap(d.expr), d.line, d.column)
                                       for d in expr.defs), expr.line, expr.column)
    defs = tuple(n.AttrDef(d.name, new_nodes, d.line, d.column) if d is nodes_def else d
                 for d in rec.defs)
    return n.RecordExpr(defs, rec.line, rec.column), []
