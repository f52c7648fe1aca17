"""The gLite additions to the ClassAd functions: fqanMember and the gang-matching functions
anyMatch, allMatch, whichMatch (evaluate an expression inside each ad of a list, e.g.
`anyMatch(other.storage.CloseSEs, GlueSAStateAvailableSpace > 1000)`).
Source: gLite JDL Attributes Specification (EGEE-JRA1-TEC-590869) Section 4; the gLite
classad_plugin (gang-matching). Not in HTCondor's classad library (docs/jdl.md).
"""
from __future__ import annotations

from .context import Ctx
from .operators import to_bool
from .values import ERROR, UNDEFINED, ClassAd, MappingAd


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
    for item in lst:
        if type(item) is ClassAd or type(item) is MappingAd:
            yield item, to_bool(pred_fn(Ctx(item, ctx.me, ctx.other, ctx.active, ctx.now)))
        else:
            yield item, ERROR


def _any_match(ctx, fns):
    """anyMatch(list_of_ads, expr): expr true in some ad of the list (gLite gang-matching)."""
    bad, lst, pred = _match_list(ctx, fns)
    if bad is not None:
        return bad
    return any(r is True for _, r in _each_ad(ctx, lst, pred))


def _all_match(ctx, fns):
    bad, lst, pred = _match_list(ctx, fns)
    if bad is not None:
        return bad
    return all(r is True for _, r in _each_ad(ctx, lst, pred))


def _which_match(ctx, fns):
    """whichMatch(list_of_ads, expr): the first ad of the list where expr is true."""
    bad, lst, pred = _match_list(ctx, fns)
    if bad is not None:
        return bad
    for item, r in _each_ad(ctx, lst, pred):
        if r is True:
            return item
    return UNDEFINED


# by lower-case name, as jdl.functions (strict: evaluated arguments; lazy: ctx and closures)
FUNCTIONS = {"fqanmember": _fqan_member}
LAZY_FUNCTIONS = {"anymatch": _any_match, "allmatch": _all_match, "whichmatch": _which_match}
