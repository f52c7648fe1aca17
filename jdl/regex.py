"""Regular expressions for regexp()/regexps() with the ClassAd options i, m, s, x.

Patterns and targets are matched as UTF-8 bytes, as HTCondor's PCRE does without UTF mode
(`.` is one byte, `i` folds ASCII only). Patterns are compiled once (LRU cache). A match
that takes longer than TIMEOUT_S (catastrophic backtracking) gives None -> error. A pattern that does not compile gives None (the
caller turns it into ERROR). Source: HTCondor manual, regexp() (PCRE options i m s x).
"""
from __future__ import annotations

import functools
import re

import regex as _regex  # like re, but a match can be given a timeout

TIMEOUT_S = 0.1  # a regexp() match running longer than this (checked periodically) is error

_FLAGS = {"i": _regex.IGNORECASE, "m": _regex.MULTILINE, "s": _regex.DOTALL,
          "x": _regex.VERBOSE}
_RE_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}
_QUANTIFIED_GROUP = re.compile(rb"\)[*+?{]|\\[1-9]")
_UNBOUNDED = re.compile(rb"(?<!\\)[*+]|\{[0-9]*,\}")


def risky(pattern: bytes) -> bool:
    """True when a pattern can backtrack badly: a quantified group, a back-reference, or more
    than one unbounded quantifier. Others (`pbs`, `^lcg-`, `.*cern.ch`) use the faster re."""
    return bool(_QUANTIFIED_GROUP.search(pattern)) or len(_UNBOUNDED.findall(pattern)) > 1


class Compiled:
    """A compiled pattern and whether its matches run under the timeout."""

    __slots__ = ("pattern", "guarded")

    def __init__(self, pattern, guarded: bool):
        self.pattern, self.guarded = pattern, guarded


@functools.lru_cache(maxsize=512)
def compile_pattern(pattern: str, options: str = ""):
    """Compiled (or None when the pattern is invalid) for regexp(pattern, target, options)."""
    raw = _bytes(pattern)
    guarded = risky(raw) or "x" in options
    flags = 0
    table = _FLAGS if guarded else _RE_FLAGS
    for ch in options:  # case-sensitive, as HTCondor ("I" is not "i")
        flags |= table.get(ch, 0)
    try:
        if guarded:
            return Compiled(_regex.compile(raw, flags | _regex.VERSION0), True)
        return Compiled(re.compile(raw, flags), False)
    except (_regex.error, re.error, OverflowError, RecursionError, ValueError):
        return None


def _bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def search(compiled, target: str):
    """True/False, or None when the match ran longer than TIMEOUT_S (pathological pattern)."""
    data = target.encode("utf-8", "surrogateescape")
    if not compiled.guarded:
        return compiled.pattern.search(data) is not None
    try:
        return compiled.pattern.search(data, timeout=TIMEOUT_S) is not None
    except TimeoutError:
        return None


def substitute(compiled, target: str, template: str):
    """regexps(): the template with \\0..\\9 replaced by the groups of the first match."""
    try:
        if compiled.guarded:
            m = compiled.pattern.search(_bytes(target), timeout=TIMEOUT_S)
        else:
            m = compiled.pattern.search(_bytes(target))
    except TimeoutError:
        return None
    if m is None:
        return ""

    if any(int(d) > m.re.groups for d in re.findall(r"\\(\d)", template)):
        return None  # a group the pattern does not have: error, as HTCondor

    def group(mo):
        g = m.group(int(mo.group(1)))
        return g.decode("utf-8", "surrogateescape") if g else ""
    return re.sub(r"\\(\d)", group, template)
