"""Which dispatch failures blacklist a CE in the ISM (gLite ISM behaviour).

A CE that does not take a job because *it* is in trouble is left out of matching for
``BrokerSettings.blacklist_s`` seconds of the broker's clock, so the next match chooses another
CE. Decided on the typed error (``ServiceError.kind`` / ``status``), never on its text:

* ``unreachable`` (connection refused or reset, unknown host, TLS failure) -> blacklisted;
* ``timeout`` (no answer within ``dispatch_timeout_s``) -> blacklisted;
* ``http`` with a 5xx status (the CE agent failed) -> blacklisted;
* ``http`` with a 4xx status (400 bad JDL, 403 not allowed, 409 ...): the CE answered and refused
  *the job*; that is the job's fault, not the CE's -> not blacklisted;
* ``bad-answer`` (a 2xx the client could not read): the CE is up -> not blacklisted.
"""
from __future__ import annotations

from vgrid_runtime.httpclient import ErrorKind, ServiceError


def blacklist_reason(exc: ServiceError) -> str | None:
    """Why the failure ``exc`` blacklists its CE (a short reason), or None when it does not."""
    if exc.kind in (ErrorKind.UNREACHABLE, ErrorKind.TIMEOUT):
        return f"dispatch {exc.kind.value}: {exc.brief()}"
    if exc.kind is ErrorKind.HTTP and exc.status is not None and exc.status >= 500:
        return f"dispatch refused: HTTP {exc.status}"
    return None


def blacklist_ce(ism, ce_id: str, exc: ServiceError, now: float, blacklist_s: float) -> bool:
    """Blacklist ``ce_id`` (every VO view of it) in ``ism`` until ``now + blacklist_s`` when
    ``exc`` is the CE's fault and ``blacklist_s > 0``; True if it did."""
    reason = blacklist_reason(exc)
    if reason is None or blacklist_s <= 0:
        return False
    ism.blacklist(ce_id, until=now + blacklist_s, reason=reason)
    return True
