"""vgrid.jdl: gLite JDL and the new-ClassAd language with HTCondor's semantics.

Public API (docs/jdl.md has the details):
    parse_jdl(text, filename="<string>", validate=True) -> JobDescription
        raises JDLSyntaxError (file:line:column + caret) or JDLValidationError (.problems)
    matches(job, ce_ad, now) -> bool ; rank_value(job, ce_ad, now) -> float | None
        (now: the caller's clock.now(), what time() returns; jdl never reads the wall clock)
    expand(job, base_dir=None) -> Expansion (plain jobs of parametric jobs, collections, DAGs)
    inline_nodes(job) -> str (DAG/collection file= nodes inlined, as a client sends them)
    to_jdl(job) -> canonical JDL text ; parse_ad(text) -> ClassAd ; MappingAd(mapping)
    parse_expr(text) -> node ; evaluate(node, ad=None, other=None, now=None) -> value
"""
from __future__ import annotations

import os

from .errors import JDLError, JDLSyntaxError, JDLValidationError, Problem
from .evaluator import evaluate
from .model import (DEFAULT_RANK, DEFAULT_REQUIREMENTS, CompiledExpression, JobDescription,
                    as_ad, matches, rank_value, to_python)
from .parser import parse_classad, parse_expr
from .printer import record_text, unparse, unparse_value
from .validate import validate_record
from .expansion import Expansion, PlainJob, expand, inline_nodes  # noqa: E402  (after the model it uses)
from .values import ERROR, UNDEFINED, ClassAd, MappingAd

CaseInsensitiveAd = MappingAd


def parse_jdl(text: str, filename: str = "<string>", validate: bool = True,
              local_files: bool = True) -> JobDescription:
    """Parse and validate a gLite JDL (with or without the outer [ ]).

    Raises JDLSyntaxError (file:line:column, source line and caret in str()) when the text is
    not a ClassAd, JDLValidationError (every problem in .problems) when it breaks the
    attribute rules (validate=False skips these). DAG `file =` nodes are read relative to
    `filename` when it is an existing file and local_files is True; a server handling
    submitted text passes local_files=False so that no local file is ever read.
    """
    record = parse_classad(text, filename)
    if validate:
        base_dir = os.path.dirname(os.path.abspath(filename)) \
            if local_files and os.path.isfile(filename) else None  # DAG file= nodes
        problems = validate_record(record, filename, base_dir)
        problems.sort(key=lambda p: (p.filename != filename, p.filename, p.line, p.column))
        if problems:
            raise JDLValidationError(problems, text)
    return JobDescription(record, text, filename)


def to_jdl(job: JobDescription) -> str:
    """Canonical JDL text of `job` (one attribute per line); parse_jdl(to_jdl(j)) == j."""
    return record_text(job.record, indent=2) + "\n"


def parse_ad(text: str, filename: str = "<string>") -> ClassAd:
    """Parse ClassAd text (e.g. a CE ad) into a ClassAd record usable as `ce_ad`."""
    return ClassAd(parse_classad(text, filename))


__all__ = [
    "parse_jdl", "parse_ad", "parse_classad", "parse_expr", "evaluate", "matches", "rank_value",
    "JobDescription", "CompiledExpression", "JDLError", "JDLSyntaxError", "JDLValidationError",
    "Problem", "ClassAd", "MappingAd", "CaseInsensitiveAd", "UNDEFINED", "ERROR", "as_ad",
    "to_python", "unparse", "unparse_value", "DEFAULT_REQUIREMENTS", "DEFAULT_RANK", "to_jdl",
    "expand", "inline_nodes", "Expansion", "PlainJob", "validate_record",
]
