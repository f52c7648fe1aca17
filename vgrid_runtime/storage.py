"""A service's own storage failing (full disk, I/O error, database down) as a clear HTTP answer.

Every vgrid service writes what it acknowledges to its state directory and its database before
answering. When that write fails the client must learn why, in the project's error shape
(``{"error": {"message", ...}}``, as :class:`vgrid_runtime.httpjson.ApiError`), never a traceback, and the service must go on
serving (the failed request stored nothing; the next one succeeds once space is back):

- the storage is **full** (``ENOSPC``, ``EDQUOT``; SQLite ``SQLITE_FULL``; PostgreSQL SQLSTATE
  ``53100`` disk_full): **507** ``{"error": {"message": "<service> state directory is full",
  "path", "operation", "cause"}}`` (RFC 4918 "Insufficient Storage"; the event outboxes and the
  node agent's sandbox uploads retry 5xx, so they wait for space);
- the database cannot be written for another reason (locked, I/O error, server gone):
  **503** ``{"error": {"message": "<service> database unavailable: ...", "operation", "cause"}}``;
- any other ``OSError``: **500** ``{"error": {"message": "<operation> failed: <strerror>",
  "path", "operation", "cause"}}``.

``operation`` names what was being done ("storing the input sandbox", or the request's method
and path when the code did not say); ``cause`` is the errno name or the driver's error name
("ENOSPC", "SQLITE_FULL", "53100"). Source: RFC 4918 Section 11.5; SQLite result codes
(https://sqlite.org/rescode.html); PostgreSQL Appendix A (error codes).
"""
from __future__ import annotations

import errno
import logging
import os
from contextlib import contextmanager
from typing import Iterator

from flask import Flask, jsonify, request
from sqlalchemy.exc import OperationalError, TimeoutError as PoolTimeout

from .throttle import Throttle

log = logging.getLogger("vgrid.storage")

#: errno values that mean "no space left" (the filesystem, or the user's quota).
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
SQLITE_FULL = 13          # primary result code
PG_DISK_FULL = "53100"    # SQLSTATE disk_full


class StorageError(Exception):
    """A write to the service's own storage failed; ``status`` 507 (full), 503 (database
    unavailable) or 500; ``full`` is True for 507; ``body`` is the error object
    ``{"message", "operation", "path", "cause"}``."""

    def __init__(self, status: int, message: str, operation: str, path: str | None,
                 cause: str | None) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"message": message, "operation": operation, "path": path, "cause": cause}
        self.full = status == 507


def _db_cause(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", exc)
    name = getattr(orig, "sqlite_errorname", None)
    if name:
        return str(name)
    code = getattr(orig, "pgcode", None)
    return str(code) if code else None


def is_full(exc: BaseException) -> bool:
    """True when ``exc`` says the storage has no space left: an OSError with ENOSPC/EDQUOT, a
    SQLite error with result code SQLITE_FULL, a PostgreSQL disk_full (SQLSTATE 53100)."""
    if isinstance(exc, OSError):
        return exc.errno in FULL_ERRNOS
    orig = getattr(exc, "orig", exc)
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF == SQLITE_FULL:
        return True
    return getattr(orig, "pgcode", None) == PG_DISK_FULL


def storage_error(exc: BaseException, service: str, path: str | os.PathLike | None,
                  operation: str) -> StorageError:
    """The :class:`StorageError` answering ``exc`` (an OSError or a SQLAlchemy
    OperationalError) raised while ``operation`` wrote under ``path`` (the service's state
    directory; an OSError's own file name is preferred)."""
    where = getattr(exc, "filename", None) or (os.fspath(path) if path is not None else None)
    if isinstance(exc, OSError):
        cause = errno.errorcode.get(exc.errno or 0)
        if is_full(exc):
            return StorageError(507, f"{service} state directory is full", operation, where, cause)
        return StorageError(500, f"{operation} failed: {exc.strerror or exc}", operation, where, cause)
    cause = _db_cause(exc)
    path_s = os.fspath(path) if path is not None else None
    if is_full(exc):
        return StorageError(507, f"{service} state directory is full", operation, path_s, cause)
    first = str(getattr(exc, "orig", exc)).strip().splitlines()[0][:200] if str(exc) else type(exc).__name__
    return StorageError(503, f"{service} database unavailable: {first}", operation, None, cause)


_quiet: dict[float, Throttle] = {}


def log_failure(logger: logging.Logger, what: str, exc: BaseException, every_s: float = 60.0) -> None:
    """Log that a background pass ``what`` failed with ``exc``: with its traceback, except when
    the storage is full (:func:`is_full`), then one line at most every ``every_s`` seconds per
    ``what`` (a loop retrying every half second must not fill the disk further with logs)."""
    if not is_full(exc):
        logger.error("%s", what, exc_info=exc)
        return
    if not _quiet.setdefault(every_s, Throttle(every_s)).due(what):
        return
    cause = errno.errorcode.get(exc.errno or 0) if isinstance(exc, OSError) else _db_cause(exc)
    logger.error("%s: the state directory or database is full (%s); retrying, logged again in "
                 "%g s at most", what, cause or type(exc).__name__, every_s)


@contextmanager
def storing(service: str, path: str | os.PathLike | None, operation: str) -> Iterator[None]:
    """Run a write to the service's storage; an OSError or a database OperationalError inside
    becomes the :class:`StorageError` of :func:`storage_error` (the caller has rolled back)."""
    try:
        yield
    except (OSError, OperationalError) as exc:
        raise storage_error(exc, service, path, operation) from exc


def install_storage_errors(app: Flask, service: str, path) -> None:
    """Answer a :class:`StorageError`, and any OSError or SQLAlchemy OperationalError a route of
    ``app`` lets escape, as described in the module docstring (``service`` names the service in
    the message, ``path`` is its state directory, or a callable returning it at the time of the
    error; the operation is the request's method and path). Logged with the cause, without a
    traceback for a full disk."""
    where = path if callable(path) else (lambda: path)

    def answer(err: StorageError, exc: BaseException | None):
        if err.full:
            log.error("%s %s: %s (%s, %s)", request.method, request.path, err.body["message"],
                      err.body.get("path"), err.body.get("cause"))
        else:
            log.error("%s %s: %s", request.method, request.path, err.body["message"],
                      exc_info=exc is not None and not isinstance(exc, StorageError))
        return jsonify({"error": err.body}), err.status

    @app.errorhandler(StorageError)
    def _storage(exc: StorageError):
        return answer(exc, exc)

    @app.errorhandler(OSError)
    def _os_error(exc: OSError):
        return answer(storage_error(exc, service, where(), f"{request.method} {request.path}"), exc)

    @app.errorhandler(OperationalError)
    @app.errorhandler(PoolTimeout)          # every pooled connection busy for the pool timeout
    def _db_error(exc: OperationalError | PoolTimeout):
        return answer(storage_error(exc, service, where(), f"{request.method} {request.path}"), exc)
