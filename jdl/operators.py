"""ClassAd operators on values, with HTCondor's three-valued semantics.

Rules (checked against HTCondor's classad library, module classad2, see tests/test_jdl_oracle.py):
- error in an operand gives error, then undefined gives undefined (strict operators);
- booleans take part in arithmetic and comparison as 0/1, strings compare case-insensitively
  with == != < <= > >= and exactly with =?= (is) / =!= (isnt);
- integer arithmetic wraps at 64 bits, / truncates toward zero, % has the dividend's sign,
  division or modulus by zero is error, % on reals is error;
- && and || are non-strict: `false && x` is false, `true || x` is true, `undefined && false`
  is false, `undefined || true` is true.
Source: HTCondor manual, "ClassAd Evaluation Semantics"; classad library operators.cpp.
"""
from __future__ import annotations

import math

from .values import ERROR, UNDEFINED, wrap64

_ASCII_LOWER = {c: c + 32 for c in range(65, 91)}


def fold(s: str) -> str:
    """ASCII-only lower case (strcasecmp semantics)."""
    return s.lower() if s.isascii() else s.translate(_ASCII_LOWER)


def to_bool(v):
    """Boolean value of v for && || ! ?: (numbers: non-zero is true); UNDEFINED or ERROR."""
    t = type(v)
    if t is bool:
        return v
    if t is int or t is float:
        return v != 0
    if v is UNDEFINED:
        return UNDEFINED
    return ERROR


def _num(v):
    """Numeric value for arithmetic/comparison (bool -> int), or None if not a number."""
    t = type(v)
    if t is int or t is float:
        return v
    if t is bool:
        return int(v)
    return None


def _arith_pre(a, b):
    if a is ERROR or b is ERROR:
        return ERROR, None, None
    if a is UNDEFINED or b is UNDEFINED:
        return UNDEFINED, None, None
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return ERROR, None, None
    return None, x, y


def _real(r: float):
    """HTCondor's real arithmetic reports +infinity as error (-infinity and NaN stay)."""
    return ERROR if r == _INF else r


_INF = float("inf")
_NAN = float("nan")


def add(a, b):
    bad, x, y = _arith_pre(a, b)
    if bad is not None:
        return bad
    r = x + y
    return wrap64(r) if type(r) is int else _real(r)


def sub(a, b):
    bad, x, y = _arith_pre(a, b)
    if bad is not None:
        return bad
    r = x - y
    return wrap64(r) if type(r) is int else _real(r)


def mul(a, b):
    bad, x, y = _arith_pre(a, b)
    if bad is not None:
        return bad
    r = x * y
    return wrap64(r) if type(r) is int else _real(r)


def div(a, b):
    bad, x, y = _arith_pre(a, b)
    if bad is not None:
        return bad
    if type(x) is int and type(y) is int:
        if y == 0:
            return ERROR
        q = abs(x) // abs(y)
        return wrap64(q if (x < 0) == (y < 0) else -q)
    if y == 0:  # IEEE: x/0.0 is +-inf (+inf -> error) or NaN
        if x != x or x == 0:
            return _NAN
        return ERROR if (x > 0) == (math.copysign(1.0, y) > 0) else -_INF
    try:
        return _real(x / y)
    except OverflowError:
        return ERROR


def mod(a, b):
    bad, x, y = _arith_pre(a, b)
    if bad is not None:
        return bad
    if type(x) is not int or type(y) is not int or y == 0:
        return ERROR
    r = abs(x) % abs(y)
    return wrap64(-r if x < 0 else r)


def _cmp_pre(a, b):
    """(status, x, y): status None when x, y are comparable (both numbers or both folded str)."""
    if a is ERROR or b is ERROR:
        return ERROR, None, None
    if a is UNDEFINED or b is UNDEFINED:
        return UNDEFINED, None, None
    ta, tb = type(a), type(b)
    if ta is str:
        if tb is str:
            return None, fold(a), fold(b)
        return ERROR, None, None
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return ERROR, None, None
    return None, x, y


def eq(a, b):
    ta = type(a)
    if ta is type(b) and (ta is int or ta is float):
        return a == b
    bad, x, y = _cmp_pre(a, b)
    return bad if bad is not None else x == y


