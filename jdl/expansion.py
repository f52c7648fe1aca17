"""Expansion of compound requests into plain jobs, keeping the parent/child relation.

- a plain job expands to itself;
- a parametric job (JobType "parametric") to one job per parameter value: Parameters as an
  integer gives ParameterStart, ParameterStart + ParameterStep, ... below Parameters; as a
  list, its elements (a bare name such as `test` stands for the string "test"). `_PARAM_` is
  replaced in every string of the ad; the jobs get JobType "normal";
- a collection to its nodes, a DAG to its nodes with their dependencies (parents); node
  descriptions come inline (`description = [...]`, or the node ad itself) or from `file =`
  (relative to the JDL file's directory), and inherit the compound's attributes.
Source: gLite JDL Attributes Specification, Sections 3.3 (parametric), 4 (DAG), 5 (collection).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from . import nodes as n
from .compound import (dependencies, inherit, inline_node_files, load_node_file, node_entries,
                       topological)
from .errors import JDLValidationError, Problem
from .model import JobDescription
from .printer import record_text, unparse
from .validate import validate_record

PARAM = "_PARAM_"
MAX_JOBS = 10_000  # a parametric job or compound expanding to more is refused


@dataclass
class PlainJob:
    """One plain job of an expansion: `name` (unique), `description` (Type "job"),
    `parents` (names of DAG nodes that must finish first), `parameter` (parametric value)."""

    name: str
    description: JobDescription
    parents: tuple[str, ...] = ()
    parameter: object = None

    def to_json(self) -> dict:
        d = self.description
        return {"name": self.name, "parents": list(self.parents), "parameter": self.parameter,
                "executable": d.executable, "arguments": d.arguments,
                "jdl": record_text(d.record, indent=2)}


@dataclass
class Expansion:
    """The plain jobs of a request: `kind` is job, parametric, collection or dag; `parent`
    is the original request (the parent of every job)."""

    kind: str
    parent: JobDescription
    jobs: list[PlainJob] = field(default_factory=list)

    def children_of(self, name: str) -> list[str]:
        return [j.name for j in self.jobs if name in j.parents]

    def to_json(self) -> dict:
        return {"kind": self.kind, "file": self.parent.filename,
                "jobs": [j.to_json() for j in self.jobs]}


def expand(job: JobDescription, base_dir: str | None = None,
           local_files: bool = True) -> Expansion:
    """Expand `job` into plain jobs. base_dir: directory for `file=` nodes (default: the
    directory of job.filename when that is an existing file; otherwise `file=` nodes are a
    problem, so a server never reads local files named by a submitted JDL; local_files=False
    refuses them always). Raises
    JDLValidationError with every problem (unreadable node files, invalid nodes, unknown
    dependencies, cycles, too many jobs)."""
    if not local_files:
        base_dir = None
    elif base_dir is None and os.path.isfile(job.filename):
        base_dir = os.path.dirname(os.path.abspath(job.filename))
    kind = job.type
    if kind in ("dag", "collection"):
        return _expand_compound(job, kind, base_dir)
    if "parametric" in job.job_type:
        return _expand_parametric(job)
    return Expansion("job", job, [PlainJob(_node_name(job.record, "job"), job)])


def _node_name(rec: n.RecordExpr, default: str) -> str:
    d = rec.attrs.get("nodename")
    if d is not None and type(d.expr) is n.Literal and type(d.expr.value) is str:
        return d.expr.value
    return default


# ---- parametric ---------------------------------------------------------------------------

def parameter_values(job: JobDescription) -> list:
    """The parameter values of a parametric job (strings or integers)."""
    d = job.record.attrs.get("parameters")
    if d is None:
        return []
    if type(d.expr) is n.ListExpr:
        out = []
        for item in d.expr.items:
            if type(item) is n.AttrRef:
                out.append(item.name)
            elif type(item) is n.Literal and type(item.value) in (str, int):
                out.append(item.value)
            else:
                out.append(unparse(item))
        return out
    count = job.get("Parameters")
    start = job.get("ParameterStart", 0)
    step = job.get("ParameterStep", 1)
    if type(count) is not int or type(start) is not int or type(step) is not int or step < 1:
        return []
    values = range(start, count, step)  # a range: its length is known without building it
    return values if len(values) > MAX_JOBS else list(values)


def _expand_parametric(job: JobDescription) -> Expansion:
    values = parameter_values(job)
    if len(values) > MAX_JOBS:
        d = job.record.attrs["parameters"]
        raise JDLValidationError([Problem(job.filename, d.expr.line, d.expr.column,
                                          f"parametric job expands to {len(values)} jobs "
                                          f"(at most {MAX_JOBS})")], job.text)
    drop = {"parameters", "parameterstart", "parameterstep", "jobtype"}
    jobs = []
    for i, value in enumerate(values):
        text = str(value)
        defs = [n.AttrDef(d.name, replace_strings(d.expr, PARAM, text), d.line, d.column)
                for d in job.record.defs if d.lname not in drop]
        defs.append(n.AttrDef("JobType", n.Literal("normal")))
        rec = n.RecordExpr(tuple(defs), job.record.line, job.record.column)
        jobs.append(PlainJob(f"Node_{i}", _plain(rec, job.filename, job.text), (), value))
    return Expansion("parametric", job, jobs)


def replace_strings(node: n.Node, old: str, new: str) -> n.Node:
    """A copy of `node` with `old` replaced by `new` in every string literal (and in quoted
    attribute names of nested ads). Nodes without such strings are shared, not copied."""
    out: dict[int, n.Node] = {}
    order, stack = [], [node]
    while stack:
        x = stack.pop()
        order.append(x)
        stack.extend(x.children())
    for x in reversed(order):
        out[id(x)] = _rebuild(x, out, old, new)
    return out[id(node)]


def _rebuild(x: n.Node, done: dict, old: str, new: str) -> n.Node:
    t = type(x)
    if t is n.Literal:
        if type(x.value) is str and old in x.value:
            return n.Literal(x.value.replace(old, new), x.line, x.column)
        return x
    kids = x.children()
    new_kids = tuple(done[id(k)] for k in kids)
    if all(a is b for a, b in zip(kids, new_kids)):
        return x
    if t is n.Select:
        return n.Select(new_kids[0], x.name, x.line, x.column)
    if t is n.Subscript:
        return n.Subscript(*new_kids, x.line, x.column)
    if t is n.Unary:
        return n.Unary(x.op, new_kids[0], x.line, x.column)
    if t is n.Binary:
        return n.Binary(x.op, new_kids[0], new_kids[1], x.line, x.column)
    if t is n.Conditional:
        if x.then is None:
            return n.Conditional(new_kids[0], None, new_kids[1], x.line, x.column)
        return n.Conditional(*new_kids, x.line, x.column)
    if t is n.Call:
        return n.Call(x.name, new_kids, x.line, x.column)
    if t is n.ListExpr:
        return n.ListExpr(new_kids, x.line, x.column)
    if t is n.RecordExpr:
        defs = tuple(n.AttrDef(d.name, e, d.line, d.column) for d, e in zip(x.defs, new_kids))
        return n.RecordExpr(defs, x.line, x.column)
    return x


# ---- collections and DAGs -----------------------------------------------------------------

def _expand_compound(job: JobDescription, kind: str, base_dir: str | None) -> Expansion:
    rec, filename = job.record, job.filename
    entries, nodes_rec, problems = node_entries(rec, kind, filename)
    if len(entries) > MAX_JOBS:
        problems.append(Problem(filename, rec.line, rec.column,
                                f"{kind} has {len(entries)} nodes (at most {MAX_JOBS})"))
    resolved = []
    for e in entries:
        desc, fname = e.description, filename
        if desc is None:
            desc, fname, problem = load_node_file(e, base_dir, filename)
            if problem is not None:
                problems.append(problem)
                continue
        merged = inherit(rec, desc)
        sub_dir = os.path.dirname(fname) if fname != filename else base_dir
        problems += validate_record(merged, fname, sub_dir)
        # (validate_record reads nested file= nodes only below a directory it was given)
        resolved.append((e.name, merged, fname))
    edges = []
    if kind == "dag":
        edges, dep_problems = dependencies(rec, nodes_rec, [e.name for e in entries], filename)
        problems += dep_problems
    if problems:
        raise JDLValidationError(problems, job.text)
    by_name = {name: (merged, fname) for name, merged, fname in resolved}
    order = topological([name for name, _, _ in resolved], edges) if kind == "dag" \
        else [name for name, _, _ in resolved]
    jobs = []
    for name in order:
        merged, fname = by_name[name]
        parents = tuple(p for p, c in edges if c == name)
        jobs.append(PlainJob(name, _plain(merged, fname, job.text if fname == filename else None),
                             parents))
    return Expansion(kind, job, jobs)


def _plain(rec: n.RecordExpr, filename: str, text: str | None) -> JobDescription:
    return JobDescription(rec, text if text is not None else record_text(rec, indent=2), filename)


def inline_nodes(job: JobDescription, base_dir: str | None = None) -> str:
    """The JDL text of ``job`` with every DAG/collection node given by ``file =`` inlined as
    ``description = [...]`` (what a client sends to a broker, which reads no local files).
    base_dir: where node files are (default: the JDL file's directory). Returns ``job.text``
    unchanged when there is nothing to inline; raises JDLValidationError naming every node file
    that cannot be read or parsed."""
    if job.type not in ("dag", "collection"):
        return job.text
    if base_dir is None:
        base_dir = os.path.dirname(os.path.abspath(job.filename))
    rec, problems = inline_node_files(job.record, job.type, job.filename, base_dir)
    if problems:
        raise JDLValidationError(problems, job.text)
    return job.text if rec is None else record_text(rec, indent=2) + "\n"
