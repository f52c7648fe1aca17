"""JobDescription: a parsed gLite JDL with typed accessors, plus matching against CE ads.

Source: gLite JDL Attributes Specification (EGEE-JRA1-TEC-590869), Sections 3 (job
attributes) and 3.8-3.9 (Requirements, Rank, FuzzyRank); defaults as the gLite UI applies them
(Requirements `other.GlueCEStateStatus == "Production"`, Rank `-other.GlueCEStateEstimatedResponseTime`).
"""
from __future__ import annotations

from collections.abc import Mapping

from . import nodes as n
from .context import Ctx
from .evaluator import compile_expr
from .parser import parse_expr
from .printer import unparse
from .values import ERROR, UNDEFINED, ClassAd, MappingAd

DEFAULT_REQUIREMENTS = 'other.GlueCEStateStatus == "Production"'
DEFAULT_RANK = "-other.GlueCEStateEstimatedResponseTime"


def as_ad(ce_ad) -> ClassAd | MappingAd:
    """A record for matching: ClassAd/MappingAd as is, any other Mapping wrapped once."""
    if type(ce_ad) is MappingAd or type(ce_ad) is ClassAd:
        return ce_ad
    if isinstance(ce_ad, Mapping):
        return MappingAd(ce_ad)
    raise TypeError(f"a CE ad must be a Mapping or ClassAd, not {type(ce_ad).__name__}")


class CompiledExpression:
    """An expression compiled once (Requirements, Rank, ...), evaluated against many ads.

    `.node` the tree, `.text` its canonical text, `.is_default` True when the JDL did not set
    it, `.line`/`.column` where it was written (0 for defaults).
    """

    __slots__ = ("node", "fn", "is_default", "owner")

    def __init__(self, node: n.Node, owner: ClassAd | None, is_default: bool = False):
        self.node = node
        self.fn = compile_expr(node)
        self.owner = owner
        self.is_default = is_default

    @property
    def text(self) -> str:
        return unparse(self.node)

    @property
    def line(self) -> int:
        return self.node.line

    @property
    def column(self) -> int:
        return self.node.column

    def evaluate(self, ce_ad=None, now: float | None = None):
        """The ClassAd value (bool, int, float, str, list, record, UNDEFINED or ERROR) with
        `other.` bound to ce_ad (any Mapping of GLUE names, a MappingAd or a ClassAd); `now`:
        seconds from the caller's clock, what time() returns (None: time() is error)."""
        other = None if ce_ad is None else as_ad(ce_ad)
        ctx = Ctx(self.owner, self.owner, other, set(), now)
        try:
            return self.fn(ctx)
        except RecursionError:
            return ERROR

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"CompiledExpression({self.text!r})"

    def __eq__(self, other):
        return isinstance(other, CompiledExpression) and self.node == other.node

    def __hash__(self):
        return hash(self.node)


def to_python(v):
    """ClassAd value -> plain Python (UNDEFINED -> None, ERROR -> None, records -> dict)."""
    if v is UNDEFINED or v is ERROR:
        return None
    t = type(v)
    if t is list:
        return [to_python(x) for x in v]
    if t is ClassAd:
        from .evaluator import evaluate
        return {d.name: to_python(evaluate(d.expr, v, None)) for d in v.record.defs
                if v.attrs[d.lname] is d}
    if t is MappingAd:
        return dict(v.data)
    return v


