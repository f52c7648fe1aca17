"""Regular expressions for regexp()/regexps() with the ClassAd options i, m, s, x.

Patterns are compiled once (LRU cache). A pattern that does not compile gives None (the
caller turns it into ERROR). Source: HTCondor manual, regexp() (PCRE options i m s x).
"""
from __future__ import annotations

import functools
import re

_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}


@functools.lru_cache(maxsize=512)
def compile_pattern(pattern: str, options: str = ""):
    flags = 0
    for ch in options.lower():
        flags |= _FLAGS.get(ch, 0)
    try:
        return re.compile(pattern, flags)
    except (re.error, OverflowError, RecursionError):
        return None


def search(compiled, target: str) -> bool:
    return compiled.search(target) is not None


def substitute(compiled, target: str, template: str):
    m = compiled.search(target)
    if m is None:
        return ""
    def group(mo):
        i = int(mo.group(1))
        try:
            return m.group(i) or ""
        except IndexError:
            return ""
    return re.sub(r"\\(\d)", group, template)
