"""Built-in ClassAd functions used by grid JDL (names are case-insensitive).

Strict functions take evaluated values (FUNCTIONS); lazy ones (LAZY_FUNCTIONS) take the
context and the compiled argument closures (ifThenElse, isUndefined, ...). Wrong argument
count or types give ERROR, as in HTCondor's classad library (fnCall.cpp).
Sources: HTCondor manual "ClassAd Built-in Functions"; gLite JDL Attributes Specification
(EGEE-JRA1-TEC-590869) Section 4 for fqanMember/anyMatch/allMatch/whichMatch.
"""
from __future__ import annotations

import math
import time as _time

from . import regex as rx
from .operators import BINARY, eq, fold, identical, to_bool
from .values import ERROR, UNDEFINED, ClassAd, MappingAd, wrap64
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

def _member_with(cmp):
    def member(*args):
        if len(args) != 2:
            return ERROR
        x, lst = args
        if lst is UNDEFINED:
            return UNDEFINED
        if type(lst) is not list:
            return ERROR
        if x is ERROR or type(x) is list or type(x) is ClassAd or type(x) is MappingAd:
            return ERROR
        if x is UNDEFINED:
            return UNDEFINED
        for item in lst:
            if cmp(x, item) is True:
                return True
        return False
    return member


FUNCTIONS["member"] = _member_with(eq)
FUNCTIONS["identicalmember"] = _member_with(identical)


def _compare_all(quantifier):
    def f(*args):
        if len(args) != 3:
            return ERROR
        op, lst, x = args
        if op is UNDEFINED or lst is UNDEFINED:
            return UNDEFINED
        if type(op) is not str or type(lst) is not list:
            return ERROR
        impl = BINARY.get(op.lower())
        if impl is None:
            return ERROR
        results = [impl(item, x) is True for item in lst]
        return any(results) if quantifier == "any" else all(results)
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
    if type(v) is str or type(v) is list:
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


@_fn("strcat")
def _strcat(*args):
    for a in args:
        if a is ERROR:
            return ERROR
    for a in args:
        if a is UNDEFINED:
            return UNDEFINED
    return "".join(_as_text(a) for a in args)


@_fn("toUpper")
def _to_upper(*args):
    if len(args) != 1:
        return ERROR
    v = args[0]
    if v is UNDEFINED or v is ERROR:
        return v
    return _as_text(v).upper()


@_fn("toLower")
def _to_lower(*args):
    if len(args) != 1:
        return ERROR
    v = args[0]
    if v is UNDEFINED or v is ERROR:
        return v
    return _as_text(v).lower()


@_fn("substr")
def _substr(*args):
    if not _arity(args, 2, 3):
        return ERROR
    if any(a is UNDEFINED for a in args):
        return UNDEFINED
    s, off = args[0], args[1]
    if type(s) is not str or type(off) is not int:
        return ERROR
    n = len(s)
    if off < 0:
        off = max(n + off, 0)
    if off > n:
        return ""
    if len(args) == 2:
        return s[off:]
    ln = args[2]
    if type(ln) is not int:
        return ERROR
    end = off + ln if ln >= 0 else n + ln
    return s[off:max(end, off)]


# ---- regular expressions ----------------------------------------------------------------

@_fn("regexp")
def _regexp(*args):
    if not _arity(args, 2, 3):
        return ERROR
    if any(a is ERROR for a in args):
        return ERROR
    if any(a is UNDEFINED for a in args):
        return UNDEFINED
    if any(type(a) is not str for a in args):
        return ERROR
    compiled = rx.compile_pattern(args[0], args[2] if len(args) == 3 else "")
    if compiled is None:
        return ERROR
    return rx.search(compiled, args[1])


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
    return rx.substitute(compiled, args[1], args[2])


# ---- numbers ------------------------------------------------------------------------------

def _parse_int_prefix(s: str):
    s = s.strip()
    i = 1 if s[:1] in "+-" else 0
    j = i
    while j < len(s) and s[j].isdigit() and s[j].isascii():
        j += 1
    if j == i:
        return ERROR
    return wrap64(int(s[:j]))


def _parse_real(s: str):
    try:
        return float(s.strip())
    except ValueError:
        return ERROR


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
        if math.isnan(v) or math.isinf(v):
            return ERROR
        return wrap64(int(v))
    if t is str:
        r = _parse_real(v)
        if type(r) is float and not (math.isnan(r) or math.isinf(r)):
            return wrap64(int(r))
        return _parse_int_prefix(v)
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
                return ERROR
            return wrap64(int(how(v)))
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
    if len(args) != 2:
        return ERROR
    b, e = args
    if b is ERROR or e is ERROR:
        return ERROR
    if b is UNDEFINED or e is UNDEFINED:
        return UNDEFINED
    if type(b) not in (int, float) or type(e) not in (int, float):
        return ERROR
    if type(b) is int and type(e) is int and e >= 0:
        return wrap64(pow(b, e)) if e < 4096 or abs(b) <= 1 else _pow_big(b, e)
    try:
        return math.pow(float(b), float(e))
    except (OverflowError, ValueError):
        if b == 0 and e < 0:
            return math.inf
        return ERROR


def _pow_big(b: int, e: int) -> int:
    return wrap64(pow(b, e, 1 << 64))


@_fn("time")
def _time_now(*args):
    """Seconds since the epoch (the ClassAd time() function)."""
    if args:
        return ERROR
    return int(_time_now.clock())


_time_now.clock = _time.time  # replaceable (tests, simulation) without touching callers


# ---- gLite additions ----------------------------------------------------------------------

@_fn("fqanMember")
def _fqan_member(*args):
    """fqanMember(fqan, list): true when an FQAN in list equals fqan or is under it."""
    if len(args) != 2:
        return ERROR
    x, lst = args
    if x is UNDEFINED or lst is UNDEFINED:
        return UNDEFINED
    if type(x) is not str or type(lst) is not list:
        return ERROR
    want = x.rstrip("/")
    for item in lst:
        if type(item) is str:
            item = item.rstrip("/")
            if item == want or item.startswith(want + "/") or want.startswith(item + "/Role="):
                return True
    return False


def _match_list(ctx, fns):
    if len(fns) != 2:
        return ERROR, None, None
    lst = fns[0](ctx)
    if lst is UNDEFINED:
        return UNDEFINED, None, None
    if type(lst) is not list:
        return ERROR, None, None
    return None, lst, fns[1]


def _each_ad(ctx, lst, pred_fn):
    from .evaluator import Ctx
    for item in lst:
        if type(item) is ClassAd or type(item) is MappingAd:
            yield item, to_bool(pred_fn(Ctx(item, ctx.me, ctx.other, ctx.active)))
        else:
            yield item, ERROR


@_lazy("anyMatch")
def _any_match(ctx, fns):
    """anyMatch(list_of_ads, expr): expr true in some ad of the list (gLite gang-matching)."""
    bad, lst, pred = _match_list(ctx, fns)
    if bad is not None:
        return bad
    return any(r is True for _, r in _each_ad(ctx, lst, pred))


@_lazy("allMatch")
def _all_match(ctx, fns):
    bad, lst, pred = _match_list(ctx, fns)
    if bad is not None:
        return bad
    return all(r is True for _, r in _each_ad(ctx, lst, pred))


@_lazy("whichMatch")
def _which_match(ctx, fns):
    """whichMatch(list_of_ads, expr): the first ad of the list where expr is true."""
    bad, lst, pred = _match_list(ctx, fns)
    if bad is not None:
        return bad
    for item, r in _each_ad(ctx, lst, pred):
        if r is True:
            return item
    return UNDEFINED
