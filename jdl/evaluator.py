"""Compile ClassAd expression trees into Python closures and evaluate them.

compile_expr(node) -> fn(ctx) is cached on the node, so each Requirements / Rank expression is
compiled once and then evaluated against many CE ads. A Ctx (jdl.context) carries the current
record (`ad`, for unscoped references and `parent`), the top record of its side (`me`: `my.`/
`self.`) and the record being matched against (`other`: `other.`/`target.`). Evaluating an
attribute of `other` swaps the two sides, as in the classad library's MatchClassAd.
Source: HTCondor manual "ClassAd Evaluation Semantics" (scoping, MY/TARGET, undefined/error).
"""
from __future__ import annotations

from collections.abc import Mapping

from . import functions, glite_functions
from . import nodes as n
from .context import Ctx
from .operators import BINARY, UNARY, fold, identical, to_bool
from .values import ERROR, UNDEFINED, ClassAd, MappingAd, int32

SCOPE_WORDS = {"other", "target", "my", "self", "parent"}
# every function by lower-case name: HTCondor's built-ins and the gLite additions
FUNCTIONS = {**functions.FUNCTIONS, **glite_functions.FUNCTIONS}
LAZY_FUNCTIONS = {**functions.LAZY_FUNCTIONS, **glite_functions.LAZY_FUNCTIONS}


def compile_expr(node: n.Node):
    """Closure fn(ctx) -> value for `node`, compiled once and cached on the node.

    Descendants are compiled first, bottom-up without recursion, so a long operator chain
    (`a || b || ...` over thousands of CEs) never exhausts the Python stack.
    """
    fn = node._fn
    if fn is not None:
        return fn
    order, stack, spine = [], [node], set()
    while stack:
        x = stack.pop()
        if x._fn is None:
            order.append(x)
            stack.extend(x.children())
            if type(x) is n.Binary and type(x.left) is n.Binary:
                spine.add(id(x.left))  # compiled as part of its parent's chain
    for x in reversed(order):
        if x._fn is None and id(x) not in spine:
            x._fn = _COMPILERS[type(x)](x)
    if node._fn is None:
        node._fn = _COMPILERS[type(node)](node)
    return node._fn


def evaluate(node: n.Node, ad=None, other=None, now: float | None = None):
    """Evaluate `node` in record `ad` against record `other` (each a ClassAd, a MappingAd, any
    Mapping of plain values, or None); `now`: seconds from the caller's clock (clock.now(),
    epoch seconds live, simulated seconds in a simulation), what time() returns; without it
    time() is error. Returns a ClassAd value (never raises)."""
    ad, other = _record(ad), _record(other)
    ctx = Ctx(ad, ad, other, set(), now)
    try:
        return compile_expr(node)(ctx)
    except RecursionError:
        return ERROR


def _record(x):
    if x is None or type(x) is ClassAd or type(x) is MappingAd:
        return x
    if isinstance(x, Mapping):
        return MappingAd(x)
    raise TypeError(f"a record must be a ClassAd or a Mapping, not {type(x).__name__}")


def attr_value(ad, name: str, lname: str, ctx: Ctx):
    """Value of attribute `name` of record `ad` seen from `ctx`; None when ad lacks it."""
    if type(ad) is MappingAd:
        return ad.lookup(name, lname)
    d = ad.attrs.get(lname)
    if d is None:
        return None
    key = (id(ad), lname)
    active = ctx.active
    if key in active:
        return UNDEFINED  # circular definition: undefined, as HTCondor
    if ad is not ctx.ad:
        top = _top(ad)
        if top is ctx.other and top is not ctx.me:
            ctx = Ctx(ad, ctx.other, ctx.me, active, ctx.now)
        else:
            ctx = Ctx(ad, ctx.me, ctx.other, active, ctx.now)
    active.add(key)
    try:
        return compile_expr(d.expr)(ctx)
    finally:
        active.discard(key)


def _top(ad):
    while type(ad) is ClassAd and ad.parent is not None:
        ad = ad.parent
    return ad


