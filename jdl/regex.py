"""Regular expressions for regexp()/regexps() with the ClassAd options i, m, s, x.

Patterns and targets are matched as UTF-8 bytes, as HTCondor's PCRE does without UTF mode
(`.` is one byte, `i` folds ASCII only). Patterns are compiled once (LRU cache). A pattern that does not compile gives None (the
caller turns it into ERROR). Source: HTCondor manual, regexp() (PCRE options i m s x).
"""
from __future__ import annotations

import functools
import re

_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}


@functools.lru_cache(maxsize=512)
def compile_pattern(pattern: str, options: str = ""):
    flags = 0
    for ch in options:  # case-sensitive, as HTCondor ("I" is not "i")
        flags |= _FLAGS.get(ch, 0)
    try:
        return re.compile(_bytes(pattern), flags)
    except (re.error, OverflowError, RecursionError):
        return None


def _bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def search(compiled, target: str) -> bool:
    return compiled.search(_bytes(target)) is not None


def substitute(compiled, target: str, template: str):
    """regexps(): the template with \\0..\\9 replaced by the groups of the first match."""
    m = compiled.search(_bytes(target))
    if m is None:
        return ""

    def group(mo):
        i = int(mo.group(1))
        try:
            g = m.group(i)
        except IndexError:
            return ""
        return g.decode("utf-8", "surrogateescape") if g else ""
    return re.sub(r"\\(\d)", group, template)