class JobDescription:
    """A parsed JDL: `.text`, `.filename`, `.ad` (ClassAd), typed read-only accessors.

    Build with jdl.parse_jdl. Accessors return plain Python values; expressions that do not
    evaluate to the expected type give the default (validation reports them).
    """

    def __init__(self, record: n.RecordExpr, text: str, filename: str):
        self.record = record
        self.text = text
        self.filename = filename
        self.ad = ClassAd(record)
        self._compiled: dict[str, CompiledExpression] = {}

    def __repr__(self) -> str:
        return f"<JobDescription {self.filename} type={self.type} executable={self.executable!r}>"

    def __eq__(self, other):
        return isinstance(other, JobDescription) and self.record == other.record

    def __hash__(self):
        return hash(self.record)

    def __contains__(self, name: str) -> bool:
        return name.lower() in self.ad.attrs

    def names(self) -> list[str]:
        """Attribute names as written, in source order."""
        return self.ad.names()

    def value(self, name: str):
        """The raw ClassAd value of attribute `name` evaluated in this job (other unbound, no
        `now`: time() is error); UNDEFINED when absent."""
        d = self.ad.attrs.get(name.lower())
        if d is None:
            return UNDEFINED
        return self.expression(name).evaluate(None)

    def get(self, name: str, default=None):
        """Attribute `name` (case-insensitive) as a plain Python value; default when it is
        absent or evaluates to undefined/error."""
        v = self.value(name)
        if v is UNDEFINED or v is ERROR:
            return default
        return to_python(v)

    def expression(self, name: str, default_text: str | None = None) -> CompiledExpression | None:
        """Attribute `name` compiled once; the parsed default_text when absent (else None)."""
        key = name.lower()
        c = self._compiled.get(key)
        if c is None:
            d = self.ad.attrs.get(key)
            if d is not None:
                c = CompiledExpression(d.expr, self.ad)
            elif default_text is not None:
                c = CompiledExpression(parse_expr(default_text, f"<default {name}>"), self.ad,
                                       True)
            else:
                return None
            self._compiled[key] = c
        return c

    # ---- typed accessors ---------------------------------------------------------------
    def _str(self, name: str, default=None):
        v = self.value(name)
        return v if type(v) is str else default

    def _str_list(self, name: str) -> list[str]:
        v = self.value(name)
        if type(v) is str:
            return [v]
        if type(v) is list:
            return [x for x in v if type(x) is str]
        return []

    def _bool(self, name: str, default):
        v = self.value(name)
        return v if type(v) is bool else default

    def _int(self, name: str, default=None):
        v = self.value(name)
        return v if type(v) is int else default

    @property
    def type(self) -> str:
        """Type: "job" (default), "dag" or "collection", lower case."""
        return (self._str("Type") or "job").lower()

    @property
    def job_type(self) -> str:
        """JobType: "normal" (default), "parametric", "interactive", "mpich", ... lower case."""
        v = self.value("JobType")
        if type(v) is list:
            return ", ".join(x.lower() for x in v if type(x) is str)
        return v.lower() if type(v) is str else "normal"

    @property
    def executable(self) -> str | None:
        return self._str("Executable")

    @property
    def arguments(self) -> str:
        return self._str("Arguments", "")

    @property
    def std_input(self) -> str | None:
        return self._str("StdInput")

    @property
    def std_output(self) -> str | None:
        return self._str("StdOutput")

    @property
    def std_error(self) -> str | None:
        return self._str("StdError")

    @property
    def input_sandbox(self) -> list[str]:
        return self._str_list("InputSandbox")

    @property
    def output_sandbox(self) -> list[str]:
        return self._str_list("OutputSandbox")

    @property
    def environment(self) -> list[str]:
        """Environment as "NAME=value" strings."""
        return self._str_list("Environment")

    @property
    def requirements(self) -> CompiledExpression:
        return self.expression("Requirements", DEFAULT_REQUIREMENTS)

    @property
    def rank(self) -> CompiledExpression:
        return self.expression("Rank", DEFAULT_RANK)

    @property
    def fuzzy_rank(self) -> bool:
        return self._bool("FuzzyRank", False)

    @property
    def fete_rank(self) -> bool | None:
        """FeteRank (vgrid extension, seed 004 Section 4.2): None when not set."""
        return self._bool("FeteRank", None)

    @property
    def virtual_organisation(self) -> str | None:
        return self._str("VirtualOrganisation")

    @property
    def retry_count(self) -> int | None:
        return self._int("RetryCount")

    @property
    def shallow_retry_count(self) -> int | None:
        return self._int("ShallowRetryCount")


def matches(job: JobDescription, ce_ad, now: float | None) -> bool:
    """True when job's Requirements evaluate to boolean true with `other.` = ce_ad.

    ce_ad: Mapping of GLUE attribute names (case-insensitive) to int/float/str/bool/list, a
    MappingAd (build once per CE for speed) or a ClassAd. Undefined/error/non-bool: False.
    now (required): the caller's clock.now() in seconds (epoch live, simulated time in a
    simulation), what the ClassAd time() function returns; None makes time() error.
    """
    req = job._compiled.get("requirements") or job.requirements
    other = ce_ad if type(ce_ad) is MappingAd else as_ad(ce_ad)
    ctx = Ctx(job.ad, job.ad, other, set(), now)
    try:
        return req.fn(ctx) is True
    except RecursionError:
        return False


def rank_value(job: JobDescription, ce_ad, now: float | None) -> float | None:
    """job's Rank against ce_ad as a float; None when undefined, error or not a number.
    now (required): the caller's clock.now() in seconds, what time() returns (as matches)."""
    rank = job._compiled.get("rank") or job.rank
    other = ce_ad if type(ce_ad) is MappingAd else as_ad(ce_ad)
    ctx = Ctx(job.ad, job.ad, other, set(), now)
    try:
        v = rank.fn(ctx)
    except RecursionError:
        return None
    t = type(v)
    if t is int or t is float or t is bool:
        return float(v)
    return None
