"""Built-in ClassAd functions used by grid JDL (names are case-insensitive).

Strict functions take evaluated values (FUNCTIONS); lazy ones (LAZY_FUNCTIONS) take the
context (jdl.context.Ctx) and the compiled argument closures (ifThenElse, isUndefined, ...).
Wrong argument count or types give ERROR, as in HTCondor's classad library (fnCall.cpp).
The gLite additions are in jdl.glite_functions; jdl.evaluator merges both tables.
Source: HTCondor manual "ClassAd Built-in Functions".
"""
from __future__ import annotations

import math

from . import regex as rx
from .operators import BINARY, eq, fold, identical, to_bool
from .values import ERROR, UNDEFINED, ClassAd, MappingAd, int32, real_to_int, strtod
from .printer import unparse_value

FUNCTIONS: dict = {}
LAZY_FUNCTIONS: dict = {}


def _fn(*names):
    def register(f):
        for name in names:
            FUNCTIONS[name.lower()] = f
        return f
    return register


def _lazy(*names):
    def register(f):
        for name in names:
            LAZY_FUNCTIONS[name.lower()] = f
        return f
    return register


def _arity(args, lo, hi=None):
    return lo <= len(args) <= (lo if hi is None else hi)


# ---- type predicates (lazy so that they see error without propagating it) ---------------

def _pred(test):
    def f(ctx, fns):
        if len(fns) != 1:
            return ERROR
        return test(fns[0](ctx))
    return f


_LAZY_PREDICATES = {
    "isUndefined": lambda v: v is UNDEFINED,
    "isError": lambda v: v is ERROR,
    "isString": lambda v: type(v) is str,
    "isInteger": lambda v: type(v) is int,
    "isReal": lambda v: type(v) is float,
    "isBoolean": lambda v: type(v) is bool,
    "isList": lambda v: type(v) is list,
    "isClassAd": lambda v: type(v) is ClassAd or type(v) is MappingAd,
    "isAbstime": lambda v: False,
    "isReltime": lambda v: False,
}
for _name, _test in _LAZY_PREDICATES.items():
    LAZY_FUNCTIONS[_name.lower()] = _pred(_test)


@_lazy("ifThenElse")
def _if_then_else(ctx, fns):
    if len(fns) != 3:
        return ERROR
    c = to_bool(fns[0](ctx))
    if c is True:
        return fns[1](ctx)
    if c is False:
        return fns[2](ctx)
    return c


# ---- lists --------------------------------------------------------------------------------

def _member_with(cmp, strict: bool):
    """member (== semantics; undefined/error x propagate) or identicalMember (=?=)."""
    def member(*args):
        if len(args) != 2:
            return ERROR
        x, lst = args
        if lst is UNDEFINED:
            return UNDEFINED
        if type(x) is list or type(x) is ClassAd or type(x) is MappingAd:
            return ERROR
        if strict and x is UNDEFINED:
            return UNDEFINED
        if type(lst) is not list:
            return ERROR
        if strict and x is ERROR:
            return ERROR
        for item in lst:
            if cmp(x, item) is True:
                return True
        return False
    return member


FUNCTIONS["member"] = _member_with(eq, True)
FUNCTIONS["identicalmember"] = _member_with(identical, False)


_COMPARE_OPS = {"<", "<=", "==", "!=", ">", ">=", "is", "isnt"}


def _compare_all(quantifier):
    """anyCompare/allCompare(op, list, x): stops at the first element that decides; an
    undefined comparison counts as false, an error comparison gives error (as HTCondor)."""
    want = quantifier == "any"

    def f(*args):
        if len(args) != 3:
            return ERROR
        op, lst, x = args
        if op is UNDEFINED:
            return UNDEFINED
        if type(op) is not str or op.lower() not in _COMPARE_OPS:
            return ERROR
        if lst is UNDEFINED:
            return UNDEFINED
        if type(lst) is not list:
            return ERROR
        impl = BINARY[op.lower()]
        for item in lst:
            r = impl(item, x)
            if r is ERROR:
                return ERROR
            if r is UNDEFINED:
                return False
            if r is want:
                return want
        return not want
    return f