def select(base, name: str, lname: str, ctx: Ctx):
    """`base.name`: attribute of a record; element-wise over a list; undefined stays."""
    if type(base) is ClassAd or type(base) is MappingAd:
        v = attr_value(base, name, lname, ctx)
        return UNDEFINED if v is None else v
    if base is UNDEFINED:
        return UNDEFINED
    if type(base) is list:
        return [select(x, name, lname, ctx) for x in base]
    return ERROR


def _lookup_unscoped(name: str, lname: str, ctx: Ctx):
    ad = ctx.ad
    while ad is not None:
        v = attr_value(ad, name, lname, ctx)
        if v is not None:
            return v
        ad = ad.parent if type(ad) is ClassAd else None
    if lname in SCOPE_WORDS:
        return _scope_value(lname, ctx)
    return UNDEFINED


def _scope_value(lname: str, ctx: Ctx):
    if lname in ("other", "target"):
        r = ctx.other
    elif lname == "my":
        r = ctx.me
    elif lname == "self":
        r = ctx.ad
    else:  # parent
        r = ctx.ad.parent if type(ctx.ad) is ClassAd else None
    return UNDEFINED if r is None else r


# ---- compilers, one per node type -------------------------------------------------------

def _c_literal(node: n.Literal):
    v = node.value
    return lambda ctx: v


def _c_attr(node: n.AttrRef):
    name, lname = node.name, node.lname
    if node.absolute:
        def absolute(ctx):
            top = _top(ctx.ad) if ctx.ad is not None else None
            if top is None:
                return UNDEFINED
            v = attr_value(top, name, lname, ctx)
            return UNDEFINED if v is None else v
        return absolute
    return lambda ctx: _lookup_unscoped(name, lname, ctx)


def _c_select(node: n.Select):
    name, lname = node.name, node.lname
    base = node.base
    if type(base) is n.AttrRef and not base.absolute and base.lname in ("other", "target"):
        def other_attr(ctx):
            o = ctx.other
            if o is None:
                return _generic(ctx)
            if type(o) is MappingAd:
                v = o.lookup(name, lname)
            else:
                v = attr_value(o, name, lname, ctx)
            return UNDEFINED if v is None else v
        bfn = compile_expr(base)
        _generic = lambda ctx: select(bfn(ctx), name, lname, ctx)  # noqa: E731
        return other_attr
    bfn = compile_expr(base)
    return lambda ctx: select(bfn(ctx), name, lname, ctx)


def _c_subscript(node: n.Subscript):
    bfn, ifn = compile_expr(node.base), compile_expr(node.index)

    def subscript(ctx):
        b, i = bfn(ctx), ifn(ctx)
        if b is ERROR or i is ERROR:
            return ERROR
        if b is UNDEFINED or i is UNDEFINED:
            return UNDEFINED
        if type(b) is list:
            if type(i) is not int:
                return ERROR
            i = int32(i)
            return b[i] if 0 <= i < len(b) else ERROR
        if (type(b) is ClassAd or type(b) is MappingAd) and type(i) is str:
            v = attr_value(b, i, i.lower(), ctx)
            return UNDEFINED if v is None else v
        return ERROR
    return subscript


def _c_unary(node: n.Unary):
    op, f = UNARY[node.op], compile_expr(node.operand)
    return lambda ctx: op(f(ctx))


def _c_binary(node: n.Binary):
    """Left-nested chains (`a + b + c`, `a || b || c`) become one loop over their steps."""
    steps = []
    x = node
    while type(x) is n.Binary:
        steps.append((x.op, compile_expr(x.right), x.right))
        x = x.left
    base = compile_expr(x)
    steps.reverse()
    if len(steps) == 1:
        o, rf, rnode = steps[0]
        if o == "&&":
            return _and(base, rf)
        if o == "||":
            return _or(base, rf)
        op = BINARY[o]
        if type(rnode) is n.Literal:  # the common `other.X == "lit"` / `>= 4`
            rv = rnode.value
            if type(rv) is str and o in ("==", "!="):
                return _str_equality(base, rv, o == "==", op)
            return lambda ctx: op(base(ctx), rv)
        return lambda ctx: op(base(ctx), rf(ctx))
    plan = tuple((_STEP.get(o) or BINARY[o], o in _STEP, rf) for o, rf, _ in steps)

    def chain(ctx):
        v = base(ctx)
        for op, lazy, rf in plan:
            v = op(v, rf, ctx) if lazy else op(v, rf(ctx))
        return v
    return chain


