"""Semantic validation of a parsed JDL: every problem at once, each with file:line:column.

Checks: value kinds and allowed values of the attributes in jdl.attributes, mandatory
attributes per Type/JobType, relative Executable missing from InputSandbox, Environment
entries, OutputSandboxDestURI length, StdInput/StdOutput/StdError and OutputSandbox names
(relative to the job's work directory, no ``..``), parametric Parameters, interactive std streams, MPICH
CPU count, the vgrid lease attributes, and for DAGs / collections every node (inheriting the
compound's attributes) plus DAG dependencies (unknown nodes, cycles).
Source: gLite JDL Attributes Specification, Sections 3-5; docs/jdl.md for the extensions.
"""
from __future__ import annotations

import os
import re
from datetime import datetime

from . import nodes as n
from .attributes import ATTRIBUTES
from .compound import dependencies, inherit, load_node_file, node_entries
from .errors import Problem
from .evaluator import evaluate
from .values import ERROR, UNDEFINED, ClassAd, MappingAd, type_name

_ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=", re.S)
_URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_A = {"integer": "an integer", "string": "a string", "boolean": "a boolean", "number":
      "a number", "strings": "a string or a list of strings", "classad": "an ad [ ... ]",
      "classad-list": "a list of ads", "parameters": "an integer or a list",
      "time": "epoch seconds or an ISO 8601 string"}


def _refs_free(expr: n.Node) -> bool:
    stack = [expr]
    while stack:
        x = stack.pop()
        if type(x) in (n.AttrRef, n.Select, n.Call):
            return False
        stack.extend(x.children())
    return True


def _calls_time(expr: n.Node) -> bool:
    """True when time() is called anywhere in expr: its value depends on the evaluation's now."""
    stack = [expr]
    while stack:
        x = stack.pop()
        if type(x) is n.Call and x.lname == "time":
            return True
        stack.extend(x.children())
    return False


def _is_list_of(v, pred) -> bool:
    return type(v) is list and all(pred(x) for x in v)


def _kind_ok(kind: str, v) -> bool:
    t = type(v)
    if kind == "string":
        return t is str
    if kind == "integer":
        return t is int
    if kind == "boolean":
        return t is bool
    if kind == "strings":
        return t is str or _is_list_of(v, lambda x: type(x) is str)
    if kind == "number":
        return t is int or t is float
    if kind == "classad":
        return t is ClassAd or t is MappingAd
    if kind == "classad-list":
        return t is ClassAd or t is MappingAd or _is_list_of(
            v, lambda x: type(x) is ClassAd or type(x) is MappingAd)
    if kind == "parameters":
        return t is int or t is list
    if kind == "time":
        return t is int or t is str
    return True


def _constant(expr: n.Node):
    """The value of a literal or a list of literals (no evaluation needed), else None."""
    if type(expr) is n.Literal:
        return expr.value
    if type(expr) is n.ListExpr and all(type(x) is n.Literal for x in expr.items):
        return [x.value for x in expr.items]
    return None


