"""What a job's Requirements or Rank read of a CE ad, so one evaluation serves every CE ad that
agrees on those attributes (issue 12, session 7: cold class matching at 10,000 CEs).

A class's Requirements typically read a handful of GLUE attributes (``GlueCEStateStatus``,
``GlueHostMainMemoryRAMSize``, ``GlueCEInfoTotalCPUs``, ``GlueCEPolicyMaxWallClockTime``) that
take a few dozen distinct value combinations over thousands of CEs. With a plain CE ad (a
:class:`jdl.MappingAd`: values, no expressions), an expression's value against the ad is a
function of the job (constant for a class), ``now`` and the values of the ``other.NAME``
attributes it reads -- the evaluator reaches the ad only through the scope words
``other``/``target`` (``jdl.evaluator._c_select`` / ``_scope_value``). So when every use of
``other``/``target`` in the expression and in the job attributes it reaches is ``other.NAME``,
the tuple of those NAMEs' values (:func:`projection`) determines the result: the task queues
evaluate Requirements (and Rank) once per distinct tuple per class and snapshot
(:mod:`broker.class_filter`), the per-ad tuples being computed once per snapshot and shared by
every class that reads the same names. HTCondor's autoclustering of
jobs by their significant attributes is the same idea from the other side.

Not projected (:func:`ad_reads` answers None, the ad is evaluated as before): a bare
``other``/``target`` (passed to a function, subscripted), ``eval(...)`` (reads what a string
names), and ``VGridDispatchedSinceRefresh`` (an ISM view's live feedback count).
"""
from __future__ import annotations

from typing import Any

from infosys.ism import DISPATCHED
from jdl import nodes as jn

_SCOPES = ("other", "target")
_JOB_SCOPES = ("my", "self")
_ABSENT = ("absent",)


def ad_reads(record: jn.RecordExpr, expr: jn.Node) -> tuple[str, ...] | None:
    """The lower-case names ``NAME`` of every ``other.NAME`` / ``target.NAME`` that ``expr``
    may read, following the job's own attributes it names (unscoped, ``.NAME``, ``my.NAME``,
    ``self.NAME``; transitively, over-including names a nested record would shadow), sorted;
    None when the ad may be read another way (see the module doc). ``record``: the job's
    top-level record (``JobDescription.record``)."""
    attrs = record.attrs
    names: set[str] = set()
    seen_attrs: set[str] = set()
    stack = [expr]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is jn.Select:
            base = x.base
            if type(base) is jn.AttrRef and not base.absolute:
                if base.lname in _SCOPES:
                    names.add(x.lname)
                    continue
                if base.lname in _JOB_SCOPES:
                    stack.append(jn.AttrRef(x.name))   # my.NAME: the job's attribute NAME
                    continue
        elif t is jn.AttrRef:
            if x.lname in _SCOPES and not x.absolute and x.lname not in attrs:
                return None          # the whole ad as a value
            if x.lname not in seen_attrs:
                seen_attrs.add(x.lname)
                d = attrs.get(x.lname)
                if d is not None:
                    stack.append(d.expr)
            continue
        elif t is jn.Call and x.lname == "eval":
            return None
        stack.extend(x.children())
    if DISPATCHED.lower() in names:
        return None
    return tuple(sorted(names))


def canonical(value: Any) -> Any:
    """A hashable key equal for two ad values iff the evaluator cannot tell them apart: the
    type goes with the value (``1``, ``1.0`` and ``True`` differ; floats by ``repr``, so
    ``-0.0`` is not ``0.0``), lists element-wise, records by lower-case name."""
    t = type(value)
    if t is str or t is int or t is bool:
        return (t.__name__, value)
    if t is float:
        return ("float", repr(value))
    if value is None:
        return _ABSENT
    if t is list or t is tuple:
        return ("list",) + tuple(canonical(v) for v in value)
    data = getattr(value, "data", value)   # a nested MappingAd: its mapping
    if isinstance(data, dict) or hasattr(data, "items"):
        return ("record",) + tuple(sorted((str(k).lower(), canonical(v)) for k, v in data.items()))
    return ("other", t.__name__, repr(value))


def projection(ad_record, names: tuple[str, ...]) -> tuple:
    """The values of ``names`` in a :class:`jdl.MappingAd` as one hashable key
    (:func:`canonical` of each; absent attributes included as absent)."""
    lookup = ad_record.lookup
    return tuple(canonical(lookup(n, n)) for n in names)