def ne(a, b):
    r = eq(a, b)
    return (not r) if type(r) is bool else r


def lt(a, b):
    ta, tb = type(a), type(b)
    if (ta is int or ta is float) and (tb is int or tb is float):   # the common case, as _cmp_pre
        return a < b
    bad, x, y = _cmp_pre(a, b)
    return bad if bad is not None else x < y


def le(a, b):
    ta, tb = type(a), type(b)
    if (ta is int or ta is float) and (tb is int or tb is float):   # the common case, as _cmp_pre
        return a <= b
    bad, x, y = _cmp_pre(a, b)
    return bad if bad is not None else x <= y


def gt(a, b):
    ta, tb = type(a), type(b)
    if (ta is int or ta is float) and (tb is int or tb is float):   # the common case, as _cmp_pre
        return a > b
    bad, x, y = _cmp_pre(a, b)
    return bad if bad is not None else x > y


def ge(a, b):
    ta, tb = type(a), type(b)
    if (ta is int or ta is float) and (tb is int or tb is float):   # the common case, as _cmp_pre
        return a >= b
    bad, x, y = _cmp_pre(a, b)
    return bad if bad is not None else x >= y


def identical(a, b):
    """`a =?= b`: same type and same value (strings case-sensitive); never undefined."""
    if a is UNDEFINED or b is UNDEFINED or a is ERROR or b is ERROR:
        return a is b
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is bool or ta is int or ta is float or ta is str:
        return a == b
    return ERROR  # lists and records: HTCondor yields error


def not_identical(a, b):
    r = identical(a, b)
    return (not r) if type(r) is bool else r


def _int_pre(a, b):
    if a is ERROR or b is ERROR:
        return ERROR, None, None
    if a is UNDEFINED or b is UNDEFINED:
        return UNDEFINED, None, None
    if type(a) is int and type(b) is int:
        return None, a, b
    return ERROR, None, None


def bit_and(a, b):
    bad, x, y = _int_pre(a, b)
    return bad if bad is not None else (x & y)


def bit_or(a, b):
    bad, x, y = _int_pre(a, b)
    return bad if bad is not None else (x | y)


def bit_xor(a, b):
    bad, x, y = _int_pre(a, b)
    return bad if bad is not None else (x ^ y)


_shift_pre = _int_pre


def shl(a, b):
    bad, x, y = _shift_pre(a, b)
    return bad if bad is not None else wrap64(x << (y & 63))


def shr(a, b):
    """Arithmetic shift; HTCondor shifts a negative value bit by bit (count <= 0: unchanged,
    >= 63: -1) and a non-negative one with the x86 count mask (y & 63)."""
    bad, x, y = _shift_pre(a, b)
    if bad is not None:
        return bad
    if x >= 0:
        return x >> (y & 63)
    if y <= 0:
        return x
    return -1 if y >= 63 else x >> y


def ushr(a, b):
    """Logical shift: (x >> y) & ~(-1 << (64 - y)) with x86 count masks, as HTCondor."""
    bad, x, y = _shift_pre(a, b)
    if bad is not None:
        return bad
    if x >= 0:
        return x >> (y & 63)
    return (x >> (y & 63)) & ((1 << ((64 - y) & 63)) - 1)


def neg(a):
    t = type(a)
    if t is int:
        return wrap64(-a)
    if t is float:
        return -a
    if a is UNDEFINED:
        return UNDEFINED
    return ERROR


def pos(a):
    t = type(a)
    if t is int or t is float or a is UNDEFINED:
        return a
    return ERROR


def lnot(a):
    b = to_bool(a)
    return (not b) if type(b) is bool else b


def bit_not(a):
    if type(a) is int:
        return ~a
    if a is UNDEFINED:
        return UNDEFINED
    return ERROR


BINARY = {
    "+": add, "-": sub, "*": mul, "/": div, "%": mod,
    "==": eq, "!=": ne, "<": lt, "<=": le, ">": gt, ">=": ge,
    "=?=": identical, "=!=": not_identical, "is": identical, "isnt": not_identical,
    "&": bit_and, "|": bit_or, "^": bit_xor, "<<": shl, ">>": shr, ">>>": ushr,
}
UNARY = {"-": neg, "+": pos, "!": lnot, "~": bit_not}