class _Checker:
    def __init__(self, rec: n.RecordExpr, filename: str, base_dir: str | None):
        self.rec, self.filename, self.base_dir = rec, filename, base_dir
        self.ad = ClassAd(rec)
        self.problems: list[Problem] = []
        self.values: dict[str, object] = {}

    def add(self, node, message: str, filename: str | None = None):
        self.problems.append(Problem(filename or self.filename, node.line, node.column, message))

    def value(self, lname: str):
        v = self.values.get(lname, self)
        if v is self:
            d = self.rec.attrs.get(lname)
            if d is None:
                v = UNDEFINED
            else:
                v = _constant(d.expr)
                if v is None:
                    v = evaluate(d.expr, self.ad, None)
            self.values[lname] = v
        return v

    def check_kinds(self):
        for d in self.rec.defs:
            spec = ATTRIBUTES.get(d.lname)
            if spec is None or spec.kind == "nodes" or self.rec.attrs[d.lname] is not d:
                continue
            if spec.kind == "expression":
                if _refs_free(d.expr):  # only constant expressions can be checked here
                    self.check_expression(d, self.value(d.lname))
                continue
            v = self.value(d.lname)
            if v is ERROR:
                if not _calls_time(self.rec):  # else time() without a now: known at match time
                    self.add(d.expr, f"{spec.name} evaluates to error")
            elif v is UNDEFINED:
                if _refs_free(d.expr):
                    self.add(d.expr, f"{spec.name} must be {_A.get(spec.kind, spec.kind)}, "
                                     "not undefined")
            elif not _kind_ok(spec.kind, v):
                self.add(d.expr, f"{spec.name} must be {_A.get(spec.kind, spec.kind)}, "
                                 f"not {_article(type_name(v))}")
            else:
                self.check_value(spec, d, v)

    def check_expression(self, d, v):
        if d.lname == "requirements" and type(v) is not bool:
            self.add(d.expr, f"Requirements must be a boolean expression, not {_article(type_name(v))}")
        if d.lname == "rank" and type(v) not in (int, float):
            self.add(d.expr, f"Rank must be a numeric expression, not {_article(type_name(v))}")

    def check_value(self, spec, d, v):
        for item in (v if type(v) is list else [v]) if spec.choices else ():
            if type(item) is str and item.lower() not in spec.choices:
                self.add(d.expr, f"{spec.name} must be one of "
                                 + ", ".join(f'"{c}"' for c in spec.choices) + f", not {item!r}")
        if spec.minimum is not None and type(v) in (int, float) and v < spec.minimum:
            self.add(d.expr, f"{spec.name} must be >= {spec.minimum:g}, not {v}")
        if spec.kind == "time" and type(v) is str:
            try:
                datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                self.add(d.expr, f"{spec.name} is not an ISO 8601 time: {v!r}")
        if d.lname == "environment":
            for item in (v if type(v) is list else [v]):
                if not _ENV_RE.match(item):
                    self.add(d.expr, f'Environment entry {item!r} is not "NAME=value"')

    def expr_of(self, lname: str):
        d = self.rec.attrs.get(lname)
        return d.expr if d is not None else self.rec


