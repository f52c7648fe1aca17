"""Idempotent submission: a client's ``Idempotency-Key`` makes a retried ``POST /jobs`` safe.

The client (:class:`broker.client.BrokerClient`) sends one key (a UUID) per submission and the
same key on every retry. The broker stores it with the request's first job row, scoped to the
submitter's DN ("" in plain-HTTP mode), in the same transaction as the job rows; a unique index
on (scope, key) makes two concurrent requests with one key store one job. A repeat with the
same JDL text answers the first job; a repeat with different JDL text is a 409 naming the key.
Contract: docs/architecture.md, "broker".
"""
from __future__ import annotations

import re

from .db import Job, JobStore

HEADER = "Idempotency-Key"
MAX_LENGTH = 128
_VALID = re.compile(r"^[\x21-\x7e]{1,%d}$" % MAX_LENGTH)   # printable ASCII, no spaces


class IdempotencyError(Exception):
    """A bad or conflicting key; ``status`` (400 or 409) and ``details`` for the JSON error."""

    def __init__(self, message: str, status: int, key: str) -> None:
        super().__init__(message)
        self.status = status
        self.details = {"idempotency_key": key}


def check_key(key: str) -> str:
    """``key`` if it is 1 to 128 printable ASCII characters without spaces, else
    IdempotencyError(400)."""
    if not _VALID.match(key):
        raise IdempotencyError(f"invalid {HEADER} {key[:MAX_LENGTH]!r}: 1 to {MAX_LENGTH} printable "
                               "ASCII characters without spaces", 400, key[:MAX_LENGTH])
    return key


def scope_of(owner_dn: str | None) -> str:
    """The scope of a key: the owner's DN, "" without one (plain-HTTP mode)."""
    return owner_dn or ""


def earlier(store: JobStore, scope: str, key: str, text: str) -> Job | None:
    """The job an earlier request with ``key`` in ``scope`` stored, or None; IdempotencyError(409)
    when that request's JDL text differs from ``text``."""
    job = store.find_idempotent(scope, key)
    if job is not None and job.jdl != text:
        raise IdempotencyError(f"{HEADER} {key!r} was already used for a different JDL "
                               f"(job {job.key})", 409, key)
    return job