FUNCTIONS["anycompare"] = _compare_all("any")
FUNCTIONS["allcompare"] = _compare_all("all")


@_fn("size")
def _size(*args):
    if len(args) != 1:
        return ERROR
    v = args[0]
    if v is UNDEFINED:
        return UNDEFINED
    if type(v) is str:
        return len(v) if v.isascii() else len(v.encode("utf-8", "surrogateescape"))
    if type(v) is list:
        return len(v)
    if type(v) is ClassAd:
        return len(v.attrs)
    if type(v) is MappingAd:
        return len(v.data)
    return ERROR


def _split_string_list(s: str, delims: str) -> list[str]:
    out, cur = [], []
    for ch in s:
        if ch in delims:
            if cur:
                out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def _string_list(fold_case: bool):
    def f(*args):
        if not _arity(args, 2, 3):
            return ERROR
        if any(a is UNDEFINED for a in args):
            return UNDEFINED
        if any(type(a) is not str for a in args):
            return ERROR
        delims = args[2] if len(args) == 3 else " ,"
        items = _split_string_list(args[1], delims)
        x = args[0]
        if fold_case:
            return fold(x) in (fold(i) for i in items)
        return x in items
    return f


FUNCTIONS["stringlistmember"] = _string_list(False)
FUNCTIONS["stringlistimember"] = _string_list(True)


# ---- strings ------------------------------------------------------------------------------

def _as_text(v):
    """String form used by strcat/toUpper/...: strings as-is, others unparsed."""
    return v if type(v) is str else unparse_value(v)


_ASCII_UPPER = {c: c - 32 for c in range(97, 123)}


def _ascii_upper(s: str) -> str:
    """toupper() in the C locale: ASCII letters only, as HTCondor."""
    return s.upper() if s.isascii() else s.translate(_ASCII_UPPER)


@_fn("strcat")
def _strcat(*args):
    for a in args:
        if a is ERROR or a is UNDEFINED:
            return a
    return "".join(_as_text(a) for a in args)


@_fn("toUpper")
def _to_upper(*args):
    if len(args) != 1:
        return ERROR
    v = args[0]
    if v is UNDEFINED or v is ERROR:
        return v
    return _ascii_upper(_as_text(v))


@_fn("toLower")
def _to_lower(*args):
    if len(args) != 1:
        return ERROR
    v = args[0]
    if v is UNDEFINED or v is ERROR:
        return v
    return fold(_as_text(v))


@_fn("substr")
def _substr(*args):
    """substr(s, offset [, length]) on the UTF-8 bytes of s (HTCondor strings are bytes);
    negative offset/length count from the end; offsets are C ints."""
    if not _arity(args, 2, 3):
        return ERROR
    if any(a is UNDEFINED for a in args):
        return UNDEFINED
    s, off = args[0], args[1]
    if type(s) is not str or type(off) is not int:
        return ERROR
    if len(args) == 3 and type(args[2]) is not int:
        return ERROR
    b = s.encode("utf-8", "surrogateescape") if not s.isascii() else s
    off, size = int32(off), len(b)
    if off < 0:
        off = max(size + off, 0)
    if off > size:
        return ""
    if len(args) == 2:
        part = b[off:]
    else:
        ln = int32(args[2])
        end = off + ln if ln >= 0 else size + ln
        part = b[off:max(end, off)]
    return part if type(part) is str else part.decode("utf-8", "surrogateescape")


# ---- regular expressions ----------------------------------------------------------------

@_fn("regexp")
def _regexp(*args):
    """regexp(pattern, target [, options]): true when pattern matches somewhere in target."""
    if len(args) == 2:
        p, t = args
        o = ""
    elif len(args) == 3:
        p, t, o = args
    else:
        return ERROR
    if type(p) is not str or type(t) is not str or type(o) is not str:
        if ERROR in (p, t, o):
            return ERROR
        if UNDEFINED in (p, t, o):
            return UNDEFINED
        return ERROR
    compiled = rx.compile_pattern(p, o)
    if compiled is None:
        return ERROR
    found = rx.search(compiled, t)
    return ERROR if found is None else found