def _article(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def validate_record(rec: n.RecordExpr, filename: str, base_dir: str | None = None,
                    _depth: int = 0) -> list[Problem]:
    """Every problem of the JDL record `rec`. file= nodes are read (relative to base_dir)
    only when base_dir is given."""
    c = _Checker(rec, filename, base_dir)
    c.check_kinds()
    typ = c.value("type")
    kind = typ.lower() if type(typ) is str else "job"
    if kind == "job":
        _check_job(c)
    elif kind in ("dag", "collection") and _depth < 8:
        _check_compound(c, kind, _depth)
    return c.problems


def _check_job(c: _Checker):
    exe = c.value("executable")
    if "executable" not in c.rec.attrs:
        c.add(c.rec, "a job needs an Executable")
    elif type(exe) is str:
        isb = c.value("inputsandbox")
        isb = [isb] if type(isb) is str else [x for x in isb if type(x) is str] \
            if type(isb) is list else []
        relative = not (exe.startswith("/") or exe.startswith("$") or _URI_RE.match(exe))
        if relative and os.path.basename(exe) not in {os.path.basename(x) for x in isb}:
            c.add(c.expr_of("executable"), f"relative Executable {exe!r} is not in InputSandbox")
    jt = c.value("jobtype")
    jobtypes = {x.lower() for x in (jt if type(jt) is list else [jt]) if type(x) is str}
    if "parametric" in jobtypes:
        p = c.value("parameters")
        if "parameters" not in c.rec.attrs:
            c.add(c.expr_of("jobtype"), "a parametric job needs Parameters")
        elif type(p) is int:
            start = c.value("parameterstart")
            start = start if type(start) is int else 0
            if p <= start:
                c.add(c.expr_of("parameters"),
                      f"Parameters ({p}) must be greater than ParameterStart ({start})")
        elif type(p) is list and not p:
            c.add(c.expr_of("parameters"), "Parameters must not be an empty list")
    if "interactive" in jobtypes:
        for name in ("StdInput", "StdOutput", "StdError"):
            if name.lower() in c.rec.attrs:
                c.add(c.expr_of(name.lower()), f"{name} is not allowed in an interactive job")
    if "mpich" in jobtypes and not ({"cpunumber", "nodenumber"} & set(c.rec.attrs)):
        c.add(c.expr_of("jobtype"), "an MPICH job needs CpuNumber (or NodeNumber)")
    out, dest = c.value("outputsandbox"), c.value("outputsandboxdesturi")
    if type(out) is list and type(dest) is list and len(out) != len(dest):
        c.add(c.expr_of("outputsandboxdesturi"),
              f"OutputSandboxDestURI has {len(dest)} entries, OutputSandbox {len(out)}")
    _check_work_dir_names(c)
    _check_lease(c)


def _leaves_work_dir(name: str) -> str | None:
    """Why file name ``name`` is not a path inside the job's work directory, else None."""
    if name.startswith("/"):
        return "must be a path relative to the job's work directory, not absolute"
    if ".." in name.split("/"):
        return "must not contain '..' (it would leave the job's work directory)"
    return None


def _check_work_dir_names(c: _Checker):
    """StdInput/StdOutput/StdError and OutputSandbox entries are files of the work directory."""
    for name in ("StdInput", "StdOutput", "StdError"):
        v = c.value(name.lower())
        why = _leaves_work_dir(v) if type(v) is str else None
        if why:
            c.add(c.expr_of(name.lower()), f"{name} {v!r} {why}")
    out = c.value("outputsandbox")
    expr = c.expr_of("outputsandbox")
    for i, item in enumerate(out if type(out) is list else [out]):
        why = _leaves_work_dir(item) if type(item) is str else None
        if why:
            at = expr.items[i] if type(expr) is n.ListExpr and i < len(expr.items) else expr
            c.add(at, f"OutputSandbox entry {item!r} {why}")


def _check_lease(c: _Checker):
    lt = c.value("leasetype")
    lt = lt.lower() if type(lt) is str else "best-effort"
    if lt == "advance-reservation":
        for name in ("LeaseStart", "LeaseDuration"):
            if name.lower() not in c.rec.attrs:
                c.add(c.expr_of("leasetype"), f"an advance-reservation lease needs {name}")
    elif "leasestart" in c.rec.attrs:
        c.add(c.expr_of("leasestart"), "LeaseStart is only allowed with "
                                       'LeaseType = "advance-reservation"')
    if lt == "immediate" and "leaseduration" not in c.rec.attrs:
        c.add(c.expr_of("leasetype"), "an immediate lease needs LeaseDuration")
    origin, pclass = c.value("requestorigin"), c.value("preemptionclass")
    if (type(origin) is str and origin.lower() == "local" and type(pclass) is str
            and pclass.lower() != "non-preemptable"):
        c.add(c.expr_of("preemptionclass"), 'a local request is deadline-constrained and '
              f'non-preemptable (seed 002 Section 4.2): PreemptionClass {pclass!r} is not allowed '
              'with RequestOrigin = "local"')
    img = c.value("vmimage")
    if type(img) is str and not (_URI_RE.match(img) or img.startswith("/")):
        c.add(c.expr_of("vmimage"), f"VMImage must be a URI or an absolute path, not {img!r}")


def _check_compound(c: _Checker, kind: str, depth: int):
    entries, nodes_rec, problems = node_entries(c.rec, kind, c.filename)
    c.problems += problems
    for e in entries:
        desc, fname = e.description, c.filename
        if desc is None:
            if c.base_dir is None:
                continue  # file= nodes are checked when the JDL is expanded from a file
            desc, fname, problem = load_node_file(e, c.base_dir, c.filename)
            if problem is not None:
                c.problems.append(problem)
                continue
        merged = inherit(c.rec, desc)
        sub_dir = os.path.dirname(fname) if fname != c.filename else c.base_dir
        c.problems += validate_record(merged, fname, sub_dir, depth + 1)
    if kind == "dag":
        _, dep_problems = dependencies(c.rec, nodes_rec, [e.name for e in entries], c.filename)
        c.problems += dep_problems
