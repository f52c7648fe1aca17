"""A float-seconds stand-in for eGenix mx.DateTime (the parts Haizea 1.1 uses).

DateTime: absolute time, float seconds since 1970-01-01 00:00 (proleptic Gregorian, UTC).
DateTimeDelta: float seconds. Arithmetic is plain float arithmetic on seconds.
"""
import math


def _days_from_civil(y, m, d):
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z):
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return (y + (m <= 2), m, d)


class DateTimeDelta(object):
    __slots__ = ("seconds",)

    def __init__(self, days=0, hours=0, minutes=0, seconds=0):
        self.seconds = float(days) * 86400.0 + float(hours) * 3600.0 + float(minutes) * 60.0 + float(seconds)

    # components (signed, like the whole value)
    def _parts(self):
        s = self.seconds
        sign = -1 if s < 0 else 1
        a = abs(s)
        day = int(a // 86400)
        r = a - day * 86400
        hour = int(r // 3600)
        r -= hour * 3600
        minute = int(r // 60)
        r -= minute * 60
        return sign, day, hour, minute, r

    day = property(lambda self: self._parts()[0] * self._parts()[1])
    hour = property(lambda self: self._parts()[0] * self._parts()[2])
    minute = property(lambda self: self._parts()[0] * self._parts()[3])
    second = property(lambda self: self._parts()[0] * self._parts()[4])
    minutes = property(lambda self: self.seconds / 60.0)
    hours = property(lambda self: self.seconds / 3600.0)
    days = property(lambda self: self.seconds / 86400.0)

    def __add__(self, o):
        if isinstance(o, DateTimeDelta):
            return _delta(self.seconds + o.seconds)
        if isinstance(o, DateTime):
            return _dt(o.ticks + self.seconds)
        if isinstance(o, (int, long, float)):
            return _delta(self.seconds + o)
        return NotImplemented
    __radd__ = __add__

    def __sub__(self, o):
        if isinstance(o, DateTimeDelta):
            return _delta(self.seconds - o.seconds)
        if isinstance(o, (int, long, float)):
            return _delta(self.seconds - o)
        return NotImplemented

    def __rsub__(self, o):
        if isinstance(o, (int, long, float)):
            return _delta(o - self.seconds)
        return NotImplemented

    def __mul__(self, o):
        if isinstance(o, (int, long, float)):
            return _delta(self.seconds * o)
        return NotImplemented
    __rmul__ = __mul__

    def __div__(self, o):
        if isinstance(o, DateTimeDelta):
            return self.seconds / o.seconds
        if isinstance(o, (int, long, float)):
            return _delta(self.seconds / o)
        return NotImplemented
    __truediv__ = __div__

    def __neg__(self):
        return _delta(-self.seconds)

    def __pos__(self):
        return self

    def __abs__(self):
        return _delta(abs(self.seconds))

    def __nonzero__(self):
        return self.seconds != 0.0

    def __float__(self):
        return self.seconds

    def __int__(self):
        return int(self.seconds)

    def __hash__(self):
        return hash(self.seconds)

    def _o(self, o):
        if isinstance(o, DateTimeDelta):
            return o.seconds
        if isinstance(o, (int, long, float)):
            return o
        return None

    def __eq__(self, o):
        v = self._o(o)
        return False if v is None else self.seconds == v

    def __ne__(self, o):
        v = self._o(o)
        return True if v is None else self.seconds != v

    def __lt__(self, o):
        v = self._o(o)
        if v is None:
            return NotImplemented
        return self.seconds < v

    def __le__(self, o):
        v = self._o(o)
        if v is None:
            return NotImplemented
        return self.seconds <= v

    def __gt__(self, o):
        v = self._o(o)
        if v is None:
            return NotImplemented
        return self.seconds > v

    def __ge__(self, o):
        v = self._o(o)
        if v is None:
            return NotImplemented
        return self.seconds >= v

    def __str__(self):
        sign, day, hour, minute, sec = self._parts()
        s = "%02d:%02d:%05.2f" % (hour, minute, sec)
        if day:
            s = "%d:%s" % (day, s)
        return ("-" if sign < 0 else "") + s

    def __repr__(self):
        return "<DateTimeDelta %s>" % self

    def __getstate__(self):
        return self.seconds

    def __setstate__(self, s):
        self.seconds = s


def _delta(s):
    d = DateTimeDelta.__new__(DateTimeDelta)
    d.seconds = float(s)
    return d


def TimeDelta(hours=0, minutes=0, seconds=0):
    return _delta(float(hours) * 3600.0 + float(minutes) * 60.0 + float(seconds))


class DateTime(object):
    __slots__ = ("ticks",)

    def __init__(self, year, month=1, day=1, hour=0, minute=0, second=0.0):
        self.ticks = float(_days_from_civil(year, month, day)) * 86400.0 + hour * 3600.0 + minute * 60.0 + float(second)

    def _parts(self):
        days = int(math.floor(self.ticks / 86400.0))
        r = self.ticks - days * 86400.0
        y, m, d = _civil_from_days(days)
        hour = int(r // 3600)
        r -= hour * 3600
        minute = int(r // 60)
        r -= minute * 60
        return y, m, d, hour, minute, r

    year = property(lambda self: self._parts()[0])
    month = property(lambda self: self._parts()[1])
    day = property(lambda self: self._parts()[2])
    hour = property(lambda self: self._parts()[3])
    minute = property(lambda self: self._parts()[4])
    second = property(lambda self: self._parts()[5])

    def __add__(self, o):
        if isinstance(o, DateTimeDelta):
            return _dt(self.ticks + o.seconds)
        if isinstance(o, (int, long, float)):
            return _dt(self.ticks + o * 86400.0)  # mx: numbers are days
        return NotImplemented
    __radd__ = __add__

    def __sub__(self, o):
        if isinstance(o, DateTime):
            return _delta(self.ticks - o.ticks)
        if isinstance(o, DateTimeDelta):
            return _dt(self.ticks - o.seconds)
        if isinstance(o, (int, long, float)):
            return _dt(self.ticks - o * 86400.0)
        return NotImplemented

    def __hash__(self):
        return hash(self.ticks)

    def __eq__(self, o):
        return isinstance(o, DateTime) and self.ticks == o.ticks

    def __ne__(self, o):
        return not (isinstance(o, DateTime) and self.ticks == o.ticks)

    # other types (None): NotImplemented, so Python 2 falls back to its default order (None first)
    def __lt__(self, o):
        return self.ticks < o.ticks if isinstance(o, DateTime) else NotImplemented

    def __le__(self, o):
        return self.ticks <= o.ticks if isinstance(o, DateTime) else NotImplemented

    def __gt__(self, o):
        return self.ticks > o.ticks if isinstance(o, DateTime) else NotImplemented

    def __ge__(self, o):
        return self.ticks >= o.ticks if isinstance(o, DateTime) else NotImplemented

    def __str__(self):
        y, m, d, hour, minute, sec = self._parts()
        return "%04d-%02d-%02d %02d:%02d:%05.2f" % (y, m, d, hour, minute, sec)

    def __repr__(self):
        return "<DateTime %s>" % self

    def __getstate__(self):
        return self.ticks

    def __setstate__(self, s):
        self.ticks = s


def _dt(t):
    d = DateTime.__new__(DateTime)
    d.ticks = float(t)
    return d


def TimestampFromTicks(t):
    return _dt(t)


def now():
    import time
    return _dt(time.time())


DateTimeType = DateTime
DateTimeDeltaType = DateTimeDelta

import Parser  # noqa
import ISO  # noqa