@_fn("regexps")
def _regexps(*args):
    if not _arity(args, 3, 4):
        return ERROR
    if any(a is ERROR for a in args):
        return ERROR
    if any(a is UNDEFINED for a in args):
        return UNDEFINED
    if any(type(a) is not str for a in args):
        return ERROR
    compiled = rx.compile_pattern(args[0], args[3] if len(args) == 4 else "")
    if compiled is None:
        return ERROR
    out = rx.substitute(compiled, args[1], args[2])
    return ERROR if out is None else out


# ---- numbers ------------------------------------------------------------------------------

def _parse_real(s: str):
    r = strtod(s)
    return ERROR if r is None else r


@_fn("int")
def _int(*args):
    if len(args) != 1:
        return ERROR
    v = args[0]
    t = type(v)
    if t is int or v is UNDEFINED or v is ERROR:
        return v
    if t is bool:
        return int(v)
    if t is float:
        return real_to_int(v)
    if t is str:
        r = strtod(v)
        return ERROR if r is None else real_to_int(r)
    return ERROR


@_fn("real")
def _real(*args):
    if len(args) != 1:
        return ERROR
    v = args[0]
    t = type(v)
    if t is float or v is UNDEFINED or v is ERROR:
        return v
    if t is int or t is bool:
        return float(v)
    if t is str:
        return _parse_real(v)
    return ERROR


@_fn("string")
def _string(*args):
    if len(args) != 1:
        return ERROR
    v = args[0]
    if v is UNDEFINED or v is ERROR:
        return v
    return _as_text(v)


def _rounding(how):
    def f(*args):
        if len(args) != 1:
            return ERROR
        v = args[0]
        t = type(v)
        if t is int:
            return v
        if t is bool:
            return int(v)
        if t is float:
            if math.isnan(v) or math.isinf(v):
                return real_to_int(v)
            return real_to_int(float(how(v)))
        if t is str:
            r = _real(v)
            return f(r) if type(r) is float else ERROR
        return ERROR
    return f


FUNCTIONS["floor"] = _rounding(math.floor)
FUNCTIONS["ceiling"] = _rounding(math.ceil)
FUNCTIONS["round"] = _rounding(round)


@_fn("pow")
def _pow(*args):
    """pow(b, e): integer when both are integers and e >= 0 (computed in double precision and
    cast, as HTCondor does), else real; undefined arguments give error."""
    if len(args) != 2:
        return ERROR
    b, e = args
    tb, te = type(b), type(e)
    if tb is str:
        b = strtod(b)
    if te is str:
        e = strtod(e)
    if type(b) not in (int, float, bool) or type(e) not in (int, float, bool):
        return ERROR
    r = _real_pow(float(b), float(e))
    if tb is int and te is int and e >= 0:
        return real_to_int(r + 0.5)  # HTCondor: (long long)(pow(b, e) + 0.5), so (-2)^3 = -7
    return r


def _real_pow(b: float, e: float) -> float:
    try:
        return math.pow(b, e)
    except OverflowError:
        return math.inf if b > 0 or float(e).is_integer() and int(e) % 2 == 0 else -math.inf
    except ValueError:
        if b == 0 and e < 0:  # C: pow(-0.0, odd negative) is -inf, otherwise +inf
            odd = e.is_integer() and int(e) % 2 == 1
            return -math.inf if odd and math.copysign(1.0, b) < 0 else math.inf
        return math.nan


@_lazy("time")
def _time_now(ctx, fns):
    """time(): the evaluation's `now` as integer seconds, which the caller takes from its clock
    (matches(job, ad, now), rank_value(job, ad, now), evaluate(..., now=...)): epoch seconds live,
    simulated seconds in a simulation. Error with arguments or when no `now` was given."""
    if fns or ctx.now is None:
        return ERROR
    return int(ctx.now)