def _str_equality(base, literal: str, want: bool, op):
    """`x == "lit"` with the literal folded once (case-insensitive, as ClassAd ==)."""
    folded = fold(literal)

    def str_eq(ctx):
        a = base(ctx)
        if type(a) is str:
            return (fold(a) == folded) is want
        return op(a, literal)
    return str_eq


def _and_step(a, rf, ctx):
    if a is False:
        return False
    a = to_bool(a)
    if a is ERROR or a is False:
        return a
    b = to_bool(rf(ctx))
    if b is ERROR or a is True:
        return b
    return False if b is False else UNDEFINED


def _or_step(a, rf, ctx):
    if a is True:
        return True
    a = to_bool(a)
    if a is ERROR or a is True:
        return a
    b = to_bool(rf(ctx))
    if b is ERROR or a is False:
        return b
    return True if b is True else UNDEFINED


_STEP = {"&&": _and_step, "||": _or_step}


def _and(lf, rf):
    def and_(ctx):
        a = lf(ctx)
        if a is False:
            return False
        a = to_bool(a)
        if a is ERROR:
            return ERROR
        if a is False:
            return False
        b = to_bool(rf(ctx))
        if b is ERROR:
            return ERROR
        if a is True:
            return b
        return False if b is False else UNDEFINED
    return and_


def _or(lf, rf):
    def or_(ctx):
        a = lf(ctx)
        if a is True:
            return True
        a = to_bool(a)
        if a is ERROR:
            return ERROR
        if a is True:
            return True
        b = to_bool(rf(ctx))
        if b is ERROR:
            return ERROR
        if a is False:
            return b
        return True if b is True else UNDEFINED
    return or_


def _c_conditional(node: n.Conditional):
    cf, of = compile_expr(node.cond), compile_expr(node.otherwise)
    if node.then is None:  # elvis
        def elvis(ctx):
            v = cf(ctx)
            return of(ctx) if v is UNDEFINED else v
        return elvis
    tf = compile_expr(node.then)

    def conditional(ctx):
        c = to_bool(cf(ctx))
        if c is True:
            return tf(ctx)
        if c is False:
            return of(ctx)
        return c
    return conditional


def _c_call(node: n.Call):
    fns = tuple(compile_expr(a) for a in node.args)
    lazy = LAZY_FUNCTIONS.get(node.lname)
    if lazy is not None:
        return lambda ctx: lazy(ctx, fns)
    impl = FUNCTIONS.get(node.lname)
    if impl is None:
        return lambda ctx: ERROR  # unknown function: error, as in the classad library
    if len(fns) == 1:
        f0 = fns[0]
        return lambda ctx: impl(f0(ctx))
    if len(fns) == 2:
        f0, f1 = fns
        return lambda ctx: impl(f0(ctx), f1(ctx))
    return lambda ctx: impl(*[f(ctx) for f in fns])


def _c_list(node: n.ListExpr):
    fns = tuple(compile_expr(x) for x in node.items)
    return lambda ctx: [f(ctx) for f in fns]


def _c_record(node: n.RecordExpr):
    return lambda ctx: ClassAd(node, ctx.ad if type(ctx.ad) is ClassAd else None)


_COMPILERS = {
    n.Literal: _c_literal, n.AttrRef: _c_attr, n.Select: _c_select, n.Subscript: _c_subscript,
    n.Unary: _c_unary, n.Binary: _c_binary, n.Conditional: _c_conditional, n.Call: _c_call,
    n.ListExpr: _c_list, n.RecordExpr: _c_record,
}

__all__ = ["Ctx", "compile_expr", "evaluate", "attr_value", "select", "identical"]
