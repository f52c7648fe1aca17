"""Parser stand-in: 'YYYY-MM-DD HH:MM:SS[.ss]' and '[-][[D:]HH:]MM:SS[.ss]'."""
import re
from mx.DateTime import DateTime, _delta

_DT = re.compile(r"^\s*(-?\d+)-(\d+)-(\d+)(?:[ T](\d+):(\d+)(?::(\d+(?:\.\d*)?))?)?\s*$")


def DateTimeFromString(s):
    m = _DT.match(s)
    if not m:
        raise ValueError("cannot parse date/time %r" % s)
    y, mo, d, h, mi, sec = m.groups()
    return DateTime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), float(sec or 0))


def DateTimeDeltaFromString(s):
    t = s.strip()
    sign = 1.0
    if t.startswith("-"):
        sign, t = -1.0, t[1:]
    parts = t.split(":")
    if not 1 <= len(parts) <= 4:
        raise ValueError("cannot parse delta %r" % s)
    mult = [1.0, 60.0, 3600.0, 86400.0]
    total = 0.0
    for i, p in enumerate(reversed(parts)):
        total += float(p) * mult[i]
    return _delta(sign * total)


TimeDeltaFromString = DateTimeDeltaFromString
