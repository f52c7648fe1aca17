"""Paginated, filtered job listings for ``GET /jobs`` (issue 12, "Reads that scale").

The query string (all optional)::

    state=S[,S...]   gLite state names (Waiting, Running, ...)
    owner=me|DN      the caller's own jobs, or another DN's (administrators only)
    since=T          jobs submitted at or after T (broker-clock seconds, like ``submitted_at``)
    limit=N          page size, default :data:`DEFAULT_LIMIT`, at most :data:`MAX_LIMIT` (larger is capped)
    after=CURSOR     the ``next`` of the previous page
    ids=K1,K2        only these jobs (keys or gLite job ids; the pre-pagination filter, kept)

Order: ``(submitted_at, key)`` ascending, a total order no job ever leaves (neither column
changes after submission). A cursor is the opaque, URL-safe encoding of the last job's
``(submitted_at, key)``; the next page holds the jobs strictly after it (keyset pagination), so
following ``next`` never repeats a job and never skips one that existed when the listing began,
however many jobs are added meanwhile (a job added during the walk is listed at most once).
Answer: ``{"jobs": [...], "next": CURSOR | null}``; ``next`` is null on the last page.
Errors: :class:`BadQuery` (HTTP 400, ``field`` names the parameter).
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Mapping

from vgrid_runtime.job_states import JobState

#: Page size when the request has no ``limit``.
DEFAULT_LIMIT = 100
#: The largest page the broker answers (a larger ``limit`` is capped to it).
MAX_LIMIT = 1000


class BadQuery(ValueError):
    """A malformed listing parameter (``field``: its name); HTTP 400."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ListQuery:
    """A parsed ``GET /jobs`` query: states (None = all), owner (``"me"``, a DN or None = as
    the rules allow), since (s or None), limit (1..MAX_LIMIT), after ((submitted_at, key) or
    None), keys (None = all)."""

    states: tuple[JobState, ...] | None = None
    owner: str | None = None
    since: float | None = None
    limit: int = DEFAULT_LIMIT
    after: tuple[float, str] | None = None
    keys: tuple[str, ...] | None = None


def encode_cursor(submitted_at: float, key: str) -> str:
    """The opaque cursor after the job ``(submitted_at, key)`` (URL-safe base64 of JSON; a
    float survives the JSON round trip exactly)."""
    raw = json.dumps([submitted_at, key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """``(submitted_at, key)`` of a cursor from :func:`encode_cursor`; BadQuery if malformed."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        t, key = json.loads(raw)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not isinstance(key, str):
            raise ValueError
        return float(t), key
    except (ValueError, TypeError):
        raise BadQuery(f"after={cursor!r} is not a cursor this broker issued", "after") from None


def _number(args: Mapping[str, str], name: str, conv, what: str):
    """Parameter ``name`` converted by ``conv`` (None when absent); BadQuery saying it is not ``what``."""
    if not args.get(name):
        return None
    try:
        return conv(args[name])
    except ValueError:
        raise BadQuery(f"{name}={args[name]!r} is not {what}", name) from None


def parse_query(args: Mapping[str, str], key_of=lambda k: k) -> ListQuery:
    """The :class:`ListQuery` of request arguments ``args``; ``key_of`` turns a job id of
    ``ids`` into its key. Raises BadQuery naming the parameter."""
    states = None
    if args.get("state"):
        try:
            states = tuple(JobState(s.strip()) for s in args["state"].split(",") if s.strip())
        except ValueError:
            raise BadQuery(f"state={args['state']!r}: not a job state "
                           f"({', '.join(s.value for s in JobState)})", "state") from None
    since = _number(args, "since", float, "a number of seconds")
    limit = _number(args, "limit", int, "an integer")
    if limit is None:
        limit = DEFAULT_LIMIT
    elif limit < 1:
        raise BadQuery(f"limit={limit} must be at least 1", "limit")
    limit = min(limit, MAX_LIMIT)
    after = decode_cursor(args["after"]) if args.get("after") else None
    keys = None
    if args.get("ids"):
        keys = tuple(key_of(k) for k in args["ids"].split(",") if k)
    return ListQuery(states=states, owner=args.get("owner") or None, since=since, limit=limit,
                     after=after, keys=keys)
